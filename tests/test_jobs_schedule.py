"""benchmarks/jobs_schedule.py: a recorded seed's units scheduled on --jobs workers."""
from __future__ import annotations

import pytest
from script_loader import load_script

from seed_train.records import read_record, write_record
from seed_train.results_tables import RESULTS


def test_sokoban_seed_0_on_two_workers_as_worked_by_hand(capsys, tmp_path):
    # The record's seed 0 (s): Stage 1 1,560.2, base model 551.8, sft-grpo 1,893.6, seed 2,492.4,
    # seed-wrong-rule 2,558.0 (no train_seconds: the arms wait for the whole Stage 1). w1 Stage 1 0-1,560.2;
    # w2 base 0-551.8, then waits; sft-grpo 1,560.2-3,453.8 and seed 1,560.2-4,052.6 side by side;
    # seed-wrong-rule 3,453.8-6,011.8 s.
    bench = load_script("benchmarks/jobs_schedule.py")
    minutes = bench.seed_minutes(RESULTS / "records" / "sokoban-cpu.jsonl", ["sft-grpo", "seed", "seed-wrong-rule"], 2)
    assert minutes[0] == pytest.approx(6011.8 / 60, abs=0.01)
    one = bench.seed_minutes(RESULTS / "records" / "sokoban-cpu.jsonl", ["sft-grpo", "seed", "seed-wrong-rule"], 1)
    assert one[0] == pytest.approx((1560.2 + 551.8 + 1893.6 + 2492.4 + 2558.0) / 60, abs=0.01)
    # A record of baselines only (a committed record's, its arms dropped): no arm to time, a dash per seed.
    record = read_record(RESULTS / "records" / "webshop-cpu.jsonl")
    record.units = {key: unit for key, unit in record.units.items() if key[0] != "arm"}
    write_record(record, tmp_path / "baselines.jsonl")
    bench.main([str(tmp_path / "baselines.jsonl")])
    assert "| 0 | - |" in capsys.readouterr().out
