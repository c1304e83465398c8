"""Where a policy's evaluation episodes end, per training seed: won, ended by the env without a win, or cut
at the step limit; how many of their steps the env refused; and the mean score.

    python benchmarks/episode_endings.py EXPERIMENT_DIR [--splits test unseen] [--seeds 0 1] [--pairs P ...]

Success alone hides why a policy fails: a base model that never writes an action the env accepts and a
policy that buys the wrong product both score 0 on WebShop. For each training seed, split and policy this
reads the experiment's own evaluation trajectories (``paired_by_category.eval_files``) and counts the
episodes it played (an episode an env fault ended is counted apart, as the experiment leaves it out), how
they ended, the share of steps with an invalid action (refused by the env) or a format error (no action
parsed), and the mean score (WebShop's reward for a partial match, the success elsewhere). ``--pairs``
here names policies, not pairs (``before``, ``after_stage1``, an arm); default: every policy with files.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from paired_by_category import eval_files, print_split_tables

from wrappers import Trajectory, read_trajectories


@dataclass
class Endings:
    episodes: int = 0
    won: int = 0
    ended: int = 0  # the env ended the episode (terminated) without a win
    cut: int = 0  # at the step limit (truncated), or stopped otherwise
    faulted: int = 0  # an env fault ended it: no outcome of the policy's
    steps: int = 0
    invalid: int = 0
    format_errors: int = 0
    score: float = 0.0

    def cell(self) -> str:
        if not self.episodes:
            return f"no episode ({self.faulted} faulted)" if self.faulted else "-"
        share = (lambda k: f"{k / self.steps:.0%}") if self.steps else (lambda k: "-")
        return (f"{self.won} / {self.ended} / {self.cut} of {self.episodes}; invalid {share(self.invalid)}, "
                f"format {share(self.format_errors)} of {self.steps} steps; score {self.score / self.episodes:.3f}"
                + (f"; {self.faulted} faulted" if self.faulted else ""))


def endings(trajectories: list[Trajectory]) -> Endings:
    """How the episodes of one evaluation ended (see the module's docstring)."""
    out = Endings()
    for t in trajectories:
        if t.meta.get("env_failed") or t.meta.get("error"):
            out.faulted += 1
            continue
        out.episodes += 1
        out.steps += len(t.steps)
        out.invalid += sum(s.invalid_action for s in t.steps)
        out.format_errors += sum(s.format_error for s in t.steps)
        out.score += t.score
        if t.success:
            out.won += 1
        elif t.steps and t.steps[-1].terminated:
            out.ended += 1
        else:
            out.cut += 1
    return out


def split_table(root: Path, split: str, policies: list[tuple[str, ...]] | None = None,
                seeds: list[int] | None = None) -> str:
    manifest = json.loads((root / "experiment.json").read_text())
    files = eval_files(root, split, seeds)
    seeds = sorted(manifest["seeds"] if seeds is None else seeds)
    names = [p[0] for p in policies] if policies else list(files)
    lines = [f"## {split}", "", ("Per training seed: episodes won / ended by the env without a win / cut at the step "
                                 "limit; the share of steps the env refused (invalid) or with no action parsed "
                                 "(format); the mean score. '-' where the seed has no such evaluation."), "",
             "| policy | " + " | ".join(f"seed {s}" for s in seeds) + " |", "|---|" + "---|" * len(seeds)]
    for name in names:
        cells = [endings(list(read_trajectories(files[name][s]))).cell() if s in files.get(name, {}) else "-"
                 for s in seeds]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    print_split_tables(__doc__.split("\n\n")[0], split_table, argv)


if __name__ == "__main__":
    main()
