"""How many evaluation episodes two policies of an experiment played alike, per training seed.

    python benchmarks/same_play.py EXPERIMENT_DIR [--splits test unseen] [--seeds 0 1] [--pairs A:B ...]

Two arms whose success rates agree may do so because they play differently and win as often, or because
they play the same: at a small distillation coefficient an arm and its content control can train to
the same policy. For each training seed and split this reads both policies' evaluation trajectories
(``paired_by_category.eval_files``: the experiment's own files) and counts, over the episodes both
played (same task and sample), those with the same sequence of actions the env received, and those
with the same raw responses as well (the model's text, token for token). Evaluations are seeded per
task, so two identical policies play every episode alike; at temperature > 0 two policies that differ
anywhere in an episode's sampled tokens usually part there.

Policies: ``before``, ``after_stage1`` and the arms the folder's ``experiment.json`` records; default
pairs: every two arms, and each arm against ``after_stage1``.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paired_by_category import eval_files, print_split_tables

from seed_train.evaluate import episode_outcomes
from wrappers import read_trajectories


def plays(path: Path) -> dict[str, tuple[tuple[str, ...], tuple[str | None, ...]]]:
    """Episode key (as the experiment's paired tests key them) -> (actions, responses) of that episode."""
    trajectories = list(read_trajectories(path))
    keys = episode_outcomes(trajectories)  # the keys, in the trajectories' order (faulted episodes left out)
    kept = [t for t in trajectories if not (t.meta.get("env_failed") or t.meta.get("error"))]
    return {key: (tuple(s.action for s in t.steps), tuple(s.response for s in t.steps))
            for key, t in zip(keys, kept, strict=True)}


def same_play(a: dict, b: dict) -> tuple[int, int, int]:
    """(same actions, same actions and responses, episodes both played)."""
    both = sorted(set(a) & set(b))
    return (sum(a[k][0] == b[k][0] for k in both), sum(a[k] == b[k] for k in both), len(both))


def split_table(root: Path, split: str, pairs: list[tuple[str, str]] | None = None,
                seeds: list[int] | None = None) -> str:
    manifest = json.loads((root / "experiment.json").read_text())
    files = eval_files(root, split, seeds)
    seeds = sorted(manifest["seeds"] if seeds is None else seeds)
    arms = list(manifest["arms"])  # every arm the experiment names, run or not: a unit not run shows '-'
    if pairs is None:
        pairs = [(a, b) for i, a in enumerate(arms) for b in arms[i + 1:]] + [(a, "after_stage1") for a in arms]
    lines = [f"## {split}", "", ("Episodes played alike, per training seed: same actions (same responses too) / "
                                 "episodes both played; '-' where a seed lacks either policy's evaluation."), "",
             "| a | b | " + " | ".join(f"seed {s}" for s in seeds) + " |", "|---|---|" + "---|" * len(seeds)]
    for a, b in pairs:
        cells = []
        for s in seeds:
            if s not in files.get(a, {}) or s not in files.get(b, {}):
                cells.append("-")
                continue
            actions, responses, n = same_play(plays(files[a][s]), plays(files[b][s]))
            cells.append(f"{actions} ({responses}) / {n}")
        lines.append(f"| {a} | {b} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    print_split_tables(__doc__.split("\n\n")[0], split_table, argv)


if __name__ == "__main__":
    main()
