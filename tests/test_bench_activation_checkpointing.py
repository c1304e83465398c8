"""benchmarks/bench_activation_checkpointing.py: both variants run, each in its own process, and agree."""
from __future__ import annotations

import re

import pytest
from script_loader import load_script

pytest.importorskip("torch")
pytest.importorskip("transformers")

from seed_train.tiny import cached_tiny_model


def test_checkpointing_changes_memory_not_the_logprobs(capsys):
    bench = load_script("benchmarks/bench_activation_checkpointing.py")
    bench.main(["--device", "cpu", "--shape-of", str(cached_tiny_model(seed=0)), "--qwen-shape", "0.5b",
                "--layers", "1", "--rows", "2", "--prompt-tokens", "16", "--response-tokens", "8"])
    out = capsys.readouterr().out
    rows = dict(re.findall(r"^\| (off|on) \|.*\| (-?\d+\.\d+) \|$", out, flags=re.MULTILINE))
    assert set(rows) == {"off", "on"}
    assert rows["off"] == rows["on"]  # recomputation, not another computation
