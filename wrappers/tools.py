"""Actions as tool calls: an env's verbs as OpenAI function schemas, and a tool call read back as the action.

An env declares its verbs in ``agent_defaults.tool_verbs`` (e.g. Sokoban's ``up``, WebShop's
``search(query)`` and ``click(target)``): each has a ``name``, a ``description``, an ``action`` template
over its ``args`` (argument name -> description), e.g. ``"click[{target}]"``. An env that declares none
gets one generic verb, ``act(action)``. With the ``"tools"`` answer format
(``LLMActionParser(format="tools")``, ``make_agent_env(action_format="tools")``) a model acts by calling
one verb; its answer is the call as JSON text, ``{"name": "click", "arguments": {"target": "buy now"}}``
(what :class:`seed_agents.openai_endpoint.OpenAIChatAgent` returns for a reply's first ``tool_calls``
entry, and what Stage 1 trains a local model to write), and the action is the verb's template filled
in. A missing or malformed call (no JSON, an unknown verb, missing or extra arguments, arguments that
are not strings) is a format error with the same feedback as malformed tags.

Duck-typed on the verb objects (``seed_envs.core.ToolVerb`` or :class:`Tool`): this package never
imports an env package.
"""
from __future__ import annotations

import json
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym


@dataclass(frozen=True)
class Tool:
    """A verb as data (the fields of ``seed_envs.core.ToolVerb``)."""

    name: str
    description: str
    action: str
    args: Mapping[str, str] = field(default_factory=dict)


#: The verb of an env that declares none: any action text.
GENERIC_TOOL = Tool("act", "Take one action in the environment.", "{action}", {"action": "the action text"})

#: The most characters of a tool call read (a longer answer is a format error, parsed in linear time).
MAX_CALL_CHARS = 20_000


def env_tools(env: gym.Env | None) -> tuple[Any, ...]:
    """The verbs the innermost env declares (``agent_defaults.tool_verbs``), else ``(GENERIC_TOOL,)``."""
    declared = getattr(getattr(getattr(env, "unwrapped", None), "agent_defaults", None), "tool_verbs", None)
    return tuple(declared or ()) or (GENERIC_TOOL,)


def tool_schemas(tools: Sequence[Any]) -> list[dict[str, Any]]:
    """OpenAI ``tools=`` entries (type ``function``) for ``tools``: every argument a required string."""
    return [{"type": "function", "function": {
        "name": t.name, "description": t.description,
        "parameters": {"type": "object",
                       "properties": {a: {"type": "string", "description": d} for a, d in t.args.items()},
                       "required": list(t.args), "additionalProperties": False}}} for t in tools]


def tool_call_text(name: str, arguments: Any) -> str:
    """A call as the text the ``"tools"`` format reads: ``{"name": ..., "arguments": {...}}``. ``arguments``
    may be a dict or the JSON string an OpenAI reply carries (kept as it is when it is not JSON)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass
    return json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)


def read_tool_call(text: str, tools: Sequence[Any]) -> tuple[str | None, str]:
    """(the action, "") for a valid call in ``text``, else (None, why it is not one)."""
    names = ", ".join(t.name for t in tools)
    if len(text) > MAX_CALL_CHARS:
        return None, f"tool call longer than {MAX_CALL_CHARS} characters"
    try:
        call = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None, f"no tool call (call one of: {names})"
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None, f"no tool call (call one of: {names})"
    tool = next((t for t in tools if t.name == call["name"]), None)
    if tool is None:
        return None, f"unknown tool {call['name'][:60]!r} (tools: {names})"
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (json.JSONDecodeError, RecursionError):
            return None, f"{tool.name}: arguments are not a JSON object"
    if not isinstance(arguments, dict):
        return None, f"{tool.name}: arguments are not a JSON object"
    missing, extra = [a for a in tool.args if a not in arguments], [a for a in arguments if a not in tool.args]
    if missing or extra:
        return None, (f"{tool.name}: " + "; ".join(p for p in (f"missing {missing}" if missing else "",
                                                                  f"unexpected {extra[:5]}" if extra else "") if p)
                      + f" (takes {list(tool.args) or 'no arguments'})")
    if not all(isinstance(v, str) for v in arguments.values()):
        return None, f"{tool.name}: every argument must be a string"
    empty = [a for a in tool.args if not arguments[a].strip()]
    if empty:
        return None, f"{tool.name}: empty argument {empty[0]!r}"
    action = tool.action.format(**{a: arguments[a].strip() for a in tool.args}).strip()
    return (action, "") if action else (None, f"{tool.name}: empty action")


def call_for_action(action: str, tools: Sequence[Any]) -> str:
    """The call text that reads back as ``action`` (the first verb whose template matches it): what a
    perfect policy writes, e.g. for Stage 1. ValueError when no verb can carry the action."""
    for tool in tools:
        match = _template_regex(tool.action).fullmatch(action)
        if match is not None:
            text = tool_call_text(tool.name, {a: match.group(a) for a in tool.args})
            if read_tool_call(text, tools)[0] == action:
                return text
    raise ValueError(f"the action {action!r} matches none of the tools {[t.name for t in tools]}")


def _template_regex(template: str) -> re.Pattern:
    """``"click[{target}]"`` -> ``click\\[(?P<target>.+?)\\]``: the template's literal text, its fields."""
    pattern = ""
    for literal, name, _, _ in string.Formatter().parse(template):
        pattern += re.escape(literal)
        if name is not None:
            pattern += f"(?P<{name}>.+?)"
    return re.compile(pattern, re.DOTALL)
