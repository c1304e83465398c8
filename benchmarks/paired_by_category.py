"""An experiment's evaluations per task category: success per seed and paired tests within each category.

    python benchmarks/paired_by_category.py EXPERIMENT_DIR [--splits test unseen] [--seeds 0 1 2] [--pairs A:B ...]

``seed-train experiment``'s report pairs every episode of a split; when the panel's categories are
unbalanced (EZPoints' test panel: 5 product deals of 24) a policy that learned to tell the categories
apart and one that answers all of them the way the common category wants can differ on few pairs. This
reads each unit's evaluation trajectories (``seed<S>/<unit>/eval_<stage>_<split>.trajectories.jsonl``) and
prints, per split:

- per policy and category: success per seed and pooled, and the *balanced* success (the mean over
  categories of the category's success: 0.5 for a policy that answers every deal of two categories the
  same way, 1 for one that solves both);
- per pair of policies (default: every arm against ``after_stage1`` and every two arms): the exact
  McNemar test within each category, pooled over seeds (``a only / b only``, p).

Policies: ``before``, ``after_stage1`` and the arms the folder's ``experiment.json`` records.
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

from seed_train.evaluate import episode_outcomes, paired_test
from wrappers import read_trajectories


def eval_files(root: Path, split: str, seeds: list[int] | None = None) -> dict[str, dict[int, Path]]:
    """policy -> training seed -> evaluation trajectories file, for the units that have one (of ``seeds``:
    default, every seed the folder records)."""
    manifest = json.loads((root / "experiment.json").read_text())
    where = {"before": ("before", "before"), "after_stage1": ("stage1", "after_stage1")}
    where.update({arm: (arm, "after") for arm in manifest["arms"]})
    out: dict[str, dict[int, Path]] = {}
    for policy, (folder, stage) in where.items():
        for seed in sorted(manifest["seeds"] if seeds is None else seeds):
            path = root / f"seed{seed}" / folder / f"eval_{stage}_{split}.trajectories.jsonl"
            if path.is_file():
                out.setdefault(policy, {})[seed] = path
    return out


def outcomes_by_category(files: dict[int, Path]) -> dict[str, dict[tuple[int, str], bool]]:
    """category -> (seed, episode key) -> success, the keys the experiment's own paired tests use."""
    out: dict[str, dict[tuple[int, str], bool]] = defaultdict(dict)
    for seed, path in files.items():
        trajectories = list(read_trajectories(path))
        outcomes = episode_outcomes(trajectories)  # keyed in the trajectories' order
        for (key, ok), t in zip(outcomes.items(), trajectories, strict=True):
            out[t.category][(seed, key)] = ok
    return dict(out)


def rate(outcomes: dict, seed: int | None = None) -> float:
    values = [ok for (s, _), ok in outcomes.items() if seed is None or s == seed]
    return sum(values) / len(values) if values else float("nan")


def split_tables(root: Path, split: str, pairs: list[tuple[str, str]] | None = None,
                 seeds: list[int] | None = None) -> str:
    files = eval_files(root, split, seeds)
    data = {policy: outcomes_by_category(f) for policy, f in files.items()}
    categories = sorted({c for d in data.values() for c in d})
    seeds = sorted({s for f in files.values() for s in f})
    lines = [f"## {split}", "", "| policy | " + " | ".join(f"{c}: per seed / pooled" for c in categories)
             + " | balanced: per seed / mean |", "|---|" + "---|" * (len(categories) + 1)]
    for policy, by_cat in data.items():
        cells = []
        for c in categories:
            d = by_cat.get(c, {})
            cells.append(" / ".join(f"{rate(d, s):.2f}" for s in seeds) + f" / **{rate(d):.3f}** (n={len(d)})")
        balanced = [sum(rate(by_cat.get(c, {}), s) for c in categories) / len(categories) for s in seeds]
        cells.append(" / ".join(f"{b:.2f}" for b in balanced) + f" / **{sum(balanced) / len(balanced):.3f}**")
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    arms = [p for p in data if p not in ("before", "after_stage1")]
    if pairs is None:
        pairs = [(a, "after_stage1") for a in arms if "after_stage1" in data]
        pairs += [(a, b) for i, a in enumerate(arms) for b in arms[i + 1:]]
    lines += ["", "Paired within each category (exact McNemar, pooled over seeds; a only / b only, p):", "",
              "| a | b | " + " | ".join(categories) + " |", "|---|---|" + "---|" * len(categories)]
    for a, b in pairs:
        cells = []
        for c in categories:
            t = paired_test(data[a].get(c, {}), data[b].get(c, {}))
            cells.append(f"{t['a_only']} / {t['b_only']}, p = {t['p_value']:.2g}")
        lines.append(f"| {a} | {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def print_split_tables(description: str, split_table, argv: list[str] | None = None) -> None:
    """The command line of the scripts that read an experiment's evaluations per split (this one,
    ``same_play.py``): EXPERIMENT [--splits] [--seeds] [--pairs A:B ...]; prints
    ``split_table(root, split, pairs, seeds)`` for each split."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("experiment", type=Path, help="a seed-train experiment --output-dir")
    p.add_argument("--splits", nargs="+", default=None, help="default: the experiment's splits")
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="training seeds (default: all recorded)")
    p.add_argument("--pairs", nargs="+", default=None, metavar="A:B", help="policies to pair (default: see above)")
    args = p.parse_args(argv)
    splits = args.splits or json.loads((args.experiment / "experiment.json").read_text())["splits"]
    pairs = [tuple(x.split(":", 1)) for x in args.pairs] if args.pairs else None
    print("\n\n".join(split_table(args.experiment, split, pairs, args.seeds) for split in splits))


def main(argv: list[str] | None = None) -> None:
    print_split_tables(__doc__.split("\n\n")[0], split_tables, argv)


if __name__ == "__main__":
    main()
