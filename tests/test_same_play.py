"""benchmarks/same_play.py: evaluation episodes two policies played alike, per training seed."""
from __future__ import annotations

import json

from script_loader import load_script

from wrappers import Step, Trajectory, TrajectoryWriter

# Per policy folder: task -> the (action, response) of each step. Seed 0 only; "sft-grpo" has no seed 1 run.
PLAYS = {
    ("stage1", "after_stage1"): {"a": [("up", "up")], "b": [("left", "left"), ("up", "up")], "c": [("down", "down")]},
    ("seed", "after"): {"a": [("up", "up")], "b": [("left", "left"), ("up", "up")], "c": [("up", "up")]},
    # same actions as seed on a and b, but b's second response differs in text around the same action
    ("seed-wrong-rule", "after"): {"a": [("up", "up")], "b": [("left", "left"), ("up", "<answer>up</answer>")],
                                   "c": [("up", "up")]},
}


def _write(root, folder: str, stage: str, plays: dict, *, failed: str | None = None) -> None:
    (root / "seed0" / folder).mkdir(parents=True)
    with TrajectoryWriter(root / "seed0" / folder / f"eval_{stage}_test.trajectories.jsonl") as writer:
        for task, steps in plays.items():
            writer.write(Trajectory(task, "seed/Sokoban-v0", task, "t", "6x6", "test",
                                    steps=[Step(i, "obs", a, 0.0, response=r) for i, (a, r) in enumerate(steps)],
                                    meta={"env_failed": True} if task == failed else {}))


def test_counts_same_actions_and_same_responses_over_the_episodes_both_played(tmp_path, capsys):
    bench = load_script("benchmarks/same_play.py")
    (tmp_path / "experiment.json").write_text(json.dumps(
        {"arms": ["seed", "seed-wrong-rule", "sft-grpo"], "seeds": [0, 1], "splits": ["test"]}))
    for (folder, stage), plays in PLAYS.items():
        # the wrong-rule arm's episode c ended by an env fault: no outcome of the policy's, left out of the pair
        _write(tmp_path, folder, stage, plays, failed="c" if folder == "seed-wrong-rule" else None)
    bench.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "| seed | seed-wrong-rule | 2 (1) / 2 | - |" in out  # a, b same actions; only a same responses; c left out
    assert "| seed | after_stage1 | 2 (2) / 3 | - |" in out  # c: down against up
    assert "| seed-wrong-rule | after_stage1 | 2 (1) / 2 | - |" in out  # b: same actions as Stage 1, other text
    # no evaluation of sft-grpo, none at all of seed 1: a dash, not 0
    assert "| seed | sft-grpo | - | - |" in out and "| sft-grpo | after_stage1 | - | - |" in out
