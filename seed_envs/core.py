"""The environment contract, implemented once for every seed env.

:class:`SeedEnv` owns everything DESIGN.md's "environment contract" fixes: the observation and
action spaces, ``split`` / ``obs_mode`` / ``reward_mode`` validation, seeding, task panels, task
selection, the ``info`` keys, junk-action handling and rendering. A concrete env implements a few
``_hooks`` (start a task, apply a clean action, describe the state, draw the image, give an expert).

Episode length is *not* enforced here: :func:`make_with_time_limit` wraps the env in gymnasium's
``TimeLimit(max_steps)``, which is what ``gym.make`` returns for every registered id.

What an *agent* needs to play an env (prompt wording, history length, step budget, answer format, tool
verbs) is declared here too, as data: :class:`AgentDefaults`, the class attribute ``agent_defaults``.
The agent-side stack (``wrappers.make_agent_env``, ``PromptRenderer``) reads it duck-typed, so this
package never imports ``wrappers``.
"""
from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import TimeLimit

from seed_envs.spaces import TextSpace, observation_space

INFO_KEYS = (
    "task_id",
    "task",
    "category",
    "split",
    "admissible_actions",
    "invalid_action",
    "success",
    "score",
    "step",
)
OBS_MODES = ("text", "image", "text+image")
REWARD_MODES = ("env", "success")
SUCCESS_REWARD = 10.0  # verl-agent / SEED convention for reward_mode="success"
MAX_ACTION_ECHO = 60  # characters of a bad action quoted back in feedback

Expert = Callable[[dict, dict], str]


@dataclass(frozen=True)
class Task:
    """What an env tells the contract about the task it just started."""

    task_id: str
    instruction: str
    category: str


@dataclass(frozen=True)
class Outcome:
    """Result of applying one action, returned by :meth:`SeedEnv._apply`.

    ``reward`` is the env's native reward (used with ``reward_mode="env"``); ``feedback`` is a short
    line shown above the state in the next observation (e.g. why an action was invalid).
    """

    reward: float
    terminated: bool
    invalid: bool
    feedback: str = ""


@dataclass(frozen=True)
class ToolVerb:
    """One action verb an agent may call as a tool: ``action`` is a format string over ``args``
    (argument name -> description), e.g. ``ToolVerb("open", "Open a receptacle.", "open {receptacle}",
    {"receptacle": "e.g. 'fridge 1'"})``."""

    name: str
    description: str
    action: str
    args: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class AgentDefaults:
    """How an agent plays this env unless told otherwise: data, read by the agent-side stack.

    ``prompt`` holds ``wrappers.PromptTemplate`` fields (``intro``, ``task_header``, ``history_header``,
    ``step_format``, ``observation_header``, ``admissible_header``); fields left out keep the generic
    template's text. ``max_steps`` is the *agent's* step budget (the ``max_steps`` the trainer and the
    adapters pass to ``gym.make``); None means the env's own ``default_max_steps``. ``tool_verbs`` are
    the env's actions as typed tools (TRL's tool calling); empty means one generic ``act(action)``.
    ``hindsight``: the env's hindsight rule as a ``"module:function"`` entry point, imported only when a
    trainer annotates an episode (:func:`seed_envs.hindsight_rule_for`; None: the generic rule);
    ``wrong_rule``: likewise its wrong-rule rewriter for the content controls (None: the env has none).
    ``shorten``: likewise its rule for a prompt over the model's budget, ``shorten(parts, level) -> parts
    or None`` on a dict of ``observation``, ``history`` and ``admissible`` (``wrappers.PromptRenderer``
    tries levels 1, 2, ... before it drops past steps; None: only the renderer's generic rule).
    """

    prompt: Mapping[str, str] = field(default_factory=dict)
    history: int = 2
    max_steps: int | None = None
    action_format: str = "tags"
    tool_verbs: tuple[ToolVerb, ...] = ()
    hindsight: str | None = None
    wrong_rule: str | None = None
    shorten: str | None = None


#: The sentence that tells an agent to pick from the listed actions (envs that list admissible actions).
ACT_BY_ADMISSIBLE = "Each step, choose one of the admissible actions listed below."


def env_error(where: str, error: BaseException) -> str:
    """One line naming an env failure for whoever plays the env (a rollout slot, ``seed-envs``' runner):
    the env, where (``reset``, ``step 3``) and its own exception, shortened."""
    return f"env {where} raised {type(error).__name__}: {' '.join(str(error).split())[:300]}"


def quote_action(action: str) -> str:
    """A bad action quoted back to the agent, shortened so a huge string never floods the prompt."""
    short = action if len(action) <= MAX_ACTION_ECHO else action[:MAX_ACTION_ECHO] + "..."
    return repr(short)


#: What ``reset(options=...)`` of a seed env takes.
RESET_OPTIONS = ("task_id",)


def check_reset_options(options: Any, supported: Sequence[str] = RESET_OPTIONS) -> dict[str, Any]:
    """``reset``'s ``options`` as a new dict; None is {}. Anything but a mapping of supported keys is a
    ValueError that names ``options`` (not a bare TypeError from ``dict(...)`` naming nothing)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(f"reset options: expected a dict or None, got {type(options).__name__}")
    unknown = sorted((k for k in options if k not in supported), key=repr)
    if unknown:
        raise ValueError(f"reset options: unknown keys {unknown}; supported: {list(supported)}")
    return dict(options)


def resolve_data_dir(data_dir: str | os.PathLike | None, env_var: str | None) -> Path | None:
    """``data_dir`` if given, else the benchmark's usual environment variable, else None."""
    if data_dir is not None:
        return Path(data_dir).expanduser()
    if env_var and os.environ.get(env_var):
        return Path(os.environ[env_var]).expanduser()
    return None


class SeedEnv(gym.Env[dict, str]):
    """Base class of every seed env; see the module docstring. Not registered itself."""

    metadata: ClassVar[dict] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}

    #: Canonical split names; every env has ``train``, ``test`` and an out-of-distribution split.
    split_names: ClassVar[tuple[str, ...]] = ("train", "test", "unseen")
    #: Extra names accepted for ``split`` (``unseen`` must resolve in every env).
    split_aliases: ClassVar[dict[str, str]] = {}
    #: Height and width of the image observation, or None for text-only envs. A subclass whose
    #: image size depends on its arguments sets ``self.image_shape`` before ``super().__init__``.
    image_shape: tuple[int, int] | None = None
    #: Default episode length (``TimeLimit``) when ``max_steps`` is not given.
    default_max_steps: ClassVar[int] = 50
    #: How an agent plays this env by default (prompt, history, step budget, answer format, tools).
    agent_defaults: ClassVar[AgentDefaults] = AgentDefaults()
    #: The env's row in the docs' env table (``seed_envs.catalog``, ``seed-envs tables``): what the agent
    #: does (None: the class docstring's first line), a note per split, and text after the split list.
    summary: ClassVar[str | None] = None
    split_notes: ClassVar[dict[str, str]] = {}
    splits_extra: ClassVar[str] = ""

    def __init__(
        self,
        *,
        split: str = "train",
        obs_mode: str = "text",
        max_steps: int | None = None,
        data_dir: str | os.PathLike | None = None,
        reward_mode: str = "env",
        render_mode: str | None = None,
    ):
        self.split = self._resolve_split(split)
        if obs_mode not in OBS_MODES:
            raise ValueError(f"obs_mode: expected one of {OBS_MODES}, got {obs_mode!r}")
        if obs_mode != "text" and self.image_shape is None:
            raise ValueError(f"obs_mode: {type(self).__name__} has no image observations; use obs_mode='text'")
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode: expected one of {REWARD_MODES}, got {reward_mode!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode: expected one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        if render_mode == "rgb_array" and self.image_shape is None:
            raise ValueError(f"render_mode: {type(self).__name__} has no images; use 'ansi'")
        max_steps = self.default_max_steps if max_steps is None else max_steps
        if not isinstance(max_steps, (int, np.integer)) or isinstance(max_steps, bool) or max_steps < 1:
            raise ValueError(f"max_steps: expected a positive int, got {max_steps!r}")
        self.obs_mode = obs_mode
        self.reward_mode = reward_mode
        self.render_mode = render_mode
        self.max_steps = int(max_steps)
        self.data_dir = data_dir
        self.observation_space = observation_space(self.image_shape if obs_mode != "text" else None)
        self.action_space = TextSpace()
        self._panel: tuple[str, ...] | None = None
        self._task: Task | None = None
        self._step_count = 0
        self._last_invalid = False
        self._feedback = ""
        self._done = False

    # ----------------------------------------------------------------- hooks for subclasses
    def _build_panel(self) -> Sequence[str]:
        """Task ids of ``self.split`` (any order; the base sorts and checks them)."""
        raise NotImplementedError

    def _start_task(self, task_id: str) -> Task:
        """Set up the episode state for ``task_id``; raise ValueError for an id not of this env/split."""
        raise NotImplementedError

    def _apply(self, action: str) -> Outcome:
        """Apply a stripped action string. Never raise: unknown actions are an invalid Outcome."""
        raise NotImplementedError

    def _state_text(self, with_state: bool) -> str:
        """Text observation. ``with_state=False`` (``obs_mode="image"``) leaves out what the image shows."""
        raise NotImplementedError

    def _image(self) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} has no image observations")

    def _admissible_actions(self) -> list[str] | None:
        return None

    def _success(self) -> bool:
        raise NotImplementedError

    def _score(self) -> float:
        return float(self._success())

    def _extra_info(self) -> dict[str, Any]:
        """Env-specific info entries added after the contract keys."""
        return {}

    def make_expert(self) -> Expert:
        """A callable ``(obs, info) -> action`` that solves the current task; see ``seed_envs.make_expert``."""
        raise NotImplementedError

    # ----------------------------------------------------------------- the contract
    @classmethod
    def _resolve_split(cls, split: str) -> str:
        name = cls.split_aliases.get(split, split)
        if name not in cls.split_names:
            choices = sorted(set(cls.split_names) | set(cls.split_aliases))
            raise ValueError(f"split: expected one of {choices}, got {split!r}")
        return name

    def task_ids(self) -> tuple[str, ...]:
        """The split's task panel: fixed, sorted, independent of process, workers and file order."""
        if self._panel is None:
            ids = sorted(self._build_panel())
            if not ids:
                raise RuntimeError(f"{type(self).__name__}: split {self.split!r} has no tasks")
            if len(set(ids)) != len(ids):
                raise RuntimeError(f"{type(self).__name__}: split {self.split!r} has duplicate task ids")
            self._panel = tuple(ids)
        return self._panel

    def _draw_task_id(self, rng: np.random.Generator) -> str:
        panel = self.task_ids()
        return panel[int(rng.integers(len(panel)))]

    @property
    def task(self) -> Task | None:
        """The current task (None before the first reset)."""
        return self._task

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = check_reset_options(options)
        task_id = options.get("task_id")
        if task_id is None:
            self._task = self._start_task(self._draw_task_id(self.np_random))
        elif not isinstance(task_id, str):
            raise ValueError(f"reset options: task_id must be a str, got {type(task_id).__name__}")
        else:
            try:
                self._task = self._start_task(task_id)
            except ValueError as e:
                if task_id in self.task_ids():
                    # A task of the panel that failed to load: the env's error (its engine, its data), as the
                    # env raised it, never reported as a bad option.
                    raise
                raise ValueError(f"reset options: {e}") from e  # not this env's or split's task
        self._step_count = 0
        self._last_invalid = False
        self._feedback = ""
        self._done = False
        return self._observation(), self._info()

    def step(self, action: str):
        if self._task is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if not isinstance(action, str):
            # Only strings are actions; anything else is the agent's mistake, reported, not raised.
            outcome = Outcome(0.0, False, True, f"Invalid action: expected text, got {type(action).__name__}.")
        elif self._done:
            outcome = Outcome(0.0, True, True, "The episode has ended; reset the environment.")
        else:
            outcome = self._apply(action.strip())
        self._step_count += 1
        self._last_invalid = outcome.invalid
        self._feedback = outcome.feedback
        terminated = bool(outcome.terminated)
        self._done = self._done or terminated
        if self.reward_mode == "success":
            reward = SUCCESS_REWARD if (terminated and self._success() and not outcome.invalid) else 0.0
        else:
            reward = float(outcome.reward)
        return self._observation(), reward, terminated, False, self._info()

    def _observation(self) -> dict:
        text = self._state_text(with_state=self.obs_mode != "image")
        if self._feedback:
            text = f"{self._feedback}\n{text}"
        obs = {"text": text}
        if self.obs_mode != "text":
            obs["image"] = self._image()
        return obs

    def _info(self) -> dict[str, Any]:
        task = self._task
        assert task is not None
        admissible = self._admissible_actions()
        info = {
            "task_id": task.task_id,
            "task": task.instruction,
            "category": task.category,
            "split": self.split,
            "admissible_actions": list(admissible) if admissible is not None else None,
            "invalid_action": self._last_invalid,
            "success": bool(self._success()),
            "score": float(self._score()),
            "step": self._step_count,
        }
        info.update(self._extra_info())
        return info

    def render(self):
        if self.render_mode == "rgb_array":
            return self._image()
        if self.render_mode == "ansi":
            return self._state_text(with_state=True)
        return None


#: The contract's constructor arguments (``split``, ``obs_mode``, ``max_steps``, ``data_dir``,
#: ``reward_mode``, ``render_mode``) and their defaults, as :class:`SeedEnv` declares them. A concrete env
#: takes them as ``**contract`` and passes them on to ``super().__init__(**contract)`` unrestated.
CONTRACT_DEFAULTS: dict[str, Any] = {
    name: p.default for name, p in inspect.signature(SeedEnv.__init__).parameters.items() if p.kind is p.KEYWORD_ONLY
}


def contract_arg(contract: Mapping[str, Any], name: str) -> Any:
    """Contract argument ``name`` as :class:`SeedEnv` will see it (given, else its default), for an env
    that needs it before calling ``super().__init__(**contract)``."""
    return contract.get(name, CONTRACT_DEFAULTS[name])


def make_with_time_limit(env_cls: type[SeedEnv], **kwargs: Any) -> gym.Env:
    """Build ``env_cls(**kwargs)`` wrapped in gymnasium's ``TimeLimit(max_steps)``.

    Registered ids point at a one-line factory calling this, so ``gym.make(id, max_steps=N)``
    truncates at N with gymnasium's own wrapper while the env still knows its ``max_steps``.
    """
    env = env_cls(**kwargs)
    return TimeLimit(env, max_episode_steps=env.max_steps)


def time_limited(env_cls: type[SeedEnv]) -> Callable[..., gym.Env]:
    """The registered entry point of ``env_cls``: ``make(**kwargs)`` = :func:`make_with_time_limit`.

    It carries ``env_cls.agent_defaults`` and ``env_cls`` itself (``env_class``) as attributes, so an
    agent's defaults and the docs' env table are read from the registry's entry point without building the
    env (``wrappers.stack.agent_defaults``, ``seed_envs.catalog``).
    """

    def make(**kwargs: Any) -> gym.Env:
        return make_with_time_limit(env_cls, **kwargs)

    make.__doc__ = f"Entry point of {env_cls.__name__}: the env inside gymnasium's ``TimeLimit``."
    make.__qualname__ = make.__name__ = "make"
    make.__module__ = env_cls.__module__
    make.agent_defaults = env_cls.agent_defaults  # type: ignore[attr-defined]
    make.env_class = env_cls  # type: ignore[attr-defined]  # (the docs' env table reads its declaration)
    return make
