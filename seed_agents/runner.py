"""Play episodes to their end, and whole panels of tasks with bounded concurrency.

Endpoint agents spend their time waiting on the server, so several tasks run at once, each in a worker
thread with its own env (envs are not thread-safe) and its own agent view (an expert is bound to its
env; an endpoint agent is shared, its HTTP client is thread-safe). Results come back in panel order,
whatever order the tasks finished in. An :class:`~seed_agents.agents.AgentError` (an endpoint that kept
failing) ends only its own episode, as a recorded failure; other errors stop the run. Ctrl-C returns at
once, without waiting for workers still inside a call (the CLIs then end the process: :func:`exit_interrupted`).
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from seed_agents.agents import Agent, AgentError
from seed_envs.core import env_error


@dataclass
class EpisodeResult:
    task_id: str
    category: str
    success: bool
    score: float
    return_: float
    steps: int
    error: str | None = None  # why the agent or the env could not go on (the episode then counts as a failure)
    env_failed: bool = False  # the env raised (its worker's env is rebuilt before the next episode)


def exit_interrupted(prog: str) -> None:
    """End the process after Ctrl-C at once, whatever worker threads still wait on (exit status 130).

    Every episode that ended was already written (trajectory writers append and fsync each as it ends);
    ``os._exit`` skips the interpreter's join of worker threads, which would otherwise wait for a hung
    endpoint call."""
    print(f"{prog}: interrupted; episodes that ended before are written", file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(130)


def run_episode(env: gym.Env, agent: Agent, *, task_id: str | None = None, seed: int | None = None,
                options: Mapping[str, Any] | None = None) -> EpisodeResult:
    """Play one episode to its end (terminated or truncated by the env's TimeLimit).

    When ``agent`` raises :class:`AgentError` the episode ends there as a failure with the error in
    :attr:`EpisodeResult.error`; a :class:`~wrappers.TrajectoryRecorder` in the stack records it too
    (``abort_episode``), so no task goes missing from a trajectory file.
    """
    reset_options = dict(options or {})
    if task_id is not None:
        reset_options["task_id"] = task_id
    try:
        obs, info = env.reset(seed=seed, options=reset_options or None)
    except Exception as e:  # noqa: BLE001  (the env's fault ends this episode only; the panel goes on)
        return EpisodeResult(str(task_id), "", False, 0.0, 0.0, 0, error=env_error("reset", e), env_failed=True)
    total, steps = 0.0, 0
    while True:
        try:
            action = agent(obs, info)
        except AgentError as e:
            error = f"step {steps}: {e}"
            _record_abort(env, error)
            return EpisodeResult(str(info.get("task_id", task_id)), str(info.get("category", "")), False, 0.0,
                                 total, steps, error=error)
        try:
            obs, reward, terminated, truncated, info_after = env.step(action)
        except Exception as e:  # noqa: BLE001
            error = env_error(f"step {steps}", e)
            _record_abort(env, error)
            return EpisodeResult(str(info.get("task_id", task_id)), str(info.get("category", "")), False, 0.0,
                                 total, steps, error=error, env_failed=True)
        info = info_after
        total += float(reward)
        steps += 1
        if terminated or truncated:
            break
    return EpisodeResult(info["task_id"], info["category"], bool(info["success"]), float(info["score"]), total, steps)


def _record_abort(env: gym.Env, error: str) -> None:
    try:
        abort = env.get_wrapper_attr("abort_episode")
    except AttributeError:  # no recorder in the stack: the result alone carries the error
        return
    abort(error)


def evaluate(env: gym.Env, agent: Agent, task_ids: Iterable[str]) -> list[EpisodeResult]:
    """Each task of the panel exactly once, in panel order, one at a time on ``env``."""
    return [run_episode(env, agent, task_id=t) for t in task_ids]


def play_panel(
    make_env: Callable[[], gym.Env],
    agent_for: Callable[[gym.Env], Agent],
    task_ids: Sequence[str],
    *,
    concurrency: int = 1,
    seeds: Sequence[int | None] | None = None,
    options: Sequence[Mapping[str, Any] | None] | None = None,
    on_finished: Callable[[EpisodeResult], Any] | None = None,
) -> list[EpisodeResult]:
    """Play each task once with at most ``concurrency`` at a time; results in ``task_ids`` order.

    Each worker builds its own env with ``make_env()`` and its agent with ``agent_for(env)`` on first use;
    every env is closed at the end. ``seeds[k]`` / ``options[k]``: task k's reset seed and extra reset
    options (e.g. a recorder's ``group_id``). ``on_finished`` is called (from the worker) per episode.
    """
    if concurrency < 1:
        raise ValueError(f"concurrency: expected >= 1, got {concurrency}")
    n = len(task_ids)
    for name, values in (("seeds", seeds), ("options", options)):
        if values is not None and len(values) != n:
            raise ValueError(f"{name}: expected one per task ({n}), got {len(values)}")
    local = threading.local()
    opened: list[gym.Env] = []
    interrupted = False
    lock = threading.Lock()

    def worker() -> tuple[gym.Env, Agent]:
        if not hasattr(local, "env"):
            env = make_env()
            with lock:
                opened.append(env)
            local.env, local.agent = env, agent_for(env)
        return local.env, local.agent

    def play(k: int) -> EpisodeResult:
        env, agent = worker()
        result = run_episode(env, agent, task_id=task_ids[k], seed=None if seeds is None else seeds[k],
                             options=None if options is None else options[k])
        if result.env_failed:  # the env may be in any state: this worker's next episode gets a fresh one
            try:
                env.close()
            except Exception:  # noqa: BLE001  (a broken env may fail to close too)
                pass
            with lock:
                opened.remove(env)
            del local.env
        if on_finished is not None:
            on_finished(result)
        return result

    try:
        if concurrency == 1 or n <= 1:
            return [play(k) for k in range(n)]
        pool = ThreadPoolExecutor(max_workers=min(concurrency, n), thread_name_prefix="seed-agents")
        try:
            futures = [pool.submit(play, k) for k in range(n)]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        except BaseException:
            # Ctrl-C: leave without joining the workers (one may wait on an endpoint for its whole deadline);
            # tasks not started are dropped, episodes already ended were handed to ``on_finished``.
            interrupted = True
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        failed = [f for f in done if f.exception() is not None]
        if failed:  # a bug, not an endpoint failure: stop starting tasks and raise it
            pool.shutdown(wait=True, cancel_futures=True)
            raise failed[0].exception()
        pool.shutdown(wait=True)
        return [f.result() for f in futures]
    finally:
        if not interrupted:  # (envs a running worker still uses are left to the process's end)
            for env in opened:
                env.close()
