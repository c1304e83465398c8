"""LLMActionParser: turn raw LLM output into the clean action a text env expects.

The work is done by the pure function :func:`parse_action`; the wrapper only applies it, the
format penalty and the error policy. Every parser runs in time linear in the input: tags are found
with literal-only regular expressions (no backtracking), braces with a single forward scan.

Formats (tag names are matched case-insensitively; the extracted action is stripped of surrounding
whitespace, its case and inner text are left as the model wrote them):

``"tags"`` (verl-agent)
    ``<think>...</think><action>...</action>``. The action is the text of the **last** complete
    ``<action>...</action>`` block after the last ``</think>``. Format errors: no complete block
    (missing or unclosed tag), an ``<action>`` left open after the last block (output cut off), a
    stray ``</action>`` inside the block (nested tags), an unclosed ``<think>``, an empty action;
    with ``require_think=True`` a missing ``<think>...</think>`` before the action; with
    ``allow_multiple=False`` more than one ``<action>`` tag; with ``reject_cjk=True`` any CJK
    ideograph (U+4E00..U+9FFF) anywhere in the output. verl-agent's projections take the first
    block, require the think block (``require_think``) and flag CJK output in ALFWorld/WebShop; here
    the last block wins (a model that revises itself is taken at its final word) and the two checks
    are opt-in.
``"search_r1"`` (Search-R1)
    After the (optional) think block, exactly one complete ``<search>query</search>`` (action
    ``search[query]``) or ``<answer>text</answer>`` (action ``answer[text]``). As in verl-agent's
    ``search_projection``, an output with both kinds of tag or with a tag repeated is a format error
    (``allow_multiple=True`` relaxes this and takes the first complete block). Tags inside the think
    block are ignored; an unclosed ``<think>`` is an error.
``"boxed"``
    The content of the **last** ``\\boxed{...}``, with nested braces balanced (``\\{`` and ``\\}``
    are literal); an unclosed last box is an error.
``"json"``
    The **last** top-level JSON object in the output (markdown code fences and surrounding prose are
    fine) that has the key ``json_key`` (default ``"action"``) with a string value. An object nested
    deeper than :data:`MAX_JSON_DEPTH` (objects and arrays) is not decoded: it is a format error, so
    a bracket bomb costs a linear scan, never a ``RecursionError``.
``"plain"``
    The whole output, stripped; only an empty output is an error.
``"tools"``
    A call of one of the env's verbs as JSON, ``{"name": "click", "arguments": {"target": "buy now"}}``
    (an OpenAI reply's tool call; :mod:`wrappers.tools`); the action is the verb's template filled in.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, NamedTuple

import gymnasium as gym

FORMATS = ("tags", "search_r1", "boxed", "json", "plain", "tools")
ON_ERROR = ("invalid", "fallback", "raw")

_CJK = re.compile("[\u4e00-\u9fff]")
_BOXED = "\\boxed{"
_BRACES = re.compile(r"\\.|[{}]", re.DOTALL)
_JSON_TOKENS = re.compile(r'\\.|[{}"]', re.DOTALL)
_JSON_RETRIES = 8  # fallback decode attempts at the last opening braces (bounds the work)
_JSON_NESTING = re.compile(r'\\.|["\[\]{}]', re.DOTALL)
# An action object needs depth 1 or 2. Python's json recurses once per level and raises
# RecursionError near 1,000, so anything deeper than this is refused before decoding.
MAX_JSON_DEPTH = 64
_TAG_RES: dict[tuple[str, ...], re.Pattern] = {}


class ParseResult(NamedTuple):
    """Outcome of :func:`parse_action`.

    ``action`` is the clean action (None when nothing usable was found); ``format_error`` says the
    output broke the format (an action may still be present, e.g. with a CJK or multiple-tag error);
    ``reason`` is a short human-readable explanation, ``""`` when the format was respected.
    """

    action: str | None
    format_error: bool
    reason: str


class _Tag(NamedTuple):
    start: int
    end: int
    name: str
    closing: bool


def _tags(text: str, names: tuple[str, ...]) -> list[_Tag]:
    """All ``<name>`` / ``</name>`` tags of the given names, in order (case-insensitive, linear)."""
    pattern = _TAG_RES.get(names)
    if pattern is None:
        pattern = re.compile(r"<(/?)(" + "|".join(map(re.escape, names)) + r")>", re.IGNORECASE)
        _TAG_RES[names] = pattern
    return [_Tag(m.start(), m.end(), m.group(2).lower(), bool(m.group(1))) for m in pattern.finditer(text)]


def _ok(action: str) -> ParseResult:
    return ParseResult(action, False, "")


def _error(reason: str, action: str | None = None) -> ParseResult:
    return ParseResult(action, True, reason)


def _after_think(text: str, require_think: bool) -> tuple[int, str]:
    """Offset where the answer part starts (after the last ``</think>``), or an error reason."""
    think = _tags(text, ("think",))
    if think and not think[-1].closing:
        return 0, "unclosed <think> tag"
    if not think:
        return 0, "missing <think>...</think> block" if require_think else ""
    if require_think and not any(not t.closing for t in think):
        return 0, "missing <think> opening tag"
    return think[-1].end, ""


def _parse_tags(text: str, require_think: bool, allow_multiple: bool) -> ParseResult:
    start, reason = _after_think(text, require_think)
    if reason:
        return _error(reason)
    all_tags = _tags(text, ("action",))
    tags = [t for t in all_tags if t.start >= start]
    if not tags and all_tags:
        return _error("no <action> after </think> (actions inside <think> are ignored)")
    closes = [i for i, t in enumerate(tags) if t.closing]
    if not closes:
        return _error("unclosed <action> tag" if tags else "missing <action>...</action>")
    last = closes[-1]
    if last + 1 < len(tags):
        return _error("unclosed <action> tag after the last action")
    if last == 0 or tags[last - 1].closing:
        return _error("nested or stray </action> tag")
    opening, closing = tags[last - 1], tags[last]
    action = text[opening.end : closing.start].strip()
    if not action:
        return _error("empty action")
    if not allow_multiple and sum(not t.closing for t in tags) > 1:
        return _error("more than one <action> tag", action)
    return _ok(action)


def _parse_search_r1(text: str, require_think: bool, allow_multiple: bool) -> ParseResult:
    start, reason = _after_think(text, require_think)
    if reason:
        return _error(reason)
    tags = [t for t in _tags(text, ("search", "answer")) if t.start >= start]
    opened = {name: sum(1 for t in tags if t.name == name and not t.closing) for name in ("search", "answer")}
    # First complete block: an opening tag immediately followed (among these tags) by its closing tag.
    block = next(
        ((a, b) for a, b in zip(tags, tags[1:]) if not a.closing and b.closing and a.name == b.name),
        None,
    )
    if block is None:
        if tags:
            return _error("no complete <search>...</search> or <answer>...</answer> block")
        return _error("missing <search>...</search> or <answer>...</answer>")
    opening, closing = block
    content = text[opening.end : closing.start].strip()
    if not content:
        return _error(f"empty <{opening.name}> block")
    action = f"{opening.name}[{content}]"
    if not allow_multiple:
        if opened["search"] and opened["answer"]:
            return _error("both <search> and <answer> tags", action)
        if opened["search"] > 1 or opened["answer"] > 1:
            return _error(f"more than one <{opening.name}> tag", action)
    return _ok(action)


def _parse_boxed(text: str) -> ParseResult:
    start = text.rfind(_BOXED)
    if start < 0:
        return _error("missing \\boxed{...}")
    begin = start + len(_BOXED)
    depth = 1
    for m in _BRACES.finditer(text, begin):
        token = m.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth -= 1
            if depth == 0:
                action = text[begin : m.start()].strip()
                return _ok(action) if action else _error("empty \\boxed{}")
    return _error("unclosed \\boxed{")


def _json_objects(text: str) -> list[tuple[int, int]]:
    """Spans of the top-level ``{...}`` groups, string-aware inside them (one linear scan)."""
    spans: list[tuple[int, int]] = []
    pos = 0
    while True:
        start = text.find("{", pos)
        if start < 0:
            return spans
        depth, in_string = 1, False
        for m in _JSON_TOKENS.finditer(text, start + 1):
            token = m.group()
            if len(token) == 2:  # a backslash escape: never a brace or a quote
                continue
            if in_string:
                in_string = token != '"'
            elif token == '"':
                in_string = True
            elif token == "{":
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    spans.append((start, m.end()))
                    pos = m.end()
                    break
        else:  # unclosed: it swallowed the rest of the text
            return spans


def _too_deep(text: str, start: int) -> bool:
    """Whether the JSON value opening at ``text[start]`` nests objects/arrays deeper than
    :data:`MAX_JSON_DEPTH`. String-aware; stops when the value closes or the limit is passed, so
    it never reads more than the decoder would."""
    if text.count("[", start) + text.count("{", start) <= MAX_JSON_DEPTH:  # C-speed common case
        return False
    depth, in_string = 0, False
    for m in _JSON_NESTING.finditer(text, start):
        token = m.group()
        if len(token) == 2:  # a backslash escape
            continue
        if in_string:
            in_string = token != '"'
        elif token == '"':
            in_string = True
        elif token in "[{":
            depth += 1
            if depth > MAX_JSON_DEPTH:
                return True
        else:
            depth -= 1
            if depth <= 0:
                return False
    return False


def _decode(text: str, begin: int, decoder: json.JSONDecoder) -> Any:
    """The JSON value at ``text[begin:]``; ValueError when it is not one or nests too deep."""
    if _too_deep(text, begin):
        raise ValueError(f"JSON nested deeper than {MAX_JSON_DEPTH}")
    try:
        return decoder.raw_decode(text, begin)[0]
    except RecursionError:  # a second line of defence: _too_deep bounds the nesting already
        raise ValueError("JSON nested too deeply") from None


def _json_candidates(text: str, key: str):
    """Objects to try, best first: the top-level ``{...}`` groups from last to first, then (for
    outputs where a stray brace in prose unbalanced the scan) decodes starting at each of the last
    :data:`_JSON_RETRIES` opening braces. Groups without the quoted key are skipped unparsed; each
    decode is linear, so the whole search is."""
    quoted = json.dumps(key)
    decoder = json.JSONDecoder()
    for begin, end in reversed(_json_objects(text)):
        if text.find(quoted, begin, end) < 0:
            continue
        try:
            yield _decode(text[begin:end], 0, decoder)
        except ValueError:
            continue
    pos = len(text)
    for _ in range(_JSON_RETRIES):
        pos = text.rfind("{", 0, pos)
        if pos < 0:
            return
        try:
            yield _decode(text, pos, decoder)
        except ValueError:
            continue


def _parse_json(text: str, key: str) -> ParseResult:
    if json.dumps(key) not in text:  # cheap exit; also keeps huge junk outputs fast
        return _error(f"no JSON object with key {key!r}")
    found_object = False
    for obj in _json_candidates(text, key):
        if not isinstance(obj, dict):
            continue
        found_object = True
        if key in obj:
            value = obj[key]
            if not isinstance(value, str):
                return _error(f"JSON key {key!r} is not a string")
            action = value.strip()
            return _ok(action) if action else _error(f"empty JSON {key!r}")
    return _error(f"no JSON object with key {key!r}" if found_object else "no JSON object")


def parse_action(
    text: Any,
    format: str = "tags",
    *,
    require_think: bool = False,
    allow_multiple: bool | None = None,
    reject_cjk: bool = False,
    json_key: str = "action",
    tools: Any = None,
) -> ParseResult:
    """Parse raw model output ``text`` into a clean action; see the module docstring for formats.

    Args:
        text: the raw model output. A non-``str`` is a format error, never an exception.
        format: one of :data:`FORMATS`.
        require_think: ("tags", "search_r1") require a complete ``<think>...</think>`` block.
        allow_multiple: accept several action tags; None means the format's default (True for
            "tags", which takes the last block; False for "search_r1", as in Search-R1/verl-agent).
        reject_cjk: flag any CJK ideograph in the output as a format error (verl-agent's check).
        json_key: ("json") the key holding the action.
        tools: ("tools") the verbs a call may name (:mod:`wrappers.tools`); None: the generic ``act(action)``.

    Options that do not apply to ``format`` are ignored. Never raises on any input text.
    """
    if format not in FORMATS:
        raise ValueError(f"format: expected one of {FORMATS}, got {format!r}")
    if not isinstance(text, str):
        return _error(f"expected text, got {type(text).__name__}")
    if format == "tags":
        result = _parse_tags(text, require_think, True if allow_multiple is None else allow_multiple)
    elif format == "search_r1":
        result = _parse_search_r1(text, require_think, False if allow_multiple is None else allow_multiple)
    elif format == "boxed":
        result = _parse_boxed(text)
    elif format == "json":
        result = _parse_json(text, json_key)
    elif format == "tools":
        from wrappers.tools import GENERIC_TOOL, read_tool_call

        action, reason = read_tool_call(text.strip(), tools or (GENERIC_TOOL,))
        result = _ok(action) if action is not None else _error(reason)
    else:
        action = text.strip()
        result = _ok(action) if action else _error("empty output")
    if reject_cjk and not result.format_error and _CJK.search(text):
        return _error("contains CJK characters", result.action)
    return result


def format_response(action: str, format: str = "tags", *, json_key: str = "action", tools: Any = None) -> str:
    """What a perfect policy writes for ``action`` in ``format``: the inverse of :func:`parse_action`.

    Stage 1 trains on these strings and the expert plays through them, so every format must give the
    action back: ``parse_action(format_response(a, f), f).action == a`` (for ``"search_r1"`` an
    action that is not ``search[...]``/``answer[...]`` is written as an answer and comes back as
    ``answer[a]``). An action the format cannot carry (``</action>`` inside a tag, an unbalanced
    brace inside ``\\boxed{}``, surrounding whitespace, an empty string) raises ValueError rather
    than teaching the policy an output the parser reads differently.
    """
    if not isinstance(action, str):
        raise ValueError(f"action: expected a str, got {type(action).__name__}")
    expected = action
    if format == "tags":
        text = f"<action>{action}</action>"
    elif format == "boxed":
        text = f"\\boxed{{{action}}}"
    elif format == "json":
        text = json.dumps({json_key: action})
    elif format == "search_r1":
        verb = next((v for v in ("search", "answer") if action.startswith(f"{v}[") and action.endswith("]")), None)
        if verb is None:
            verb, expected = "answer", f"answer[{action}]"
            content = action
        else:
            content = action[len(verb) + 1:-1]
        text = f"<{verb}>{content}</{verb}>"
    elif format == "plain":
        text = action
    elif format == "tools":
        from wrappers.tools import GENERIC_TOOL, call_for_action

        text = call_for_action(action, tools or (GENERIC_TOOL,))
    else:
        raise ValueError(f"format: expected one of {FORMATS}, got {format!r}")
    parsed = parse_action(text, format, json_key=json_key, tools=tools)
    if parsed.format_error or parsed.action != expected:
        raise ValueError(f"the action {action!r} cannot be written in the {format!r} format so that it parses back "
                         f"(the parser reads {parsed.action!r}{': ' + parsed.reason if parsed.reason else ''})")
    return text


def format_instructions(format: str = "tags", *, json_key: str = "action") -> str:
    """The answer-format instruction for a prompt, matching what :func:`parse_action` accepts."""
    if format == "tags":
        return (
            "First reason step by step inside <think> </think>, "
            "then give exactly one action inside <action> </action>."
        )
    if format == "search_r1":
        return (
            "First reason step by step inside <think> </think>. Then do exactly one of the following: "
            "if you need more information, search with <search> your query </search>; "
            "if you can answer, give the final answer with <answer> your answer </answer>."
        )
    if format == "boxed":
        return "Reason step by step, then give your action as \\boxed{your action}."
    if format == "json":
        return f'Reply with a JSON object of the form {{"{json_key}": "your action"}}.'
    if format == "plain":
        return "Reply with the action only."
    if format == "tools":
        return "Act by calling exactly one of the tools."
    raise ValueError(f"format: expected one of {FORMATS}, got {format!r}")


@dataclass(frozen=True)
class _Config:
    format: str
    require_think: bool
    allow_multiple: bool | None
    reject_cjk: bool
    json_key: str
    tools: tuple = ()


class LLMActionParser(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Parses raw model output into the inner env's action, penalising malformed outputs.

    ``step(text)`` runs :func:`parse_action` on ``text``. When the format is respected the parsed
    action is sent to the inner env. On a format error ``format_penalty`` is subtracted from the
    reward and, per ``on_error``, the inner env receives:

    - ``"invalid"`` (default): an empty string, which seed envs count as an invalid step (the task
      does not advance; ``TimeLimit`` still bounds the episode);
    - ``"fallback"``: ``fallback_action``;
    - ``"raw"``: the raw text unchanged.

    ``info`` gains ``format_error`` (bool; False after ``reset``), ``format_error_reason`` (str,
    ``""`` when none) and, after a step, ``action`` (the string actually sent to the inner env).

    Put it outside :class:`~wrappers.prompt.PromptRenderer`, so the prompt history shows clean
    actions, and inside :class:`~wrappers.recorder.TrajectoryRecorder`, so the raw text is recorded.

    Args:
        env: any env taking ``str`` actions.
        format: one of ``"tags"``, ``"search_r1"``, ``"boxed"``, ``"json"``, ``"plain"``.
        format_penalty: subtracted from the reward on a format error (>= 0).
        on_error: ``"invalid"``, ``"fallback"`` or ``"raw"`` (see above).
        fallback_action: the action sent on a format error; required with ``on_error="fallback"``.
        require_think, allow_multiple, reject_cjk, json_key: passed to :func:`parse_action`.
        tools: (``format="tools"``) the verbs a call may name; None: the env's own
            (:func:`wrappers.tools.env_tools`: its ``agent_defaults.tool_verbs``, else ``act(action)``).
    """

    def __init__(
        self,
        env: gym.Env,
        format: str = "tags",
        format_penalty: float = 0.1,
        on_error: str = "invalid",
        fallback_action: str | None = None,
        *,
        require_think: bool = False,
        allow_multiple: bool | None = None,
        reject_cjk: bool = False,
        json_key: str = "action",
        tools: Any = None,
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self,
            format=format,
            format_penalty=format_penalty,
            on_error=on_error,
            fallback_action=fallback_action,
            require_think=require_think,
            allow_multiple=allow_multiple,
            reject_cjk=reject_cjk,
            json_key=json_key,
            tools=tools,
        )
        gym.Wrapper.__init__(self, env)
        if format not in FORMATS:
            raise ValueError(f"format: expected one of {FORMATS}, got {format!r}")
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error: expected one of {ON_ERROR}, got {on_error!r}")
        if isinstance(format_penalty, bool) or not isinstance(format_penalty, (int, float)):
            raise ValueError(f"format_penalty: expected a number >= 0, got {format_penalty!r}")
        if not format_penalty >= 0:  # also rejects NaN
            raise ValueError(f"format_penalty: expected a number >= 0, got {format_penalty!r}")
        if on_error == "fallback" and not isinstance(fallback_action, str):
            raise ValueError("fallback_action: a str is required with on_error='fallback'")
        if fallback_action is not None and not isinstance(fallback_action, str):
            raise ValueError(f"fallback_action: expected a str or None, got {type(fallback_action).__name__}")
        if not isinstance(json_key, str):
            raise ValueError(f"json_key: expected a str, got {type(json_key).__name__}")
        self.format = format
        self.format_penalty = float(format_penalty)
        self.on_error = on_error
        self.fallback_action = fallback_action
        if format == "tools" and tools is None:
            from wrappers.tools import env_tools

            tools = env_tools(env)
        self.tools = tuple(tools or ())
        self._config = _Config(format, bool(require_think), allow_multiple, bool(reject_cjk), json_key, self.tools)

    def parse(self, text: Any) -> ParseResult:
        """:func:`parse_action` with this wrapper's format and options."""
        c = self._config
        return parse_action(
            text,
            c.format,
            require_think=c.require_think,
            allow_multiple=c.allow_multiple,
            reject_cjk=c.reject_cjk,
            json_key=c.json_key,
            tools=c.tools,
        )

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        info = dict(info)
        info["format_error"] = False
        info["format_error_reason"] = ""
        return obs, info

    def step(self, action: Any):
        result = self.parse(action)
        if not result.format_error:
            sent = result.action
        elif self.on_error == "invalid":
            sent = ""
        elif self.on_error == "fallback":
            sent = self.fallback_action
        else:
            sent = action
        obs, reward, terminated, truncated, info = self.env.step(sent)
        if result.format_error:
            reward = float(reward) - self.format_penalty
        info = dict(info)
        info["format_error"] = result.format_error
        info["format_error_reason"] = result.reason
        info["action"] = sent if isinstance(sent, str) else repr(sent)
        return obs, reward, terminated, truncated, info
