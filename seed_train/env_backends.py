"""Where rollout envs run: ``sync`` (this process), ``async`` (subprocesses) or ``ray`` (Ray actors).

All three are gymnasium vector envs over the same per-env stack, so the rollout loop
(:func:`seed_train.rollout.run_episodes`) is one piece of code whichever backend steps the envs::

    RolloutSlot(TrajectoryRecorder(LLMActionParser(PromptRenderer(gym.make(env_id))), trajectory_in_info=True))

- ``sync``: gymnasium's ``SyncVectorEnv``; no copies, no processes: the default, and the fastest for
  cheap envs (Sokoban, EZPoints, generated SearchQA).
- ``async``: gymnasium's ``AsyncVectorEnv`` (``spawn`` start method, no shared memory since text has
  none); envs step in parallel processes: for slow envs (ALFWorld, WebShop) on one machine.
- ``ray``: :class:`seed_train.envs_ray.RayVectorEnv`, one actor per env, on any node of a Ray cluster;
  a crashed actor is replaced and its episode comes back marked ``env_failed``.

Two things cross the process boundary with the data rather than through method calls: the sampled
token ids ride on the action (:class:`wrappers.TokenizedResponse`, a ``str``), and each finished
episode comes back in the last step's ``info["trajectory"]``.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from seed_envs.core import env_error

if TYPE_CHECKING:  # pragma: no cover
    from seed_train.rollout import EnvSpec

ENV_BACKENDS = ("sync", "async", "ray")

#: The reset option holding one entry per slot: ``{"options": {...}}`` to start an episode, or None.
SLOT_JOBS = "slot_jobs"

#: What a slot passes on of an env's info: what :func:`seed_train.rollout.run_episodes` reads, and the
#: ``task_id`` that names a slot's episode to whoever inspects it.
ROLLOUT_INFO_KEYS = ("trajectory", "env_failed", "env_error", "slot_idle", "task_id")


def _placeholder(space: gym.Space) -> Any:
    """An empty observation of ``space`` for a slot that has never played (text "", images black)."""
    if isinstance(space, spaces.Dict):
        return {k: _placeholder(v) for k, v in space.spaces.items()}
    if isinstance(space, spaces.Box):
        return np.zeros(space.shape, dtype=space.dtype)
    if isinstance(space, spaces.Space) and space.shape is None:  # TextSpace and other custom spaces
        return ""
    return space.sample()


class RolloutSlot(gym.Wrapper):
    """Slot ``index`` of a rollout vector env.

    A vector env resets and steps all its sub-envs together, but a rollout batch gives each env its own
    task and lets episodes end at different turns. So ``reset`` reads this slot's own options from
    ``options["slot_jobs"][index]`` (None: the slot sits this batch out), and once its episode has
    ended the slot is idle: steps (and a vector env's autoreset, which passes no slot jobs) return the
    last observation, reward 0, not done, ``info["slot_idle"] = True``, without touching the env.

    An env that raises in ``reset`` or ``step`` ends only its episode (on every backend, as a crashed Ray
    actor does): the step returns truncated with ``info["env_failed"]`` and the error in
    ``info["env_error"]``, the episode's steps so far come back in ``info["trajectory"]`` marked so, and
    ``rebuild`` (when given) replaces the env for the slot's next episode.

    Only the ``info`` keys the rollout reads cross to the vector env (:data:`ROLLOUT_INFO_KEYS`; the
    recorder keeps every step's full info in the trajectory): gymnasium merges sub-env infos key by key
    and fails when one key is a dict in one env and not in another (WebShop's ``reward_parts`` once
    bought, None before), and the rest would only be copied between processes for nothing.
    """

    def __init__(self, env: gym.Env, index: int, rebuild: Any = None):
        super().__init__(env)
        self.index = index
        self.rebuild = rebuild
        self._live = False
        self._last_obs: Any = None
        self._reset_error: str | None = None

    def _idle(self) -> Any:
        if self._last_obs is None:
            self._last_obs = _placeholder(self.observation_space)
        return self._last_obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        jobs = (options or {}).get(SLOT_JOBS)
        job = jobs[self.index] if jobs is not None and self.index < len(jobs) else None
        if job is None:
            self._live = False
            return self._idle(), {"slot_idle": True}
        self._live, self._reset_error = True, None
        try:
            obs, info = self.env.reset(seed=seed, options=job.get("options"))
        except Exception as e:  # noqa: BLE001  (the env's fault ends its episode, not the run: see step)
            self._reset_error = env_error("reset", e)
            self._replace_env()
            return self._idle(), {"env_failed": True, "env_error": self._reset_error}
        self._last_obs = obs
        return obs, _rollout_info(info)

    def step(self, action: Any):
        if not self._live:
            return self._idle(), 0.0, False, False, {"slot_idle": True}
        if self._reset_error is not None:  # the episode never started: it ends at its first step
            self._live = False
            return self._idle(), 0.0, False, True, {"env_failed": True, "env_error": self._reset_error}
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as e:  # noqa: BLE001
            self._live = False
            error = env_error("step", e)
            info = {"env_failed": True, "env_error": error}
            abort = getattr(self.env, "abort_episode", None)  # the recorder: the steps played so far
            trajectory = abort(error) if callable(abort) else None
            if trajectory is not None:
                trajectory.meta.update(env_failed=True, env_error=error)
                info["trajectory"] = trajectory
            self._replace_env()
            return self._idle(), 0.0, False, True, info
        self._last_obs = obs
        if terminated or truncated:
            self._live = False
        return obs, reward, terminated, truncated, _rollout_info(info)

    def _replace_env(self) -> None:
        """A fresh env for the slot's next episode (the failed one may be in any state)."""
        if self.rebuild is None:
            return
        try:
            self.env.close()
        except Exception:  # noqa: BLE001  (a broken env may fail to close too)
            pass
        self.env = self.rebuild()


def _rollout_info(info: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``info`` the rollout reads (see :class:`RolloutSlot`)."""
    return {k: info[k] for k in ROLLOUT_INFO_KEYS if k in info}


def make_slot(spec: EnvSpec, index: int) -> gym.Env:
    """The env of slot ``index`` (module level, so subprocesses and Ray actors can rebuild it)."""
    import seed_envs  # noqa: F401  (a fresh process has not registered the ids yet)

    build = functools.partial(spec.make, None, trajectory_in_info=True, index=index)
    return RolloutSlot(build(), index, rebuild=build)


def make_vector_env(spec: EnvSpec, num_envs: int, backend: str = "sync", *,
                    ray_cpus_per_env: float = 0.0) -> gym.vector.VectorEnv:
    """``num_envs`` rollout slots of ``spec`` on ``backend`` (see the module docstring)."""
    if backend not in ENV_BACKENDS:
        raise ValueError(f"env_backend must be one of {ENV_BACKENDS}; got {backend!r}")
    if num_envs < 1:
        raise ValueError(f"num_envs must be >= 1; got {num_envs}")
    fns = [functools.partial(make_slot, spec, i) for i in range(num_envs)]
    if backend == "sync":
        return gym.vector.SyncVectorEnv(fns, copy=False)
    if backend == "async":
        # spawn: the trainer process holds torch threads, which fork does not copy safely.
        return gym.vector.AsyncVectorEnv(fns, shared_memory=False, copy=False, context="spawn")
    from seed_train.envs_ray import RayVectorEnv

    return RayVectorEnv(fns, num_cpus_per_env=ray_cpus_per_env, copy=False)
