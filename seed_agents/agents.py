"""The agent protocol, and the scripted agents (the env's expert, uniform random).

An agent is any callable ``agent(obs, info) -> str``: it gets the observation and info the env last
returned and gives the action text to step with. Model agents answer ``obs["prompt"]`` (an env built
with :func:`wrappers.stack.make_agent_env` renders it) with raw model text, which the env's action
parser reads, exactly as in training.
"""
from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np

import seed_envs

Agent = Callable[[dict, dict], str]


class AgentError(RuntimeError):
    """The agent could not produce an action (e.g. an endpoint still failing after its retries).

    The runner ends that episode as a failure, records why, and goes on with the other tasks.
    """


def make_agent(env: gym.Env, kind: str, seed: int = 0) -> Agent:
    """``expert`` (the env's own expert) or ``random`` (uniform over admissible actions)."""
    if kind == "expert":
        return seed_envs.make_expert(env)
    if kind == "random":
        rng = np.random.default_rng(seed)
        space = env.action_space

        def random_agent(obs: dict, info: dict) -> str:
            actions = info.get("admissible_actions")
            if actions:
                return actions[int(rng.integers(len(actions)))]
            return space.sample()

        return random_agent
    raise ValueError(f"--agent: expected 'expert', 'random' or 'openai', got {kind!r}")
