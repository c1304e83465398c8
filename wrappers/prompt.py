"""PromptRenderer: build the policy prompt of each step and keep its parts.

The prompt is made of sections joined by blank lines, in this order::

    intro                       the env's instructions (PromptTemplate.intro; the env declares its own)
    task line                   template.task_header with info["task"]
    [inserted block]            empty by default; a trainer puts a skill here
    history                     the last k (observation, action) pairs, oldest first
    current observation         the observation text now
    admissible actions          info["admissible_actions"], one per line (left out if None or empty)
    answer format               e.g. wrappers.action_parser.format_instructions("tags")

Empty sections are left out. The wrapper adds the prompt to the observation as ``obs["prompt"]`` and
its parts as ``info["prompt_parts"]`` (a JSON-safe dict); :func:`render_prompt` turns parts back into
the same string, optionally with a block inserted right after the task line, so a trainer can build
the skill-augmented prompt of a recorded step without re-parsing text. Rendering is linear in the
size of the parts; observation text is never cut.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import gymnasium as gym

#: Prompt-space length allowance for everything besides observation and action texts.
_PROMPT_EXTRA_CHARS = 1_000_000


@dataclass(frozen=True)
class PromptTemplate:
    """The fixed text of a prompt family.

    Headers are ``str.format`` strings with these fields: ``task_header`` {task};
    ``history_header`` {count} (pairs shown) and {total} (steps taken so far); ``step_format``
    {step} (1-based step number), {observation}, {action}; ``observation_header`` {step} (the current
    step number); ``admissible_header`` {count}. ``intro`` is used verbatim (braces are literal).
    """

    intro: str = (
        "You are an agent acting in a text environment. "
        "Each turn, read the current observation and reply with one action."
    )
    task_header: str = "Your task: {task}"
    history_header: str = "You have taken {total} step(s) so far. Your last {count} step(s), oldest first:"
    step_format: str = "[Step {step}] Observation:\n{observation}\nAction: {action}"
    observation_header: str = "[Step {step}] Current observation:"
    admissible_header: str = "Admissible actions (choose exactly one):"

    def validate(self) -> None:
        """Raise ValueError (naming ``template``) if a header has unknown or malformed fields."""
        samples = {
            "task_header": {"task": ""},
            "history_header": {"count": 0, "total": 0},
            "step_format": {"step": 0, "observation": "", "action": ""},
            "observation_header": {"step": 0},
            "admissible_header": {"count": 0},
        }
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, str):
                raise ValueError(f"template: {f.name} must be a str, got {type(value).__name__}")
            if f.name in samples:
                try:
                    value.format(**samples[f.name])
                except (KeyError, IndexError, ValueError) as exc:
                    allowed = sorted(samples[f.name])
                    raise ValueError(
                        f"template: {f.name} {value!r} is not a valid format string with fields {allowed}: {exc}"
                    ) from None


#: Built-in generic templates. An env's own wording is not here: the env declares it as data
#: (``env.unwrapped.agent_defaults.prompt``, see :func:`env_template`).
TEMPLATES: dict[str, PromptTemplate] = {
    "default": PromptTemplate(),
    # The shortest prompt for any env: no intro, terse headers. For small models and CPU budgets,
    # where every prompt token is paid for at every step (the quickstart uses it).
    "compact": PromptTemplate(
        intro="",
        task_header="Task: {task}",
        history_header="Last steps:",
        step_format="{observation}\n> {action}",
        observation_header="Now:",
        admissible_header="Actions:",
    ),
}

#: The history length of an env that declares none.
DEFAULT_HISTORY = 2


def env_agent_defaults(env: gym.Env) -> Any:
    """The agent defaults the innermost env declares (its ``agent_defaults`` attribute), or None.

    Duck-typed on purpose: this package never imports an env package. The attribute is read as data
    with ``prompt`` (PromptTemplate fields), ``history``, ``max_steps``, ``action_format``.
    """
    return getattr(env.unwrapped, "agent_defaults", None)


def env_shorten(env: gym.Env) -> Callable[[dict, int], dict | None] | None:
    """The env's own rule for a prompt over budget (its declared ``agent_defaults.shorten``, a
    ``"module:function"`` entry point imported here), else None."""
    target = getattr(env_agent_defaults(env), "shorten", None)
    if not target:
        return None
    if callable(target):
        return target
    module, _, name = str(target).partition(":")
    return getattr(importlib.import_module(module), name)


def template_from_fields(prompt_fields: Any) -> PromptTemplate:
    """A :class:`PromptTemplate` from a mapping of some of its fields (the rest keep the generic text)."""
    if not isinstance(prompt_fields, Mapping):
        raise ValueError(f"template: an env's agent_defaults.prompt must be a mapping, got {type(prompt_fields).__name__}")
    known = {f.name for f in fields(PromptTemplate)}
    unknown = sorted(set(prompt_fields) - known)
    if unknown:
        raise ValueError(f"template: unknown PromptTemplate fields {unknown}; expected a subset of {sorted(known)}")
    return PromptTemplate(**dict(prompt_fields))


def env_template(env: gym.Env) -> PromptTemplate:
    """The env's own prompt template (from its declared ``agent_defaults.prompt``), else ``default``."""
    prompt_fields = getattr(env_agent_defaults(env), "prompt", None)
    return TEMPLATES["default"] if not prompt_fields else template_from_fields(prompt_fields)


def env_history(env: gym.Env) -> int:
    """The env's own history length (its declared ``agent_defaults.history``), else :data:`DEFAULT_HISTORY`."""
    history = getattr(env_agent_defaults(env), "history", None)
    return DEFAULT_HISTORY if history is None else history


@dataclass
class PromptParts:
    """Everything one prompt is rendered from (see :func:`render_prompt`).

    ``history`` entries are dicts ``{"step": int, "observation": str, "action": str}``, oldest
    first; ``admissible`` is None when not shown; ``step`` is the number of steps taken so far;
    ``template`` holds the :class:`PromptTemplate` headers as a dict. All fields are JSON-safe.
    """

    intro: str = ""
    task: str | None = None
    insert_after_task: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    observation: str = ""
    admissible: list[str] | None = None
    format: str = ""
    step: int = 0
    template: dict[str, str] = field(default_factory=lambda: asdict(PromptTemplate()))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (the form stored in ``info["prompt_parts"]``)."""
        return {
            "intro": self.intro,
            "task": self.task,
            "insert_after_task": self.insert_after_task,
            "history": [dict(h) for h in self.history],
            "observation": self.observation,
            "admissible": None if self.admissible is None else list(self.admissible),
            "format": self.format,
            "step": self.step,
            "template": dict(self.template),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PromptParts:
        """Inverse of :meth:`to_dict`; unknown keys raise ValueError."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"parts: unknown keys {unknown}; expected a subset of {sorted(known)}")
        return cls(**data)


def render_prompt(parts: PromptParts | dict[str, Any], insert_after_task: str | None = None) -> str:
    """Render prompt parts into the prompt string.

    ``insert_after_task``, when given (not None), replaces ``parts.insert_after_task``: the block is
    placed as its own paragraph right after the task line, so everything before it is unchanged.
    Rendering ``info["prompt_parts"]`` without an insert gives exactly ``obs["prompt"]``.
    """
    if isinstance(parts, dict):
        parts = PromptParts.from_dict(parts)
    elif not isinstance(parts, PromptParts):
        raise ValueError(f"parts: expected PromptParts or dict, got {type(parts).__name__}")
    tpl = {**asdict(PromptTemplate()), **parts.template}
    insert = parts.insert_after_task if insert_after_task is None else insert_after_task
    sections: list[str] = []
    if parts.intro:
        sections.append(parts.intro)
    if parts.task:
        sections.append(tpl["task_header"].format(task=parts.task))
    if insert:
        sections.append(insert)
    if parts.history:
        lines = [tpl["history_header"].format(count=len(parts.history), total=parts.step)]
        for h in parts.history:
            lines.append(tpl["step_format"].format(step=h["step"], observation=h["observation"], action=h["action"]))
        sections.append("\n".join(lines))
    sections.append(tpl["observation_header"].format(step=parts.step + 1) + "\n" + parts.observation)
    if parts.admissible:  # None (not shown) or [] (nothing to choose, e.g. after the end): left out
        sections.append("\n".join([tpl["admissible_header"].format(count=len(parts.admissible)), *parts.admissible]))
    if parts.format:
        sections.append(parts.format)
    return "\n\n".join(sections)


def _prompt_space(text_space: gym.spaces.Space, history: int) -> gym.spaces.Space:
    """A copy of the inner text space, widened so it holds prompts built from texts it holds."""
    space = copy.deepcopy(text_space)
    max_length = getattr(space, "max_length", None)
    if isinstance(max_length, int):
        # history + current observation, history actions (bounded like observations) and extras.
        space.max_length = max_length * (2 * history + 2) + _PROMPT_EXTRA_CHARS
    return space


class PromptRenderer(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Adds the policy prompt to each observation (``obs["prompt"]``) and its parts to ``info``.

    The renderer remembers the last ``history`` (observation text, action) pairs of the episode; it
    records the actions it is stepped with, so put it *inside* an action parser to show clean
    actions. History is cleared on ``reset``.

    The observation space is the inner ``Dict`` space plus ``"prompt"``: a copy of the inner
    ``"text"`` space (so no env package is imported) whose ``max_length``, if it has one, is widened
    to hold the history; pass ``prompt_space`` to choose it yourself (e.g. for a charset-limited
    ``gymnasium.spaces.Text``, which would reject the template's characters).

    Args:
        env: an env whose observations are dicts with a ``"text"`` entry and whose ``info`` may hold
            ``"task"`` and ``"admissible_actions"``.
        template: a family name from :data:`TEMPLATES`, a :class:`PromptTemplate`, or None for the
            env's own (:func:`env_template`: what the env declares, else ``default``).
        history: number of past (observation, action) pairs shown (>= 0; 0 shows none); None for the
            env's own (:func:`env_history`, else 2).
        show_admissible: show ``info["admissible_actions"]`` when it is not None.
        answer_format: the answer-format instruction placed last, e.g.
            ``wrappers.action_parser.format_instructions("tags")``; ``""`` leaves it out.
        insert_after_task: a block placed right after the task line in every prompt (e.g. a static
            skill library); ``""`` for none. Change it between episodes with
            ``env.set_wrapper_attr("insert_after_task", text)``.
        prompt_space: the space of ``obs["prompt"]``; default derived from the text space.
        prompt_fits: a test of a rendered prompt (e.g. its token count against the model's budget); when
            a prompt fails it, the env's own rule shortens it first (``shorten``; ``info["prompt_shortened"]``
            is the level that fit or the last one tried), then the oldest history entries are left out until
            it passes or none is left (``info["history_trimmed"]`` counts them). What still does not fit is
            the agent's to handle (:class:`wrappers.PromptOverflow`). None: every prompt is kept whole.
        shorten: ``shorten(parts, level) -> parts or None``, on a dict of the prompt's ``task``,
            ``observation``, ``history`` and ``admissible``: the prompt's parts shortened up to ``level``
            (1, 2, ...; None past the env's last level), least information lost first. None: the env's own
            (:func:`env_shorten`); pass ``False`` for none.
    """

    def __init__(
        self,
        env: gym.Env,
        template: str | PromptTemplate | None = None,
        history: int | None = None,
        show_admissible: bool = True,
        answer_format: str = "",
        *,
        insert_after_task: str = "",
        prompt_space: gym.spaces.Space | None = None,
        prompt_fits: Callable[[str], bool] | None = None,
        shorten: Callable[[dict, int], dict | None] | None | bool = None,
    ):
        gym.utils.RecordConstructorArgs.__init__(
            self,
            template=template,
            history=history,
            show_admissible=show_admissible,
            answer_format=answer_format,
            insert_after_task=insert_after_task,
            prompt_space=prompt_space,
            prompt_fits=prompt_fits,
            shorten=shorten,
        )
        gym.Wrapper.__init__(self, env)
        if template is None:
            template = env_template(env)
        elif isinstance(template, str):
            if template not in TEMPLATES:
                raise ValueError(f"template: unknown family {template!r}; built-in templates: {sorted(TEMPLATES)}")
            template = TEMPLATES[template]
        elif not isinstance(template, PromptTemplate):
            raise ValueError(f"template: expected a family name, a PromptTemplate or None, got {type(template).__name__}")
        template.validate()
        if history is None:
            history = env_history(env)
        if isinstance(history, bool) or not isinstance(history, int) or history < 0:
            raise ValueError(f"history: expected an int >= 0, got {history!r}")
        if not isinstance(answer_format, str):
            raise ValueError(f"answer_format: expected a str, got {type(answer_format).__name__}")
        if not isinstance(insert_after_task, str):
            raise ValueError(f"insert_after_task: expected a str, got {type(insert_after_task).__name__}")
        inner = env.observation_space
        if not isinstance(inner, gym.spaces.Dict) or "text" not in inner.spaces:
            raise ValueError(f"env: observation space must be a Dict with a 'text' entry, got {inner}")
        if "prompt" in inner.spaces:
            raise ValueError("env: observation space already has a 'prompt' entry")
        if prompt_fits is not None and not callable(prompt_fits):
            raise ValueError(f"prompt_fits: expected a callable taking a prompt, got {type(prompt_fits).__name__}")
        if prompt_space is not None and not isinstance(prompt_space, gym.spaces.Space):
            raise ValueError(f"prompt_space: expected a gymnasium Space or None, got {type(prompt_space).__name__}")
        self.template = template
        self.history = history
        self.show_admissible = bool(show_admissible)
        self.answer_format = answer_format
        self.insert_after_task = insert_after_task
        self.prompt_fits = prompt_fits
        if shorten is None:
            shorten = env_shorten(env)
        elif shorten is False:
            shorten = None
        elif not callable(shorten):
            raise ValueError(f"shorten: expected a callable, None or False, got {type(shorten).__name__}")
        self.shorten = shorten
        self.observation_space = gym.spaces.Dict(
            {**inner.spaces, "prompt": prompt_space if prompt_space is not None else _prompt_space(inner["text"], history)}
        )
        self._template_dict = asdict(template)
        self._history: list[dict[str, Any]] = []
        self._steps = 0
        self._last_text = ""
        self._last_parts: PromptParts | None = None

    @property
    def last_parts(self) -> PromptParts | None:
        """Parts of the most recent prompt (None before the first reset)."""
        return self._last_parts

    def build_parts(self, text: str, info: dict[str, Any]) -> PromptParts:
        """Parts of the prompt for observation ``text`` and ``info``, using the recorded history."""
        admissible = info.get("admissible_actions") if self.show_admissible else None
        task = info.get("task")
        shown = self._history[len(self._history) - self.history :] if self.history else []
        return PromptParts(
            intro=self.template.intro,
            task=None if task is None else str(task),
            history=[dict(h) for h in shown],
            insert_after_task=self.insert_after_task,
            observation=text,
            admissible=None if admissible is None else [str(a) for a in admissible],
            format=self.answer_format,
            step=self._steps,
            template=dict(self._template_dict),
        )

    def _augment(self, obs: dict[str, Any], info: dict[str, Any]):
        text = obs["text"]
        text = text if isinstance(text, str) else str(text)
        parts = self.build_parts(text, info)
        prompt = render_prompt(parts)
        trimmed = shortened = 0
        if self.prompt_fits is not None and not self.prompt_fits(prompt):
            if self.shorten is not None:  # the env's own rule first: it knows what can go
                parts, prompt, shortened = self._shortened(parts, prompt)
            while parts.history and not self.prompt_fits(prompt):  # then the oldest past step goes first
                parts.history = parts.history[1:]
                trimmed += 1
                prompt = render_prompt(parts)
        self._last_text = text
        self._last_parts = parts
        obs = dict(obs)
        obs["prompt"] = prompt
        info = dict(info)
        info["prompt_parts"] = parts.to_dict()
        if trimmed:
            info["history_trimmed"] = trimmed
        if shortened:
            info["prompt_shortened"] = shortened
        return obs, info

    def _shortened(self, parts: PromptParts, prompt: str) -> tuple[PromptParts, str, int]:
        """The env rule's levels, each from the original parts, until the prompt fits or the rule has no
        further level: (parts, prompt, the level used)."""
        original = {"task": parts.task, "observation": parts.observation, "history": [dict(h) for h in parts.history],
                    "admissible": None if parts.admissible is None else list(parts.admissible)}
        level = 0
        while not self.prompt_fits(prompt):
            shorter = self.shorten(copy.deepcopy(original), level + 1)
            if shorter is None:
                break
            level += 1
            parts = dataclasses.replace(parts, observation=str(shorter["observation"]),
                                        history=[dict(h) for h in shorter["history"]],
                                        admissible=None if shorter.get("admissible") is None
                                        else [str(a) for a in shorter["admissible"]])
            prompt = render_prompt(parts)
        return parts, prompt, level

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        self._history = []
        self._steps = 0
        return self._augment(obs, info)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._steps += 1
        if self.history:
            shown = action if isinstance(action, str) else repr(action)
            self._history.append({"step": self._steps, "observation": self._last_text, "action": shown})
            del self._history[: -self.history]
        obs, info = self._augment(obs, info)
        return obs, reward, terminated, truncated, info
