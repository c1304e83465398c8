"""seed-train experiment (arms x seeds, one shared Stage 1 per seed, paired tests, resume), the exact
McNemar test, aggregation over runs, the after-Stage-1 evaluation and seed-eval's seeds."""
from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

import pytest
import toy_env  # noqa: F401  (registers test/Echo-v0)

import seed_train.trainer as trainer
from seed_train.arms import ARMS, arms_markdown
from seed_train.config import SeedConfig
from seed_train.evaluate import aggregate_runs, mcnemar_exact, paired_test
from seed_train.experiment import Experiment
from seed_train.logs import read_metrics
from wrappers import read_trajectories

pytestmark = pytest.mark.usefixtures("keep_torch_rng")


# ---------------------------------------------------------------------------------- statistics
def test_mcnemar_exact_matches_known_values():
    # Hand-computed: n = 7, P[X <= 1] = (1 + 7) / 128 -> p = 0.125; n = 5, P[X = 0] = 1/32 -> 0.0625;
    # n = 6 split 3/3: the two tails overlap -> 1. Larger n checked against scipy.stats.binomtest (two-sided).
    assert mcnemar_exact(1, 6) == pytest.approx(0.125)
    assert mcnemar_exact(6, 1) == pytest.approx(0.125)
    assert mcnemar_exact(0, 5) == pytest.approx(0.0625)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 1) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(2, 13) == pytest.approx(0.00738525390625, rel=1e-12)
    assert mcnemar_exact(10, 25) == pytest.approx(0.016673847800120715, rel=1e-9)
    assert mcnemar_exact(40, 60) == pytest.approx(0.05688793364098089, rel=1e-9)
    assert mcnemar_exact(0, 1000) == pytest.approx(2.0**-999, rel=1e-12)  # integer arithmetic: no overflow/NaN
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 3)


def test_paired_test_counts_only_shared_keys():
    a = {(0, "t1"): True, (0, "t2"): True, (1, "t1"): False, (1, "t2"): True, (1, "t3"): True}
    b = {(0, "t1"): True, (0, "t2"): False, (1, "t1"): True, (1, "t2"): False, (2, "t9"): True}
    r = paired_test(a, b)
    assert (r["pairs"], r["both"], r["a_only"], r["b_only"], r["neither"]) == (4, 1, 2, 1, 0)
    assert r["p_value"] == pytest.approx(1.0)  # n = 3 discordant, min 1: 2 * (1 + 3) / 8 = 1


def _summary(rows: dict[str, tuple[int, int, float]]) -> dict:
    cats = {}
    for name, (wins, n, score) in rows.items():
        cats[name] = {"episodes": n, "successes": wins, "success": wins / n, "ci95": [0.0, 1.0], "score": score,
                      "length": 1.0, "format_error_rate": 0.0}
    return {"categories": cats}


def test_aggregate_runs_and_the_seed_eval_aggregate_command(tmp_path, capsys):
    from seed_train.cli import main_eval

    runs = [_summary({"sum": (2, 4, 0.5), "all": (3, 8, 0.4)}), _summary({"sum": (4, 4, 1.0), "all": (5, 8, 0.6)}),
            _summary({"product": (1, 4, 0.25), "all": (1, 8, 0.2)})]
    agg = aggregate_runs(runs)
    assert list(agg) == ["product", "sum", "all"]
    # all: 3/8, 5/8, 1/8 -> mean 0.375, sample sd 0.25
    assert agg["all"]["success_mean"] == pytest.approx(0.375) and agg["all"]["success_sd"] == pytest.approx(0.25)
    assert agg["sum"]["runs"] == 2 and agg["sum"]["success_mean"] == pytest.approx(0.75)
    assert agg["product"]["runs"] == 1 and agg["product"]["success_sd"] == 0.0
    paths = []
    for i, s in enumerate(runs[:2]):  # a seed-eval JSON, and a trainer results.json (its 'after' is used)
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(s if i == 0 else {"before": runs[2], "after": s}))
    assert main_eval(["aggregate", *map(str, paths), "--labels", "s0", "s1", "--out", str(tmp_path / "agg")]) == 0
    written = json.loads((tmp_path / "agg" / "aggregate.json").read_text())
    assert written["categories"]["all"]["success_mean"] == pytest.approx(0.5)
    assert written["categories"]["all"]["success_sd"] == pytest.approx(0.1767767, abs=1e-6)  # 3/8, 5/8
    assert "0.500 ± 0.177" in (tmp_path / "agg" / "aggregate.md").read_text()
    assert main_eval(["aggregate", str(paths[0]), "--labels", "a", "b"]) == 2


# ---------------------------------------------------------------------------------- planning
def test_arms_table_and_plan_validation(tmp_path, tiny_path):
    assert {"grpo", "sft-grpo", "seed", "seed-shuffled", "seed-shuffled-tasks", "seed-empty", "seed-constant-gate",
            "seed-static", "seed-frozen"} <= set(ARMS)
    assert ARMS["grpo"] == {"stage1_demos": 0, "opd_coef": 0.0} and ARMS["sft-grpo"] == {"opd_coef": 0.0}
    assert "| `seed-shuffled` | `--skill-source shuffled` |" in arms_markdown()
    docs = (Path(__file__).resolve().parents[1] / "docs" / "trainer.md").read_text(encoding="utf-8")
    table = docs.split("<!-- arms:begin (generated: seed_train.arms.arms_markdown) -->", 1)[1]
    assert table.split("<!-- arms:end -->", 1)[0].strip() == arms_markdown(), "docs/trainer.md arms table is stale"
    base = SeedConfig(env_id="test/Echo-v0", model=tiny_path, lora=False)
    with pytest.raises(ValueError, match="arm 'seed-static'.*static_skills"):
        Experiment.plan(base, ["seed", "seed-static"], [0], tmp_path / "x")
    with pytest.raises(ValueError, match="arm 'seed'.*opd_coef"):
        Experiment.plan(SeedConfig(**{**base.to_dict(), "opd_coef": 0.0}), ["grpo", "seed"], [0], tmp_path / "x")
    with pytest.raises(ValueError, match="arm 'sft-grpo'.*stage1_demos"):
        Experiment.plan(SeedConfig(**{**base.to_dict(), "stage1_demos": 0}), ["sft-grpo"], [0], tmp_path / "x")
    # Every arm's overrides are values SeedConfig accepts (the static arms also need a library file, the
    # category shuffle balanced Stage 2 draws, the wrong-rule arm an env with a wrong_rule).
    needs = {"seed-static", "seed-static-wrong", "seed-shuffled-categories", "seed-wrong-rule"}
    Experiment.plan(base, [a for a in ARMS if a not in needs], [0], tmp_path / "all")
    # The wrong-rule control needs the env's wrong_rule: refused at planning, not after Stage 1.
    with pytest.raises(ValueError, match="arm 'seed-wrong-rule'.*skill_source.*test/Echo-v0 declares none"):
        Experiment.plan(base, ["sft-grpo", "seed-wrong-rule"], [0], tmp_path / "x")
    for env_id in ("seed/EZPoints-v0", "seed/Sokoban-v0", "seed/CodeLock-v0"):
        Experiment.plan(SeedConfig(**{**base.to_dict(), "env_id": env_id}), ["seed-wrong-rule"], [0], tmp_path / "w")
    Experiment.plan(SeedConfig(**{**base.to_dict(), "stage2_balance_categories": True}), ["seed-shuffled-categories"],
                    [0], tmp_path / "cat")
    with pytest.raises(ValueError, match="arm 'seed-shuffled-categories'.*balance"):
        Experiment.plan(base, ["seed-shuffled-categories"], [0], tmp_path / "x")
    # An arm with field values after '@': the matched-step-size control, SFT+GRPO at another learning rate.
    from seed_train.arms import arm_overrides

    assert arm_overrides("sft-grpo@lr=1e-4") == {"opd_coef": 0.0, "lr": 1e-4}
    assert arm_overrides("seed@opd-gate=constant,opd_coef=0.5") == {"skill_source": "on_policy", "opd_gate": "constant",
                                                                   "opd_coef": 0.5}
    assert arm_overrides("seed@stage2_balance_categories=true")["stage2_balance_categories"] is True
    matched = Experiment.plan(base, ["sft-grpo", "sft-grpo@lr=1e-4"], [0], tmp_path / "m")
    assert matched.arm_config("sft-grpo@lr=1e-4", 0).lr == 1e-4 and matched.arm_config("sft-grpo", 0).lr == base.lr
    for bad, match in (("nope", "unknown arm"), ("sft-grpo@lr", "field=value"), ("sft-grpo@color=red", "field=value"),
                       ("sft-grpo@lr=fast", "'lr'.*not a float"), ("sft-grpo@seed=3", "set by the experiment")):
        with pytest.raises(ValueError, match=match):
            Experiment.plan(base, [bad], [0], tmp_path / "x")
    plan = Experiment.plan(base, ["grpo", "seed-frozen"], [3, 4], tmp_path / "x")
    assert [(u.kind, u.seed, u.arm) for u in plan.units()] == [
        ("before", 3, None), ("stage1", 3, None), ("arm", 3, "grpo"), ("arm", 3, "seed-frozen"),
        ("before", 4, None), ("stage1", 4, None), ("arm", 4, "grpo"), ("arm", 4, "seed-frozen")]
    cfg = plan.arm_config("seed-frozen", 4)
    assert (cfg.skill_source, cfg.seed, cfg.eval_after, cfg.save_final) == ("frozen", 4, False, True)
    assert plan.stage1_config(3).iterations == 0 and plan.arm_config("grpo", 3).stage1_demos == 0


# ---------------------------------------------------------------------------------- end to end
def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _tasks(path) -> dict[str, bool]:
    return {t.task_id: t.success for t in read_trajectories(path)}


def test_experiment_two_arms_two_seeds_shared_stage1_paired_and_resumable(tmp_path, tiny_path, monkeypatch, capsys):
    """Both arms start Stage 2 from their seed's one Stage 1, see the same training tasks and seeds, the
    report pairs their per-task outcomes, and a rerun trains nothing (or resumes an interrupted arm)."""
    from seed_train.cli import main_train

    calls = {"stage1": 0, "train": 0}
    real_stage1, real_train = trainer.run_stage1, trainer.train

    def counting_stage1(*a, **k):
        calls["stage1"] += 1
        return real_stage1(*a, **k)

    def counting_train(*a, **k):
        calls["train"] += 1
        return real_train(*a, **k)

    monkeypatch.setattr(trainer, "run_stage1", counting_stage1)
    monkeypatch.setattr(trainer, "train", counting_train)
    exp = tmp_path / "exp"
    argv = ["experiment", "--env-id", "test/Echo-v0", "--model", tiny_path, "--no-lora", "--template", "compact",
            "--history", "0", "--action-format", "plain", "--max-new-tokens", "4", "--skill-max-new-tokens", "8",
            "--analyzer-retries", "0", "--stage1-demos", "4", "--stage1-epochs", "1", "--iterations", "1",
            "--tasks-per-iteration", "2", "--group-size", "2", "--lr", "3e-3", "--kl-coef", "0", "--eval-limit", "4",
            "--arms", "sft-grpo", "seed", "--seeds", "0", "1", "--output-dir", str(exp)]
    # --baselines-only first, on seed 0: its base model's evaluation and Stage 1, no arm; the report lists the arms.
    assert main_train([*argv[:argv.index("--seeds") + 1], "0", "--output-dir", str(exp), "--baselines-only"]) == 0
    out = capsys.readouterr().out
    assert "[1/2] seed 0 before training" in out and "[2/2] seed 0 Stage 1: done" in out and " arm " not in out
    done = [line for line in out.splitlines() if ": done in " in line]
    # No Stage 1 has finished when the base model's evaluation ends: no ETA rather than the base model's time.
    assert done[0].endswith("ETA not known until a unit of each kind left has finished once") and done[1].endswith(
        "ETA 0s")
    assert calls == {"stage1": 1, "train": 1} and not (exp / "seed0" / "seed").exists()
    assert json.loads((exp / "report.json").read_text())["unfinished"] == ["seed 0 arm sft-grpo", "seed 0 arm seed"]
    from seed_train.experiment_report import report_markdown
    from seed_train.records import read_record, report_from_record

    baselines = report_markdown(report_from_record(read_record(exp / "record.jsonl")))  # the record: no arm yet
    assert "Arms: none yet (the base model and Stage 1 only); training seeds: 0." in baselines
    assert "| after Stage 1 | 1 |" in baselines
    calls.update(stage1=0, train=0)
    # Then the whole experiment in the same folder: seed 0's baselines are kept, everything else runs.
    assert main_train(argv) == 0
    out = capsys.readouterr().out
    assert "[1/8] seed 0 before training: finished earlier, skipped" in out and "[2/8] seed 0 Stage 1: finished" in out
    assert "[8/8] seed 1 arm seed: done" in out and "ETA" in out
    # Each evaluation names its policy, split and episode count as it starts (a long one then prints done / total).
    for label, policies in (("before training", 1), ("after Stage 1", 1), ("after Stage 2", 4)):  # seed 1; 2 seeds x 2 arms
        for split in ("unseen", "test"):
            assert out.count(f"evaluating {label}: test/Echo-v0 {split}, 4 episodes") == policies, (label, split)
    assert calls == {"stage1": 1, "train": 5}  # seed 1's Stage 1 (seed 0's was kept); per seed: 2 arms

    for seed in (0, 1):
        stage1 = exp / f"seed{seed}" / "stage1" / "run" / "checkpoints" / "stage1.safetensors"
        # θ_0 of both arms: the seed's Stage 1 weights, byte for byte (the trainer copies them into each run).
        for arm in ("sft-grpo", "seed"):
            run = exp / f"seed{seed}" / arm / "run"
            assert _sha(run / "checkpoints" / "stage1.safetensors") == _sha(stage1)
            assert json.loads((run / "results.json").read_text())["stage1_from"] == str(stage1)
        # Paired: the same training tasks, reset seeds and group ids in both arms.
        plays = [[(t.task_id, t.seed, t.group_id) for t in read_trajectories(exp / f"seed{seed}" / arm / "run" /
                                                                          "trajectories.jsonl")]
                 for arm in ("sft-grpo", "seed")]
        assert plays[0] == plays[1] and len(plays[0]) == 2 * 2
    assert _sha(exp / "seed0" / "stage1" / "run" / "checkpoints" / "stage1.safetensors") != _sha(
        exp / "seed1" / "stage1" / "run" / "checkpoints" / "stage1.safetensors")  # each seed its own Stage 1

    report = json.loads((exp / "report.json").read_text())
    assert set(report["splits"]) == {"unseen", "test"} and report["unfinished"] == []
    for split in ("unseen", "test"):
        section = report["splits"][split]
        assert list(section["policies"]) == ["before", "after_stage1", "sft-grpo", "seed"]
        # mean over seeds of each run's own evaluation file
        per_run = [json.loads((exp / f"seed{s}" / "seed" / f"eval_after_{split}.json").read_text())
                   ["categories"]["all"]["success"] for s in (0, 1)]
        assert section["policies"]["seed"]["success_mean"] == pytest.approx(sum(per_run) / 2)
        assert section["policies"]["seed"]["success_sd"] == pytest.approx(abs(per_run[0] - per_run[1]) / 2 ** 0.5)
        # the paired test, recounted from the evaluation trajectories
        (test,) = section["paired"]
        a_only = b_only = 0
        for s in (0, 1):
            a = _tasks(exp / f"seed{s}" / "sft-grpo" / f"eval_after_{split}.trajectories.jsonl")
            b = _tasks(exp / f"seed{s}" / "seed" / f"eval_after_{split}.trajectories.jsonl")
            assert set(a) == set(b) and len(a) == 4  # the same panel
            a_only += sum(a[t] and not b[t] for t in a)
            b_only += sum(b[t] and not a[t] for t in a)
        assert (test["a"], test["b"], test["pairs"], test["a_only"], test["b_only"]) == ("sft-grpo", "seed", 8, a_only,
                                                                                        b_only)
        assert test["p_value"] == pytest.approx(mcnemar_exact(a_only, b_only))
        assert [(t["a"], t["b"], t["pairs"]) for t in section["vs_start"]] == [("sft-grpo", "after_stage1", 8),
                                                                              ("seed", "after_stage1", 8)]
    md = (exp / "report.md").read_text()
    assert "exact McNemar" in md and "after Stage 1" in md and "Within-seed diagnostics" in md
    # The evidence: seed-level comparisons, one success rate per seed and policy, paired by seed.
    for split in ("unseen", "test"):
        section = report["splits"][split]
        by_pair = {(c["a"], c["b"]): c for c in section["seed_level"]}
        assert list(by_pair) == [("sft-grpo", "seed"), ("sft-grpo", "after_stage1"), ("seed", "after_stage1")]
        c = by_pair[("sft-grpo", "seed")]
        success = {arm: [json.loads((exp / f"seed{s}" / arm / f"eval_after_{split}.json").read_text())
                         ["categories"]["all"]["success"] for s in (0, 1)] for arm in ("sft-grpo", "seed")}
        assert c["seeds"] == [0, 1] and c["diffs"] == pytest.approx([a - b for a, b in zip(*success.values())])
        assert c["family"] == report["comparisons"] == 6 and c["p_floor"] in (0.5, 1.0)
        per_seed = {r["seed"]: r for r in section["paired"][0]["per_seed"]}
        assert sum(r["a_only"] for r in per_seed.values()) == section["paired"][0]["a_only"]
    assert "| sft-grpo | seed | 2 |" in md and "This report makes 6 seed-level comparisons" in md
    assert (exp / "curves_success.png").stat().st_size > 1000 and (exp / "curves_skill_valid_rate.png").is_file()

    # A rerun skips every finished unit: nothing is trained again.
    calls.update(stage1=0, train=0)
    assert main_train(argv) == 0
    assert calls == {"stage1": 0, "train": 0} and capsys.readouterr().out.count("finished earlier, skipped") == 8
    # One process per seed (the way to use two cores): each one's report covers every seed of the folder.
    assert main_train([*argv[:argv.index("--seeds") + 1], "1", "--output-dir", str(exp)]) == 0
    assert "training seeds: 0, 1" in (exp / "report.md").read_text()
    assert json.loads((exp / "report.json").read_text())["seeds"] == [0, 1]
    capsys.readouterr()
    # An arm interrupted after its checkpoint resumes from it (no Stage 1 again); the report is rebuilt.
    arm_dir = exp / "seed1" / "seed"
    (arm_dir / "results.json").unlink()
    (arm_dir / "run" / "results.json").unlink()
    assert main_train(argv) == 0
    assert calls == {"stage1": 0, "train": 1} and "resuming from iter0000" in capsys.readouterr().out
    assert json.loads((arm_dir / "run" / "config.json").read_text())["resume"].endswith("iter0000")
    # Its times count the kept iteration the interrupted process trained, as logged, besides its own.
    (kept,) = [m["iteration_s"] for m in read_metrics(arm_dir / "run")]
    resumed = json.loads((arm_dir / "results.json").read_text())
    assert resumed["resumed"] == {"from": "iter0000", "earlier_seconds": kept} and kept > 0
    assert resumed["seconds"] > resumed["train_seconds"] > kept
    entry = read_record(exp / "record.jsonl").units[("arm", 1, "seed")]
    assert entry["resumed"] == {"from": "iter0000", "earlier_seconds": round(kept, 1)}
    assert json.loads((exp / "report.json").read_text())["splits"]["test"]["paired"][0]["pairs"] == 8
    # An arm whose training finished in a process that did not live to evaluate it is evaluated, not trained
    # again, and its times count that training: the trainer's own wall time (its results.json `seconds`) and
    # the iteration kept from the checkpoint that trainer resumed from.
    trainer_seconds = json.loads((arm_dir / "run" / "results.json").read_text())["seconds"]
    assert trainer_seconds > 0
    (arm_dir / "results.json").unlink()
    calls.update(stage1=0, train=0)
    assert main_train(argv) == 0
    assert calls == {"stage1": 0, "train": 0} and "trained earlier; evaluating" in capsys.readouterr().out
    evaluated = json.loads((arm_dir / "results.json").read_text())
    assert evaluated["resumed"] == {"from": "final", "earlier_seconds": pytest.approx(trainer_seconds + kept)}
    assert evaluated["seconds"] > evaluated["train_seconds"] >= trainer_seconds + kept
    assert read_record(exp / "record.jsonl").units[("arm", 1, "seed")]["resumed"]["from"] == "final"
    # A Stage 1 trained before the trainer wrote `seconds` (nothing logged to sum): its training time is not
    # known, so its unit says none (no train_seconds, no resumed) rather than ~0.
    stage1_dir = exp / "seed1" / "stage1"
    trained = json.loads((stage1_dir / "run" / "results.json").read_text())
    (stage1_dir / "run" / "results.json").write_text(json.dumps({k: v for k, v in trained.items() if k != "seconds"}))
    (stage1_dir / "results.json").unlink()
    assert main_train(argv) == 0
    assert calls == {"stage1": 0, "train": 0} and "its training time is not in" in capsys.readouterr().out
    evaluated = json.loads((stage1_dir / "results.json").read_text())
    assert "train_seconds" not in evaluated and "resumed" not in evaluated and evaluated["seconds"] > 0
    entry = read_record(exp / "record.jsonl").units[("stage1", 1, None)]
    assert "train_seconds" not in entry and "resumed" not in entry
    # A different base config in the same folder is refused before any work.
    assert main_train([*argv, "--lr", "1e-3"]) == 2
    assert "other values of ['lr']" in capsys.readouterr().err
    # Micro-batches only change how the update fits in memory: a rerun may take them (nothing to run here).
    assert main_train([*argv, "--micro-batch-size", "2"]) == 0
    assert capsys.readouterr().out.count("finished earlier, skipped") == 8
    # A folder started by an older version, whose manifest lacks a field added since, reads it as its
    # default: the rerun goes on; a value other than the default is still refused.
    manifest = json.loads((exp / "experiment.json").read_text())
    del manifest["config"]["failed_group"]
    (exp / "experiment.json").write_text(json.dumps(manifest))
    assert main_train(argv) == 0
    assert capsys.readouterr().out.count("finished earlier, skipped") == 8
    manifest["config"].pop("failed_group", None)
    (exp / "experiment.json").write_text(json.dumps(manifest))
    assert main_train([*argv, "--failed-group", "keep"]) == 2
    assert "other values of ['failed_group']" in capsys.readouterr().err
    check_records(exp, argv, capsys)


def check_records(exp, argv, capsys):
    """The experiment's record: small, complete, and enough to rebuild its report without the folder."""
    from seed_train.cli import main_train
    from seed_train.records import read_record, unit_skills, versions, write_record

    own = exp / "record.jsonl"  # written with every report
    record = read_record(own)
    assert record.seeds == [0, 1] and record.arms == ["sft-grpo", "seed"] and len(record.units) == 8
    assert record.sessions[0]["commands"][0][:2] == ["seed-train", "experiment"]
    assert {"python", "torch", "transformers"} <= set(record.sessions[0]["versions"])
    assert own.stat().st_size < 100_000
    # On disk each episode key is written once, in the header's table the unit rows index; a version-1
    # file (every row spelled out) reads to the same record; a row indexing past the table is one line.
    first_key = record.units[("before", 0, None)]["evals"]["test"][0][0]
    assert own.read_text().count(json.dumps(first_key)) == 1
    v1 = exp.parent / "v1.jsonl"
    v1.write_text("\n".join([json.dumps({**record.header, "version": 1}),
                             *(json.dumps({"session": s}) for s in record.sessions),
                             *(json.dumps({"unit": u}) for u in record.units.values())]) + "\n")
    assert read_record(v1).units == record.units and read_record(v1).sessions == record.sessions
    bad = exp.parent / "bad.jsonl"
    lines = own.read_text().splitlines()
    unit_line = json.loads(lines[-1])
    unit_line["unit"]["evals"]["test"][0][0] = 10_000
    bad.write_text("\n".join([*lines[:-1], json.dumps(unit_line)]) + "\n")
    with pytest.raises(ValueError, match=f"bad.jsonl:{len(lines)}: a unit row names an episode"):
        read_record(bad)
    unit = record.units[("arm", 1, "seed")]
    rows = unit["evals"]["test"]
    assert [r[0] for r in rows] == [t.task_id for t in read_trajectories(exp / "seed1" / "seed" /
                                                                         "eval_after_test.trajectories.jsonl")]
    assert [bool(r[2]) for r in rows] == list(_tasks(exp / "seed1" / "seed" / "eval_after_test.trajectories.jsonl").values())
    assert unit["metrics"] and unit["metrics"][0]["iteration"] == 0 and "skill_valid_rate" in unit["metrics"][0]
    # Each trained unit keeps how it computed: the micro-batch size a rerun may have changed (0: one pass here).
    assert unit["operational"]["micro_batch_size"] == 0 and unit["operational"]["threads"] == \
        json.loads((exp / "seed1" / "seed" / "run" / "config.json").read_text())["threads"]
    assert "operational" in record.units[("stage1", 1, None)] and "operational" not in record.units[("before", 1, None)]
    trained = list(read_trajectories(exp / "seed1" / "seed" / "run" / "trajectories.jsonl"))
    assert [s[4] for s in unit_skills(unit)] == [t.meta["skill"] for t in trained]
    # The report rebuilt from the record alone equals the experiment's own, number for number.
    out = exp.parent / "from-record"
    assert main_train(["report", str(own), "--out", str(out)]) == 0
    rebuilt, original = (json.loads((d / "report.json").read_text()) for d in (out, exp))
    assert rebuilt["splits"] == original["splits"] and rebuilt["comparisons"] == original["comparisons"]
    assert (out / "report.md").read_text().split("## unseen")[1] == (exp / "report.md").read_text().split("## unseen")[1]
    assert (out / "curves_success.png").is_file()
    # A committed record made when only seed 0 had run; a later day's folder adds seed 1 and reproduces seed 0.
    committed = exp.parent / "records" / "exp.jsonl"
    committed.parent.mkdir()
    lines = own.read_text().splitlines()
    committed.write_text("\n".join(ln for ln in lines if '"seed":1,' not in ln) + "\n")
    assert len(read_record(committed).units) == 4
    capsys.readouterr()
    assert main_train(["record", str(exp), str(committed)]) == 0
    assert "4 unit(s) added, 4 already recorded" in capsys.readouterr().out
    assert read_record(committed).results() == record.results() and len(read_record(committed).sessions) == 2
    # The session names each command with the versions it ran with (here this process's), beside those of
    # the code that recorded it: a record made later by another checkout still says what produced its units.
    session = read_record(committed).sessions[1]
    assert [r["command"] for r in session["runs"]] == session["commands"] and len(session["commands"]) >= 2
    assert all(r["versions"] == versions() and r["versions"]["python"] == platform.python_version()
               for r in session["runs"])
    # A recorded unit with other outcomes, or another base config, is refused with one line.
    tampered = read_record(committed)
    tampered.units[("stage1", 0, None)]["evals"]["test"][0][2] ^= 1  # one episode's success flipped
    write_record(tampered, committed)
    assert main_train(["record", str(exp), str(committed)]) == 2
    assert "seed 0 Stage 1" in capsys.readouterr().err
    committed.write_text(own.read_text().replace('"lr":0.003', '"lr":0.001', 1))
    assert main_train(["record", str(exp), str(committed)]) == 2 and "'lr'" in capsys.readouterr().err
    # A record written before a config field existed holds the field's default: still the same experiment.
    older = read_record(own)
    del older.header["config"]["max_prompt_tokens"]
    write_record(older, committed)
    assert main_train(["record", str(exp), str(committed)]) == 0
    assert main_train(["report", str(exp / "missing.jsonl")]) == 2 and "file not found" in capsys.readouterr().err
    check_recorded_times(exp, own, argv, capsys)


def check_recorded_times(exp, own, argv, capsys):
    """A record keeps when each unit's training ended, and its unit times give a later run's ETA (--times-from);
    a record of another env is refused at start."""
    from seed_train.cli import main_train
    from seed_train.records import experiment_from_folder, read_record, recorded_times

    record = read_record(own)
    results = {(u.kind, u.seed, u.arm): json.loads(u.results_path.read_text())
               for u in experiment_from_folder(exp).units()}
    assert "train_seconds" in results[("stage1", 0, None)] and "train_seconds" not in results[("before", 0, None)]
    for key, result in results.items():
        want = round(result["train_seconds"], 1) if "train_seconds" in result else None
        assert record.units[key].get("train_seconds") == want, key
    times = recorded_times(own, "test/Echo-v0")

    def pairs(*keys):
        units = [record.units[k] for k in keys]
        return sorted((u["seconds"], u.get("train_seconds", u["seconds"])) for u in units)

    assert sorted(times["seed"]) == pairs(("arm", 0, "seed"), ("arm", 1, "seed"))
    assert sorted(times["arm"]) == pairs(*[("arm", s, a) for s in (0, 1) for a in ("sft-grpo", "seed")])
    assert sorted(times["stage1"]) == pairs(("stage1", 0, None), ("stage1", 1, None))
    assert sorted(times["before"]) == pairs(("before", 0, None), ("before", 1, None))
    assert all(t <= s for s, t in times["stage1"])
    with pytest.raises(ValueError, match="holds units of test/Echo-v0, not seed/Sokoban-v0"):
        recorded_times(own, "seed/Sokoban-v0")
    # The flag: another env's record, or no record, is refused before any work (no folder).
    other = exp.parent / "other-env.jsonl"
    other.write_text(own.read_text().replace('"env_id":"test/Echo-v0"', '"env_id":"seed/Sokoban-v0"', 1))
    fresh = exp.parent / "fresh"
    start = [*argv[:argv.index("--output-dir")], "--output-dir", str(fresh)]
    capsys.readouterr()
    assert main_train([*start, "--times-from", str(other)]) == 2
    assert "--times-from: record" in capsys.readouterr().err and not fresh.exists()
    assert main_train([*start, "--times-from", str(exp / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "--times-from: record" in err and "file not found" in err and not fresh.exists()


# ---------------------------------------------------------------------------------- trainer and seed-eval
def test_train_evaluates_after_stage1_and_the_cli_prints_the_stages(tmp_path, tiny_path):
    from seed_train.cli import stages_summary

    cfg = SeedConfig(env_id="test/Echo-v0", model=tiny_path, lora=True, template="compact", history=0,
                     action_format="plain", max_new_tokens=4, skill_max_new_tokens=8, analyzer_retries=0,
                     stage1_demos=4, stage1_epochs=1, iterations=1, tasks_per_iteration=2, group_size=2, kl_coef=0.0,
                     eval_limit=4, output_dir=str(tmp_path / "run"), checkpoint_every=0, save_final=False)
    results = trainer.train(cfg, say=lambda _: None)
    assert {"before", "after_stage1", "after", "stage1"} <= set(results)
    assert json.loads((tmp_path / "run" / "eval_after_stage1.json").read_text()) == results["after_stage1"]
    line = stages_summary(cfg, results)
    assert "before" in line and line.index("after Stage 1") < line.index("after Stage 2")
    # Starting Stage 2 from that run's Stage 1 weights (LoRA adapters): no Stage 1, the same policy.
    again = SeedConfig(**{**cfg.to_dict(), "output_dir": str(tmp_path / "again"), "eval_before": False,
                          "stage1_from": str(tmp_path / "run" / "checkpoints" / "stage1.safetensors")})
    results2 = trainer.train(again, say=lambda _: None)
    assert "stage1" not in results2 and results2["after_stage1"]["categories"] == results["after_stage1"]["categories"]
    assert _sha(tmp_path / "again" / "checkpoints" / "stage1.safetensors") == _sha(
        tmp_path / "run" / "checkpoints" / "stage1.safetensors")
    with pytest.raises(ValueError, match="stage1_from"):
        SeedConfig(stage1_from=str(tmp_path / "missing.safetensors"))


def test_seed_eval_with_several_seeds_samples(tmp_path, tiny_path, capsys):
    from seed_train.cli import main_eval

    code = main_eval(["--model", tiny_path, "--env", "test/Echo-v0", "--split", "test", "--seeds", "0", "1",
                      "--limit", "4", "--action-format", "plain", "--history", "0", "--out", str(tmp_path / "ev")])
    assert code == 0 and "sampling" in capsys.readouterr().err
    metas = [json.loads((tmp_path / "ev" / f"eval_seed{s}.json").read_text())["meta"] for s in (0, 1)]
    assert [m["greedy"] for m in metas] == [False, False] and [m["seed"] for m in metas] == [0, 1]


def test_seed_eval_config_reproduces_the_runs_own_evaluation(tmp_path, tiny_path):
    """``seed-eval --config RUN/config.json`` evaluates RUN/final as the run did: same env and prompt settings,
    sampled decoding (eval_temperature x eval_samples), eval limit and seed, so every episode's outcome equals
    the run's own ``eval_after`` (a full fine-tuning run: final/ holds exactly the weights it evaluated)."""
    from seed_train.cli import main_eval
    from seed_train.evaluate import episode_outcomes

    run = tmp_path / "run"
    cfg = SeedConfig(env_id="test/Echo-v0", model=tiny_path, lora=False, template="compact", history=0,
                     action_format="plain", max_new_tokens=4, analyzer_retries=0, stage1_demos=0, opd_coef=0.0,
                     iterations=1, tasks_per_iteration=2, group_size=2, kl_coef=0.0, eval_before=False,
                     eval_limit=4, eval_temperature=1.0, eval_samples=2, eval_split="test", seed=3,
                     panels={"few": {"split": "unseen", "eval_limit": 3}}, output_dir=str(run), checkpoint_every=0)
    trainer.train(cfg, say=lambda _: None)
    assert main_eval(["--config", str(run / "config.json"), "--out", str(tmp_path / "ev")]) == 0
    mine = json.loads((tmp_path / "ev" / "eval_seed3.json").read_text())
    theirs = json.loads((run / "eval_after.json").read_text())
    assert mine["meta"]["greedy"] is False and mine["meta"]["seed"] == 3
    assert (mine["meta"]["tasks"], mine["meta"]["samples_per_task"]) == (4, 2)
    assert mine["categories"] == theirs["categories"]
    assert episode_outcomes(list(read_trajectories(tmp_path / "ev" / "seed3.trajectories.jsonl"))) == \
        episode_outcomes(list(read_trajectories(run / "eval_after.trajectories.jsonl")))
    # Flags override the run's settings; a missing config is named.
    assert main_eval(["--config", str(run / "config.json"), "--split", "unseen", "--limit", "2",
                      "--out", str(tmp_path / "ev2")]) == 0
    meta = json.loads((tmp_path / "ev2" / "eval_seed3.json").read_text())["meta"]
    assert meta["split"] == "unseen" and (meta["tasks"], meta["samples_per_task"]) == (2, 2)
    # A named panel plays its own number of tasks; --limit still overrides it.
    for extra, tasks in (([], 3), (["--limit", "2"], 2)):
        assert main_eval(["--config", str(run / "config.json"), "--split", "few", *extra,
                          "--out", str(tmp_path / f"few{tasks}")]) == 0
        meta = json.loads((tmp_path / f"few{tasks}" / "eval_seed3.json").read_text())["meta"]
        assert meta["split"] == "unseen" and (meta["tasks"], meta["samples_per_task"]) == (tasks, 2)
    assert main_eval(["--config", str(tmp_path / "nope.json"), "--out", str(tmp_path / "ev3")]) == 2


def test_report_lists_success_per_category_when_the_panel_has_several():
    from seed_train.experiment_report import category_table

    def row(**cats):
        return {"per_seed": [{"seed": 0}, {"seed": 2}],
                "categories": {c: {"success_mean": sum(v) / len(v), "success_sd": 0.5, "success_per_run": v}
                               for c, v in {**cats, "all": [0.5]}.items()}}

    lines = category_table({"after_stage1": row(sum=[1.0, 0.0], product=[0.25, 0.75]), "seed": row(sum=[0.5, 0.5])})
    assert lines[3:] == ["| policy | product | sum |", "|---|---|---|",
                         "| after Stage 1 | 0.500 ± 0.500 (s0 0.25 s2 0.75) | 0.500 ± 0.500 (s0 1.00 s2 0.00) |",
                         "| `seed` |  | 0.500 ± 0.500 (s0 0.50 s2 0.50) |"]
    assert category_table({"seed": row(sum=[1.0])}) == []  # one category: the main table says it all
    # One training seed has no spread: its mean says so instead of printing ± 0.000.
    one = category_table({"seed": {"per_seed": [{"seed": 1}], "categories": {
        "sum": {"success_mean": 1.0, "success_sd": 0.0, "success_per_run": [1.0]},
        "product": {"success_mean": 0.25, "success_sd": 0.0, "success_per_run": [0.25]}}}})
    assert one[-1] == "| `seed` | 0.250 (1 seed) (s1 0.25) | 1.000 (1 seed) (s1 1.00) |"


def test_the_report_of_one_seed_prints_no_spread():
    from seed_train.experiment_report import report_markdown

    def policy(seed, k):
        return {"per_seed": [{"seed": seed, "success": k / 48, "ci95": [0.1, 0.5], "episodes": 48}],
                "success_mean": k / 48, "success_sd": 0.0, "categories": {}}

    report = {"env_id": "seed/Sokoban-v0", "arms": ["seed"], "seeds": [1], "unfinished": [], "decoding": {},
              "splits": {"test": {"policies": {"after_stage1": policy(1, 18), "seed": policy(1, 22)},
                                  "paired": [], "vs_start": []}}}
    text = report_markdown(report)
    assert "| after Stage 1 | 1 | 0.375 (1 seed) | s1 0.375 [0.10, 0.50] (n=48) |" in text
    assert "| `seed` after Stage 2 | 1 | 0.458 (1 seed) |" in text and "± 0.000" not in text


def test_a_damaged_experiment_file_is_one_line_naming_the_file(tmp_path, capsys):
    """Issue 33 item 9: a damaged experiment.json gave a bare JSONDecodeError message naming no file."""
    from seed_train.cli import main_train

    folder = tmp_path / "exp"
    folder.mkdir()
    (folder / "experiment.json").write_text('{"arms": ["grpo"], "seeds": [0')  # cut short
    assert main_train(["record", str(folder), str(tmp_path / "record.jsonl")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(folder / "experiment.json") in err[0] and "damaged" in err[0]


def test_a_panel_added_to_a_finished_folder_is_evaluated_from_each_units_saved_policy(tmp_path, tiny_path,
                                                                                      monkeypatch, capsys):
    """``--panels`` + ``--splits``: a finished experiment gains a named panel (split + gym.make arguments, as
    ALFWorld's real unseen games beside the generated ones): a rerun evaluates each finished unit's saved
    policy on it and trains nothing; the units' other evaluations and times stay; the record takes the panel
    into its recorded units; a panel redefined under the same name is refused."""
    from seed_train.cli import main_train
    from seed_train.evaluate import episode_outcomes
    from seed_train.progress import clock
    from seed_train.records import read_record

    calls = {"train": 0}
    real_train = trainer.train
    monkeypatch.setattr(trainer, "train", lambda *a, **k: calls.update(train=calls["train"] + 1) or real_train(*a, **k))
    exp, committed = tmp_path / "exp", tmp_path / "records" / "exp.jsonl"
    argv = ["experiment", "--env-id", "test/Echo-v0", "--model", tiny_path, "--no-lora", "--template", "compact",
            "--history", "0", "--action-format", "plain", "--max-new-tokens", "4", "--skill-max-new-tokens", "8",
            "--analyzer-retries", "0", "--stage1-demos", "4", "--stage1-epochs", "1", "--iterations", "1",
            "--tasks-per-iteration", "2", "--group-size", "2", "--kl-coef", "0", "--eval-limit", "4",
            "--arms", "sft-grpo", "--seeds", "0", "--output-dir", str(exp)]
    assert main_train(argv) == 0 and calls["train"] == 2  # Stage 1 and the arm
    assert main_train(["record", str(exp), str(committed)]) == 0
    units = {"before": exp / "seed0" / "before", "stage1": exp / "seed0" / "stage1", "arm": exp / "seed0" / "sft-grpo"}
    first = {k: json.loads((u / "results.json").read_text()) for k, u in units.items()}
    capsys.readouterr()
    # The panel: Echo's unseen split built with 8 tasks (ids 2000-2007) instead of 32, 6 of them played (its own
    # eval_limit, not the experiment's 4).
    panel = ["--panels", json.dumps({"small-unseen": {"split": "unseen", "n_tasks": 8, "eval_limit": 6}}),
             "--splits", "unseen", "test", "small-unseen"]
    assert main_train([*argv, *panel]) == 0
    out = capsys.readouterr().out
    assert calls["train"] == 2  # nothing trained again
    for label in ("seed 0 before training", "seed 0 Stage 1", "seed 0 arm sft-grpo"):
        assert f"{label}: finished earlier; evaluating on the added panel(s) small-unseen" in out
    # The ETA schedules the panel's evaluations left, each at the time the added ones took (after the base
    # model's: its time for each of Stage 1's and the arm's), then nothing is left.
    done = [line for line in out.splitlines() if ": done in " in line]
    assert len(done) == 3 and done[-1].endswith(", ETA 0s")
    added = json.loads((units["before"] / "results.json").read_text())["added_eval_seconds"]["small-unseen"]
    eta = done[0].rsplit("ETA ", 1)[1]
    assert eta == clock(2 * added), (eta, added)
    assert out.count("evaluating after Stage 2: test/Echo-v0 unseen, 6 episodes") == 1  # the panel's split
    for kind, folder in units.items():
        now = json.loads((folder / "results.json").read_text())
        assert sorted(now["evals"]) == ["small-unseen", "test", "unseen"]
        assert {s: now["evals"][s] for s in ("test", "unseen")} == first[kind]["evals"]  # kept as they were
        assert now["seconds"] == first[kind]["seconds"] and list(now["added_eval_seconds"]) == ["small-unseen"]
        assert sorted(now["evals"]["small-unseen"]["tasks"]) != sorted(first[kind]["evals"]["unseen"]["tasks"])
        assert all(2000 <= int(t.rsplit("/", 1)[1]) < 2008 for t in now["evals"]["small-unseen"]["tasks"])
        assert len(now["evals"]["small-unseen"]["tasks"]) == 6 and len(now["evals"]["test"]["tasks"]) == 4
    # Independently: seed-eval on the Stage 1 unit's own run config and saved policy, on Echo's unseen split
    # with n_tasks 8 and 6 tasks, plays every episode as the added evaluation did.
    from seed_train.cli import main_eval

    assert main_eval(["--config", str(units["stage1"] / "run" / "config.json"), "--split", "unseen",
                      "--env-kwargs", '{"n_tasks": 8}', "--limit", "6", "--out", str(tmp_path / "ev")]) == 0
    mine = episode_outcomes(list(read_trajectories(tmp_path / "ev" / "seed0.trajectories.jsonl")))
    added = json.loads((units["stage1"] / "results.json").read_text())["evals"]["small-unseen"]["tasks"]
    assert mine == added
    assert "## small-unseen" in (exp / "report.md").read_text()
    # The record: no unit added, each recorded unit given the panel's episodes; the header names the panel.
    capsys.readouterr()
    assert main_train(["record", str(exp), str(committed)]) == 0
    assert "0 unit(s) added, 0 already recorded (same outcomes), 3 given an added panel's evaluation" in \
        capsys.readouterr().out
    record = read_record(committed)
    assert "small-unseen" in record.header["splits"] and record.header["config"]["panels"] == {
        "small-unseen": {"split": "unseen", "n_tasks": 8, "eval_limit": 6}}
    assert all(len(u["evals"]["small-unseen"]) == 6 for u in record.units.values())
    # A rerun has nothing left to do; the same name for another panel is refused, naming the field.
    assert main_train([*argv, *panel]) == 0 and calls["train"] == 2
    assert capsys.readouterr().out.count("finished earlier, skipped") == 3
    other = ["--panels", json.dumps({"small-unseen": {"split": "unseen", "n_tasks": 6}}), *panel[2:]]
    assert main_train([*argv, *other]) == 2 and "'panels'" in capsys.readouterr().err
    fewer = ["--panels", json.dumps({"small-unseen": {"split": "unseen", "n_tasks": 8, "eval_limit": 5}}), *panel[2:]]
    assert main_train([*argv, *fewer]) == 2 and "'panels'" in capsys.readouterr().err  # its own limit is its too
    # So is a new panel under the name of a split the folder has evaluated (its units' "test" would mix two).
    renamed = ["--panels", json.dumps({"small-unseen": {"split": "unseen", "n_tasks": 8, "eval_limit": 6},
                                       "test": {"split": "test", "n_tasks": 8}}), *panel[2:]]
    assert main_train([*argv, *renamed]) == 2 and "'panels'" in capsys.readouterr().err
    from seed_train.experiment import panels_only_added

    assert panels_only_added({}, {"p": {"split": "unseen"}}, ["unseen", "test"])
    assert not panels_only_added({}, {"unseen": {"split": "unseen"}}, ["unseen", "test"])
    # A panel without a split, or with an argument the env refuses, fails at start naming the field.
    assert main_train([*argv[:-2], "--output-dir", str(tmp_path / "x"), "--panels", '{"p": {"n_tasks": 8}}']) == 2
    assert "config field 'panels'" in capsys.readouterr().err
    bad = ["--panels", json.dumps({"p": {"split": "unseen", "colour": 1}}), "--splits", "p"]
    assert main_train([*argv[:-2], "--output-dir", str(tmp_path / "y"), *bad]) == 2
    assert "config field 'panels' (p)" in capsys.readouterr().err
    bad = ["--panels", json.dumps({"p": {"split": "unseen", "eval_limit": -1}}), "--splits", "p"]
    assert main_train([*argv[:-2], "--output-dir", str(tmp_path / "z"), *bad]) == 2
    assert "config field 'panels'" in capsys.readouterr().err and not (tmp_path / "z").exists()
