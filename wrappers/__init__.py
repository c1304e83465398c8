"""Gymnasium wrappers for any text environment (depends on gymnasium only).

- :class:`TrajectoryRecorder` records episodes into the trajectory format
  (:class:`Trajectory`, :class:`Step`, :class:`TrajectoryWriter`, :func:`read_trajectories`).
- :class:`LLMActionParser` turns raw model output into the env's action.
- :class:`PromptRenderer` builds the policy prompt (task, history, observation, actions).
- :func:`make_agent_env` builds ``LLMActionParser(PromptRenderer(gym.make(...)))`` with the env's
  own agent defaults: the one stack the trainer and the adapters use.

Stack them with the recorder outermost::

    env = TrajectoryRecorder(LLMActionParser(PromptRenderer(gym.make(...))), sink=writer)
    env = TrajectoryRecorder(make_agent_env("seed/Sokoban-v0"), sink=writer)  # the same, env defaults
"""
from wrappers.action_parser import LLMActionParser, ParseResult, format_instructions, format_response, parse_action
from wrappers.prompt import PromptParts, PromptRenderer, PromptTemplate, TEMPLATES, render_prompt
from wrappers.stack import agent_defaults, make_agent_env
from wrappers.recorder import PromptOverflow, ServedResponse, TokenizedResponse, TrajectoryRecorder
from wrappers.trajectory import (
    SCHEMA,
    SCHEMA_VERSION,
    Step,
    Trajectory,
    TrajectoryWriter,
    read_trajectories,
    resolve_image,
)

__all__ = [
    "LLMActionParser",
    "ParseResult",
    "PromptOverflow",
    "PromptParts",
    "PromptRenderer",
    "PromptTemplate",
    "SCHEMA",
    "SCHEMA_VERSION",
    "ServedResponse",
    "Step",
    "TEMPLATES",
    "Trajectory",
    "TokenizedResponse",
    "TrajectoryRecorder",
    "TrajectoryWriter",
    "agent_defaults",
    "format_instructions",
    "format_response",
    "make_agent_env",
    "parse_action",
    "read_trajectories",
    "render_prompt",
    "resolve_image",
]
