"""benchmarks/bench_env_iterations.py's parsing and table on a hand-written metrics.jsonl (no model runs), its
envs' recipes, and benchmarks/bench_rollout.py's recipe settings held equal to the recipes."""
from __future__ import annotations

import json
import math
import sys

import pytest
from script_loader import load_script

from seed_train.config import SeedConfig, _read_yaml
from seed_train.recipes import recipe_names

bench = load_script("benchmarks/bench_env_iterations.py")


def _record(**over):
    """An iteration record as seed_iteration + the training loop write it (keys the table reads, and others)."""
    record = {"iteration": 0, "success": 0.25, "length": 4.0, "skills_valid": 3, "skills_written": 8,
              "rollout_s": 30.0, "analyze_s": 20.0, "score_s": 5.0, "update_s": 40.0, "generate_s": 25.0,
              "env_s": 1.5, "tokens_per_s": 4.0, "episodes_trained": 8.0, "prefill_tokens": 1000.0,
              "prompt_tokens": 6400.0, "torch_threads": 1, "iteration_s": 100.0, "peak_rss_mb": 2345.6}
    record.update(over)
    return record


def _write(path, *records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_read_iteration_takes_the_stage2_record(tmp_path):
    path = _write(tmp_path / "metrics.jsonl", {"stage1_loss": 1.0}, _record(iteration_s=12.0))
    assert bench.read_iteration(path)["iteration_s"] == 12.0
    with pytest.raises(ValueError):
        bench.read_iteration(_write(tmp_path / "empty.jsonl", {"stage1_loss": 1.0}))


def test_row_values_from_a_hand_written_record(tmp_path):
    values = bench.row_values(bench.read_iteration(_write(tmp_path / "metrics.jsonl", _record())))
    assert values["episodes"] == 8 and values["steps"] == 4.0
    assert values["gen_tokens"] == 100  # 4 tok/s x 25 s
    assert values["prompt_per_step"] == 200  # 6400 prompt tokens over 8 episodes x 4 steps
    assert values["s_per_token"] == pytest.approx(1.0)  # 100 s / 100 tokens
    assert (values["rollout_s"], values["analyze_s"], values["score_s"], values["update_s"]) == (30, 20, 5, 40)
    assert (values["skills_valid"], values["skills_written"]) == (3, 8)
    assert values["peak_rss_mb"] == 2345.6
    # No analyzer (GRPO arm): no skill counts; an iteration that trained on nothing has no steps.
    bare = bench.row_values({k: v for k, v in _record(episodes_trained=0.0, length=float("nan")).items()
                             if not k.startswith("skills")})
    assert math.isnan(bare["skills_written"]) and math.isnan(bare["prompt_per_step"]) and bare["steps"] == 0


def test_medians_and_table_against_ezpoints():
    ez = [bench.row_values(_record(iteration_s=s)) for s in (100.0, 80.0, 300.0)]  # median 100: 1 s/token
    shop = bench.row_values(_record(iteration_s=180.0, tokens_per_s=2.0, generate_s=60.0))  # 120 tok: 1.5 s/tok
    results = {"ezpoints": bench.median_values(ez), "webshop": bench.median_values([shop]),
               "alfworld": "exit 1: ValueError: no games"}
    assert results["ezpoints"]["iteration_s"] == 100.0 and results["ezpoints"]["s_per_token"] == 1.0
    lines = bench.table_lines(results)
    assert lines[0] == bench.HEADER
    ez_row, shop_row, alf_row = lines[1:]
    assert ez_row.split()[:7] == ["ezpoints", "8", "4.0", "100", "200", "3/8", "100.0"]
    assert "30.0   30%" in ez_row and "40.0   40%" in ez_row and ez_row.endswith("1.00x")
    assert ez_row.split()[-3:-1] == ["2346", "1.000"]  # peak MB, s/gen tok
    assert shop_row.split()[3] == "120" and "1.500" in shop_row and shop_row.endswith("1.50x")
    assert "30.0   17%" in shop_row  # rollout 30 s of 180 s
    assert alf_row == "alfworld  not run: exit 1: ValueError: no games"
    assert bench.goal_line(results).endswith("webshop 1.50x (met)")
    assert "ezpoints did not run" in bench.goal_line({"webshop": results["webshop"]})
    assert bench.table_lines({"webshop": results["webshop"]})[1].endswith("-")  # no reference: no ratio


def test_command_order_and_failure_reason(tmp_path):
    cmd = bench.train_command("webshop", tmp_path, stage1_demos=0, threads=1, seed=3, group_size=2)
    assert cmd[:4] == [sys.executable, "-m", "seed_train", "train"]
    flags = cmd[4:]
    assert flags[flags.index("--config") + 1] == "webshop-cpu"
    assert flags[flags.index("--iterations") + 1] == "1" and flags[flags.index("--seed") + 1] == "3"
    assert flags[flags.index("--group-size") + 1] == "2" and "--tasks-per-iteration" not in flags
    assert {"--no-eval-before", "--no-eval-after"} <= set(flags)
    # Every flag the benchmark passes is one seed-train train accepts.
    parser = __import__("argparse").ArgumentParser()
    SeedConfig.add_arguments(parser)
    parser.parse_args(flags)
    assert bench.round_order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert bench.round_order(["a", "b", "c"], 4) == ["b", "c", "a"]
    log = "loading\nTraceback ...\nValueError: boom\nseed-train: env_id: not registered\n"
    assert bench.failure_reason(log, 2) == "exit 2: seed-train: env_id: not registered"
    assert bench.failure_reason("", 1) == "exit 1: exit status 1"
    # a run the kernel killed (the OOM killer sends SIGKILL) names the signal, not its last log line
    assert bench.failure_reason("Loading weights: 100%", -9) == "killed by SIGKILL (out of memory? see dmesg)"
    assert bench.failure_reason("", -15) == "killed by SIGTERM"


def test_every_default_env_has_a_cpu_recipe():
    assert set(bench.recipe_of(env) for env in bench.DEFAULT_ENVS) <= set(recipe_names())
    assert bench.REFERENCE in bench.DEFAULT_ENVS and set(bench.GOAL_ENVS) <= set(bench.DEFAULT_ENVS)


def test_bench_rollout_recipe_settings_equal_the_recipes():
    rollout = load_script("benchmarks/bench_rollout.py")
    for name, recipe in rollout.RECIPES.items():
        cfg = SeedConfig.from_dict(_read_yaml(recipe))
        setting = rollout.resolve_setting(name)
        assert setting == {"env_id": cfg.env_id, "template": cfg.template, "history": cfg.env_default("history"),
                           "action_format": cfg.env_default("action_format"),
                           "max_steps": cfg.env_default("max_steps"), "max_new_tokens": cfg.max_new_tokens}, name
    # The settings from before keep their values; flags override a setting's own only when given.
    assert rollout.resolve_setting("long") == {"env_id": "seed/EZPoints-v0", "template": None, "history": 2,
                                               "action_format": "plain", "max_steps": 5, "max_new_tokens": 8}
    assert rollout.resolve_setting("webshop", max_steps=3)["max_steps"] == 3
    assert rollout.resolve_setting("webshop", max_new_tokens=None)["max_new_tokens"] == SeedConfig.from_dict(_read_yaml("webshop-cpu")).max_new_tokens


def test_record_lines_give_each_recorded_iteration_its_cost_per_generated_token():
    from pathlib import Path

    from seed_train.records import read_record

    path = Path(__file__).resolve().parents[1] / "docs" / "results" / "records" / "ezpoints-mechanism.jsonl"
    expected = {f"s{seed}-it{row['iteration']}": row["iteration_s"] / round(row["tokens_per_s"] * row["generate_s"])
                for (kind, seed, arm), unit in read_record(path).units.items() if kind == "arm" and arm == "seed"
                for row in unit["metrics"] if "iteration_s" in row}
    lines = bench.record_lines(path, "seed")
    assert lines[0] == bench.HEADER and len(lines) == 1 + len(expected) >= 1 + 8  # 2 seeds x 4 iterations at least
    for line in lines[1:]:
        name, *_, per_token, ratio = line.split()
        assert float(per_token) == pytest.approx(expected[name], abs=5e-4) and ratio == "-"
