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


# ------------------------------------------------------------------------------------ plot readability
def test_value_limits_give_a_single_or_flat_series_a_readable_span():
    from seed_train.logs import value_limits

    assert value_limits([0.25]) == pytest.approx((0.225, 0.275))
    assert value_limits([0.0, 0.0]) == pytest.approx((-0.05, 0.05))
    assert value_limits([-3e-7]) == pytest.approx((-3.3e-7, -2.7e-7))  # scaled to the value, not +-0.05
    assert value_limits([0.0, 1.0]) == pytest.approx((-0.08, 1.08))


def test_curves_count_iterations_from_one_with_whole_ticks_and_no_offset_labels():
    import matplotlib.pyplot as plt

    from seed_train.logs import curves_figure

    fig = curves_figure([{"iteration": 0, "success": 0.25, "mean_gate": 0.5000001, "opd_term": 1.2e-5}])
    try:
        fig.canvas.draw()
        panels = {ax.get_title(): ax for ax in fig.axes if ax.get_visible()}
        success = panels["success rate"]
        assert list(success.get_xticks()) == [1] and success.get_xlim() == (0.5, 1.5)
        assert success.get_xlabel() == "iteration"
        assert [t.get_text() for t in success.texts] == ["0.25"]  # the lone point's value is printed
        gate = panels["mean gate"]
        assert gate.yaxis.get_offset_text().get_text() == ""  # no "+5e-1" offset over the axis
        labels = [t.get_text() for t in gate.get_yticklabels()]
        assert len(set(labels)) == len(labels) > 1  # distinct, readable tick labels
        assert panels["KL to reference"].get_xticks().size == 0  # an empty panel prints no axis numbers
    finally:
        plt.close(fig)
    fig = curves_figure([{"iteration": i, "success": i / 3} for i in range(3)])
    try:
        assert list(next(ax for ax in fig.axes if ax.get_title() == "success rate").get_xticks()) == [1, 2, 3]
    finally:
        plt.close(fig)


def test_one_evaluation_chart_names_the_evaluation_and_labels_zero_bars():
    import matplotlib.pyplot as plt

    from seed_train.reports import success_figure

    summary = fake_summary({"a": 0.0, "b": 0.5})
    titles = {}
    for name in ("eval_before", "eval_after_stage1", "eval_after"):
        fig = success_figure([summary], [name], "seed/Sokoban-v0 unseen")
        ax = fig.axes[0]
        titles[name] = ax.get_title()
        values = [t.get_text() for t in ax.texts]
        plt.close(fig)
        assert values == ["0.00", "0.50", "0.25"]  # a, b, all: the zero bar has its label
    assert titles == {"eval_before": "seed/Sokoban-v0 unseen: before training",
                      "eval_after_stage1": "seed/Sokoban-v0 unseen: after Stage 1",
                      "eval_after": "seed/Sokoban-v0 unseen: after training"}


# ------------------------------------------------------------------------------------ run report
def _hand_made_run(run):
    """A run folder as the trainer leaves it: config, three evaluations, metrics, trajectories with skills."""
    from seed_train.config import SeedConfig
    from wrappers import TrajectoryWriter

    run.mkdir()
    (run / "config.json").write_text(json.dumps(SeedConfig(env_id="seed/Sokoban-v0", iterations=2).to_dict()))
    for name, rates in (("eval_before", {"6x6": 0.0, "8x8": 0.0}), ("eval_after_stage1", {"6x6": 0.5, "8x8": 0.1}),
                        ("eval_after", {"6x6": 0.6, "8x8": 0.2})):
        write_report(fake_summary(rates), run, name)
    (run / "results.json").write_text(json.dumps({"stage1": {"stage1_pairs": 116, "stage1_loss_first": 4.25,
                                                             "stage1_loss_last": 0.21}}))
    logger = MetricsLogger(run)
    for it in range(2):
        logger.log(it, {"success": 0.4 + 0.1 * it, "return": 4.0, "loss": -0.01, "iteration_s": 30.0})
    logger.close()
    with TrajectoryWriter(run / "trajectories.jsonl") as writer:
        for it in range(2):
            for k in range(6):
                writer.write(Trajectory(episode_id=f"it{it}-{k}", env_id="seed/Sokoban-v0", task_id=f"t{k}",
                                        task="Push the box", category="6x6", split="train",
                                        meta={"iteration": it, "skill": None if k == 5 else
                                              f"rule {it}/{k}: push <script>alert(1)</script> first"})
                             .finish(success=k % 2 == 0, score=0.0))


def test_run_report_has_every_section_escaped_and_links_the_viewer(tmp_path):
    from seed_train.reports import skill_samples, write_run_report

    run = tmp_path / "run"
    _hand_made_run(run)
    page = write_run_report(run, samples=4).read_text(encoding="utf-8")
    for heading in ("before training", "after Stage 1", "after training", "Stage 1 (skill SFT)", "116 SFT pairs",
                    "Training (Stage 2)", "Skills the policy wrote (iteration 2)", "Config", "env_id"):
        assert heading in page, heading
    # 12/20 with its Wilson 95% interval, then mean steps and the format-valid share of steps (fake_summary's
    # episodes have none: 0 steps, nothing unparsed)
    assert "<td>0.600</td><td>[0.387, 0.781]</td><td>20</td><td>0.0</td><td>1.000</td>" in page
    assert page.count("data:image/png;base64,") == 2  # the before-vs-after chart and the curves, inlined
    assert_png(run / "before_after.png", (400, 300))
    # Model text is escaped, never markup; only the last iteration's skills, two successes and two failures.
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    picked = skill_samples(run / "trajectories.jsonl", 4)
    assert [r["iteration"] for r in picked] == [2] * 4 and [r["success"] for r in picked] == [True, True, False, False]
    assert "rule 1/0" in page and "rule 0/" not in page
    assert '<a href="viewer.html">' in page and (run / "viewer.html").stat().st_size > 1000
    assert 'href="eval_after.md"' in page
    # No viewer asked for and none there: the page says how to make one instead of linking a missing file.
    (run / "viewer.html").unlink()
    page = write_run_report(run, viewer=False).read_text(encoding="utf-8")
    assert 'href="viewer.html"' not in page and "seed-envs view" in page


def test_run_report_lists_steps_and_format_valid_share_per_category_and_stage(tmp_path):
    """Issue 30 item 6: after each stage the report gives, per category, success, mean steps and the share of
    steps whose output parsed as an action."""
    from seed_train.reports import write_run_report
    from wrappers import Step

    def episode(category, k, steps, unparsed):
        t = Trajectory(episode_id=f"{category}{k}", env_id="seed/Sokoban-v0", task_id=f"{category}/{k}", task="t",
                       category=category, split="test")
        t.steps = [Step(index=i, observation="o", action="up", reward=0.0, format_error=i < unparsed)
                   for i in range(steps)]
        return t.finish(success=k == 0, score=0.0)

    run = tmp_path / "run"
    run.mkdir()
    # before: 6x6 episodes of 4 and 2 steps, 3 of 6 unparsed; 8x8 one of 5 steps, all parsed
    write_report(summarize([episode("6x6", 0, 4, 2), episode("6x6", 1, 2, 1), episode("8x8", 0, 5, 0)]), run,
                 "eval_before")
    # after Stage 1: every step parsed, 6x6 in 1 and 3 steps
    write_report(summarize([episode("6x6", 0, 1, 0), episode("6x6", 1, 3, 0), episode("8x8", 0, 5, 0)]), run,
                 "eval_after_stage1")
    page = write_run_report(run, viewer=False).read_text(encoding="utf-8")
    assert page.count("<th>format-valid</th>") == 2 and page.count("<th>steps</th>") == 2
    six = page[page.index("<td>6x6</td>"):page.index("</tr>", page.index("<td>6x6</td>"))]
    assert "<td>2</td><td>3.0</td><td>0.500</td>" in six  # before: 2 episodes, 6 steps / 2, 3 of 6 parsed
    assert "<td>2</td><td>2.0</td><td>1.000</td>" in six  # after Stage 1
    total = page[page.index("<td>all</td>"):page.index("</tr>", page.index("<td>all</td>"))]
    assert "<td>3</td><td>3.7</td><td>0.727</td>" in total  # 11 steps / 3 episodes, 8 of 11 parsed


def test_run_report_of_a_run_without_evaluations_or_iterations(tmp_path):
    from seed_train.reports import write_run_report

    run = tmp_path / "bare"
    run.mkdir()
    page = write_run_report(run).read_text(encoding="utf-8")
    assert "No evaluation in this run folder" in page and "No Stage 2 iteration logged" in page
    assert "No trajectory files" in page and "No config.json" in page
