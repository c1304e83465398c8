"""Wall-clock limits on an env's own calls: a hung ``reset`` or ``step`` raises instead of hanging the run.

An env that hangs (a dead browser, a server that never answers, a bug that loops) would block whoever
steps it: the trainer's rollout, an evaluation, every env backend alike. :class:`EnvDeadline` runs the
inner env's ``reset`` and ``step`` on a thread of its own and waits for each with a deadline; a call
past it raises :class:`EnvTimeout` in the caller, which ends that episode as any env error does (the
trainer's rollout slots and ``seed-envs``' runner record it as an env failure and replace the env).
The hung call's thread is abandoned (a daemon thread: it never keeps a process from exiting) and the
wrapper refuses further calls, so nothing else ever runs on an env in an unknown state.

Written by hand: ``concurrent.futures`` joins its worker threads at interpreter exit, so a worker stuck
in an env forever would keep the process from ending.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

import gymnasium as gym


class EnvTimeout(TimeoutError):
    """An env call past its wall-clock limit (the env is then abandoned)."""


class _CallThread:
    """One daemon thread running the calls it is given, one at a time, in order."""

    def __init__(self, name: str):
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, name=name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            fn, box, done = call
            try:
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001  (handed to the waiting caller)
                box["error"] = e
            done.set()

    def run(self, fn: Callable[[], Any], timeout: float) -> Any:
        """``fn()``'s result or exception; :class:`EnvTimeout` when it has not returned after ``timeout`` s."""
        box: dict[str, Any] = {}
        done = threading.Event()
        self._calls.put((fn, box, done))
        if not done.wait(timeout):
            raise EnvTimeout(f"no answer within {timeout:g} s")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def stop(self) -> None:
        self._calls.put(None)


def call_with_deadline(fn: Callable[[], Any], timeout: float, name: str = "deadline-call") -> Any:
    """``fn()`` on a daemon thread of its own, waited on for ``timeout`` seconds: its result or exception,
    or :class:`EnvTimeout` (the call is then abandoned, its thread ends when ``fn`` returns). One call of
    anything that may hang, e.g. an endpoint request (``seed_agents.openai_endpoint``)."""
    thread = _CallThread(name)
    try:
        return thread.run(fn, timeout)
    finally:
        thread.stop()  # (queued after the call: the thread leaves once fn has returned)


class EnvDeadline(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Limits the wall-clock time of the inner env's ``reset`` and ``step`` calls.

    Args:
        env: any gymnasium env.
        step_timeout_s: the longest one ``reset`` or ``step`` may take (> 0).
        episode_timeout_s: the longest the env's calls of one episode may take together (its ``reset``
            and every ``step``; the agent's own time is not counted); 0: no episode limit.

    A call over either limit raises :class:`EnvTimeout` (a ``TimeoutError``) naming the call and the
    limit. After a hung call (one past ``step_timeout_s``) the env is abandoned: its thread is left
    running, ``close`` does not touch it, and any further call raises :class:`EnvTimeout` at once.
    An episode over its total limit only ends: the next ``reset`` starts afresh.
    """

    def __init__(self, env: gym.Env, step_timeout_s: float, episode_timeout_s: float = 0.0):
        if not step_timeout_s > 0:
            raise ValueError(f"step_timeout_s: expected > 0, got {step_timeout_s!r}")
        if not episode_timeout_s >= 0:
            raise ValueError(f"episode_timeout_s: expected >= 0 (0: no limit), got {episode_timeout_s!r}")
        gym.utils.RecordConstructorArgs.__init__(self, step_timeout_s=step_timeout_s,
                                                 episode_timeout_s=episode_timeout_s)
        gym.Wrapper.__init__(self, env)
        self.step_timeout_s = float(step_timeout_s)
        self.episode_timeout_s = float(episode_timeout_s)
        self._thread: _CallThread | None = None
        self._hung: str | None = None
        self._episode_s = 0.0
        self._steps = 0

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        if self._hung is not None:
            raise EnvTimeout(f"the env is abandoned: its {self._hung}")
        if self._thread is None:
            self._thread = _CallThread(f"env-deadline-{id(self):x}")
        start = time.monotonic()
        try:
            return self._thread.run(fn, self.step_timeout_s)
        except EnvTimeout:
            self._hung = f"{what} took longer than {self.step_timeout_s:g} s (the step limit)"
            raise EnvTimeout(self._hung) from None
        finally:
            self._episode_s += time.monotonic() - start

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._episode_s, self._steps = 0.0, 0
        return self._call("reset", lambda: self.env.reset(seed=seed, options=options))

    def step(self, action: Any):
        self._steps += 1
        result = self._call(f"step {self._steps}", lambda: self.env.step(action))
        terminated, truncated = result[2], result[3]
        if self.episode_timeout_s and self._episode_s > self.episode_timeout_s and not (terminated or truncated):
            raise EnvTimeout(f"the env's calls of this episode took {self._episode_s:.1f} s by step {self._steps}, "
                             f"over the {self.episode_timeout_s:g} s episode limit")
        return result

    def close(self) -> None:
        if self._hung is not None:  # the env may be inside a call on the abandoned thread
            return
        if self._thread is not None:
            self._thread.stop()
            self._thread = None
        self.env.close()
