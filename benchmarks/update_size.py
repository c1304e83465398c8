"""How far each Stage 2 update moved the policy, per arm of an experiment: the trainer's own step metrics.

    python benchmarks/update_size.py EXPERIMENT_DIR [--seeds 0 1 2] [--metrics approx_kl clip_fraction]

Reads each arm's ``seed<S>/<arm>/run/metrics.jsonl`` (one row per Stage 2 iteration) and prints, per arm,
each metric's mean over the iterations that updated, per training seed, and the mean ± sd over seeds.
``approx_kl`` is the trainer's k3 estimate ``mean(r - 1 - log r)`` over the iteration's response tokens
(r = π_θ / π_rollout on the sampled token), i.e. KL(π_rollout || π_θ): how far the iteration's
minibatch updates moved the policy from the one that sampled its episodes. An arm whose extra loss
term pulls towards the rollout policy (SEED's OPD with a gate near 0.5, docs/trainer.md) should show a
smaller KL than its control at the same learning rate.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from seed_train.logs import read_metrics


def per_seed_means(root: Path, arm: str, seeds: list[int], metric: str) -> dict[int, float]:
    """seed -> the metric's mean over the iterations that logged it (one with no update logs no step
    metrics, and does not count as a zero); seeds without a run are left out."""
    out = {}
    for seed in seeds:
        values = [float(row[metric]) for row in read_metrics(root / f"seed{seed}" / arm / "run")
                  if row.get(metric) is not None]
        if values:
            out[seed] = statistics.fmean(values)
    return out


def table(root: Path, arms: list[str], seeds: list[int], metric: str) -> str:
    lines = [f"### {metric}", "", "| arm | " + " | ".join(f"s{s}" for s in seeds) + " | mean ± sd over seeds |",
             "|---|" + "---:|" * (len(seeds) + 1)]
    for arm in arms:
        means = per_seed_means(root, arm, seeds, metric)
        cells = [f"{means[s]:.4f}" if s in means else "-" for s in seeds]
        values = list(means.values())
        summary = (f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}" if len(values) > 1
                   else f"{values[0]:.4f}" if values else "-")
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {summary} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("experiment_dir", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", help="training seeds (default: the folder's)")
    parser.add_argument("--metrics", nargs="+", default=["approx_kl", "clip_fraction"])
    args = parser.parse_args(argv)
    manifest = json.loads((args.experiment_dir / "experiment.json").read_text())
    seeds = args.seeds or sorted(manifest["seeds"])
    for metric in args.metrics:
        print(table(args.experiment_dir, manifest["arms"], seeds, metric))
        print()


if __name__ == "__main__":
    main()
