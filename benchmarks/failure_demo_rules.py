"""Which failure rules Stage 1's failure demos teach, before paying for Stage 1: no model is loaded.

    python benchmarks/failure_demo_rules.py --config sokoban-cpu --demos 16 32 64 --noise 1.0 0.6

For each number of demos and each ``stage1_failure_noise`` it plays the failure demos exactly as the trainer's
Stage 1 would for the config's seed (``seed_train.trainer.failure_demos``: the same tasks and reset seeds) and
gives the rule-based annotator's skill for each lost one (``taught_failure_rules``: what the Stage 1 log line
prints), as a markdown table: how many lost, their mean steps, how many distinct rules, and each rule's count.
A rule the lost demos never show is one the analyzer never sees written (Sokoban's random play: mostly "back
and forth"; docs/results.md). With ``annotator_model`` set in the config the trainer's skills would be the
model's; this script always gives the rule-based ones.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics

from seed_train.config import SeedConfig
from seed_train.skills import rule_based_skill
from seed_train.trainer import failure_demos, stage1_panel, taught_failure_rules


def rule_counts(cfg: SeedConfig, demos: int, noise: float) -> dict:
    """One row: the failure demos ``cfg`` would play with ``demos`` episodes at ``noise``, and their rules."""
    cfg = dataclasses.replace(cfg, stage1_failure_demos=demos, stage1_failure_noise=noise)
    played = failure_demos(*stage1_panel(cfg), cfg)
    lost = [t for t in played if not t.success]
    return {"demos": demos, "noise": noise, "lost": len(lost),
            "steps": statistics.fmean(len(t.steps) for t in played) if played else 0.0,
            "rules": taught_failure_rules(played, rule_based_skill)}


def table(rows: list[dict], width: int = 60) -> str:
    lines = ["| failure demos | noise | lost | mean steps | distinct rules | rules the lost demos teach |",
             "|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        taught = "; ".join(f'{n} x "{text[:width]}"' for text, n in r["rules"].most_common()) or "-"
        lines.append(f"| {r['demos']} | {r['noise']:g} | {r['lost']} | {r['steps']:.1f} | {len(r['rules'])} | "
                     f"{taught} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="a recipe name or YAML config (its env, split, seed, balance)")
    p.add_argument("--demos", nargs="+", type=int, default=[16], help="numbers of failure demos")
    p.add_argument("--noise", nargs="+", type=float, default=[1.0], help="stage1_failure_noise values")
    p.add_argument("--seed", type=int, default=None, help="the run's seed (default: the config's)")
    args = p.parse_args(argv)
    cfg = SeedConfig.from_yaml(args.config)
    if args.seed is not None:
        cfg = dataclasses.replace(cfg, seed=args.seed)
    if any(n < 1 for n in args.demos):
        p.error(f"--demos: {args.demos}: each must be >= 1")
    if any(not 0 < x <= 1 for x in args.noise):
        p.error(f"--noise: {args.noise}: each must be a share in (0, 1]")
    print(f"{cfg.env_id}, seed {cfg.seed}:\n")
    print(table([rule_counts(cfg, n, noise) for n in args.demos for noise in args.noise]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
