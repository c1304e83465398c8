"""Stage 2's update in micro-batches: the rows of a minibatch in their drawn order against ordered by prompt
(``seed_train.trainer.heads_together``: rows that share a prompt head land in one micro-batch, where the
head runs once), optionally against one pass over the whole minibatch, on a finished run's own step samples.

    OMP_NUM_THREADS=1 python benchmarks/bench_micro_batches.py runs/bench-iter/r0-alfworld --samples 32 --micro 4
    OMP_NUM_THREADS=1 python benchmarks/bench_micro_batches.py RUN --samples 32 --micro 4 --one-pass --memory

Reads the run's ``config.json`` (model, LoRA, prompt settings) and ``trajectories.jsonl`` (the rollouts'
token ids), draws ``--samples`` step samples with seeded advantages, and times ``update_policy`` on one
minibatch of them per variant, the variants alternating over ``--repeats`` rounds (medians). The weights
start from the model's initial ones (LoRA untrained): the time of a pass does not depend on the values.
Prints seconds per update, the ratio to the drawn order, and the load average.

``--memory`` runs each variant once in a fresh child process instead and adds each one's memory: the
process's resident memory with the policy, the samples and the update's model copy loaded (``base MiB``, from /proc) and its
peak during the update (``peak MiB``, ``ru_maxrss``: a high-water mark, hence one process per variant);
``peak - base`` is what the update itself adds, the figure that decides whether a recipe's minibatch fits.
"""
from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a bare checkout too


def load_samples(run_dir: Path, n: int, seed: int):
    """The run's policy (initial weights) and ``n`` of its step samples, drawn with ``seed``."""
    import json

    import numpy as np

    from seed_train.config import SeedConfig
    from seed_train.samples import build_samples
    from seed_train.trainer import load
    from wrappers import read_trajectories

    cfg = SeedConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    policy = load(cfg)
    trajectories = [t for t in read_trajectories(run_dir / "trajectories.jsonl")
                    if t.steps and all(s.prompt_token_ids and s.response_token_ids for s in t.steps)]
    if not trajectories:
        raise SystemExit(f"{run_dir / 'trajectories.jsonl'}: no episodes with token ids (a Stage 2 run's file)")
    rng = np.random.default_rng(seed)
    advantages = [list(rng.normal(size=len(t.steps))) for t in trajectories]
    samples = build_samples(trajectories, advantages, [None] * len(trajectories), policy.codec)
    if len(samples) < n:
        raise SystemExit(f"the run has {len(samples)} step samples; --samples {n} asks for more")
    keep = sorted(rng.choice(len(samples), size=n, replace=False))
    return cfg, policy, [samples[i] for i in keep]


def time_update(policy, samples, cfg, micro: int, ordered: bool, seed: int, on_start=None) -> float:
    """Seconds of one ``update_policy`` call over all ``samples`` as one minibatch (``on_start()`` is called
    just before it, with the copied model and its optimizer in memory)."""
    import numpy as np
    import torch

    import seed_train.trainer as trainer

    run_cfg = copy.copy(cfg)
    run_cfg.minibatch_size, run_cfg.micro_batch_size, run_cfg.ppo_epochs = len(samples), micro, 1
    model = copy.deepcopy(policy.model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=run_cfg.lr)
    real = trainer.heads_together
    if not ordered:
        trainer.heads_together = lambda idx, _samples: idx  # the rows in their drawn order
    try:
        if on_start is not None:
            on_start()
        t0 = time.perf_counter()
        trainer.update_policy(model, optimizer, samples, {"teacher_logprobs": None, "ref_logprobs": None}, run_cfg,
                              np.random.default_rng(seed))
        return time.perf_counter() - t0
    finally:
        trainer.heads_together = real


def resident_mib() -> float:
    """The process's resident memory now, in MiB (Linux /proc; nan elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


MEMORY_LINE = "memory-of-variant"  # the child's result line, read back by the parent


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path, help="a finished seed-train run folder (config.json, trajectories.jsonl)")
    p.add_argument("--samples", type=int, default=32, help="step samples in the minibatch")
    p.add_argument("--micro", type=int, default=4, help="micro-batch size")
    p.add_argument("--one-pass", action="store_true", help="also time the whole minibatch in one pass (memory!)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--memory", action="store_true",
                   help="each variant once in its own process: seconds, base and peak resident memory")
    p.add_argument("--only", help=argparse.SUPPRESS)  # (a --memory child: the one variant it runs)
    args = p.parse_args(argv)
    if args.memory and not args.only:
        run_in_children(args)
        return
    from seed_train.threads import torch_threads

    with torch_threads(args.threads):  # (restores the caller's thread count after)
        run(args)


def variants_of(args: argparse.Namespace) -> dict[str, tuple[int, bool]]:
    """Variant name -> (micro-batch size, rows ordered by prompt)."""
    variants = {"drawn order": (args.micro, False), "heads together": (args.micro, True)}
    if args.one_pass:
        variants["one pass"] = (0, False)
    return variants


def run_in_children(args: argparse.Namespace) -> None:
    """``--memory``: every variant in a fresh process (a peak is a process's high-water mark)."""
    import subprocess

    print(f"{args.run_dir}: {args.samples} step samples; micro-batch {args.micro}; threads {args.threads}; one "
          f"process per variant; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    rows = {}
    for name in variants_of(args):
        cmd = [sys.executable, str(Path(__file__).resolve()), str(args.run_dir), "--samples", str(args.samples),
               "--micro", str(args.micro), "--threads", str(args.threads), "--seed", str(args.seed),
               "--repeats", "1", "--only", name] + (["--one-pass"] if args.one_pass else [])
        out = subprocess.run(cmd, check=False, capture_output=True, text=True)
        found = [line.split("\t")[1:] for line in out.stdout.splitlines() if line.startswith(MEMORY_LINE)]
        if out.returncode != 0 or not found:
            # An OOM kill (SIGKILL, returncode -9) is itself the answer for that variant.
            why = ("killed by SIGKILL (out of memory? see dmesg)" if out.returncode == -9
                   else f"exit {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
            print(f"  {name}: failed, {why}", flush=True)
            continue
        rows[name] = [float(x) for x in found[-1]]
        print(f"  {name}: {rows[name][0]:.1f}s, base {rows[name][1]:.0f} MiB, peak {rows[name][2]:.0f} MiB",
              flush=True)
    print(f"{'variant':<16} {'s':>7} {'base MiB':>9} {'peak MiB':>9} {'update MiB':>11}")
    for name, (seconds, base, peak) in rows.items():
        print(f"{name:<16} {seconds:>7.1f} {base:>9.0f} {peak:>9.0f} {peak - base:>11.0f}")
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


def run(args: argparse.Namespace) -> None:
    from seed_train.trainer import peak_rss_mb

    cfg, policy, samples = load_samples(args.run_dir, args.samples, args.seed)
    variants = variants_of(args)
    if args.only:
        micro, ordered = variants[args.only]
        base: list[float] = []
        seconds = time_update(policy, samples, cfg, micro, ordered, args.seed, on_start=lambda: base.append(resident_mib()))
        print(f"{MEMORY_LINE}\t{seconds}\t{base[0]}\t{peak_rss_mb()}", flush=True)
        return
    print(f"{args.run_dir}: {len(samples)} step samples, prompts {min(len(s.prompt_ids) for s in samples)}-"
          f"{max(len(s.prompt_ids) for s in samples)} tokens; micro-batch {args.micro}; threads {args.threads}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.repeats):
        names = list(variants)[r % len(variants):] + list(variants)[:r % len(variants)]  # rotate the order
        for name in names:
            micro, ordered = variants[name]
            seconds[name].append(time_update(policy, samples, cfg, micro, ordered, args.seed))
            print(f"  round {r + 1} {name}: {seconds[name][-1]:.1f}s", flush=True)
    base = statistics.median(seconds["drawn order"])
    print(f"{'variant':<16} {'median s':>9} {'x drawn order':>14}")
    for name, values in seconds.items():
        print(f"{name:<16} {statistics.median(values):>9.1f} {statistics.median(values) / base:>14.2f}")
    print(f"load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
