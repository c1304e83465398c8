"""``test/FaultyEcho-v0``: Echo (tests/toy_env.py) over two steps, whose env breaks on chosen tasks: task
numbers ending in 1 raise in ``step`` at the second step, those ending in 2 raise in ``reset`` (importable
by name, so subprocess backends build it: ``faulty_env:test/FaultyEcho-v0``)."""
from __future__ import annotations

import time

import gymnasium as gym

import toy_env
from seed_envs.core import Outcome

ENV_ID = "test/FaultyEcho-v0"


class FaultyEchoEnv(toy_env.EchoEnv):
    def _number(self, task_id: str) -> int:
        return int(task_id.rsplit("/", 1)[1])

    def _start_task(self, task_id):
        if self._number(task_id) % 10 == 2:
            raise RuntimeError(f"the engine crashed loading {task_id}")
        self._steps = 0
        return super()._start_task(task_id)

    def _apply(self, action):
        self._steps += 1
        if self._steps == 2 and self._number(self.task.task_id) % 10 == 1:
            raise RuntimeError("boom at step 2")
        if self._steps == 1:  # a first word that is not the end: the episode goes on
            return Outcome(0.0, False, action not in toy_env.WORDS, "Say it again.")
        return super()._apply(action)


def make(**kwargs) -> gym.Env:
    return toy_env.make_with_time_limit(FaultyEchoEnv, **kwargs)


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="faulty_env:make")


MIXED_INFO_ID = "test/MixedInfoEcho-v0"


class MixedInfoEchoEnv(toy_env.EchoEnv):
    """Echo whose info key ``extra`` is a dict on even tasks and None on odd ones (as WebShop's
    ``reward_parts`` is a dict once bought and None before): gymnasium cannot merge such a key."""

    def _extra_info(self):
        even = self.task is not None and int(self.task.task_id.rsplit("/", 1)[1]) % 2 == 0
        return {"extra": {"bought": 1} if even else None}


def make_mixed(**kwargs) -> gym.Env:
    return toy_env.make_with_time_limit(MixedInfoEchoEnv, **kwargs)


if MIXED_INFO_ID not in gym.registry:
    gym.register(id=MIXED_INFO_ID, entry_point="faulty_env:make_mixed")


HANGING_ID = "test/HangingEcho-v0"
#: How long a hung call sleeps (far past any limit the tests set; the abandoned thread is a daemon).
HANG_S = 120.0


class HangingEchoEnv(FaultyEchoEnv):
    """FaultyEcho whose env hangs instead of raising: task numbers ending in 3 sleep in ``step`` at the
    second step, those ending in 4 sleep in ``reset``."""

    def _start_task(self, task_id):
        if self._number(task_id) % 10 == 4:
            time.sleep(HANG_S)
        return super()._start_task(task_id)

    def _apply(self, action):
        if self._steps == 1 and self._number(self.task.task_id) % 10 == 3:
            time.sleep(HANG_S)
        return super()._apply(action)


def make_hanging(**kwargs) -> gym.Env:
    return toy_env.make_with_time_limit(HangingEchoEnv, **kwargs)


if HANGING_ID not in gym.registry:
    gym.register(id=HANGING_ID, entry_point="faulty_env:make_hanging")


BROKEN_ID = "test/BrokenEcho-v0"


class BrokenEchoEnv(FaultyEchoEnv):
    """Echo whose every task fails to load (an engine that is down)."""

    def _start_task(self, task_id):
        raise RuntimeError(f"the engine is down (loading {task_id})")


def make_broken(**kwargs) -> gym.Env:
    return toy_env.make_with_time_limit(BrokenEchoEnv, **kwargs)


if BROKEN_ID not in gym.registry:
    gym.register(id=BROKEN_ID, entry_point="faulty_env:make_broken")
