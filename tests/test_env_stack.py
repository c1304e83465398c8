"""One env stack: every way the project builds an agent env gives the same prompt for the same env id,
from the defaults the env itself declares (seed_envs.core.AgentDefaults)."""
from __future__ import annotations

import functools

import gymnasium as gym
import pytest

import seed_envs
from seed_envs.core import AgentDefaults, SeedEnv
from seed_train.adapters.trl import TaskEnv
from seed_train.adapters.verl_agent import SeedEnvironmentManager
from seed_train.config import SeedConfig
from seed_train.trainer import env_spec
from wrappers import TEMPLATES, PromptTemplate, agent_defaults, make_agent_env
from wrappers.prompt import template_from_fields

ENV_IDS = sorted(seed_envs.ENV_IDS)
RESET_SEED = 4


def or_skip_missing_extra(build):
    try:
        return build()
    except ImportError as e:  # an env whose optional extra is not installed
        pytest.skip(f"missing extra: {e}")


@functools.cache
def env_class(env_id: str) -> type[SeedEnv]:
    """The class behind a registered id (built once to find it; skips where an optional extra is missing)."""
    env = or_skip_missing_extra(lambda: gym.make(env_id))
    env.close()
    return type(env.unwrapped)


def first_prompt(env: gym.Env) -> str:
    try:
        obs, _ = env.reset(seed=RESET_SEED)
        return obs["prompt"]
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_first_prompt_through_builder_trainer_and_both_adapters(env_id):
    builder = or_skip_missing_extra(lambda: make_agent_env(env_id, split="test"))
    trainer = env_spec(SeedConfig(env_id=env_id), "test").make(lambda trajectory: None)
    trl = TaskEnv(env_id, split="test").make()
    prompts = {"builder": first_prompt(builder), "trainer": first_prompt(trainer), "trl": first_prompt(trl)}
    verl = SeedEnvironmentManager(env_id, 1, 1, seed=RESET_SEED, split="test")
    try:
        obs, _ = verl.reset()
        prompts["verl_agent"] = obs["text"][0]
    finally:
        verl.close()
    assert len(set(prompts.values())) == 1, {k: v[:200] for k, v in prompts.items()}
    declared = env_class(env_id).agent_defaults
    assert prompts["builder"].startswith(declared.prompt["intro"] + "\n\n")  # the env's own wording


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_builder_and_config_use_the_declared_defaults(env_id):
    declared = env_class(env_id).agent_defaults
    assert isinstance(declared, AgentDefaults)
    assert agent_defaults(env_id) is declared
    assert agent_defaults(f"seed_envs:{env_id}") is declared  # gymnasium's module-prefixed form
    cfg = SeedConfig(env_id=env_id)
    assert (cfg.env_default("max_steps"), cfg.env_default("history"), cfg.env_default("template")) == (
        declared.max_steps, declared.history, None)
    env = or_skip_missing_extra(lambda: make_agent_env(env_id, split="test"))
    try:
        assert env.unwrapped.max_steps == declared.max_steps
        assert env.get_wrapper_attr("history") == declared.history
        assert env.get_wrapper_attr("template") == template_from_fields(declared.prompt)
        assert env.get_wrapper_attr("format") == declared.action_format
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_explicit_arguments_override_the_env_defaults(env_id):
    env = or_skip_missing_extra(lambda: make_agent_env(env_id, split="test", template="compact", history=0,
                                                       max_steps=3, action_format="plain"))
    try:
        assert env.get_wrapper_attr("template") == TEMPLATES["compact"]
        assert (env.get_wrapper_attr("history"), env.unwrapped.max_steps, env.get_wrapper_attr("format")) == (0, 3, "plain")
        assert first_prompt(env).startswith("Task: ")  # compact: no intro
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_declared_prompts_are_valid_templates(env_id):
    declared = env_class(env_id).agent_defaults
    template = template_from_fields(declared.prompt)
    template.validate()
    assert template != PromptTemplate() and declared.history >= 0 and declared.max_steps >= 1


def test_env_knowledge_lives_in_the_env():
    sokoban = env_class("seed/Sokoban-v0").agent_defaults
    for symbol in ("#", "_", "O", "√", "X", "P", "S"):
        assert f"{symbol} " in sokoban.prompt["intro"]
    assert [v.name for v in sokoban.tool_verbs] == ["up", "down", "left", "right"]
    ezpoints = env_class("seed/EZPoints-v0").agent_defaults.prompt["intro"]
    assert all(token in ezpoints for token in ("+", "*", "=", "target"))
    # ALFWorld: the agent's budget (SEED's 30) is declared apart from the env's own episode length (50).
    alfworld = env_class("seed/ALFWorld-v0")
    assert (alfworld.agent_defaults.max_steps, alfworld.default_max_steps) == (30, 50)
    assert gym.make("seed/ALFWorld-v0").unwrapped.max_steps == 50


def test_an_env_declaring_nothing_gets_the_generic_defaults():
    from toy_env import ENV_ID  # registers test/Echo-v0 (its entry point declares no agent defaults)

    assert agent_defaults(ENV_ID) is None
    assert SeedConfig(env_id=ENV_ID).env_default("history") == 2
    assert SeedConfig(env_id="nobody/Unregistered-v0").env_default("max_steps") is None
    env = make_agent_env(ENV_ID)
    try:
        assert env.get_wrapper_attr("template") == TEMPLATES["default"]
        assert env.get_wrapper_attr("history") == 2 and env.get_wrapper_attr("format") == "tags"
        assert env.unwrapped.max_steps == 1  # the env's own episode length
    finally:
        env.close()
