"""benchmarks/skill_content.py reads what a run's skills say and the teacher's preference at the operator step."""
from __future__ import annotations

import math

import pytest
from script_loader import load_script

from wrappers import Step, Trajectory, TrajectoryWriter


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/skill_content.py")


def test_operators_named_and_content_kind(bench):
    assert bench.operators_named("If the card values multiply to the target, type one value, *, the other") == {"*"}
    assert bench.operators_named("If the values add up to the target, type one value, +, the other") == {"+"}
    assert bench.operators_named("Join them with *; adding misses it.") == {"*", "+"}
    assert bench.operators_named("Check the value before entering =.") == set()
    assert bench.content_kind("Multiply the two cards.", "*") == "right"
    assert bench.content_kind("Multiply the two cards.", "+") == "wrong"
    assert bench.content_kind("Enter = at the end.", "+") == "neither"


def _episode(i: int, category: str, op: str, skill: str | None, student: float, teacher: float | None) -> Trajectory:
    steps = [Step(0, "deal", "3", 0.0), Step(1, "3", op, 0.0, response_logprobs=[student, -0.1],
                                              teacher_logprobs=None if teacher is None else [teacher, -0.1])]
    return Trajectory(f"e{i}", "seed/EZPoints-v0", f"t{i}", "task", category, "train", steps=steps,
                      meta={"iteration": i % 2, "skill": skill})


def test_analyse_counts_skills_and_the_teacher_gate(bench, tmp_path):
    with TrajectoryWriter(tmp_path / "trajectories.jsonl") as writer:
        writer.write(_episode(0, "product", "*", "Multiply the cards.", math.log(0.1), math.log(0.8)))
        writer.write(_episode(2, "product", "+", "Multiply the cards.", math.log(0.9), math.log(0.2)))
        writer.write(_episode(4, "sum", "+", "Multiply the cards.", math.log(0.9), None))
        writer.write(_episode(1, "sum", "+", None, math.log(0.9), None))  # iteration 1: no skill
    rows = bench.analyse(tmp_path, beta=5.0)
    assert sorted(rows) == [0, 1]
    zero = rows[0]
    assert zero["episodes"] == 3 and dict(zero["skills"]) == {"right": 2, "wrong": 1}
    ((d_right, g_right),) = zero["teacher"]["right"]
    ((d_wrong, g_wrong),) = zero["teacher"]["wrong"]
    assert d_right == pytest.approx(math.log(8)) and g_right == pytest.approx(1 / (1 + 8 ** -5))
    assert d_wrong == pytest.approx(math.log(0.2 / 0.9)) and g_wrong < 0.01
    assert rows[1]["episodes"] == 1 and not rows[1]["skills"]
