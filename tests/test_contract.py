"""The environment contract of DESIGN.md, checked for every registered id and obs mode (and for the
sixth env that lives in tests/sixth_env, docs/adding-an-environment.md)."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import seed_envs
import sixth_env
from seed_agents.contract import junk_actions
from seed_envs.core import INFO_KEYS

TESTS_DIR = Path(__file__).resolve().parent
#: Each id checked, with the package whose import registers it (gymnasium's "package:id" form).
REGISTERED_BY = {**{env_id: "seed_envs" for env_id in seed_envs.ENV_IDS}, sixth_env.ENV_ID: "sixth_env"}


def obs_modes(env_id: str) -> list[str]:
    """The obs modes ``env_id`` has; raises ImportError when its optional extra is not installed."""
    env = gym.make(env_id)
    modes = ["text"] if env.unwrapped.image_shape is None else ["text", "image", "text+image"]
    env.close()
    return modes


def probe(env_id: str) -> tuple[list[str], str | None]:
    """(obs modes, None), or ([], why) for an env that cannot be built here: a missing extra skips that
    env's tests instead of failing the whole file at collection."""
    try:
        return obs_modes(env_id), None
    except ImportError as e:
        return [], f"{env_id}: optional extra not installed ({e})"


PROBES = {env_id: probe(env_id) for env_id in sorted(REGISTERED_BY)}
ENV_IDS = [pytest.param(env_id, marks=pytest.mark.skip(reason=why)) if why else env_id
           for env_id, (_, why) in PROBES.items()]
CASES = [pytest.param(env_id, "text", marks=pytest.mark.skip(reason=why)) if why else (env_id, mode)
         for env_id, (modes, why) in PROBES.items() for mode in (modes or ["text"])]


def fresh_interpreter_env() -> dict[str, str]:
    """The environment of a fresh interpreter that can import the test-only ``sixth_env`` package."""
    path = os.pathsep.join(p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def play_expert(env, seed=None, task_id=None, max_steps=500):
    obs, info = env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
    expert = seed_envs.make_expert(env)
    trace = [(obs, 0.0, info)]
    for _ in range(max_steps):
        obs, r, term, trunc, info = env.step(expert(obs, info))
        trace.append((obs, r, info))
        if term or trunc:
            break
    return trace


@pytest.mark.parametrize("env_id,obs_mode", CASES)
def test_check_env_passes(env_id, obs_mode):
    env = gym.make(env_id, obs_mode=obs_mode)
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_works_in_a_fresh_interpreter_with_module_prefix(env_id):
    code = (f"import gymnasium as gym; e = gym.make('{REGISTERED_BY[env_id]}:{env_id}'); o, i = e.reset(seed=0); "
            "print(type(o['text']).__name__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=fresh_interpreter_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "str"


@pytest.mark.parametrize("env_id,obs_mode", CASES)
def test_observation_and_info_contract(env_id, obs_mode):
    env = gym.make(env_id, obs_mode=obs_mode, split="test")
    for obs, _, info in play_expert(env, seed=3):
        assert set(INFO_KEYS) <= set(info), f"missing {set(INFO_KEYS) - set(info)}"
        assert isinstance(obs["text"], str) and obs["text"]
        assert env.observation_space.contains(obs)
        assert ("image" in obs) == (obs_mode != "text")
        if "image" in obs:
            assert obs["image"].dtype == np.uint8 and obs["image"].ndim == 3 and obs["image"].shape[2] == 3
        assert isinstance(info["task_id"], str) and isinstance(info["task"], str) and isinstance(info["category"], str)
        assert info["split"] == env.unwrapped.split == env.unwrapped._resolve_split("test")
        assert info["admissible_actions"] is None or all(isinstance(a, str) for a in info["admissible_actions"])
        assert isinstance(info["invalid_action"], bool) and isinstance(info["success"], bool)
        assert isinstance(info["score"], float) and 0.0 <= info["score"] <= 1.0
    assert info["success"], "the expert should win this seeded test task"


#: Hostile actions that are well-formed in WebShop / SearchQA (a path in a click, a 10k-character query):
#: they must not raise there (a long query is truncated), but need not be invalid.
WELL_FORMED_HOSTILE = ("click[../../etc/passwd]", "search[" + "a" * 10_000 + "]")


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_two_thousand_junk_actions_never_raise_and_are_flagged(env_id):
    env = gym.make(env_id)
    junk = junk_actions(random.Random(0))  # the contract checker's own junk (seed_agents/contract.py)
    env.reset(seed=0)
    for i in range(2000):
        hostile = i % 10 in (5, 7)
        obs, reward, term, trunc, info = env.step(WELL_FORMED_HOSTILE[i % 10 == 7] if hostile else next(junk))
        assert isinstance(obs["text"], str)
        if not hostile:
            assert info["invalid_action"] is True, f"junk action #{i} not flagged"
        assert len(obs["text"]) < 10_000, "a junk action must not be echoed back whole"
        if term or trunc:
            env.reset(seed=i)


TRACE = """
import json, sys, gymnasium as gym, seed_envs
env = gym.make(sys.argv[1], **json.loads(sys.argv[2]))
obs, info = env.reset(seed=int(sys.argv[3]))
expert = seed_envs.make_expert(env)
trace = [obs["text"]]
rewards = []
while True:
    obs, r, term, trunc, info = env.step(expert(obs, info))
    trace.append(obs["text"]); rewards.append(r)
    if term or trunc:
        break
print(json.dumps({"panel": list(env.unwrapped.task_ids()), "trace": trace, "rewards": rewards,
                  "task_id": info["task_id"]}))
"""


def trace_in_subprocess(env_id, kwargs, seed):
    r = subprocess.run([sys.executable, "-c", TRACE, f"{REGISTERED_BY[env_id]}:{env_id}", json.dumps(kwargs), str(seed)],
                       capture_output=True, text=True, timeout=300, env=fresh_interpreter_env())
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_episode_and_panel_in_two_processes(env_id):
    a = trace_in_subprocess(env_id, {"split": "test"}, 11)
    b = trace_in_subprocess(env_id, {"split": "test"}, 11)
    assert a == b
    env = gym.make(env_id, split="test")
    assert list(env.unwrapped.task_ids()) == a["panel"]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_seeding_draws_tasks_reproducibly_and_options_select_tasks(env_id):
    env = gym.make(env_id, split="test")
    first = [env.reset(seed=s)[1]["task_id"] for s in range(20)]
    again = [env.reset(seed=s)[1]["task_id"] for s in range(20)]
    assert first == again and len(set(first)) > 1
    ids = env.unwrapped.task_ids()
    assert list(ids) == sorted(ids) and len(set(ids)) == len(ids)
    for tid in (ids[0], ids[len(ids) // 2], ids[-1]):
        assert env.reset(options={"task_id": tid})[1]["task_id"] == tid
    with pytest.raises(ValueError):
        env.reset(options={"task_id": "no/such/task"})
    with pytest.raises(ValueError, match="unknown keys"):
        env.reset(options={"taskid": ids[0]})


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_unseen_alias_and_bad_config_name_the_field(env_id):
    env = gym.make(env_id, split="unseen")
    assert env.unwrapped.split in env.unwrapped.split_names
    for kwargs, field in [({"split": "nope"}, "split"), ({"obs_mode": "video"}, "obs_mode"),
                          ({"max_steps": 0}, "max_steps"), ({"reward_mode": "x"}, "reward_mode")]:
        with pytest.raises(ValueError, match=field):
            gym.make(env_id, **kwargs)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_time_limit_truncates_at_max_steps(env_id):
    env = gym.make(env_id, max_steps=3)
    env.reset(seed=0)
    flags = [env.step("")[2:4] for _ in range(3)]
    assert flags == [(False, False), (False, False), (False, True)]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_success_reward_mode_pays_ten_only_on_success(env_id):
    env = gym.make(env_id, split="test", reward_mode="success")
    trace = play_expert(env, seed=5)
    rewards = [r for _, r, _ in trace[1:]]
    assert rewards[-1] == 10.0 and all(r == 0.0 for r in rewards[:-1])


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_make_expert_wins_seeded_episodes_on_every_split(env_id):
    for split in ("train", "test", "unseen"):
        env = gym.make(env_id, split=split)
        wins = [play_expert(env, seed=100 + k)[-1][2]["success"] for k in range(10)]
        assert all(wins), f"{split}: expert won {sum(wins)}/10"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_episodes_played_in_threads_equal_the_same_played_one_by_one(env_id):
    """Thread safety is part of the contract (issue 34): ``seed-envs eval --concurrency N`` plays a panel
    in threads, one env each."""
    from seed_agents.contract import ContractChecker

    ContractChecker(env_id, {"split": "test"}, threads=4).check_threads()


def test_make_expert_refuses_other_envs():
    with pytest.raises(TypeError):
        seed_envs.make_expert(gym.make("CartPole-v1"))


def test_an_env_whose_extra_is_missing_is_skipped_not_fatal():
    class NeedsAnExtra(gym.Env):
        def __init__(self):
            raise ImportError("needs some_backend: pip install 'seed-gym[extra]'")

    env_id = "test-contract/NeedsAnExtra-v0"
    gym.register(env_id, entry_point=NeedsAnExtra)
    try:
        modes, why = probe(env_id)
    finally:
        del gym.registry[env_id]
    assert modes == [] and env_id in why and "seed-gym[extra]" in why
