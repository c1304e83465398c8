"""seed_envs: agentic text environments behind one gymnasium API.

Importing this package registers every id (cheaply: entry-point strings, nothing heavy is imported)::

    import gymnasium as gym
    import seed_envs

    env = gym.make("seed/Sokoban-v0", split="test")
    expert = seed_envs.make_expert(env)

In a fresh interpreter without the import, use ``gym.make("seed_envs:seed/Sokoban-v0")``.
"""
from __future__ import annotations

import gymnasium as gym

from seed_envs.core import INFO_KEYS, Expert, SeedEnv

__all__ = ["ENV_IDS", "HINDSIGHT_RULES", "INFO_KEYS", "SeedEnv", "hindsight_rule_for", "make_expert", "register_envs",
           "wrong_rule_for"]
__version__ = "0.1.0"

#: Registered ids and the factory each one is built by (module:function, imported lazily).
ENV_IDS: dict[str, str] = {
    "seed/Sokoban-v0": "seed_envs.sokoban.env:make",
    "seed/EZPoints-v0": "seed_envs.ezpoints.env:make",
    "seed/ALFWorld-v0": "seed_envs.alfworld.env:make",
    "seed/SearchQA-v0": "seed_envs.searchqa.env:make",
    "seed/WebShop-v0": "seed_envs.webshop.env:make",
    "seed/CodeLock-v0": "seed_envs.codelock.env:make",  # the trainer's positive control, not a paper benchmark
}

#: Each env's hindsight rules (module:function, imported lazily): what its agent should learn from a
#: finished episode (see seed_envs.hindsight). Other ids get the generic rules.
HINDSIGHT_RULES: dict[str, str] = {
    "seed/Sokoban-v0": "seed_envs.sokoban.hindsight:hindsight_rule",
    "seed/EZPoints-v0": "seed_envs.ezpoints.hindsight:hindsight_rule",
    "seed/ALFWorld-v0": "seed_envs.alfworld.hindsight:hindsight_rule",
    "seed/SearchQA-v0": "seed_envs.searchqa.hindsight:hindsight_rule",
    "seed/WebShop-v0": "seed_envs.webshop.hindsight:hindsight_rule",
    "seed/CodeLock-v0": "seed_envs.codelock.hindsight:hindsight_rule",
}


def hindsight_rule_for(env_id: str | None):
    """The function ``(seed_envs.hindsight.EpisodeRecord) -> HindsightRule`` of ``env_id``.

    Accepts ``"seed/Sokoban-v0"`` and gymnasium's ``"seed_envs:seed/Sokoban-v0"``; any other id (or
    None) gets :func:`seed_envs.hindsight.generic_rule`.
    """
    import importlib

    name = (env_id or "").split(":")[-1]
    module, _, function = HINDSIGHT_RULES.get(name, "seed_envs.hindsight:generic_rule").partition(":")
    return getattr(importlib.import_module(module), function)


def wrong_rule_for(env_id: str | None):
    """The env's wrong-rule rewriter ``(skill_text, category) -> skill_text`` for the content controls
    (``wrong_rule`` beside ``hindsight_rule`` in its hindsight module: a skill of the same format whose rule
    is wrong for the category), or None where the env declares none."""
    import importlib

    name = (env_id or "").split(":")[-1]
    if name not in HINDSIGHT_RULES:
        return None
    module = importlib.import_module(HINDSIGHT_RULES[name].partition(":")[0])
    return getattr(module, "wrong_rule", None)


def register_envs() -> None:
    """Register every id with gymnasium; safe to call more than once."""
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point)


def make_expert(env: gym.Env) -> Expert:
    """The expert of any seed env (wrapped or not): a callable ``(obs, info) -> action str``.

    The expert plans from the current state, so call it after ``reset`` and at every step.
    """
    base = env.unwrapped
    if not isinstance(base, SeedEnv):
        raise TypeError(f"make_expert: {type(base).__name__} is not a seed env")
    return base.make_expert()


register_envs()
