"""benchmarks/episode_endings.py: how a policy's evaluation episodes ended, per training seed."""
from __future__ import annotations

import json

from script_loader import load_script

from wrappers import Step, Trajectory, TrajectoryWriter


def _episode(task: str, steps: list[Step], *, success=False, score=0.0, meta=None) -> Trajectory:
    return Trajectory(task, "seed/WebShop-v0", task, "buy it", "beauty", "test", steps=steps, success=success,
                      score=score, meta=meta or {})


def test_counts_wins_env_endings_cuts_refused_steps_and_the_mean_score(tmp_path, capsys):
    bench = load_script("benchmarks/episode_endings.py")
    (tmp_path / "experiment.json").write_text(json.dumps({"arms": ["seed"], "seeds": [0, 1], "splits": ["test"]}))
    episodes = [
        _episode("won", [Step(0, "o", "search[x]", 0.0), Step(1, "o", "click[buy now]", 1.0, terminated=True)],
                 success=True, score=1.0),
        _episode("wrong buy", [Step(0, "o", "click[buy now]", 0.5, terminated=True)], score=0.5),
        _episode("cut", [Step(0, "o", "click[nothing]", 0.0, invalid_action=True),
                         Step(1, "o", "", 0.0, format_error=True, invalid_action=True, truncated=True)]),
        _episode("fault", [Step(0, "o", "search[x]", 0.0)], meta={"env_failed": True}),
    ]
    folder = tmp_path / "seed0" / "stage1"
    folder.mkdir(parents=True)
    with TrajectoryWriter(folder / "eval_after_stage1_test.trajectories.jsonl") as writer:
        for t in episodes:
            writer.write(t)
    counted = bench.endings(episodes)
    assert (counted.episodes, counted.won, counted.ended, counted.cut, counted.faulted) == (3, 1, 1, 1, 1)
    assert (counted.steps, counted.invalid, counted.format_errors) == (5, 2, 1)  # the faulted episode left out
    bench.main([str(tmp_path)])
    out = capsys.readouterr().out
    # 1 won, 1 ended by the env, 1 cut of 3; 2 of 5 steps refused, 1 without an action; score (1 + 0.5 + 0) / 3
    assert ("| after_stage1 | 1 / 1 / 1 of 3; invalid 40%, format 20% of 5 steps; score 0.500; 1 faulted | - |"
            in out)
    assert "| before |" not in out  # only the policies with an evaluation
