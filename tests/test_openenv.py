"""Our envs over the OpenEnv protocol: ``seed-envs serve`` and ``gym.make("seed/Remote-v0", url=...)``.

Every env played through a loopback server equals the same env in process, step for step (observation
text and image, reward, flags, info), for seeded episodes of the expert with junk actions mixed in; the
contract checker passes on the remote env; 32 sessions at once; openenv-core's own client; limits
(capacity, message size, hung env), hostile messages, and a server killed mid-episode.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("openenv.core", reason="the serve extra (openenv-core) is not installed")

import faulty_env  # noqa: E402,F401  (registers test/Hanging-v0)

import seed_envs  # noqa: E402
from seed_agents.contract import ContractChecker  # noqa: E402
from seed_agents.openenv_server import BackgroundServe, make_app, start_server_process  # noqa: E402
from seed_agents.serve_limits import ServeLimits  # noqa: E402
from seed_envs.openenv import MAX_ACTION_CHARS  # noqa: E402
from seed_envs.openenv.client import RemoteEnvError  # noqa: E402

TESTS_DIR = Path(__file__).resolve().parent

#: Each env served, with make arguments that keep it quick (and an image mode where the env has one).
SERVED = {
    "seed/EZPoints-v0": {"split": "test"},
    "seed/Sokoban-v0": {"split": "test", "obs_mode": "text+image"},
    "seed/SearchQA-v0": {"split": "test"},
    "seed/WebShop-v0": {"split": "test"},
    "seed/ALFWorld-v0": {"split": "test"},
    "seed/CodeLock-v0": {"split": "test"},
}


def available(env_id: str) -> str | None:
    try:
        gym.make(env_id, **SERVED[env_id]).close()
    except ImportError as e:
        return f"{env_id}: optional extra not installed ({e})"
    return None


def without_expert(info: dict) -> dict:
    return {k: v for k, v in info.items() if k != "expert_action"}


def same_obs(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and a["text"] == b["text"] and (
        "image" not in a or (a["image"].dtype == b["image"].dtype and np.array_equal(a["image"], b["image"])))


def play_both(remote: gym.Env, local: gym.Env, seed: int, junk_every: int = 3) -> int:
    """The expert's episode on both envs, a junk action every ``junk_every`` steps; asserts each step equal."""
    obs, info = remote.reset(seed=seed)
    lobs, linfo = local.reset(seed=seed)
    assert same_obs(obs, lobs) and without_expert(info) == linfo and info["expert_action"]
    expert = seed_envs.make_expert(local)
    for step in range(60):
        action = "<junk> 42" if step % junk_every == junk_every - 1 else expert(lobs, linfo)
        obs, reward, terminated, truncated, info = remote.step(action)
        lobs, lreward, lterminated, ltruncated, linfo = local.step(action)
        assert same_obs(obs, lobs), f"step {step}: observations differ"
        assert (reward, terminated, truncated) == (lreward, lterminated, ltruncated)
        assert without_expert(info) == json.loads(json.dumps(linfo)), f"step {step}: info differs"
        if terminated or truncated:
            return step + 1
    raise AssertionError("the episode did not end")


@pytest.mark.parametrize("env_id", sorted(SERVED))
def test_every_env_served_equals_in_process_step_for_step(env_id):
    why = available(env_id)
    if why:
        pytest.skip(why)
    with BackgroundServe(env_id, SERVED[env_id]) as url:
        remote = gym.make("seed/Remote-v0", url=url, env_id=env_id, expert=True)
        local = gym.make(env_id, **SERVED[env_id])
        try:
            assert remote.observation_space == local.observation_space
            assert remote.unwrapped.task_ids() == local.unwrapped.task_ids()
            assert remote.unwrapped.agent_defaults == local.unwrapped.agent_defaults  # tools, prompt, hindsight...
            steps = [play_both(remote, local, seed) for seed in (0, 7)]
        finally:
            remote.close()
            local.close()
    assert max(steps) >= 3  # (an episode of several steps: the comparison covers more than a reset)


def test_the_contract_checker_passes_on_a_remote_env():
    with BackgroundServe("seed/EZPoints-v0", {"split": "test"}) as url:
        checker = ContractChecker("seed/Remote-v0", {"url": url, "expert": True}, episodes=3, junk=40, threads=4)
        only = ("make_fresh", "check_env", "observation", "info_keys", "junk_actions", "bad_config", "panel",
                "determinism", "expert", "threads")
        results = {r.name: r for r in checker.run(only)}
    failed = {name: r.detail for name, r in results.items() if r.status != "PASS"}
    assert not failed, failed


def test_remote_env_arguments_must_match_the_server_and_a_missing_server_is_named():
    with BackgroundServe("seed/EZPoints-v0", {"split": "test"}) as url:
        for bad, name in ([{"env_id": "seed/Sokoban-v0"}, "env_id"], [{"max_steps": 3}, "max_steps"],
                          [{"reward_mode": "success"}, "reward_mode"]):
            with pytest.raises(ValueError, match=f"^{name}: the server at .* serves {name}="):
                gym.make("seed/Remote-v0", url=url, **bad)
        with pytest.raises(ValueError, match=r"^split: the server at .* serves the splits \['test'\], not 'train'"):
            gym.make("seed/Remote-v0", url=url, split="train")
        spec = json.loads(urllib.request.urlopen(f"{url}/seed/spec").read())
        assert spec["make_kwargs"] == {"split": "test", "obs_mode": "text", "max_steps": 8, "reward_mode": "env"}
        assert spec["max_action_chars"] == MAX_ACTION_CHARS and url.startswith("http://127.0.0.1:")
        # OpenEnv's stateless HTTP /reset (an env made per request) is not served; sessions are.
        request = urllib.request.Request(f"{url}/reset", data=b"{}", headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as http_error:
            urllib.request.urlopen(request)
        assert http_error.value.code in (404, 405)
    with pytest.raises(ValueError, match="^url: no seed-gym OpenEnv server at http://127.0.0.1:"):
        gym.make("seed/Remote-v0", url=url)
    with pytest.raises(ValueError, match="^url: expected"):
        gym.make("seed/Remote-v0", url="127.0.0.1:1")


def test_a_bad_served_config_fails_at_start_naming_the_field(capsys):
    from seed_agents.cli import main

    with pytest.raises(ValueError, match="split"):
        make_app("seed/EZPoints-v0", {"split": "no-such-split"})
    assert main(["serve", "seed/EZPoints-v0", "--split", "no-such-split", "--port", "1"]) == 2
    assert "split" in capsys.readouterr().err
    with pytest.raises(ValueError, match="max_sessions"):
        ServeLimits(max_sessions=0)
    with pytest.raises(ValueError, match="max_message_bytes"):
        ServeLimits(max_message_bytes=1000)


def test_32_sessions_at_once_each_its_own_env_and_one_more_is_refused():
    limits = ServeLimits(max_sessions=32)
    with BackgroundServe("seed/EZPoints-v0", {"split": "test"}, limits=limits) as url:
        local = gym.make("seed/EZPoints-v0", split="test")
        expected = {}
        for seed in range(32):
            expected[seed] = trace(local, seed)
        envs = [gym.make("seed/Remote-v0", url=url, expert=True) for _ in range(32)]
        barrier = threading.Barrier(32)
        results: dict[int, list] = {}

        def one(seed: int) -> None:
            envs[seed].reset(seed=seed)  # every session open before any episode is played
            barrier.wait(timeout=60)
            results[seed] = trace(envs[seed], seed)

        threads = [threading.Thread(target=one, args=(s,)) for s in range(32)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert results == expected
        extra = gym.make("seed/Remote-v0", url=url)
        with pytest.raises(RemoteEnvError, match="CAPACITY_REACHED"):
            extra.reset(seed=0)
        envs[0].close()  # a session ends: its slot is free again
        deadline = time.monotonic() + 10
        while True:
            try:
                extra.reset(seed=0)
                break
            except RemoteEnvError:
                assert time.monotonic() < deadline, "a closed session's slot was not freed"
                time.sleep(0.1)
        for env in [*envs[1:], extra]:
            env.close()


def trace(env: gym.Env, seed: int) -> list:
    obs, info = env.reset(seed=seed)
    expert = seed_envs.make_expert(env)
    out = [obs["text"]]
    while True:
        obs, reward, terminated, truncated, info = env.step(expert(obs, info))
        out.append((obs["text"], reward, info["success"]))
        if terminated or truncated:
            return out


def test_openenv_own_client_plays_our_server():
    from openenv.core.generic_client import GenericEnvClient

    with BackgroundServe("seed/Sokoban-v0", {"split": "test"}) as url:
        local = gym.make("seed/Sokoban-v0", split="test")
        task = local.unwrapped.task_ids()[3]
        lobs, linfo = local.reset(options={"task_id": task})
        with GenericEnvClient(base_url=url).sync() as client:
            result = client.reset(task_id=task, episode_id="ep-1")
            assert result.observation["text"] == lobs["text"] and result.observation["info"] == linfo
            assert result.done is False and result.observation["image"] is None
            result = client.step({"text": "up"})
            lobs, lreward, lterm, ltrunc, linfo = local.step("up")
            assert (result.observation["text"], result.reward, result.done) == (lobs["text"], lreward, lterm or ltrunc)
            state = client.state()
            assert state["env_id"] == "seed/Sokoban-v0" and state["task_id"] == task
            assert state["episode_id"] == "ep-1" and state["step_count"] == 1
            schema = json.loads(urllib.request.urlopen(f"{url}/schema").read())
            assert "text" in schema["action"]["properties"] and "info" in schema["observation"]["properties"]


def test_hostile_messages_get_errors_and_the_session_goes_on():
    from websockets.sync.client import connect

    limits = ServeLimits(max_message_bytes=2 << 20)
    with BackgroundServe("seed/EZPoints-v0", {"split": "test"}, limits=limits) as url:
        ws_url = url.replace("http://", "ws://") + "/ws"
        with connect(ws_url, max_size=None) as ws:
            def ask(message) -> dict:
                ws.send(message if isinstance(message, str) else json.dumps(message))
                return json.loads(ws.recv(timeout=30))

            assert ask("{not json")["data"]["code"] == "INVALID_JSON"
            assert ask({"type": "launch"})["data"]["code"] == "UNKNOWN_TYPE"
            assert "ResetNeeded" in ask({"type": "step", "data": {"text": "1"}})["data"]["message"]
            reply = ask({"type": "reset", "data": {"seed": 0, "path": "/etc/passwd"}})
            assert reply["type"] == "error" and "unknown keys ['path']" in reply["data"]["message"]
            assert "seed must be an int" in ask({"type": "reset", "data": {"seed": "0; rm -rf /"}})["data"]["message"]
            assert ask({"type": "reset", "data": {"seed": 0}})["type"] == "observation"
            reply = ask({"type": "step", "data": {"text": ["not", "a", "string"]}})
            assert reply["type"] == "observation" and reply["data"]["observation"]["info"]["invalid_action"] is True
            reply = ask({"type": "step", "data": {"text": "x" * (MAX_ACTION_CHARS + 1)}})
            assert reply["type"] == "error" and "at most" in json.dumps(reply["data"])
            assert ask({"type": "step", "data": {"text": "__import__('os')"}})["type"] == "observation"
            ws.send("x" * (3 << 20))  # over max_message_bytes: the server closes the connection (1009)
            with pytest.raises(Exception) as closed:
                ws.recv(timeout=30)
            assert "1009" in str(closed.value)
        # the server still serves new sessions
        env = gym.make("seed/Remote-v0", url=url)
        assert env.reset(seed=1)[1]["task_id"]
        # an action over the limit is sent as its first MAX_ACTION_CHARS characters: invalid, as in process
        local = gym.make("seed/EZPoints-v0", split="test")
        local.reset(seed=1)
        junk = "x" * 1_000_000
        obs, _, _, _, info = env.step(junk)
        assert info["invalid_action"] and obs == local.step(junk[:MAX_ACTION_CHARS])[0]
        env.close()


def test_a_hung_env_is_abandoned_after_the_request_timeout_and_a_new_session_works():
    limits = ServeLimits(request_timeout_s=1.0)
    with BackgroundServe(faulty_env.HANGING_ID, limits=limits) as url:
        env = gym.make("seed/Remote-v0", url=url)
        ids = env.unwrapped.task_ids()
        hangs = next(t for t in ids if t.endswith("3"))  # (faulty_env: its second step sleeps)
        fine = next(t for t in ids if t[-1] in "05")
        env.reset(options={"task_id": hangs})
        env.step("a")
        started = time.monotonic()
        with pytest.raises(RemoteEnvError, match="EnvTimeout"):
            env.step("b")
        assert time.monotonic() - started < 10
        with pytest.raises(gym.error.ResetNeeded):
            env.step("c")
        env.reset(options={"task_id": fine})  # a new session, a new env on the server
        env.step("a")
        env.step("b")
        env.close()


def test_a_server_killed_mid_episode_is_a_clean_error_and_nothing_recorded_is_lost(tmp_path):
    from wrappers import TrajectoryRecorder, read_trajectories

    server, url = start_server_process("seed/EZPoints-v0", "--split", "test", stdout=subprocess.DEVNULL,
                                       stderr=subprocess.PIPE, text=True, start_new_session=True,
                                       env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)})
    try:
        path = tmp_path / "episodes.jsonl"
        env = TrajectoryRecorder(gym.make("seed/Remote-v0", url=url, expert=True), path)
        expert = seed_envs.make_expert(env)
        obs, info = env.reset(seed=0)
        while True:  # one whole episode, recorded
            obs, _, terminated, truncated, info = env.step(expert(obs, info))
            if terminated or truncated:
                break
        obs, info = env.reset(seed=1)
        env.step(expert(obs, info))
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        with pytest.raises(RemoteEnvError, match="step failed"):
            env.step(expert(obs, info))
        with pytest.raises(RemoteEnvError, match="reset failed"):
            env.reset(seed=2)
        env.close()
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
    episodes = list(read_trajectories(path))
    assert len(episodes) >= 1 and episodes[0].success and episodes[0].task_id


def test_the_agent_stack_over_a_remote_env_gives_the_same_prompts_and_steps():
    """wrappers.make_agent_env on seed/Remote-v0 plays the served env with the served env's own agent
    defaults (prompt template, history, answer format), as in process."""
    from wrappers.stack import make_agent_env

    with BackgroundServe("seed/Sokoban-v0", {"split": "test", "max_steps": 15}) as url:
        remote = make_agent_env("seed/Remote-v0", split="test", env_kwargs={"url": url})
        local = make_agent_env("seed/Sokoban-v0", split="test", max_steps=15)
        (robs, _), (lobs, _) = remote.reset(seed=4), local.reset(seed=4)
        assert robs["prompt"] == lobs["prompt"] and "Sokoban" in robs["prompt"]
        for answer in ("<think>go</think><action>up</action>", "up", "left, then down", "<action>right</action>"):
            r, l = remote.step(answer), local.step(answer)
            assert r[0]["prompt"] == l[0]["prompt"] and r[1:4] == l[1:4]
            assert (r[4]["format_error"], r[4]["action"]) == (l[4]["format_error"], l[4]["action"])
        remote.close()
        local.close()


def test_a_server_serves_several_splits_each_session_picks_one():
    with BackgroundServe("seed/EZPoints-v0", {"split": "train"}, splits=("train", "test", "unseen")) as url:
        spec = json.loads(urllib.request.urlopen(f"{url}/seed/spec").read())
        assert spec["splits"] == ["train", "test", "unseen"] and spec["make_kwargs"]["split"] == "train"
        for split in ("unseen", "test", None):
            remote = gym.make("seed/Remote-v0", url=url, split=split, expert=True)
            local = gym.make("seed/EZPoints-v0", split=split or "train")
            assert remote.unwrapped.split == local.unwrapped.split
            assert remote.unwrapped.task_ids() == local.unwrapped.task_ids()
            assert trace(remote, 5) == trace(local, 5)
            remote.close()
        with pytest.raises(ValueError, match=r"^split: the server at .* serves the splits \['test', 'train', 'unseen'\]"):
            gym.make("seed/Remote-v0", url=url, split="warmup")
        from websockets.sync.client import connect

        with connect(url.replace("http://", "ws://") + "/ws") as ws:
            ws.send(json.dumps({"type": "reset", "data": {"split": "warmup"}}))
            assert "split: this server serves" in json.loads(ws.recv(timeout=30))["data"]["message"]


def test_the_trainer_runs_against_served_envs_as_in_process(tmp_path):
    """seed-train with env_urls (two servers, envs spread over them): Stage 1 demonstrations (the servers'
    expert), rollouts, skills and evaluations equal the same run's in process, episode for episode."""
    import toy_env  # noqa: F401  (registers test/Echo-v0)
    import torch

    from seed_train import trainer
    from seed_train.config import SeedConfig, SetupError
    from seed_train.tiny import cached_tiny_model
    from wrappers import read_trajectories

    base = dict(env_id="test/Echo-v0", model=str(cached_tiny_model(seed=0)), lora=True, template="compact",
                history=0, action_format="plain", max_new_tokens=4, skill_max_new_tokens=8, analyzer_retries=0,
                stage1_demos=4, stage1_epochs=1, iterations=1, tasks_per_iteration=2, group_size=2, kl_coef=0.0,
                eval_limit=4, checkpoint_every=0, save_final=False, eval_before=False)
    local_cfg = SeedConfig(**base, output_dir=str(tmp_path / "local"))
    spec = trainer.env_spec(local_cfg, "train")
    served = {"reward_mode": local_cfg.reward_mode, **({"max_steps": spec.max_steps} if spec.max_steps else {})}
    splits = ("train", local_cfg.eval_split)

    def episodes(run: str) -> list:
        return [(t.task_id, t.success, t.return_, [(s.action, s.reward) for s in t.steps], t.meta.get("skill"))
                for t in read_trajectories(tmp_path / run / "trajectories.jsonl")]

    with torch.random.fork_rng(devices=[]):
        local = trainer.train(local_cfg, say=lambda _: None)
    with BackgroundServe("test/Echo-v0", served, splits=splits) as url_a, \
            BackgroundServe("test/Echo-v0", served, splits=splits) as url_b:
        remote_cfg = SeedConfig(**base, output_dir=str(tmp_path / "remote"), env_urls=[url_a, url_b])
        with torch.random.fork_rng(devices=[]):
            remote = trainer.train(remote_cfg, say=lambda _: None)
        # A server that does not serve a split the run needs is refused at start, naming the field.
        with BackgroundServe("test/Echo-v0", served, splits=("train",)) as url_c:
            from seed_train.preflight import check_run_setup

            with pytest.raises(SetupError, match="env_urls.*split"):
                check_run_setup(SeedConfig(**base, output_dir=str(tmp_path / "c"), env_urls=[url_a, url_c]))
    assert remote["after"]["categories"] == local["after"]["categories"]
    assert remote["after_stage1"]["categories"] == local["after_stage1"]["categories"]
    assert remote["stage1"] == local["stage1"]
    assert episodes("remote") == episodes("local") and episodes("local")
