"""Env steps per second and episode latency: sync vs async (subprocesses) vs Ray actors vs OpenEnv sessions.

    python benchmarks/bench_vector_envs.py                       # every available text env
    python benchmarks/bench_vector_envs.py --envs seed/Sokoban-v0 --sizes 1 8 --steps 50
    python benchmarks/bench_vector_envs.py --envs seed/WebShop-v0 seed/ALFWorld-v0 --sizes 1 8 32 \
        --backends sync async ray openenv --steps 20 --ray-cpus 2
    python benchmarks/bench_vector_envs.py --envs seed/WebShop-v0 --sizes 1 8 32 --backends sync openenv \
        --latency-steps 10                                       # and episode latency, 10-step episodes

``openenv``: one ``seed-envs serve`` process per env id (the serve extra), and ``seed/Remote-v0`` clients,
one session each, stepped at once from threads (how a trainer that reaches envs over the network drives
them); the server's envs run in its own process.

Each configuration resets all envs, then takes ``--steps`` vector steps with a random admissible
action per env (finished envs are reset through ``reset_mask``, autoreset disabled, as the trainer
does); the time of the steps and those resets is reported (construction and the first reset are not).
ALFWorld and WebShop are measured when their ids are registered; Ray rows need ``ray`` installed.

``--latency-steps K`` adds a second table: the envs (and a server's) made with ``max_steps=K``, all reset
at once and stepped with random admissible actions until each one's first episode ends; an env's episode
latency is the wall time from that reset to the step that ended it (median and max over the envs), i.e.
what one episode of K steps costs when ``envs`` sessions play at once.
"""
from __future__ import annotations

import argparse
import functools
import time
from typing import Any, Iterator

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

import seed_envs  # noqa: F401

CANDIDATES = ["seed/ALFWorld-v0", "seed/WebShop-v0", "seed/Sokoban-v0", "seed/EZPoints-v0"]


class ThreadedRemoteVector:
    """``n`` remote envs reset and stepped at once from threads: what the loop below needs of a vector env."""

    def __init__(self, url: str, n: int):
        from concurrent.futures import ThreadPoolExecutor

        self.envs = [gym.make("seed/Remote-v0", url=url) for _ in range(n)]
        self.pool = ThreadPoolExecutor(n)

    def reset(self, seed: int | None = None, options: dict | None = None):
        n = len(self.envs)
        mask = (options or {}).get("reset_mask")
        which = list(range(n)) if mask is None else [int(i) for i in np.flatnonzero(mask)]
        results = self.pool.map(lambda i: self.envs[i].reset(seed=None if seed is None else seed + i), which)
        adm: list = [None] * n
        for i, (_, info) in zip(which, results):
            adm[i] = info.get("admissible_actions")
        return None, {"admissible_actions": adm}

    def step(self, actions: list[str]):
        results = list(self.pool.map(lambda i: self.envs[i].step(actions[i]), range(len(self.envs))))
        return (None, None, np.array([r[2] for r in results]), np.array([r[3] for r in results]),
                {"admissible_actions": [r[4].get("admissible_actions") for r in results]})

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.pool.shutdown()


_SERVERS: dict[tuple, tuple] = {}  # (env id, max_steps) -> (process, url): one server each, for every size


def served_url(env_id: str, max_steps: int | None = None) -> str:
    import os

    from seed_agents.openenv_server import start_server_process

    key = (env_id, max_steps)
    if key not in _SERVERS:
        limit = ["--max-steps", str(max_steps)] if max_steps else []
        _SERVERS[key] = start_server_process(env_id, "--split", "test", "--obs-mode", "text", "--max-sessions", "64",
                                             *limit, ready_timeout_s=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return _SERVERS[key][1]


def make_vector(backend: str, env_id: str, n: int, max_steps: int | None = None):
    if backend == "openenv":
        return ThreadedRemoteVector(served_url(env_id, max_steps), n)
    limit = {"max_steps": max_steps} if max_steps else {}
    fns = [functools.partial(gym.make, env_id, split="test", obs_mode="text", **limit)] * n
    if backend == "sync":
        return SyncVectorEnv(fns, autoreset_mode=AutoresetMode.DISABLED)
    if backend == "async":
        return AsyncVectorEnv(fns, shared_memory=False, autoreset_mode=AutoresetMode.DISABLED)
    from seed_train.envs_ray import RayVectorEnv

    return RayVectorEnv(fns)


def actions_for(infos: dict, n: int, rng: np.random.Generator) -> list[str]:
    adm = infos.get("admissible_actions")
    return [str(rng.choice(adm[i])) if adm is not None and adm[i] else "look" for i in range(n)]


def random_play(envs: Any, infos: dict, n: int, rng: np.random.Generator, seed: int) -> Iterator[np.ndarray]:
    """Vector steps of random admissible actions from the reset that gave ``infos``, without end: yields each
    step's done mask, then resets the envs whose episode ended (seed ``seed + 1000 * k`` at the k-th such
    reset) and plays them on."""
    resets = 0
    while True:
        _, _, term, trunc, step_infos = envs.step(actions_for(infos, n, rng))
        done = term | trunc
        yield done
        if done.any():
            resets += 1
            _, reset_infos = envs.reset(seed=seed + 1000 * resets, options={"reset_mask": done})
            for i in np.flatnonzero(done):
                step_infos["admissible_actions"][i] = reset_infos["admissible_actions"][i]
        infos = step_infos


def measure(backend: str, env_id: str, n: int, steps: int, seed: int = 0) -> float:
    """Env steps per second over ``steps`` vector steps of random play (the first reset not timed)."""
    envs = make_vector(backend, env_id, n)
    try:
        _, infos = envs.reset(seed=seed)
        t0 = time.perf_counter()
        for _, _done in zip(range(steps), random_play(envs, infos, n, np.random.default_rng(seed), seed)):
            pass
        return n * steps / (time.perf_counter() - t0)
    finally:
        envs.close()


def episode_latency(backend: str, env_id: str, n: int, max_steps: int, seed: int = 0) -> list[float]:
    """Seconds from resetting all ``n`` envs (made with ``max_steps``) to the step that ended each one's
    first episode; an env that finished is reset and played on (its time is kept) until all have."""
    envs = make_vector(backend, env_id, n, max_steps)
    try:
        ended: list[float | None] = [None] * n
        t0 = time.perf_counter()
        _, infos = envs.reset(seed=seed)
        play = random_play(envs, infos, n, np.random.default_rng(seed), seed)
        while any(e is None for e in ended):
            done = next(play)
            now = time.perf_counter() - t0
            for i in np.flatnonzero(done):
                ended[i] = now if ended[i] is None else ended[i]
        return [float(e) for e in ended]
    finally:
        envs.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="*", default=None, help="env ids (default: every registered candidate)")
    parser.add_argument("--sizes", nargs="*", type=int, default=[1, 2, 8, 32])
    parser.add_argument("--backends", nargs="*", default=["sync", "async", "ray"], choices=["sync", "async", "ray", "openenv"])
    parser.add_argument("--steps", type=int, default=100, help="vector steps per measurement")
    parser.add_argument("--ray-cpus", type=int, default=None, help="num_cpus for the local ray.init")
    parser.add_argument("--latency-steps", type=int, default=0,
                        help="also measure episode latency with episodes of this many steps (0: not)")
    args = parser.parse_args()
    env_ids = args.envs or [e for e in CANDIDATES if e in gym.registry]
    backends = list(args.backends)
    if "ray" in backends:
        try:
            import ray

            ray.init(num_cpus=args.ray_cpus, include_dashboard=False, log_to_driver=False)
        except ImportError:
            print("ray is not installed: skipping the ray rows")
            backends.remove("ray")
    print("| env | envs | " + " | ".join(f"{b} steps/s" for b in backends) + " |")
    print("|---|---:|" + "---:|" * len(backends))
    try:
        for env_id in env_ids:
            for n in args.sizes:
                row = [f"{measure(b, env_id, n, args.steps):,.0f}" for b in backends]
                print(f"| {env_id} | {n} | " + " | ".join(row) + " |", flush=True)
        if args.latency_steps:
            print(f"\nEpisode latency, {args.latency_steps}-step episodes, all envs at once: median / max seconds")
            print("| env | envs | " + " | ".join(f"{b} episode s" for b in backends) + " |")
            print("|---|---:|" + "---:|" * len(backends))
            for env_id in env_ids:
                for n in args.sizes:
                    cells = []
                    for b in backends:
                        times = episode_latency(b, env_id, n, args.latency_steps)
                        cells.append(f"{np.median(times):.3f} / {max(times):.3f}")
                    print(f"| {env_id} | {n} | " + " | ".join(cells) + " |", flush=True)
    finally:
        for process, _ in _SERVERS.values():
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
