"""benchmarks/failure_demo_rules.py: the failure rules Stage 1's failure demos teach, without a model, the
same episodes and rules as the trainer's own Stage 1 log line."""
from __future__ import annotations

import re

import pytest
from script_loader import load_script

from seed_envs.sokoban.hindsight import FAILURE_RULES
from seed_train.config import SeedConfig


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks/failure_demo_rules.py")


def test_the_rules_are_those_stage1_logs_for_the_same_config(bench, tmp_path, monkeypatch):
    from seed_train import trainer as trainer_module
    from seed_train.tiny import cached_tiny_model

    cfg = SeedConfig(env_id="seed/Sokoban-v0", model=str(cached_tiny_model(seed=0)), lora=False, history=0,
                     action_format="plain", max_steps=15, stage1_demos=1, stage1_failure_demos=6, seed=3,
                     stage1_epochs=1, output_dir=str(tmp_path / "run"))
    monkeypatch.setattr(trainer_module, "sft_train", lambda model, pairs, **k: [1.0, 0.5])
    said: list[str] = []
    trainer_module.run_stage1(trainer_module.load(cfg), cfg, said.append)
    (line,) = [x for x in said if "episodes of random moves" in x]
    row = bench.rule_counts(cfg, 6, 1.0)
    assert row["lost"] == int(re.search(r"(\d+) failed", line).group(1)) >= 2
    logged = {text: int(n) for n, text in re.findall(r'(\d+) x "([^"]*)"', line)}
    assert {text[:60]: n for text, n in row["rules"].items()} == logged
    assert sum(row["rules"].values()) == row["lost"]
    assert set(row["rules"]) <= set(FAILURE_RULES.values())
    # The table: one row per (demos, noise), the counts as above.
    table = bench.table([row])
    cells = [c.strip() for c in table.splitlines()[2].strip("|").split("|")]
    assert cells[:3] == ["6", "1", str(row["lost"])] and cells[4] == str(len(row["rules"]))


def test_lower_noise_loses_fewer_demos_on_the_same_tasks(bench):
    cfg = SeedConfig(env_id="seed/Sokoban-v0", history=0, action_format="plain", max_steps=15, seed=0)
    random_play, near_expert = bench.rule_counts(cfg, 12, 1.0), bench.rule_counts(cfg, 12, 0.2)
    # The expert plays 80% of moves at 0.2 and replans from any state: it wins most rooms; random play wins few.
    assert near_expert["lost"] < random_play["lost"]
    assert near_expert["steps"] < random_play["steps"]


def test_main_prints_the_table_and_rejects_out_of_range_values(bench, capsys):
    assert bench.main(["--config", "sokoban-cpu", "--demos", "2", "--noise", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("seed/Sokoban-v0, seed 0:") and "| 2 | 1 |" in out
    for bad in (["--noise", "0"], ["--noise", "1.5"], ["--demos", "0"]):
        with pytest.raises(SystemExit):
            bench.main(["--config", "sokoban-cpu", *bad])
