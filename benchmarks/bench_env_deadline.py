"""What the env wall-clock limit costs per call: the expert plays the same episodes bare and under
``wrappers.deadline.EnvDeadline`` (each reset and step handed to the env's own thread and waited on).

    python benchmarks/bench_env_deadline.py [--env-id seed/EZPoints-v0] [--episodes 200] [--repeats 3]

Both rows play the same episodes (checked); the table gives env steps/s and the added time per call
(the best of ``--repeats`` runs per row, rows interleaved, so a load change hits both).
"""
from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym

import seed_envs
from wrappers.deadline import EnvDeadline


def play(env: gym.Env, episodes: int) -> tuple[float, int, list[float]]:
    expert = seed_envs.make_expert(env)
    calls, returns = 0, []
    start = time.perf_counter()
    for k in range(episodes):
        obs, info = env.reset(seed=k)
        calls += 1
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, info = env.step(expert(obs, info))
            calls += 1
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return time.perf_counter() - start, calls, returns


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--env-id", default="seed/EZPoints-v0")
    p.add_argument("--split", default="test")
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    rows = {"bare": gym.make(args.env_id, split=args.split),
            "EnvDeadline": EnvDeadline(gym.make(args.env_id, split=args.split), step_timeout_s=300.0)}
    best: dict[str, tuple[float, int]] = {}
    seen: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, env in rows.items():
            seconds, calls, returns = play(env, args.episodes)
            seen[name] = returns
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, calls)
    assert seen["bare"] == seen["EnvDeadline"], "the limit changed an episode"
    print(f"{args.env_id} {args.split}, {args.episodes} expert episodes, best of {args.repeats}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print("| row | calls | seconds | calls/s | added per call |")
    print("|---|---:|---:|---:|---:|")
    base = best["bare"][0] / best["bare"][1]
    for name, (seconds, calls) in best.items():
        added = seconds / calls - base
        print(f"| {name} | {calls} | {seconds:.3f} | {calls / seconds:,.0f} | {added * 1e6:+.0f} µs |")
    for env in rows.values():
        env.close()


if __name__ == "__main__":
    main()
