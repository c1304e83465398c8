"""The published results tables are what the committed data give: README's and docs/results.md's
generated blocks equal seed_train.results_tables' output, and the seed-level restatement of the earlier
EZPoints experiments reproduces the figures a reviewer computed by hand from docs/trainer.md's per-seed
tables (issue 29: paired t over seeds)."""
from __future__ import annotations

import pytest

from seed_train import results_tables


def test_generated_blocks_are_up_to_date():
    assert results_tables.main(["--check"]) == 0, "run: python -m seed_train.results_tables"


def test_transcribed_experiments_restated_at_seed_level():
    by = {(e["name"], c["split"], c["a"], c["b"]): c for e in results_tables.transcribed_experiments()
          for c in e["seed_level"]}
    # The reviewer's paired t over seeds (df 4 or 2): 1.47, -1.18, 2.23, -1.53; row 1's Stage 2 gain t ~ 14.
    assert by[("balanced-stage2-lr5e-4", "test", "seed", "sft-grpo")]["t"] == pytest.approx(1.47, abs=0.02)
    assert by[("balanced-stage2-lr2e-4", "test", "seed", "sft-grpo")]["t"] == pytest.approx(-1.18, abs=0.02)
    assert by[("balanced-stage2-lr5e-4", "test", "seed", "seed-shuffled-tasks")]["t"] == pytest.approx(2.23, abs=0.02)
    assert by[("balanced-stage2-lr2e-4", "test", "seed", "seed-empty")]["t"] == pytest.approx(-1.53, abs=0.02)
    assert by[("light-stage1-lr5e-4", "test", "sft-grpo", "after Stage 1")]["t"] > 10
    # Not one of them reaches 0.05 with the exact test: 5 seeds cannot (floor 2/32).
    assert all(c["p_sign_flip"] >= 0.0625 for c in by.values())
    family = [c for c in by.values() if c["family"]]
    assert all(c["p_holm"] >= c["p_sign_flip"] for c in family)


def test_update_sizes_at_iteration_zero_and_over_the_run_with_ratios_to_the_control():
    from seed_train.records import Record

    def unit(metrics):
        return {"metrics": metrics, "evals": {}}

    record = Record(header={}, units={
        ("arm", 0, "sft-grpo"): unit([{"iteration": 0, "approx_kl": 0.04}, {"iteration": 1, "approx_kl": 0.02}]),
        ("arm", 1, "sft-grpo"): unit([{"iteration": 0}, {"iteration": 1, "approx_kl": 0.05}]),  # no update at 0
        ("arm", 0, "seed"): unit([{"iteration": 0, "approx_kl": 0.01}, {"iteration": 1, "approx_kl": 0.02}]),
        ("arm", 1, "seed"): unit([{"iteration": 0, "approx_kl": 0.02}, {"iteration": 1, "approx_kl": 0.01}]),
        ("stage1", 0, None): unit([])})
    sizes = results_tables.update_sizes(record)
    assert sizes["seed"]["iteration0"] == {0: 0.01, 1: 0.02}
    assert sizes["sft-grpo"]["iteration0"] == {0: 0.04, 1: None}
    # ratios only where both have a value: iteration 0 seed 0 alone (0.25); over the run 0.015 / 0.03 and 0.015 / 0.05
    assert sizes["seed"]["iteration0_ratio"] == {0: pytest.approx(0.25)}
    assert sizes["seed"]["run_ratio"] == {0: pytest.approx(0.5), 1: pytest.approx(0.3)}
    table = results_tables.update_size_table(record, [0, 1])
    assert "| seed | 0.0100 / 0.0200 | 0.25 (1) | 0.0150 / 0.0150 | 0.40 (2) |" in table
    assert "| sft-grpo | 0.0400 / - | 1.00 (1) | 0.0300 / 0.0500 | 1.00 (2) |" in table
    assert results_tables.update_size_table(Record(header={}, units={("arm", 0, "seed"): unit([])}), [0]) == []


def test_readme_rows_put_seed_first_and_skip_score_rows_that_repeat_success():
    def comparison(a, b, split, a_vals, b_vals, mean, ci):
        return {"a": a, "b": b, "split": split, "n": len(a_vals), "a_per_seed": a_vals, "b_per_seed": b_vals,
                "mean_diff": mean, "ci95": ci, "p_sign_flip": 0.25, "p_floor": 0.25, "detectable": 0.1}

    same_score = [comparison("sft-grpo", "seed", "test", [0.8, 0.6, 0.7], [0.7, 0.7, 0.4], 0.1, [-0.1, 0.3]),
                  comparison("sft-grpo", "seed", "test (score)", [0.8, 0.6, 0.7], [0.7, 0.7, 0.4], 0.1, [-0.1, 0.3])]
    own_score = [comparison("seed", "seed-empty", "test", [0.5, 0.5, 0.5], [0.4, 0.5, 0.5], 0.033, [0.0, 0.1]),
                 comparison("seed", "seed-empty", "test (score)", [0.6, 0.7, 0.6], [0.5, 0.5, 0.6], 0.1, [0.0, 0.2]),
                 comparison("seed", "seed-empty", "unseen", [0.5, 0.5, 0.5], [0.4, 0.5, 0.5], 0.033, [0.0, 0.1]),
                 comparison("seed", "seed-other", "test", [0.5, 0.5, 0.5], [0.4, 0.5, 0.5], 0.033, [0.0, 0.1]),
                 # the same pair at one override (arm@field=value) is shown; a pair across overrides is not
                 comparison("seed-empty@opd_coef=0.5", "seed@opd_coef=0.5", "test", [0.4, 0.4, 0.4], [0.5, 0.5, 0.6],
                            -0.133, [-0.2, -0.1]),
                 comparison("seed@opd_coef=0.5", "seed-empty", "test", [0.5, 0.5, 0.6], [0.4, 0.5, 0.5], 0.067,
                            [0.0, 0.1]),
                 comparison("seed@opd_coef=0.5", "sft-grpo@lr=0.1", "test", [0.5, 0.5, 0.6], [0.4, 0.5, 0.5], 0.067,
                            [0.0, 0.1])]
    rows = results_tables.readme_block([("a", same_score), ("b", own_score)]).splitlines()[2:]
    # SFT+GRPO - SEED is shown as SEED - SFT+GRPO: the sign and the interval flip; the score row repeats it.
    assert rows[0] == "| a | 3 | test | seed − sft-grpo | -0.100 [-0.300, +0.100] | 0.25 (0.25) | 0.100 |"
    # A score that differs from success keeps its row; unseen and unlisted controls stay in docs/results.md.
    assert rows[1:] == ["| b | 3 | test | seed − seed-empty | +0.033 [+0.000, +0.100] | 0.25 (0.25) | 0.100 |",
                        "| b | 3 | test (score) | seed − seed-empty | +0.100 [+0.000, +0.200] | 0.25 (0.25) | 0.100 |",
                        "| b | 3 | test | seed@opd_coef=0.5 − seed-empty@opd_coef=0.5 | +0.133 [+0.100, +0.200] "
                        "| 0.25 (0.25) | 0.100 |"]
    # Differences alike on every seed leave the between-seed sd unknown: no size, not 'detectable 0.000'.
    alike = {**comparison("seed", "seed-empty", "test", [0.5, 0.4, 0.4], [0.4, 0.3, 0.3], 0.1, [0.1, 0.1]),
             "detectable": float("nan")}
    assert results_tables.readme_block([("c", [alike])]).splitlines()[2].endswith("| n/a (no spread) |")


def test_a_record_keeps_commands_without_the_machines_paths(tmp_path, monkeypatch):
    """A committed record must not name the machine that ran it: the experiment folder becomes runs/NAME and
    paths under the working directory become relative; other arguments stay as they were."""
    from seed_train.records import portable_command

    folder = tmp_path / "elsewhere" / "sokoban"
    monkeypatch.chdir(tmp_path)
    command = ["seed-train", "experiment", "--config", "sokoban-cpu", "--output-dir", str(folder),
               "--static-skills", str(tmp_path / "rules.json"), "--resume", str(folder / "seed0" / "ckpt"),
               "--seeds", "0"]
    assert portable_command(command, folder) == [
        "seed-train", "experiment", "--config", "sokoban-cpu", "--output-dir", "runs/sokoban",
        "--static-skills", "rules.json", "--resume", "runs/sokoban/seed0/ckpt", "--seeds", "0"]


def test_the_per_env_table_lists_every_paper_env_with_its_record_or_none():
    from types import SimpleNamespace

    def policy(*values):
        return {"per_seed": [{"seed": s, "success": v} for s, v in enumerate(values)]}

    def experiment(name, env_id, policies):
        report = {"seeds": [0, 1], "splits": {"test": {"policies": policies}}}
        return {"name": name, "record": SimpleNamespace(header={"env_id": env_id}), "report": report}

    sokoban = experiment("sok", "seed/Sokoban-v0", {
        "before": policy(0.0, 0.0), "after_stage1": policy(0.4, 0.2), "sft-grpo": policy(0.5, 0.3),
        "seed": policy(0.6, 0.2), "seed-empty": policy(0.1, 0.1), "seed-wrong-rule": policy(0.0, 0.2)})
    lock = experiment("lock", "seed/CodeLock-v0", {
        "after_stage1": policy(0.1, 0.1), "seed-static": policy(0.3, 0.1), "seed-static-wrong": policy(0.0, 0.0),
        "sft-grpo": {"per_seed": [{"seed": 1, "success": 0.5}]}})  # seed 0's unit still to run
    shop = experiment("shop", "seed/WebShop-v0", {"before": policy(0.0, 0.0), "after_stage1": policy(0.1, 0.2)})
    # A named panel (ALFWorld's real games) comes after test and unseen, under its own name.
    house = experiment("house", "seed/ALFWorld-v0", {"before": policy(0.0, 0.0), "after_stage1": policy(0.0, 0.1)})
    house["report"]["splits"] = {"real-unseen": house["report"]["splits"]["test"],
                                 "unseen": {"policies": {"after_stage1": policy(0.2, 0.2)}}}
    assert results_tables.env_block([house]).splitlines()[6:8] == [
        "| seed/ALFWorld-v0 | [house](docs/results.md) | 2 | unseen | - | 0.200 | - | - | - |",
        "| seed/ALFWorld-v0 | [house](docs/results.md) | 2 | real-unseen | 0.000 | 0.050 | - | - | - |"]
    rows = results_tables.env_block([lock, sokoban, shop]).splitlines()[2:]
    assert rows[0].startswith("| seed/EZPoints-v0 | none yet (`ezpoints-cpu`) | 0 |")
    # means over the two seeds; the wrong-rule control wins over the empty skill
    assert rows[1] == ("| seed/Sokoban-v0 | [sok](docs/results.md) | 2 | test | 0.000 | 0.300 | 0.400 | 0.400 "
                       "| seed-wrong-rule: 0.100 |")
    assert [r.split(" | ")[0] for r in rows[2:5]] == ["| seed/SearchQA-v0", "| seed/WebShop-v0", "| seed/ALFWorld-v0"]
    # a record of the base model and Stage 1 alone (--baselines-only): no arm, no control
    assert rows[3] == "| seed/WebShop-v0 | [shop](docs/results.md) | 2 | test | 0.000 | 0.150 | - | - | - |"
    assert results_tables.comparison_table([]) == ["No seed-level comparison: no Stage 2 arm has run yet."]
    assert rows[5] == ("| seed/CodeLock-v0 | [lock](docs/results.md) | 2 | test | - | 0.100 | 0.500 (1 of 2 seeds) "
                       "| 0.200 (seed-static) | seed-static-wrong: 0.000 |")
    assert len(rows) == 6


def test_the_per_env_table_shows_the_seed_arm_over_the_most_seeds_with_its_own_control():
    """A variant arm run on every seed (λ 0.5) beats the plain arm run on fewer; its control is the control run
    with the same overrides. On a tie the plain arm stays."""
    shown = results_tables.shown_arms
    policies = {"sft-grpo": [0.1, 0.2, 0.3], "seed": [0.4, None, None], "seed-wrong-rule": [0.5, None, None],
                "seed@opd_coef=0.5": [0.2, 0.3, 0.4], "seed-wrong-rule@opd_coef=0.5": [0.6, 0.6, 0.6]}
    assert shown(policies) == ("seed@opd_coef=0.5", "seed-wrong-rule@opd_coef=0.5")
    assert shown({**policies, "seed": [0.4, 0.4, 0.4]}) == ("seed", "seed-wrong-rule")
    # No control run with the variant's overrides: the plain control, as before variants were counted.
    assert shown({"seed@lr=1e-4": [0.1], "seed-empty": [0.0]}) == ("seed@lr=1e-4", "seed-empty")
    assert shown({"seed-static": [0.1], "seed-static-wrong": [0.0]}) == ("seed-static", "seed-static-wrong")
    assert shown({"sft-grpo": [0.1]}) == (None, None)

    from types import SimpleNamespace
    report = {"seeds": [0, 1, 2], "splits": {"test": {"policies": {
        name: {"per_seed": [{"seed": s, "success": v} for s, v in enumerate(values) if v is not None]}
        for name, values in policies.items()}}}}
    row = results_tables.env_block([{"name": "sqa", "record": SimpleNamespace(header={"env_id": "seed/SearchQA-v0"}),
                                     "report": report}]).splitlines()[4]
    assert row == ("| seed/SearchQA-v0 | [sqa](docs/results.md) | 3 | test | - | - | 0.200 | 0.300 "
                   "(seed@opd_coef=0.5) | seed-wrong-rule@opd_coef=0.5: 0.600 |")


def test_success_tables_show_the_seeds_a_unit_has_not_run_for():
    report = {"seeds": [0, 1, 2], "splits": {"test": {"policies": {
        "after_stage1": {"per_seed": [{"seed": 0, "success": 0.4}, {"seed": 1, "success": 0.2},
                                      {"seed": 2, "success": 0.3}]},
        "seed": {"per_seed": [{"seed": 2, "success": 0.5}, {"seed": 0, "success": 0.7}]}}}}}
    splits, seeds = results_tables.record_success(report)
    assert splits == {"test": {"after_stage1": [0.4, 0.2, 0.3], "seed": [0.7, None, 0.5]}}
    rows = results_tables.success_table(splits, seeds)[2:]
    assert rows == ["| test | after Stage 1 | 0.400 / 0.200 / 0.300 | 0.300 ± 0.100 |",
                    "| test | seed | 0.700 / - / 0.500 | 0.600 (2 of 3 seeds) |"]


def test_a_one_seed_record_shows_no_spread():
    rows = results_tables.success_table({"test": {"after_stage1": [0.458], "seed": [0.5]}}, [0])[2:]
    assert rows == ["| test | after Stage 1 | 0.458 | 0.458 (1 seed) |", "| test | seed | 0.500 | 0.500 (1 seed) |"]
