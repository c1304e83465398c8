"""benchmarks/update_size.py: each arm's Stage 2 step metrics per training seed, from the runs' metrics.jsonl."""
from __future__ import annotations

import json

import pytest

from script_loader import load_script


def _metrics(root, seed: int, arm: str, rows: list[dict]) -> None:
    run = root / f"seed{seed}" / arm / "run"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_mean_over_updating_iterations_per_seed_then_over_seeds(tmp_path, capsys):
    bench = load_script("benchmarks/update_size.py")
    (tmp_path / "experiment.json").write_text(json.dumps({"arms": ["sft-grpo", "seed"], "seeds": [0, 1]}))
    # an iteration whose groups were all uniform logs no step metrics: it must not count as a zero
    _metrics(tmp_path, 0, "sft-grpo", [{"iteration": 0, "success": 0.5}, {"iteration": 1, "approx_kl": 0.03},
                                       {"iteration": 2, "approx_kl": 0.01}])
    _metrics(tmp_path, 1, "sft-grpo", [{"iteration": 0, "approx_kl": 0.04}])
    _metrics(tmp_path, 0, "seed", [{"iteration": 0, "approx_kl": 0.002}, {"iteration": 1, "approx_kl": 0.004}])
    bench.main([str(tmp_path), "--metrics", "approx_kl"])
    out = capsys.readouterr().out
    # sft-grpo: seed 0 (0.03 + 0.01) / 2 = 0.02, seed 1 0.04 -> mean 0.03, sd of (0.02, 0.04) = 0.0141
    assert "| sft-grpo | 0.0200 | 0.0400 | 0.0300 ± 0.0141 |" in out
    # seed: seed 1 has no run folder -> "-", and one seed gives its value without an sd
    assert "| seed | 0.0030 | - | 0.0030 |" in out


def test_iteration_zero_and_ratio_to_the_control(tmp_path, capsys):
    bench = load_script("benchmarks/update_size.py")
    (tmp_path / "experiment.json").write_text(json.dumps({"arms": ["sft-grpo", "seed"], "seeds": [0, 1]}))
    _metrics(tmp_path, 0, "sft-grpo", [{"iteration": 0, "approx_kl": 0.04}, {"iteration": 1, "approx_kl": 0.02}])
    _metrics(tmp_path, 1, "sft-grpo", [{"iteration": 0, "approx_kl": 0.05}])
    _metrics(tmp_path, 0, "seed", [{"iteration": 0, "approx_kl": 0.01}, {"iteration": 1, "approx_kl": 0.03}])
    _metrics(tmp_path, 1, "seed", [{"iteration": 0, "approx_kl": 0.02}])
    bench.main([str(tmp_path), "--metrics", "approx_kl", "--iterations", "0", "--relative-to", "sft-grpo"])
    out = capsys.readouterr().out
    assert "### approx_kl (iteration 0)" in out
    # iteration 0 only: seed 0.01 / 0.04 = 0.25 and 0.02 / 0.05 = 0.4 -> ratio mean 0.325, sd 0.1061
    assert "| seed | 0.0100 | 0.0200 | 0.0150 ± 0.0071 | 0.3250 ± 0.1061 |" in out
    assert "| sft-grpo | 0.0400 | 0.0500 | 0.0450 ± 0.0071 | 1.0000 ± 0.0000 |" in out


def test_iteration_mean_leaves_out_iterations_that_logged_no_step():
    from seed_train.logs import iteration_mean

    rows = [{"iteration": 0, "approx_kl": 0.2}, {"iteration": 1}, {"iteration": 2, "approx_kl": 0.4},
            {"iteration": 3, "approx_kl": None}]
    assert iteration_mean(rows, "approx_kl") == pytest.approx(0.3)  # not 0.15: iterations 1 and 3 made no update
    assert iteration_mean(rows, "approx_kl", iterations=(0,)) == pytest.approx(0.2)
    assert iteration_mean(rows, "approx_kl", iterations=(1, 3)) is None
    assert iteration_mean([], "approx_kl") is None
