"""benchmarks/paired_by_category.py: an experiment's evaluations split by task category, paired within each."""
from __future__ import annotations

import json

from script_loader import load_script

from wrappers import Trajectory, TrajectoryWriter

# (category, [success per sample]) per task: 1 product task, 2 sum tasks, 2 samples each
OUTCOMES = {
    ("stage1", "after_stage1"): {"p1": ("product", [0, 0]), "s1": ("sum", [1, 1]), "s2": ("sum", [1, 0])},
    ("seed", "after"): {"p1": ("product", [1, 1]), "s1": ("sum", [1, 1]), "s2": ("sum", [0, 0])},
}


def _write(root, folder: str, stage: str, outcomes) -> None:
    (root / "seed0" / folder).mkdir(parents=True)
    with TrajectoryWriter(root / "seed0" / folder / f"eval_{stage}_test.trajectories.jsonl") as writer:
        for task, (category, samples) in outcomes.items():
            for j, ok in enumerate(samples):
                writer.write(Trajectory(f"{task}{j}", "seed/EZPoints-v0", task, "t", category, "test",
                                        success=bool(ok), meta={"sample": j}))


def test_success_per_category_balanced_and_paired_within_category(tmp_path, capsys):
    bench = load_script("benchmarks/paired_by_category.py")
    (tmp_path / "experiment.json").write_text(json.dumps({"arms": ["seed"], "seeds": [0], "splits": ["test"]}))
    for (folder, stage), outcomes in OUTCOMES.items():
        _write(tmp_path, folder, stage, outcomes)
    bench.main([str(tmp_path)])
    out = capsys.readouterr().out
    # after Stage 1: product 0/2, sum 3/4 -> balanced (0 + 0.75) / 2; seed: product 2/2, sum 2/4 -> 0.75
    assert "| after_stage1 | 0.00 / **0.000** (n=2) | 0.75 / **0.750** (n=4) | 0.38 / **0.375** |" in out
    assert "| seed | 1.00 / **1.000** (n=2) | 0.50 / **0.500** (n=4) | 0.75 / **0.750** |" in out
    # paired by (seed, task, sample): product 2 seed-only pairs; sum: s2#s0 solved only after Stage 1
    assert "| seed | after_stage1 | 2 / 0, p = 0.5 | 0 / 1, p = 1 |" in out
