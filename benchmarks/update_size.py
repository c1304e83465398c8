"""How far each Stage 2 update moved the policy, per arm of an experiment: the trainer's own step metrics.

    python benchmarks/update_size.py EXPERIMENT_DIR [--seeds 0 1 2] [--metrics approx_kl clip_fraction]
        [--iterations 0] [--relative-to sft-grpo]

Reads each arm's ``seed<S>/<arm>/run/metrics.jsonl`` (one row per Stage 2 iteration) and prints, per arm,
each metric's mean over the iterations that updated, per training seed, and the mean ± sd over seeds.
``approx_kl`` is the trainer's k3 estimate ``mean(r - 1 - log r)`` over the iteration's response tokens
(r = π_θ / π_rollout on the sampled token), i.e. KL(π_rollout || π_θ): how far the iteration's
minibatch updates moved the policy from the one that sampled its episodes. An arm whose extra loss
term pulls towards the rollout policy (SEED's OPD with a gate near 0.5, docs/trainer.md) should show a
smaller KL than its control at the same learning rate.

``--iterations 0`` keeps iteration 0 only: every arm of a seed starts Stage 2 from the same Stage 1 policy
with the same rollout seeds, so its iteration-0 episodes are the same and the step is measured on identical
samples (later iterations differ by what each arm learned). ``--relative-to ARM`` adds each arm's per-seed
ratio to that arm's value (mean over the seeds both have): the matched-step-size control is SFT+GRPO at the
learning rate whose ratio is near the OPD arm's.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from seed_train.logs import iteration_mean, read_metrics


def per_seed_means(root: Path, arm: str, seeds: list[int], metric: str,
                   iterations: list[int] | None = None) -> dict[int, float]:
    """seed -> the metric's mean over the iterations that logged it (``seed_train.logs.iteration_mean``),
    only ``iterations`` when given; seeds without a run are left out."""
    means = {seed: iteration_mean(read_metrics(root / f"seed{seed}" / arm / "run"), metric, iterations)
             for seed in seeds}
    return {seed: value for seed, value in means.items() if value is not None}


def _mean_sd(values: list[float]) -> str:
    return (f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}" if len(values) > 1
            else f"{values[0]:.4f}" if values else "-")


def table(root: Path, arms: list[str], seeds: list[int], metric: str, iterations: list[int] | None = None,
          relative_to: str | None = None) -> str:
    which = "all iterations" if iterations is None else "iteration " + ", ".join(map(str, iterations))
    ratio_head = f" | ratio to {relative_to} per seed: mean ± sd" if relative_to else ""
    lines = [f"### {metric} ({which})", "",
             "| arm | " + " | ".join(f"s{s}" for s in seeds) + " | mean ± sd over seeds" + ratio_head + " |",
             "|---|" + "---:|" * (len(seeds) + 1 + bool(relative_to))]
    control = per_seed_means(root, relative_to, seeds, metric, iterations) if relative_to else {}
    for arm in arms:
        means = per_seed_means(root, arm, seeds, metric, iterations)
        cells = [f"{means[s]:.4f}" if s in means else "-" for s in seeds]
        ratio = ""
        if relative_to:
            ratios = [means[s] / control[s] for s in seeds if s in means and control.get(s)]
            ratio = " | " + _mean_sd(ratios)
        lines.append(f"| {arm} | " + " | ".join(cells) + f" | {_mean_sd(list(means.values()))}{ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("experiment_dir", type=Path)
    parser.add_argument("--seeds", type=int, nargs="+", help="training seeds (default: the folder's)")
    parser.add_argument("--metrics", nargs="+", default=["approx_kl", "clip_fraction"])
    parser.add_argument("--iterations", type=int, nargs="+", default=None,
                        help="only these Stage 2 iterations (0: the same samples in every arm of a seed)")
    parser.add_argument("--relative-to", default=None, metavar="ARM",
                        help="add each arm's per-seed ratio to ARM's value")
    args = parser.parse_args(argv)
    manifest = json.loads((args.experiment_dir / "experiment.json").read_text())
    seeds = args.seeds or sorted(manifest["seeds"])
    for metric in args.metrics:
        print(table(args.experiment_dir, manifest["arms"], seeds, metric, args.iterations, args.relative_to))
        print()


if __name__ == "__main__":
    main()
