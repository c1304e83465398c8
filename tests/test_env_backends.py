"""Rollouts on the three env backends (sync, gymnasium async, Ray) give the same episodes."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import seed_envs  # noqa: F401
from seed_train.config import SeedConfig
from seed_train.env_backends import RolloutSlot, SLOT_JOBS, make_vector_env
from seed_train.rollout import EnvPool, EnvSpec, group_jobs, run_episodes
from seed_train.tiny import cached_tiny_model
from seed_train.trainer import load
from ray_helpers import wait_until_dead
from wrappers import TokenizedResponse, Trajectory


def spec(split: str = "test") -> EnvSpec:
    return EnvSpec(env_id="seed/EZPoints-v0", split=split, template="compact", history=1, action_format="plain",
                   format_penalty=0.1, max_steps=4)


@pytest.fixture(scope="module")
def tiny_policy():
    return load(SeedConfig(model=str(cached_tiny_model(seed=0)), lora=False))


def _jobs(n_tasks: int = 2, group: int = 3):
    panel = list(gym.make("seed/EZPoints-v0", split="test").unwrapped.task_ids()[:n_tasks])
    return group_jobs(panel, group, base_seed=11, prefix="b")


def _signature(trajs: list[Trajectory]):
    """What must match exactly: tasks, tokens, actions, rewards (log-probs: see _same_episodes)."""
    return [(t.task_id, t.group_id, t.seed, t.return_, t.success,
             [(s.action, s.reward, s.prompt_token_ids, s.response_token_ids) for s in t.steps])
            for t in trajs]


def _same_episodes(a: list[Trajectory], b: list[Trajectory]) -> bool:
    """Same signature, and log-probs equal up to float rounding (batched sums differ in the last bits
    with the batch's padding)."""
    if _signature(a) != _signature(b):
        return False
    la = [x for t in a for s in t.steps for x in s.response_logprobs]
    lb = [x for t in b for s in t.steps for x in s.response_logprobs]
    return bool(np.allclose(la, lb, atol=1e-4, rtol=0))


def test_tokenized_response_is_a_str_and_pickles_with_its_tokens():
    import pickle

    r = TokenizedResponse("<action>2</action>", [1, 2, 3], [4, 5], [-0.5, -1.25])
    assert isinstance(r, str) and r == "<action>2</action>" and r.strip() == "<action>2</action>"
    back = pickle.loads(pickle.dumps(r))
    assert type(back) is TokenizedResponse and back == r
    assert back.token_fields() == {"prompt_token_ids": [1, 2, 3], "response_token_ids": [4, 5],
                                   "response_logprobs": [-0.5, -1.25]}


def test_rollout_slot_reads_its_own_options_and_idles_after_the_end():
    slot = RolloutSlot(spec().make(None, trajectory_in_info=True), index=1)
    obs, info = slot.reset(seed=0, options={SLOT_JOBS: [None, None]})
    assert info == {"slot_idle": True} and obs["text"] == "" and obs["prompt"] == ""  # never played: placeholder
    task = slot.unwrapped.task_ids()[3]
    obs, info = slot.reset(seed=0, options={SLOT_JOBS: [None, {"options": {"task_id": task, "group_id": "g"}}]})
    assert info["task_id"] == task and obs["prompt"]
    done, steps = False, 0
    while not done:
        obs, reward, term, trunc, info = slot.step("=")
        done, steps = term or trunc, steps + 1
    assert isinstance(info["trajectory"], Trajectory) and info["trajectory"].group_id == "g"
    assert len(info["trajectory"].steps) == steps
    # After the end: idle steps change nothing and are not recorded.
    again = slot.step("1")
    assert again[1:4] == (0.0, False, False) and again[4] == {"slot_idle": True} and again[0] is obs


def test_a_batch_smaller_than_the_vector_env_leaves_slots_idle(tiny_policy):
    pool = EnvPool(spec())
    big = run_episodes(tiny_policy.backend, tiny_policy.codec, pool, _jobs(2, 3), max_new_tokens=6, seed=1)
    assert pool.vector_env.num_envs == 6
    small = run_episodes(tiny_policy.backend, tiny_policy.codec, pool, _jobs(1, 2), max_new_tokens=6, seed=1)
    assert pool.vector_env.num_envs == 6 and len(small) == 2
    fresh = run_episodes(tiny_policy.backend, tiny_policy.codec, EnvPool(spec()), _jobs(1, 2), max_new_tokens=6,
                         seed=1)
    assert _same_episodes(small, fresh)
    assert len(big) == 6
    pool.close()


def test_async_backend_gives_the_same_episodes_as_sync(tiny_policy):
    jobs = _jobs()
    results = {}
    for backend in ("sync", "async"):
        pool = EnvPool(spec(), backend)
        results[backend] = run_episodes(tiny_policy.backend, tiny_policy.codec, pool, jobs, max_new_tokens=6,
                                        seed=1)
        if backend == "async":
            assert isinstance(pool.vector_env, gym.vector.AsyncVectorEnv)
        pool.close()
    assert _same_episodes(results["async"], results["sync"])
    assert all(s.response_token_ids for t in results["async"] for s in t.steps)


def test_async_backend_plays_batch_after_batch_like_sync(tiny_policy):
    """A second batch on the same async pool used to hang: gymnasium 1.4's AsyncVectorEnv without shared
    memory keeps a worker's autoreset flag across reset, so slots whose episode ended at the last turn
    answered the next batch's first step with a reset and stayed idle (the rollout drains it now)."""
    results = {}
    for backend in ("sync", "async"):
        pool = EnvPool(spec(), backend)
        try:
            results[backend] = [run_episodes(tiny_policy.backend, tiny_policy.codec, pool, _jobs(), max_new_tokens=6,
                                             seed=seed) for seed in (1, 2, 3)]
        finally:
            pool.close()
    for sync, async_ in zip(results["sync"], results["async"]):
        assert _same_episodes(async_, sync)


def test_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="env_backend"):
        make_vector_env(spec(), 2, "threads")
    with pytest.raises(ValueError, match="env_backend"):
        SeedConfig(env_backend="threads")
    with pytest.raises(ValueError, match="generation_backend"):
        SeedConfig(generation_backend="tgi")
    with pytest.raises(ValueError, match="generation_backend"):
        SeedConfig(generation_backend="vllm", device="cpu")


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'seed-gym[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield ray
    ray.shutdown()


def test_ray_backend_gives_the_same_episodes_and_survives_a_killed_actor(tiny_policy, local_ray):
    jobs = _jobs()
    sync = run_episodes(tiny_policy.backend, tiny_policy.codec, EnvPool(spec()), jobs, max_new_tokens=6, seed=1)
    pool = EnvPool(spec(), "ray")
    on_ray = run_episodes(tiny_policy.backend, tiny_policy.codec, pool, jobs, max_new_tokens=6, seed=1)
    assert _same_episodes(on_ray, sync)

    class KillsAnActor:
        """Generates like the policy, but kills env 4's actor before the second turn's step."""

        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def generate(self, prompts, **kw):
            self.calls += 1
            if self.calls == 2:
                local_ray.kill(pool.vector_env.actors[4], no_restart=True)
                wait_until_dead(local_ray, pool.vector_env.actors[4])
            return self.inner.generate(prompts, **kw)

    crashed = run_episodes(KillsAnActor(tiny_policy.backend), tiny_policy.codec, pool, jobs, max_new_tokens=6,
                           seed=1)
    survivors = [i for i in range(len(jobs)) if i != 4]
    assert crashed[4].meta["env_failed"] and not crashed[4].steps and "ActorDied" in crashed[4].meta["env_error"]
    # The others play to their end (their samples differ from the sync run: the batch lost a row).
    assert all(not crashed[i].meta.get("env_failed") and crashed[i].steps and crashed[i].length == len(crashed[i].steps)
               and crashed[i].meta["ended_by"] in ("terminated", "truncated") for i in survivors)
    assert pool.vector_env.restarts[4] == 1
    # The replaced actor plays the next batch normally.
    again = run_episodes(tiny_policy.backend, tiny_policy.codec, pool, jobs, max_new_tokens=6, seed=1)
    assert _same_episodes(again, sync)
    pool.close()


def test_an_episode_does_not_depend_on_the_rest_of_its_batch(tiny_policy):
    jobs = _jobs(2, 3)
    pool = EnvPool(spec())
    whole = run_episodes(tiny_policy.backend, tiny_policy.codec, pool, jobs, max_new_tokens=6, seed=5)
    half = run_episodes(tiny_policy.backend, tiny_policy.codec, pool, jobs[::-1][:3], max_new_tokens=6, seed=5)
    assert _same_episodes(half, whole[::-1][:3])
    # Members of one group sample differently.
    assert len({tuple(s.response_token_ids[0] for s in t.steps) for t in whole[:3]}) > 1
    pool.close()
