"""Episode length owned by the trainer (issue 33 item 4): the agent stack truncates at its step budget
whatever the env's constructor does with ``max_steps``, and an env with no limit at all is refused before
any model loads."""
from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from seed_envs.spaces import TextSpace
from seed_train.config import SeedConfig, SetupError
from seed_train.preflight import check_run_setup
from seed_train.tiny import cached_tiny_model
from wrappers import make_agent_env
from wrappers.stack import step_limit

ENV_ID = "test/Endless-v0"


class EndlessEnv(gym.Env):
    """Never ends, has no TimeLimit, and swallows every constructor argument (max_steps included)."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, **ignored: Any):
        self.observation_space = gym.spaces.Dict({"text": TextSpace()})
        self.action_space = TextSpace()

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"text": "go on"}, {"task": "never stop", "task_id": "endless/0", "category": "endless",
                                   "admissible_actions": None, "success": False, "score": 0.0, "invalid_action": False}

    def step(self, action):
        return {"text": "go on"}, 0.0, False, False, {"task": "never stop", "task_id": "endless/0",
                                                      "category": "endless", "admissible_actions": None,
                                                      "success": False, "score": 0.0, "invalid_action": False}


@pytest.fixture(autouse=True)
def registered():
    gym.register(ENV_ID, entry_point=EndlessEnv, disable_env_checker=True)
    yield
    del gym.registry[ENV_ID]


def test_the_agent_stack_truncates_an_env_that_ignores_max_steps():
    env = make_agent_env(ENV_ID, max_steps=3)
    assert step_limit(env) == 3
    env.reset(seed=0)
    assert [env.step("<action>x</action>")[3] for _ in range(3)] == [False, False, True]


def test_an_env_that_already_truncates_is_left_as_it_is():
    env = make_agent_env("seed/EZPoints-v0", max_steps=5)
    assert step_limit(env) == 5 and sum(isinstance(w, gym.wrappers.TimeLimit) for w in _chain(env)) == 1


def _chain(env):
    while isinstance(env, gym.Wrapper):
        yield env
        env = env.env


def test_an_env_with_no_limit_is_refused_before_anything_loads(tmp_path):
    cfg = SeedConfig(env_id=ENV_ID, model=str(cached_tiny_model(seed=0)), lora=False, output_dir=str(tmp_path / "r"))
    with pytest.raises(SetupError, match="config field 'max_steps': test/Endless-v0 has no step limit"):
        check_run_setup(cfg)
    check_run_setup(SeedConfig(env_id=ENV_ID, model=cfg.model, lora=False, max_steps=4, eval_split="unseen",
                               output_dir=str(tmp_path / "r")))  # a budget given: accepted
    assert not (tmp_path / "r").exists()
