"""The one agent env stack: ``LLMActionParser(PromptRenderer(gym.make(env_id, ...)))``.

The trainer, the TRL and verl-agent adapters and the CLI build their envs here, so one env id gives
one prompt whichever of them plays it. Every argument left None takes the env's own agent default:
the ``agent_defaults`` the env declares (prompt wording, history length, step budget, answer format),
read duck-typed from the registry's entry point (this package imports no env package; gymnasium
resolves the id, so import the env package first or write ``"package:id"``). An env that declares
nothing gets the generic defaults (``default`` template, history 2, its own episode length, ``tags``).

Recording stays the caller's job: wrap the result in a :class:`wrappers.TrajectoryRecorder`.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym

from wrappers.action_parser import LLMActionParser, format_instructions
from wrappers.deadline import EnvDeadline
from wrappers.prompt import DEFAULT_HISTORY, PromptRenderer, PromptTemplate, env_agent_defaults

#: The answer format of an env that declares none.
DEFAULT_ACTION_FORMAT = "tags"


def agent_defaults(env_id: str | None) -> Any:
    """The ``agent_defaults`` the registered ``env_id`` declares, without building the env; None if none
    (and for ``env_id`` None). An id not registered raises gymnasium's error.

    Read from the registry entry point: an env class's attribute, or one a factory function carries
    (``seed_envs.core.time_limited``). ``"package:id"`` imports ``package`` first, as ``gym.make`` does.
    """
    if env_id is None:
        return None
    module, _, name = env_id.rpartition(":")
    if module:
        importlib.import_module(module)
    creator = gym.spec(name).entry_point
    if isinstance(creator, str):
        creator = gym.envs.registration.load_env_creator(creator)
    return getattr(creator, "agent_defaults", None)


def default_history(env_id: str | None) -> int:
    """The history length ``env_id`` declares, else :data:`wrappers.prompt.DEFAULT_HISTORY`."""
    history = getattr(agent_defaults(env_id), "history", None)
    return DEFAULT_HISTORY if history is None else history


def default_max_steps(env_id: str | None) -> int | None:
    """The agent's step budget ``env_id`` declares (None: the env's own episode length applies)."""
    return getattr(agent_defaults(env_id), "max_steps", None)


def default_action_format(env_id: str | None) -> str:
    """The answer format ``env_id`` declares, else :data:`DEFAULT_ACTION_FORMAT`."""
    return getattr(agent_defaults(env_id), "action_format", None) or DEFAULT_ACTION_FORMAT


def default_tools(env_id: str | None) -> tuple[Any, ...]:
    """The verbs ``env_id`` declares for the ``"tools"`` answer format (``agent_defaults.tool_verbs``), else
    the generic ``act(action)`` (:data:`wrappers.tools.GENERIC_TOOL`)."""
    from wrappers.tools import GENERIC_TOOL

    return tuple(getattr(agent_defaults(env_id), "tool_verbs", ()) or ()) or (GENERIC_TOOL,)


def step_limit(env: gym.Env) -> int | None:
    """The tightest gymnasium ``TimeLimit`` anywhere in ``env``'s wrapper chain (None: the env has none)."""
    limits = []
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            limits.append(env._max_episode_steps)
        env = env.env
    return min(limits) if limits else None


def with_step_budget(env: gym.Env, max_steps: int | None) -> gym.Env:
    """``env`` truncated at ``max_steps`` whatever its constructor did with the argument: the agent stack
    owns its step budget (an env that takes ``**kwargs`` and ignores ``max_steps`` still ends). An env
    whose own limit is already that tight is returned as it is."""
    if max_steps is None:
        return env
    limit = step_limit(env)
    return env if limit is not None and limit <= max_steps else gym.wrappers.TimeLimit(env, max_episode_steps=max_steps)


def make_agent_env(
    env_id: str,
    *,
    split: str = "train",
    template: str | PromptTemplate | None = None,
    history: int | None = None,
    max_steps: int | None = None,
    action_format: str | None = None,
    format_penalty: float = 0.1,
    insert_after_task: str = "",
    env_kwargs: dict | None = None,
    prompt_fits: Callable[[str], bool] | None = None,
    step_timeout_s: float = 0.0,
    episode_timeout_s: float = 0.0,
) -> gym.Env:
    """``LLMActionParser(PromptRenderer(gym.make(env_id, split=split, max_steps=..., **env_kwargs)))``.

    Args:
        env_id: a registered id (``"seed/Sokoban-v0"`` after ``import seed_envs``, or
            ``"seed_envs:seed/Sokoban-v0"``).
        split: the env's split.
        template: a :data:`wrappers.TEMPLATES` name or a :class:`PromptTemplate`; None: the env's own.
        history: past (observation, action) pairs in the prompt; None: the env's own.
        max_steps: episode length passed to ``gym.make``; None: the env's declared agent budget, unless
            ``env_kwargs`` sets ``max_steps`` (else the env's own episode length).
        action_format: how the model writes actions (``tags``, ``plain``, ...); None: the env's own.
        format_penalty: reward subtracted for a malformed answer.
        insert_after_task: a block placed after the task line in every prompt (e.g. a skill library).
        env_kwargs: further ``gym.make`` arguments (``split`` above takes precedence over one here).
        prompt_fits: the model's prompt budget as a test of a prompt: the renderer leaves out the oldest
            history until a prompt passes (:class:`PromptRenderer`); None keeps every prompt whole.
        step_timeout_s: > 0: the longest one ``reset`` or ``step`` of the env may take; a call past it
            raises :class:`wrappers.deadline.EnvTimeout` and the env is abandoned (:class:`EnvDeadline`).
            0: no limit.
        episode_timeout_s: > 0: the longest the env's calls of one episode may take together. 0: no limit.
    """
    env_kwargs = dict(env_kwargs or {})
    if max_steps is None and "max_steps" not in env_kwargs:
        max_steps = default_max_steps(env_id)
    kwargs = dict(env_kwargs, split=split)
    if max_steps is not None:
        kwargs["max_steps"] = max_steps
    env = with_step_budget(gym.make(env_id, **kwargs), max_steps)
    # The built env's own answer format (as the registry's for a registered env; a stand-in such as
    # seed/Remote-v0 carries the served env's on the instance).
    action_format = action_format or getattr(env_agent_defaults(env), "action_format", None) or DEFAULT_ACTION_FORMAT
    if step_timeout_s or episode_timeout_s:  # (an episode limit alone bounds each call by it too)
        env = EnvDeadline(env, step_timeout_s or episode_timeout_s, episode_timeout_s)
    env = PromptRenderer(env, template=template, history=history, answer_format=format_instructions(action_format),
                         insert_after_task=insert_after_task, prompt_fits=prompt_fits)
    return LLMActionParser(env, format=action_format, format_penalty=format_penalty)
