"""Keeps benchmarks/bench_grpo_vs_trl.py from rotting: both of its sides run one step on the tiny model."""
from __future__ import annotations

import contextlib
import random

import numpy as np
import pytest
import torch
from script_loader import load_script

from seed_train.codec import encode_prompt
from seed_train.tiny import cached_tiny_model

bench = load_script("benchmarks/bench_grpo_vs_trl.py")
PROMPTS = tuple(bench.SHORT_PROMPTS[:2])


@contextlib.contextmanager
def global_rngs_restored():
    """transformers' Trainer seeds torch, numpy and random globally; later tests must not see that."""
    np_state, py_state = np.random.get_state(), random.getstate()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)


def _work(beta: float) -> "bench.Workload":
    return bench.Workload(prompts=PROMPTS, group_size=2, max_new_tokens=4, lr=1e-3, beta=beta)


def _expected_prompt_tokens(tokenizer) -> int:
    return 2 * sum(len(encode_prompt(tokenizer, p)) for p in PROMPTS)


def test_length_reward_values():
    assert bench.length_reward("x" * 40) == 1.0
    assert bench.length_reward("") == 0.0
    assert bench.length_reward("x" * 20) == 0.5 and bench.length_reward("x" * 60) == 0.5
    assert bench.length_reward("x" * 100) == 0.0
    assert bench.trl_reward([[{"role": "assistant", "content": "x" * 30}], "x" * 40]) == [0.75, 1.0]


def test_table_rows_give_the_ratio_of_medians():
    def timing(total):
        return bench.StepTiming(total / 2, total / 4, total / 4, total, 100, 50)

    runs = bench.Runs(ours=[timing(1.0), timing(2.0), timing(9.0)], trl=[timing(4.0), timing(3.0), timing(5.0)])
    rows = bench.markdown_rows(0.04, runs)
    assert len(rows) == 3
    assert rows[0].startswith("| 0.04 | TRL GRPOTrainer | 2.00 | 1.00 | 1.00 | 4.00 |")
    assert rows[1].startswith("| 0.04 | seed-train | 1.00 | 0.50 | 0.50 | 2.00 |")
    assert "**2.00x**" in rows[2]  # median 4.0 / median 2.0


def test_ours_step_on_tiny_model():
    ours = bench.OursGRPO(cached_tiny_model(), _work(beta=0.04))
    start = {n: p.detach().clone() for n, p in ours.model.named_parameters()}
    rng_before = torch.random.get_rng_state()
    t = ours.step()
    # Sampling uses per-row generators and loading forks the RNG: the global generator is untouched.
    assert torch.equal(torch.random.get_rng_state(), rng_before)
    assert t.prompt_tokens == _expected_prompt_tokens(ours.tokenizer)
    assert 4 <= t.generated_tokens <= 4 * 4  # 4 completions, 1..4 tokens each
    assert min(t.generate_s, t.score_s, t.update_s, t.forward_s) > 0
    assert t.total_s == pytest.approx(t.generate_s + t.score_s + t.update_s)
    # The update moved the policy; the KL reference is a frozen copy of the starting weights.
    assert any(not torch.equal(p, start[n]) for n, p in ours.model.named_parameters())
    assert all(torch.equal(p, start[n]) for n, p in ours.reference.named_parameters())
    assert "ratio" in bench.throughput_line([t])


def test_trl_step_on_tiny_model(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ours_tokens = _expected_prompt_tokens(bench.OursGRPO(cached_tiny_model(), _work(beta=0.0)).tokenizer)
    with global_rngs_restored():
        trl = bench.TRLGRPO(cached_tiny_model(), _work(beta=0.04), str(tmp_path))
        first = trl.step()
        second = trl.step()  # a second train() call on the same trainer: the benchmark's repeats
    for t in (first, second):
        # TRL renders the same chat template: the very prompt tokens our side feeds.
        assert t.prompt_tokens == ours_tokens
        assert 4 <= t.generated_tokens <= 4 * 4
        assert min(t.generate_s, t.score_s, t.update_s) > 0
        assert t.total_s == pytest.approx(t.generate_s + t.score_s + t.update_s)
    assert len(trl.timer.seconds) == 2
