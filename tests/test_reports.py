"""Evaluation reports (markdown + bar chart, side-by-side comparison) and training plots (PNG + TensorBoard)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from seed_train.cli import main_eval
from seed_train.evaluate import summarize, write_report
from seed_train.logs import MetricsLogger
from seed_train.reports import comparison_table, load_summary, run_labels
from wrappers import Trajectory


def fake_summary(rates: dict[str, float], n: int = 20) -> dict:
    trajectories = [Trajectory(episode_id=f"{c}{i}", env_id="seed/Sokoban-v0", task_id=f"{c}/{i}", task="t", category=c,
                               split="unseen").finish(success=i < round(rate * n), score=0.0)
                    for c, rate in rates.items() for i in range(n)]
    summary = summarize(trajectories)
    summary["meta"] = {"env_id": "seed/Sokoban-v0", "split": "unseen"}
    return summary


def assert_png(path, min_size: tuple[int, int]) -> np.ndarray:
    """A real, non-blank PNG at least ``min_size`` (width, height) pixels."""
    image = Image.open(path)
    assert image.format == "PNG"
    assert image.size[0] >= min_size[0] and image.size[1] >= min_size[1], image.size
    pixels = np.asarray(image.convert("L"), dtype=np.float64)
    assert pixels.std() > 10, "blank image"
    return pixels


def test_eval_report_writes_json_markdown_and_chart(tmp_path):
    summary = fake_summary({"6x6-1box": 0.8, "8x8-2box": 0.3})
    json_path, md_path, png_path = write_report(summary, tmp_path, "eval_after")
    assert json.loads(json_path.read_text())["categories"]["all"]["episodes"] == 40
    table = md_path.read_text()
    assert "| 6x6-1box | 20 | 0.800 |" in table and "| all | 40 | 0.550 |" in table
    assert_png(png_path, (400, 300))


def test_compare_puts_runs_side_by_side(tmp_path, capsys):
    runs = {"grpo": {"a": 0.2, "b": 0.4}, "seed": {"a": 0.6, "b": 0.5}, "shuffled": {"a": 0.3, "b": 0.45}}
    paths = []
    for name, rates in runs.items():
        (tmp_path / name).mkdir()
        paths.append(write_report(fake_summary(rates), tmp_path / name, "eval_after")[0])
    # A trainer's results.json counts too: its "after" evaluation.
    (tmp_path / "seed" / "results.json").write_text(json.dumps({"after": fake_summary(runs["seed"])}))
    assert load_summary(tmp_path / "seed" / "results.json")["categories"]["a"]["success"] == 0.6
    assert run_labels(paths) == ["grpo/eval_after", "seed/eval_after", "shuffled/eval_after"]
    out = tmp_path / "cmp"
    assert main_eval(["compare", *map(str, paths), "--labels", "GRPO", "SEED", "shuffled", "--out", str(out)]) == 0
    md = (out / "compare.md").read_text()
    assert "| category | GRPO success | GRPO 95% CI | GRPO n | SEED success |" in md
    assert md.splitlines()[-1].startswith("| all | 0.300 |") and "| a | 0.200 |" in md
    assert "| 0.600 |" in md.splitlines()[-3]  # row a, SEED group
    assert_png(out / "compare.png", (400, 300))
    assert "wrote" in capsys.readouterr().out


def test_compare_errors_are_clear(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"x": 1}')
    good = write_report(fake_summary({"a": 0.5}), tmp_path, "good")[0]
    assert main_eval(["compare", str(good)]) == 2
    assert main_eval(["compare", str(good), str(bad)]) == 2
    assert main_eval(["compare", str(good), str(good), "--labels", "one"]) == 2
    err = capsys.readouterr().err
    assert "two or more" in err and "not an evaluation result" in err and "1 labels for 2" in err


def test_comparison_marks_missing_categories():
    table = comparison_table([fake_summary({"a": 0.5}), fake_summary({"b": 0.5})], ["x", "y"])
    assert "| a | 0.500 | [0.299, 0.701] | 20 | - | - | - |" in table


def test_training_plot_covers_the_diagnostics_and_tensorboard(tmp_path):
    logger = MetricsLogger(tmp_path)
    before = assert_png(logger.plot(), (1000, 400))  # before any update: a valid figure that says so
    rng = np.random.default_rng(0)
    for it in range(6):
        logger.log(it, {"success": it / 6, "return": float(rng.normal()), "kl": 0.01 * it, "opd_term": 0.1 / (it + 1),
                        "mean_gate": 0.5 + 0.05 * it, "gate_adv_cov_context": float(rng.normal(0, 0.01)),
                        "format_error_rate": 0.1, "skill_valid_rate": 0.9, "loss": 1.0 - 0.1 * it, "success/a": 0.5})
        if it in (2, 5):  # the trainer re-plots after every update
            path = logger.plot()
    after = assert_png(path, (1000, 400))
    assert after.shape[0] > before.shape[0]  # the extra curves add a row of panels
    assert not list(tmp_path.glob("*.tmp.png"))
    logger.close()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"success", "return", "kl", "opd_term", "mean_gate", "gate_adv_cov_context", "success/a"} <= tags
    assert [e.step for e in events.Scalars("mean_gate")] == list(range(6))


def test_grpo_plot_says_which_curves_are_not_logged(tmp_path):
    logger = MetricsLogger(tmp_path)
    logger.log(0, {"success": 0.5, "return": 1.0})
    assert_png(logger.plot(), (1000, 200))
    logger.close()


@pytest.mark.parametrize("rows", [0, 1])
def test_plot_to_explicit_path(tmp_path, rows):
    logger = MetricsLogger(tmp_path / "run")
    for it in range(rows):
        logger.log(it, {"success": 1.0})
    assert logger.plot(tmp_path / "x.png") == tmp_path / "x.png"
    logger.close()


def test_chart_of_a_perfect_and_a_zero_score(tmp_path):
    """Wilson bounds at 0 and 1 equal the rate only up to rounding: the error bars must not go negative."""
    from seed_train.evaluate import summarize, write_report
    from wrappers import Step, Trajectory

    def traj(i, success):
        steps = [Step(index=0, observation="o", action="a", reward=float(success))]
        return Trajectory(episode_id=f"e{i}", env_id="x", task_id=f"t{i}", task="t", category="sum" if i % 2 else "product",
                          split="unseen", steps=steps).finish(success=success, score=float(success))

    summary = summarize([traj(i, i % 2 == 1) for i in range(28)])  # 14 a category: rounding bites at n=14
    assert summary["categories"]["sum"]["success"] == 1.0 and summary["categories"]["product"]["success"] == 0.0
    json_path, md_path, png_path = write_report(summary, tmp_path, "eval")
    assert png_path.stat().st_size > 1000
    assert summary["categories"]["sum"]["ci95"][1] == 1.0 and summary["categories"]["product"]["ci95"][0] == 0.0
