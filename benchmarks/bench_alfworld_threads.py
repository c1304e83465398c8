"""ALFWorld played by 1, 4 and 8 concurrent episodes in threads, as ``seed-envs eval --concurrency N`` plays.

    python benchmarks/bench_alfworld_threads.py [--split unseen] [--games 16] [--concurrency 1 4 8]
        [--data ../shared/data/alfworld/ALFWORLD_DATA] [--latency 0.2]

Each row plays the same games with the expert through ``seed_agents.runner.play_panel`` (one env per
thread), every game's episode compared with the one-at-a-time row (they must be identical: issue 34).
``--latency S`` makes the agent wait S seconds before each action, as a model behind an endpoint does;
that wait is what threads overlap (the engine's own work holds the GIL). An untimed pass warms the
per-process caches (PDDL translations, parses) first, so every row plays seen games; ``--cold`` skips it
and clears them before each row instead. Prints wall time, episodes/s, env steps/s and the speed-up over 1.
"""
from __future__ import annotations

import argparse
import os
import time

import gymnasium as gym

import seed_envs
from seed_agents.runner import play_panel


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--split", default="unseen")
    p.add_argument("--games", type=int, default=16)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--data", default=None, help="an ALFWORLD_DATA folder (default: the generated games)")
    p.add_argument("--latency", type=float, default=0.0, help="seconds the agent waits per action")
    p.add_argument("--cold", action="store_true", help="clear the engine caches before each row")
    args = p.parse_args()

    from seed_envs.alfworld import cache

    kwargs = {"split": args.split, **({"data_dir": args.data} if args.data else {})}
    probe = gym.make("seed/ALFWorld-v0", **kwargs)
    task_ids = list(probe.unwrapped.task_ids())[: args.games]
    probe.close()

    def agent_for(env):
        expert = seed_envs.make_expert(env)

        def act(obs, info):
            if args.latency:
                time.sleep(args.latency)
            return expert(obs, info)
        return act

    print(f"seed/ALFWorld-v0 {args.split}, {len(task_ids)} games ({'ALFWORLD_DATA ' + args.data if args.data else 'generated'}), "
          f"expert with {args.latency:.2f} s per action; load average {os.getloadavg()[0]:.2f} at the start")
    print("\n| concurrency | wall s | episodes/s | steps/s | speed-up | same episodes as 1 |\n|---:|---:|---:|---:|---:|---|")
    make = lambda: gym.make("seed/ALFWorld-v0", **kwargs)  # noqa: E731
    if not args.cold:
        play_panel(make, lambda env: seed_envs.make_expert(env), task_ids, seeds=[0] * len(task_ids))
    baseline = None
    for n in args.concurrency:
        if args.cold:
            cache.clear_caches()
        t0 = time.perf_counter()
        results = play_panel(make, agent_for, task_ids, concurrency=n, seeds=[0] * len(task_ids))
        wall = time.perf_counter() - t0
        outcome = [(r.task_id, r.success, r.steps, r.return_) for r in results]
        if baseline is None:
            baseline = (wall, outcome)
        steps = sum(r.steps for r in results)
        print(f"| {n} | {wall:.2f} | {len(results) / wall:.2f} | {steps / wall:.1f} | {baseline[0] / wall:.2f}x "
              f"| {'yes' if outcome == baseline[1] else 'NO'} |")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
