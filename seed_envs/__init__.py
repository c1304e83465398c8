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

__all__ = ["ENV_IDS", "INFO_KEYS", "REMOTE_ENV_ID", "SeedEnv", "hindsight_rule_for", "hindsight_rules_for",
           "make_expert", "register_envs", "wrong_rule_for"]
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


def entry_point(env_id: str):
    """The registered creator of ``env_id`` (imported, not called): what ``gym.make`` would call. Accepts
    gymnasium's ``"module:id"`` form (the module is imported by then); raises gymnasium's error for an
    unknown id."""
    creator = gym.spec(env_id.split(":")[-1]).entry_point
    return gym.envs.registration.load_env_creator(creator) if isinstance(creator, str) else creator


def _declared(env_id: str | None, what: str):
    """The function the env of ``env_id`` declares as ``agent_defaults.<what>`` (an entry point, imported
    here), or None: an id not registered, or an env that declares none. Read from the registry's entry
    point, so no env is built."""
    import importlib

    if not env_id:
        return None
    try:
        creator = entry_point(env_id)
    except gym.error.Error:
        return None
    target = getattr(getattr(creator, "agent_defaults", None), what, None)
    if not target:
        return None
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def hindsight_rule_for(env_id: str | None):
    """The function ``(seed_envs.hindsight.EpisodeRecord) -> HindsightRule`` the env of ``env_id`` declares
    (``agent_defaults.hindsight``), for any registered env, in this package or not.

    Accepts ``"seed/Sokoban-v0"`` and gymnasium's ``"seed_envs:seed/Sokoban-v0"``; an env that declares
    none, an unregistered id or None gets :func:`seed_envs.hindsight.generic_rule`.
    """
    from seed_envs.hindsight import generic_rule

    return _declared(env_id, "hindsight") or generic_rule


def hindsight_rules_for(env_id: str | None) -> dict[str, str]:
    """Every rule the hindsight function of ``env_id`` (:func:`hindsight_rule_for`) can write, by its kind
    (``workflow/<...>``, ``avoid/<...>``, as ``HindsightRule.kind``): the ``SUCCESS_RULES`` and
    ``FAILURE_RULES`` tables of the function's module (the generic function's too); empty for a function
    without tables. What Stage 1 can teach the analyzer to write, for diagnostics that ask
    whether a skill recites one (``benchmarks/skill_kinds.py``)."""
    import sys

    from seed_envs import hindsight

    module = sys.modules[hindsight_rule_for(env_id).__module__]  # (imported by hindsight_rule_for)
    return {**{f"{hindsight.WORKFLOW}/{k}": r for k, r in getattr(module, "SUCCESS_RULES", {}).items()},
            **{f"{hindsight.AVOID}/{k}": r for k, r in getattr(module, "FAILURE_RULES", {}).items()}}


def wrong_rule_for(env_id: str | None):
    """The env's wrong-rule rewriter ``(skill_text, category) -> skill_text`` for the content controls
    (``agent_defaults.wrong_rule``: a skill of the same format whose rule is wrong for the category), or
    None where the env declares none."""
    return _declared(env_id, "wrong_rule")


#: A served env played over the OpenEnv protocol (``seed-envs serve``; needs the ``serve`` extra). Not in
#: :data:`ENV_IDS`: it is a client of one of them, made with the server's ``url``.
REMOTE_ENV_ID = "seed/Remote-v0"


def register_envs() -> None:
    """Register every id with gymnasium; safe to call more than once."""
    for env_id, entry_point in ENV_IDS.items():
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry_point)
    if REMOTE_ENV_ID not in gym.registry:
        gym.register(id=REMOTE_ENV_ID, entry_point="seed_envs.openenv.client:make_remote")


def make_expert(env: gym.Env) -> Expert:
    """The expert of any seed env (wrapped or not): a callable ``(obs, info) -> action str``.

    The expert plans from the current state, so call it after ``reset`` and at every step.
    """
    base = env.unwrapped
    # A seed env, or one that stands in for a seed env (seed_envs.openenv's RemoteEnv plays the server's).
    if not isinstance(base, SeedEnv) and not callable(getattr(base, "make_expert", None)):
        raise TypeError(f"make_expert: {type(base).__name__} is not a seed env")
    return base.make_expert()


register_envs()
