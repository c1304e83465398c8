"""An env that raises ends only its episode (issue 33 item 1), on the sync and async backends as on Ray:
the episode comes back marked ``env_failed`` with the env's own error and the steps it had played, the
slot's env is replaced, the other episodes of the batch are untouched, and the next batch plays on."""
from __future__ import annotations

import dataclasses
import json
import time

import gymnasium as gym_module
import pytest
import torch

import faulty_env  # noqa: F401  (registers test/FaultyEcho-v0)
from seed_train.config import SeedConfig
from seed_train.evaluate import summarize
from seed_train.rollout import EnvPool, EnvSpec, EpisodeJob, run_episodes
from seed_train.tiny import cached_tiny_model
from seed_train.trainer import load

SPEC = EnvSpec(env_id="faulty_env:test/FaultyEcho-v0", split="test", template="compact", history=0,
               action_format="plain", format_penalty=0.1, max_steps=3, env_kwargs={"n_tasks": 20})


@pytest.fixture(scope="module")
def tiny():
    with torch.random.fork_rng(devices=[]):
        return load(SeedConfig(model=str(cached_tiny_model(seed=0)), lora=False, threads=1))


def jobs(numbers):
    return [EpisodeJob(task_id=f"echo/test/{1000 + n:04d}", seed=n, group_id=f"g{n}") for n in numbers]


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_a_raising_env_ends_only_its_episode_and_is_replaced(tiny, backend):
    pool = EnvPool(SPEC, backend)
    try:
        played = run_episodes(tiny.backend, tiny.codec, pool, jobs([0, 1, 2, 3]), max_new_tokens=3, seed=0)
        by_task = {t.task_id[-1]: t for t in played}
        healthy = [by_task["0"], by_task["3"]]
        assert all(not t.meta.get("env_failed") and len(t.steps) >= 1 for t in healthy)
        step_fault, reset_fault = by_task["1"], by_task["2"]
        assert step_fault.meta["env_failed"] and "env step raised RuntimeError: boom at step 2" in step_fault.meta["env_error"]
        assert len(step_fault.steps) == 1 and not step_fault.success  # the step it played before the fault
        assert reset_fault.meta["env_failed"] and "env reset raised RuntimeError: the engine crashed" in \
            reset_fault.meta["env_error"] and reset_fault.steps == []
        # The same slots play the next batch: the failed envs were replaced.
        again = run_episodes(tiny.backend, tiny.codec, pool, jobs([4, 5, 6, 7]), max_new_tokens=3, seed=0)
        assert [t.task_id[-1] for t in again] == ["4", "5", "6", "7"]
        assert all(not t.meta.get("env_failed") for t in again)
    finally:
        pool.close()
    summary = summarize(played)
    assert summary["categories"]["all"]["env_failures"] == 2  # counted apart from task failures


def test_every_episode_of_a_batch_failing_does_not_hang(tiny):
    pool = EnvPool(SPEC, "sync")
    try:
        played = run_episodes(tiny.backend, tiny.codec, pool, jobs([2, 12]), max_new_tokens=3, seed=0)
    finally:
        pool.close()
    assert [t.meta.get("env_failed") for t in played] == [True, True]


@pytest.mark.parametrize("concurrency", [1, 3])
def test_seed_envs_runner_ends_only_the_failing_episodes(concurrency):
    """``seed-envs eval`` (threads, one env each) under the same policy: an env that raises ends that
    episode as a failure naming the env's own error; its worker gets a fresh env; the panel completes."""
    import gymnasium as gym

    import seed_envs
    from seed_agents.runner import play_panel

    task_ids = [f"echo/test/{1000 + n:04d}" for n in range(8)]
    results = play_panel(lambda: gym.make(faulty_env.ENV_ID, split="test", n_tasks=20, max_steps=3),
                         lambda env: seed_envs.make_expert(env), task_ids, concurrency=concurrency)
    by_number = {int(r.task_id[-1]): r for r in results}
    assert [r.task_id for r in results] == task_ids
    assert by_number[1].env_failed and "env step 1 raised RuntimeError: boom at step 2" in by_number[1].error
    assert by_number[2].env_failed and "env reset raised RuntimeError: the engine crashed" in by_number[2].error
    assert all(r.success and not r.error for n, r in by_number.items() if n not in (1, 2))


def test_info_keys_of_mixed_types_across_envs_do_not_break_a_batch(tiny):
    """A key that is a dict in one env's info and None in another's (WebShop's reward_parts) made
    gymnasium's info merge raise; slots now pass on only what the rollout reads (the trajectory keeps all)."""
    spec = EnvSpec(env_id="faulty_env:test/MixedInfoEcho-v0", split="test", template="compact", history=0,
                   action_format="plain", format_penalty=0.1, env_kwargs={"n_tasks": 8})
    pool = EnvPool(spec, "sync")
    try:
        played = run_episodes(tiny.backend, tiny.codec, pool, jobs([1, 0, 3, 2]), max_new_tokens=3, seed=0)
    finally:
        pool.close()
    assert [t.steps[-1].info["extra"] for t in played] == [None, {"bought": 1}, None, {"bought": 1}]


# ------------------------------------------------------------------------------------ hangs (wall-clock limits)
HANGING = dataclasses.replace(SPEC, env_id="faulty_env:test/HangingEcho-v0", step_timeout_s=1.0)


@pytest.fixture
def ray_if(request):
    """A local Ray instance for the ``ray`` case (its workers import this folder's ``faulty_env``)."""
    if request.node.callspec.params.get("backend") != "ray":
        yield
        return
    import os
    from pathlib import Path

    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'seed-gym[ray]')")
    path = os.pathsep.join([str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")])
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    yield
    ray.shutdown()


@pytest.mark.parametrize("backend", ["sync", "async", "ray"])
def test_a_hanging_env_ends_only_its_episode_at_the_step_limit_and_is_replaced(tiny, backend, ray_if):
    """Tasks 3 and 4 sleep for minutes in step 2 and in reset: each ends at the 1 s limit as an env failure
    (the steps it played kept), the other episodes are untouched, and the slots play the next batch. On
    ``ray`` the same deadline runs inside each env's actor."""
    pool = EnvPool(HANGING, backend)
    try:
        start = time.monotonic()
        played = run_episodes(tiny.backend, tiny.codec, pool, jobs([0, 3, 4, 5]), max_new_tokens=3, seed=0)
        elapsed = time.monotonic() - start
        by_task = {t.task_id[-1]: t for t in played}
        assert all(not by_task[n].meta.get("env_failed") and by_task[n].steps for n in "05")
        step_hang, reset_hang = by_task["3"], by_task["4"]
        assert step_hang.meta["env_failed"] and len(step_hang.steps) == 1 and not step_hang.success
        assert "env step raised EnvTimeout: step 2 took longer than 1 s (the step limit)" in step_hang.meta["env_error"]
        assert reset_hang.meta["env_failed"] and reset_hang.steps == []
        assert "reset took longer than 1 s" in reset_hang.meta["env_error"]
        again = run_episodes(tiny.backend, tiny.codec, pool, jobs([6, 7, 8, 9]), max_new_tokens=3, seed=0)
        assert all(not t.meta.get("env_failed") for t in again)
    finally:
        pool.close()
    assert elapsed < faulty_env.HANG_S / 4  # the run did not wait for the hung calls


@pytest.mark.parametrize("concurrency", [1, 3])
def test_seed_envs_runner_ends_a_hanging_episode_at_the_step_limit(concurrency):
    import gymnasium as gym

    import seed_envs
    from seed_agents.runner import play_panel
    from wrappers.deadline import EnvDeadline

    task_ids = [f"echo/test/{1000 + n:04d}" for n in range(6)]
    start = time.monotonic()
    results = play_panel(lambda: EnvDeadline(gym.make(faulty_env.HANGING_ID, split="test", n_tasks=20, max_steps=3), 1.0),
                         lambda env: seed_envs.make_expert(env), task_ids, concurrency=concurrency)
    assert time.monotonic() - start < faulty_env.HANG_S / 4
    by_number = {int(r.task_id[-1]): r for r in results}
    assert by_number[3].env_failed and "step 2 took longer than 1 s" in by_number[3].error
    assert by_number[4].env_failed and "reset took longer than 1 s" in by_number[4].error
    assert all(r.success and not r.error for n, r in by_number.items() if n not in (1, 2, 3, 4))


class SlowSteps(gym_module.Env):
    """Each step takes ``delay`` seconds; never ends by itself."""

    observation_space = gym_module.spaces.Discrete(1)
    action_space = gym_module.spaces.Discrete(1)

    def __init__(self, delay: float):
        self.delay, self.closed = delay, False

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):
        time.sleep(self.delay)
        return 0, 0.0, False, False, {}

    def close(self):
        self.closed = True


def test_env_deadline_limits_each_call_and_the_episodes_total():
    from wrappers.deadline import EnvDeadline, EnvTimeout

    env = EnvDeadline(SlowSteps(0.2), step_timeout_s=5.0, episode_timeout_s=0.5)
    env.reset(seed=0)
    env.step(0), env.step(0)
    with pytest.raises(EnvTimeout, match=r"took 0\.\d s by step 3, over the 0.5 s episode limit"):
        env.step(0)
    env.reset(seed=0)  # an episode over its total only ends: the env is fine
    env.step(0)
    env.close()
    assert env.unwrapped.closed

    hung = EnvDeadline(SlowSteps(3.0), step_timeout_s=0.3)
    hung.reset()
    start = time.monotonic()
    with pytest.raises(EnvTimeout, match="step 1 took longer than 0.3 s"):
        hung.step(0)
    assert time.monotonic() - start < 1.5
    with pytest.raises(EnvTimeout, match="abandoned"):  # nothing more runs on an env in an unknown state
        hung.reset()
    hung.close()
    assert not hung.unwrapped.closed  # (its abandoned call may still be inside it)
    with pytest.raises(ValueError, match="step_timeout_s"):
        EnvDeadline(SlowSteps(0.0), step_timeout_s=0)


# ------------------------------------------------------------------------------------ groups and failed iterations
def _episode(group: str, k: int, *, failed: bool = False, reward: float = 1.0):
    from wrappers import Step, Trajectory

    steps = [] if failed and k % 2 else [Step(index=0, observation="o", prompt="p", response="r", action="a",
                                              reward=reward, terminated=True, truncated=False, info={})]
    meta = {"env_failed": True, "env_error": "env step raised RuntimeError: boom"} if failed else {}
    return Trajectory(episode_id=f"{group}-{k}", env_id="x", task_id=f"t/{group}", category="c", task="t",
                      split="test", seed=0, group_id=group, steps=steps, meta=meta)


def test_a_group_with_a_failed_member_is_dropped_whole_by_default_or_keeps_its_survivors():
    from seed_train.trainer import usable_episodes

    played = ([_episode("a", k) for k in range(4)] + [_episode("b", 0, failed=True)]
              + [_episode("b", k) for k in range(1, 4)] + [_episode("c", 0, reward=float("nan"))]
              + [_episode("c", k) for k in range(1, 4)])
    kept, left_out, nonfinite, dropped = usable_episodes(played, "drop")
    assert {t.group_id for t in kept} == {"a"} and len(kept) == 4 and nonfinite == 1 and dropped == 2
    # (the failed episode itself is left out too: logged with its error)
    assert sorted(t.episode_id for t in left_out) == ["b-0", "b-1", "b-2", "b-3", "c-0", "c-1", "c-2", "c-3"]
    assert all(t.meta["left_out"].startswith("a member of its group failed") for t in left_out
               if t.episode_id not in ("b-0", "c-0"))
    for t in played:
        t.meta.pop("left_out", None), t.meta.pop("nonfinite_reward", None)
    kept, left_out, nonfinite, dropped = usable_episodes(played, "keep")
    assert sorted(t.episode_id for t in kept) == ["a-0", "a-1", "a-2", "a-3", "b-1", "b-2", "b-3", "c-1", "c-2", "c-3"]
    assert [t.episode_id for t in left_out] == ["b-0", "c-0"] and dropped == 0


def test_a_run_whose_every_episode_fails_skips_its_updates_and_stops_after_n_iterations(tmp_path):
    """Every task's env is down: each iteration makes no update (warned), the run stops with one line at
    --max-failed-iterations, the failed episodes are in the trajectory file and the weights are unchanged."""
    from seed_train.trainer import RunStopped, train

    model = cached_tiny_model(seed=0)
    cfg = SeedConfig(env_id="faulty_env:test/BrokenEcho-v0", model=str(model), lora=False, template="compact",
                     history=0, action_format="plain", max_steps=3, max_new_tokens=3, skill_max_new_tokens=8,
                     analyzer_retries=0, stage1_demos=0, iterations=5, tasks_per_iteration=2, group_size=2,
                     minibatch_size=8, eval_before=False, eval_after=False, threads=1, max_failed_iterations=2,
                     env_kwargs={"n_tasks": 6}, output_dir=str(tmp_path / "run"))
    lines = []
    with pytest.raises(RunStopped, match="stopped: 2 consecutive iterations in which every episode failed"):
        train(cfg, say=lines.append)
    assert sum("every episode failed" in line and "no update" in line for line in lines) == 2
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["episodes_trained"] for m in metrics] == [0, 0] and [m["env_failures"] for m in metrics] == [4, 4]
    from wrappers import read_trajectories

    played = list(read_trajectories(tmp_path / "run" / "trajectories.jsonl"))
    assert len(played) == 8 and all(t.meta["env_failed"] and "engine is down" in t.meta["env_error"] for t in played)


def test_paired_tests_leave_an_episode_whose_env_failed_out_of_both_arms():
    from seed_train.evaluate import episode_outcomes, paired_test

    a = [_episode("a", k) for k in range(3)]
    for k, t in enumerate(a):
        t.task_id, t.success = f"t/{k}", True
    b = [_episode("b", k) for k in range(3)]
    for k, t in enumerate(b):
        t.task_id, t.success = f"t/{k}", False
    b[1].meta.update(env_failed=True)
    result = paired_test(episode_outcomes(a), episode_outcomes(b))
    assert result["pairs"] == 2 and result["a_only"] == 2  # task t/1 is in neither arm's count


def test_the_deadline_benchmark_runs_and_the_limit_changes_no_episode(monkeypatch, capsys):
    import sys

    from script_loader import load_script

    bench = load_script("benchmarks/bench_env_deadline.py")
    monkeypatch.setattr(sys, "argv", ["bench", "--episodes", "5", "--repeats", "1"])
    bench.main()  # (asserts the two rows played the same episodes)
    out = capsys.readouterr().out
    assert "| EnvDeadline | 25 |" in out and "| bare | 25 |" in out


def test_an_async_env_worker_that_dies_ends_the_batchs_open_episodes_and_the_pool_is_rebuilt(tiny):
    """A SIGKILLed AsyncVectorEnv worker used to surface as a bare EOFError that ended the run."""
    pool = EnvPool(SPEC, "async")

    class KillsAWorker:
        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def generate(self, prompts, **kwargs):
            self.calls += 1
            if self.calls == 2:  # every episode is at its second step (Echo here takes two)
                pool.vector_env.processes[1].kill()
                pool.vector_env.processes[1].join(10)
            return self.inner.generate(prompts, **kwargs)

    try:
        played = run_episodes(KillsAWorker(tiny.backend), tiny.codec, pool, jobs([0, 3, 5, 6]), max_new_tokens=3, seed=0)
        assert all(t.meta["env_failed"] and "env worker process died" in t.meta["env_error"] for t in played)
        again = run_episodes(tiny.backend, tiny.codec, pool, jobs([0, 3, 5, 6]), max_new_tokens=3, seed=0)
        assert all(not t.meta.get("env_failed") and t.steps for t in again)  # a fresh vector env
        pool.vector_env.processes[0].kill()  # a worker that died between batches: the next batch rebuilds
        pool.vector_env.processes[0].join(10)
        third = run_episodes(tiny.backend, tiny.codec, pool, jobs([0, 3, 5, 6]), max_new_tokens=3, seed=0)
        assert [[s.response for s in t.steps] for t in third] == [[s.response for s in t.steps] for t in again]
    finally:
        pool.close()


def test_rates_and_records_leave_env_failures_out_as_the_paired_tests_do():
    """A seed's success rate (what the seed-level comparisons use) is over the episodes with an outcome: an
    env failure is counted apart, not as the policy's failure; the record keeps the flag and gives the same."""
    from seed_train.evaluate import episode_outcomes
    from seed_train.records import Record, episode_rows, summary_of_rows
    from wrappers import Trajectory

    def episode(i: int, success: bool, **meta) -> Trajectory:
        t = Trajectory(episode_id=f"e{i}", env_id="test/Echo-v0", task_id=f"echo/test/{i:02d}", task="say it",
                       category="echo", split="test", meta=meta)
        return t.finish(success=success, score=float(success))

    played = [episode(0, True), episode(1, False), episode(2, True), episode(3, False, env_failed=True),
              episode(4, False, error="endpoint failed after 3 attempts")]
    summary = summarize(played)["categories"]["all"]
    assert summary["episodes"] == 5 and summary["successes"] == 2 and summary["success"] == pytest.approx(2 / 3)
    assert summary["env_failures"] == 1 and summary["errors"] == 1 and summary["score"] == pytest.approx(2 / 3)
    rows = episode_rows(played)
    assert [len(r) for r in rows] == [7, 7, 7, 8, 8]  # the flag only where there is no outcome
    assert summary_of_rows(rows)["categories"]["all"]["success"] == pytest.approx(2 / 3)
    record = Record({"record": "seed-gym experiment record"}, units={("before", 0, None): {
        "kind": "before", "seed": 0, "arm": None, "evals": {"test": rows}}})
    assert record.results()[("before", 0, None)]["evals"]["test"]["tasks"] == episode_outcomes(played)
