"""What the skills of a Stage 2 run say, and whether OPD's teacher prefers the right move: EZPoints.

    python benchmarks/skill_content.py RUN_DIR [RUN_DIR ...] [--gate-beta 5]

Reads each run's ``trajectories.jsonl`` (a ``seed-train`` run folder, e.g. an experiment arm's
``seed0/seed/run``) and prints, per run and Stage 2 iteration:

- **skill content**: of the episodes given a skill, how many name the operator that solves the deal
  (``*`` / "multiply" on a product deal, ``+`` / "add" / "sum" on a sum deal), the other one, both or
  neither. A hindsight skill carries information the acting policy lacks only when it names the right
  operator more often than the wrong one; a content control (skills of another task) should not.
- **the teacher at the operator step**: the operator token the policy sampled, its log-prob under the
  student (as sampled) and under the teacher (the same model with the skill in the prompt, as recorded
  by the trainer), so Δ = l_skill - l_θ, and the gate σ(β·Δ). OPD raises a sampled token's log-prob in
  proportion to the gate: it helps where the gate is high on the right operator and low on the wrong one.

EZPoints in token mode only (value, operator, value, =): the operator is the second step's action.
Runs without teacher log-probs (no valid skill, OPD off) show the skill table alone.
"""
from __future__ import annotations

import argparse
import math
import re
from collections import defaultdict
from pathlib import Path

from wrappers import read_trajectories

OPERATOR_STEP = 1
RIGHT_OPERATOR = {"sum": "+", "product": "*"}
_NAMES = {"*": re.compile(r"\*|multipl|product|times", re.I), "+": re.compile(r"\+|\badd|\bsum\b|plus", re.I)}


def operators_named(skill: str) -> set[str]:
    """The operators a skill's text names (symbol or word)."""
    return {op for op, pattern in _NAMES.items() if pattern.search(skill)}


def content_kind(skill: str, right: str) -> str:
    named = operators_named(skill)
    if named == {right}:
        return "right"
    if named and right not in named:
        return "wrong"
    return "both" if named else "neither"


def analyse(run: Path, beta: float) -> dict[int, dict]:
    """Per iteration: skill content counts and the operator-step teacher figures."""
    per_it: dict[int, dict] = defaultdict(lambda: {"episodes": 0, "skills": defaultdict(int),
                                                   "teacher": defaultdict(list)})
    for t in read_trajectories(run / "trajectories.jsonl"):
        right = RIGHT_OPERATOR.get(t.category)
        it = int(t.meta.get("iteration", -1))
        row = per_it[it]
        row["episodes"] += 1
        skill = t.meta.get("skill")
        if right is None or skill is None:
            continue
        row["skills"][content_kind(skill, right)] += 1
        if len(t.steps) <= OPERATOR_STEP:
            continue
        step = t.steps[OPERATOR_STEP]
        sampled = step.action.strip()
        if sampled not in ("+", "*") or not step.teacher_logprobs or not step.response_logprobs:
            continue
        delta = step.teacher_logprobs[0] - step.response_logprobs[0]
        which = "right" if sampled == right else "wrong"
        row["teacher"][which].append((delta, 1 / (1 + math.exp(-beta * delta))))
    return dict(sorted(per_it.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="seed-train run folders (holding trajectories.jsonl)")
    parser.add_argument("--gate-beta", type=float, default=5.0, help="β_opd of the runs (the gate σ(β·Δ))")
    args = parser.parse_args()
    print("| run | iteration | episodes | with a skill | names the right operator | the wrong one | both | neither "
          "| right op sampled: n, mean Δ, mean gate | wrong op sampled: n, mean Δ, mean gate |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for run in args.runs:
        for it, row in analyse(run, args.gate_beta).items():
            s = row["skills"]
            given = sum(s.values())
            cells = []
            for which in ("right", "wrong"):
                values = row["teacher"][which]
                cells.append(f"{len(values)}, {sum(d for d, _ in values) / len(values):+.2f}, "
                             f"{sum(g for _, g in values) / len(values):.2f}" if values else "-")
            print(f"| {run} | {it} | {row['episodes']} | {given} | {s['right']} | {s['wrong']} | {s['both']} "
                  f"| {s['neither']} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
