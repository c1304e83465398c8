"""The environment contract as a command: ``seed-envs check ENV_ID [--import PACKAGE]``.

Checks one registered env (in this package or out of tree: ``--import`` names the package whose import
registers it) against the contract of docs/environments.md, each check printed PASS / FAIL / SKIP with
a reason:

  make-fresh    ``gym.make("PACKAGE:ENV_ID")`` works in a fresh interpreter
  check_env     gymnasium's env checker passes on ``env.unwrapped``
  observation   observations are dicts with a str ``text`` (a uint8 HxWx3 ``image`` where the mode has one)
  info-keys     the contract's ``info`` keys after reset and after every step, with their types
  junk-actions  empty, unicode, huge, tag-laden and control-character actions never raise, are flagged
                ``invalid_action``, and are not echoed back whole
  bad-config    a bad ``split`` / ``obs_mode`` / ``max_steps`` / ``reward_mode`` is a ValueError naming it
  time-limit    ``max_steps=3`` truncates at the third step
  panel         ``task_ids()`` is non-empty, unique and sorted; ``reset(seed=s)`` draws the same task again;
                ``options={"task_id": ...}`` selects it and an unknown id is a ValueError
  determinism   the same seed gives the same episode and panel in two fresh processes
  expert        ``seed_envs.make_expert`` wins seeded episodes of the split (SKIP for an env with no expert)
  threads       episodes played by N threads at once equal the same episodes played one by one

Exit status 0 when every check passes (SKIPs allowed), 1 otherwise. ``tests/test_contract.py`` holds the
same contract as pytest cases for the registered ids; this is the form an env author runs.
"""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

INFO_TYPES: dict[str, type | tuple[type, ...]] = {
    "task_id": str, "task": str, "category": str, "split": str, "invalid_action": bool, "success": bool,
    "score": float, "admissible_actions": (list, tuple, type(None)),
}


@dataclass
class CheckResult:
    name: str
    status: str  # PASS, FAIL or SKIP
    detail: str = ""


class Skip(Exception):
    """A check that does not apply to this env (e.g. no expert)."""


def junk_actions(rng: random.Random) -> Iterator[str]:
    """Actions no env accepts: empty, blank, random unicode, a megabyte, tag soup, control characters,
    markup and code (none of them a well-formed action of any env here)."""
    kinds: list[Callable[[], str]] = [
        lambda: "",
        lambda: "  \n  ",
        lambda: "".join(chr(rng.randrange(0x80, 0x2FFF)) for _ in range(rng.randrange(1, 80))),
        lambda: "x" * 1_000_000,
        lambda: "<action>" * 50 + "</think>",
        lambda: "\x00\x01\x02\n\t\r",
        lambda: "<script>alert(1)</script>",
        lambda: "__import__('os').system('true')",
    ]
    i = 0
    while True:
        yield kinds[i % len(kinds)]()
        i += 1


def expert_or_none(env: gym.Env):
    """``seed_envs.make_expert(env)``, or None for an env that is not a seed env."""
    import seed_envs

    try:
        return seed_envs.make_expert(env)
    except TypeError:
        return None


def play(env: gym.Env, *, seed: int | None = None, task_id: str | None = None, max_steps: int = 500,
         on_info: Callable[[dict, str], None] | None = None) -> list[tuple[str, float, bool]]:
    """(observation text, reward, success) of one episode played by the expert (else the first admissible
    action, else an empty string), the reset first; ``on_info(info, where)`` sees every info."""
    obs, info = env.reset(seed=seed, options=None if task_id is None else {"task_id": task_id})
    expert = expert_or_none(env)
    out = [(obs["text"], 0.0, bool(info.get("success")))]
    if on_info is not None:
        on_info(info, "after reset")
    for step in range(max_steps):
        action = expert(obs, info) if expert is not None else (info.get("admissible_actions") or [""])[0]
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs["text"], float(reward), bool(info.get("success"))))
        if on_info is not None:
            on_info(info, f"after step {step}")
        if terminated or truncated:
            break
    return out


class ContractChecker:
    """The checks of one env id with its ``gym.make`` arguments (see the module docstring)."""

    def __init__(self, env_id: str, kwargs: dict[str, Any] | None = None, *, registered_by: str = "seed_envs",
                 episodes: int = 5, junk: int = 200, threads: int = 4):
        self.env_id, self.kwargs, self.registered_by = env_id, dict(kwargs or {}), registered_by
        self.episodes, self.junk, self.threads = episodes, junk, threads

    def make(self, **extra) -> gym.Env:
        return gym.make(self.env_id, **{**self.kwargs, **extra})

    # ----------------------------------------------------------------- checks
    def check_make_fresh(self) -> str:
        code = (f"import gymnasium as gym, json, sys; env = gym.make({self.registered_by + ':' + self.env_id!r}, "
                f"**json.loads(sys.argv[1])); env.reset(seed=0); env.close(); print('ok')")
        done = subprocess.run([sys.executable, "-c", code, json.dumps(self.kwargs)], capture_output=True, text=True,
                              timeout=600, env=_child_env())
        if done.returncode or "ok" not in done.stdout:
            raise AssertionError(_last_line(done.stderr) or "the fresh interpreter failed")
        return f"gym.make({self.registered_by}:{self.env_id}) in a new process"

    def check_check_env(self) -> str:
        from gymnasium.utils.env_checker import check_env

        env = self.make()
        try:
            check_env(env.unwrapped, skip_render_check=True)
        finally:
            env.close()
        return "gymnasium.utils.env_checker.check_env"

    def check_observation(self) -> str:
        env = self.make()
        try:
            obs, _ = env.reset(seed=0)
            assert isinstance(obs, dict) and isinstance(obs.get("text"), str), "obs must be a dict with a str 'text'"
            mode = getattr(env.unwrapped, "obs_mode", "text")
            if "image" in mode:
                image = obs.get("image")
                assert isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 \
                    and image.shape[-1] == 3, "obs['image'] must be uint8 HxWx3"
            assert env.observation_space.contains(obs), "the observation is outside observation_space"
        finally:
            env.close()
        return f"obs_mode {mode}"

    def check_info_keys(self) -> str:
        env = self.make()
        try:
            steps = sum(len(play(env, seed=1000 + k, on_info=self._info_ok)) - 1 for k in range(self.episodes))
        finally:
            env.close()
        return f"{steps} steps of {self.episodes} episodes"

    @staticmethod
    def _info_ok(info: dict, where: str) -> None:
        missing = [k for k in INFO_TYPES if k not in info]
        assert not missing, f"{where}: info lacks {missing}"
        wrong = [k for k, t in INFO_TYPES.items() if not isinstance(info[k], t)]
        assert not wrong, f"{where}: info keys of the wrong type: {wrong}"
        assert 0.0 <= info["score"] <= 1.0, f"{where}: score {info['score']} outside [0, 1]"

    def check_junk_actions(self) -> str:
        env = self.make()
        rng = random.Random(0)
        try:
            env.reset(seed=0)
            for i, action in zip(range(self.junk), junk_actions(rng)):
                try:
                    obs, _, terminated, truncated, info = env.step(action)
                except Exception as e:  # noqa: BLE001  (the finding: any exception is a contract breach)
                    raise AssertionError(f"junk action #{i} ({action[:30]!r}) raised {type(e).__name__}: {e}") from e
                assert info.get("invalid_action") is True, f"junk action #{i} ({action[:30]!r}) not flagged invalid"
                assert len(obs["text"]) < 10_000, f"junk action #{i} echoed back whole"
                if terminated or truncated:
                    env.reset(seed=i)
        finally:
            env.close()
        return f"{self.junk} junk actions"

    def check_bad_config(self) -> str:
        for kwargs, name in [({"split": "no-such-split"}, "split"), ({"obs_mode": "video"}, "obs_mode"),
                             ({"max_steps": 0}, "max_steps"), ({"reward_mode": "x"}, "reward_mode")]:
            try:
                self.make(**kwargs).close()
            except ValueError as e:
                assert name in str(e), f"{kwargs}: the error does not name {name!r}: {e}"
            else:
                raise AssertionError(f"{kwargs} was accepted")
        return "split, obs_mode, max_steps, reward_mode"

    def check_time_limit(self) -> str:
        env = self.make(max_steps=3)
        try:
            env.reset(seed=0)
            flags = [env.step("")[2:4] for _ in range(3)]
        finally:
            env.close()
        assert flags == [(False, False), (False, False), (False, True)], f"terminated/truncated were {flags}"
        return "max_steps=3 truncates at step 3"

    def check_panel(self) -> str:
        env = self.make()
        try:
            ids = list(env.unwrapped.task_ids()) if hasattr(env.unwrapped, "task_ids") else None
            if ids is None:
                raise Skip("the env has no task_ids()")
            assert ids and ids == sorted(ids) and len(set(ids)) == len(ids), "task_ids() must be non-empty, sorted, unique"
            first = [env.reset(seed=s)[1]["task_id"] for s in range(10)]
            assert first == [env.reset(seed=s)[1]["task_id"] for s in range(10)], "reset(seed=s) drew another task"
            for tid in (ids[0], ids[len(ids) // 2], ids[-1]):
                assert env.reset(options={"task_id": tid})[1]["task_id"] == tid, f"task_id {tid} not selected"
            try:
                env.reset(options={"task_id": "no/such/task"})
            except ValueError:
                pass
            else:
                raise AssertionError("an unknown task_id was accepted")
        finally:
            env.close()
        return f"{len(ids)} tasks"

    def check_determinism(self) -> str:
        a, b = (self._trace_in_subprocess(seed=11) for _ in range(2))
        assert a == b, "two processes played seed 11 differently"
        return f"seed 11 in two processes ({len(a['trace'])} observations)"

    def _trace_in_subprocess(self, seed: int) -> dict:
        code = """
import json, sys, gymnasium as gym
from seed_agents.contract import play
env = gym.make(sys.argv[1], **json.loads(sys.argv[2]))
ids = list(env.unwrapped.task_ids()) if hasattr(env.unwrapped, "task_ids") else []
print(json.dumps({"trace": play(env, seed=int(sys.argv[3])), "panel": ids}))
"""
        done = subprocess.run([sys.executable, "-c", code, f"{self.registered_by}:{self.env_id}",
                               json.dumps(self.kwargs), str(seed)], capture_output=True, text=True, timeout=600,
                              env=_child_env())
        if done.returncode:
            raise AssertionError(_last_line(done.stderr) or "the subprocess failed")
        return json.loads(done.stdout.strip().splitlines()[-1])

    def check_expert(self) -> str:
        env = self.make()
        try:
            if expert_or_none(env) is None:
                raise Skip("not a seed env: no expert")
            wins = [play(env, seed=100 + k)[-1][2] for k in range(self.episodes)]
        finally:
            env.close()
        assert all(wins), f"the expert won {sum(wins)}/{len(wins)} seeded episodes"
        return f"won {sum(wins)}/{len(wins)}"

    def check_threads(self) -> str:
        probe = self.make()
        try:
            ids = list(probe.unwrapped.task_ids())[: 2 * self.threads] if hasattr(probe.unwrapped, "task_ids") else []
        finally:
            probe.close()
        if not ids:
            raise Skip("the env has no task_ids()")

        def one(task_id: str):
            env = self.make()
            try:
                return play(env, seed=0, task_id=task_id)
            finally:
                env.close()

        alone = [one(t) for t in ids]
        with ThreadPoolExecutor(self.threads) as pool:
            together = list(pool.map(one, ids))
        differ = [t for t, a, b in zip(ids, alone, together) if a != b]
        assert not differ, f"{len(differ)} of {len(ids)} episodes differ when {self.threads} threads play at once"
        return f"{len(ids)} episodes, {self.threads} threads = one by one"

    # ----------------------------------------------------------------- driver
    CHECKS = ("make_fresh", "check_env", "observation", "info_keys", "junk_actions", "bad_config", "time_limit",
              "panel", "determinism", "expert", "threads")

    def run(self, only: tuple[str, ...] | None = None) -> list[CheckResult]:
        results = []
        for name in only or self.CHECKS:
            label = name.replace("_", "-")
            try:
                detail = getattr(self, f"check_{name}")()
                results.append(CheckResult(label, "PASS", detail))
            except Skip as e:
                results.append(CheckResult(label, "SKIP", str(e)))
            except Exception as e:  # noqa: BLE001  (every failure is reported, the next check still runs)
                detail = f"{type(e).__name__}: {e}" if not isinstance(e, AssertionError) else str(e)
                if not isinstance(e, AssertionError):
                    detail += " | " + _last_line(traceback.format_exc())
                results.append(CheckResult(label, "FAIL", " ".join(detail.split())[:400]))
        return results


def _child_env() -> dict[str, str]:
    """The environment of a fresh interpreter: this one's, with this process's import path (so a package
    registered from a source folder, e.g. a test env, is found there too)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""
