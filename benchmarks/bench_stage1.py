"""Stage 1 SFT with shared prompt heads vs every prompt computed whole, side by side in one process.

    python benchmarks/bench_stage1.py [--model smollm2-135m] [--pairs 48] [--repeats 1] [--threads 1]

Builds the quickstart's Stage 1 pairs (24 EZPoints expert demos: act and skill pairs), then times one
epoch of ``seed_train.stage1.sft_train`` over the first ``--pairs`` pairs (batches of 8) with the
trainer's grouping (``auto_prefix_groups``: each shared head runs once, gradients included) and with
every prompt run whole, alternating ``--repeats`` times. The learning rate is tiny so the weights
hardly move between arms. Prints the load average, the prompt tokens and the medians.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import seed_train.stage1 as stage1
from seed_train.cli import QUICKSTART
from seed_train.config import SeedConfig
from seed_train.evaluate import panel_of
from seed_train.rollout import sample_tasks
from seed_train.threads import torch_threads
from seed_train.trainer import env_spec, load


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--pairs", type=int, default=48)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    cfg = SeedConfig.from_dict({**QUICKSTART, "model": args.model})
    with torch_threads(args.threads) as threads:
        print(f"torch threads {threads.threads}; load average {os.getloadavg()}")
        policy = load(cfg)
        spec = env_spec(cfg, cfg.train_split)
        demos = stage1.collect_demonstrations(spec, sample_tasks(panel_of(spec), cfg.stage1_demos,
                                                                 np.random.default_rng(0)), seed=0)
        pairs = stage1.sft_pairs(demos, policy.codec, cfg.env_default("action_format"))[: args.pairs]
        print(f"{len(pairs)} pairs, {sum(len(q.prompt_ids) for q in pairs)} prompt tokens, "
              f"{sum(len(q.response_ids) for q in pairs)} response tokens")
        shared = stage1.auto_prefix_groups
        arms = {"shared heads": shared, "every prompt whole": lambda prompts: list(range(len(prompts)))}
        times: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.repeats):
            for name, grouping in arms.items():
                stage1.auto_prefix_groups = grouping
                t0 = time.perf_counter()
                stage1.sft_train(policy.model, pairs, lr=1e-9, epochs=1, batch_size=8, seed=0)
                times[name].append(time.perf_counter() - t0)
        stage1.auto_prefix_groups = shared
    print("\n| Stage 1 SFT, one epoch | seconds (median) |\n|---|---:|")
    for name, runs in times.items():
        print(f"| {name} | {statistics.median(runs):.1f} |")
    print(f"\nwhole / shared: {statistics.median(times['every prompt whole']) / statistics.median(times['shared heads']):.2f}; "
          f"load average at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
