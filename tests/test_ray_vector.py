"""RayVectorEnv on a local Ray instance (skipped where ray is not installed)."""
from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'seed-gym[ray]')")

import seed_envs  # noqa: E402,F401

from ray_helpers import wait_until_dead  # noqa: E402
from seed_train.envs_ray import RayVectorEnv  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def _fns():
    # Two kinds of env, 8 each; same observation space (a dict with text), so they batch together.
    return ([functools.partial(gym.make, "seed/Sokoban-v0", split="test", max_steps=6)] * 8
            + [functools.partial(gym.make, "seed/EZPoints-v0", split="test", max_steps=6)] * 8)


def test_sixteen_envs_two_kinds_200_steps_survive_a_killed_actor(local_ray):
    envs = RayVectorEnv(_fns())
    assert envs.num_envs == 16 and envs.metadata["autoreset_mode"].name == "DISABLED"
    obs, infos = envs.reset(seed=list(range(16)))
    assert len(obs["text"]) == 16 and all(isinstance(t, str) and t for t in obs["text"])
    assert infos["_task_id"].all()
    rng = np.random.default_rng(0)
    failed_at = None
    episodes_done = 0
    for t in range(200):
        actions = [str(rng.choice(infos["admissible_actions"][i])) if infos["admissible_actions"][i] else "x"
                   for i in range(16)]
        if t == 50:
            ray.kill(envs.actors[3], no_restart=True)
            wait_until_dead(ray, envs.actors[3])  # (so that step 50 is the one that finds it dead)
        obs, rewards, terms, truncs, step_infos = envs.step(actions)
        if step_infos.get("_env_failed", np.zeros(16, bool)).any():
            assert failed_at is None and step_infos["_env_failed"].tolist() == [i == 3 for i in range(16)]
            assert truncs[3] and rewards[3] == 0 and "Actor" in step_infos["env_error"][3]
            failed_at = t
        done = terms | truncs
        episodes_done += int(done.sum())
        infos = step_infos
        if done.any():
            _, reset_infos = envs.reset(seed=[1000 + t] * 16, options={"reset_mask": done})
            for key in ("admissible_actions",):
                for i in np.flatnonzero(done):
                    infos[key][i] = reset_infos[key][i]
    assert failed_at == 50 and envs.restarts == [1 if i == 3 else 0 for i in range(16)]
    assert episodes_done > 16
    envs.close()


def test_env_exception_restarts_the_actor(local_ray):
    class Exploding(gym.Wrapper):
        def step(self, action):
            if action == "boom":
                raise RuntimeError("env bug")
            return super().step(action)

    def make():
        return Exploding(gym.make("seed/Sokoban-v0", split="test", max_steps=4))

    envs = RayVectorEnv([make, make])
    envs.reset(seed=0)
    _, _, _, truncs, infos = envs.step(["boom", "up"])
    assert truncs.tolist() == [True, False] and infos["env_failed"][0] and "env bug" in infos["env_error"][0]
    obs, _ = envs.reset(seed=[5, 5], options={"reset_mask": np.array([True, False])})
    assert isinstance(obs["text"][0], str) and envs.restarts == [1, 0]
    envs.close()
