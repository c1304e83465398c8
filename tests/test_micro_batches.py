"""Micro-batches inside a Stage 2 minibatch or a Stage 1 batch (``--micro-batch-size``): gradient accumulation
gives the update of the whole minibatch in one pass (the token means keep the minibatch's denominators), with no
forward wider than a micro-batch. The layouts' accumulation under FSDP2 and ZeRO is checked against the
1-process run in tests/test_distributed.py."""
from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

import seed_train.stage1 as stage1_module
import seed_train.trainer as trainer_module
from seed_train.config import SeedConfig
from seed_train.parallel import ReplicatedWeights
from seed_train.rollout import EnvPool, EnvSpec, group_jobs, run_episodes
from seed_train.samples import build_samples
from seed_train.skills import Skill
from seed_train.stage1 import SFTPair, sft_train
from seed_train.tiny import cached_tiny_model
from seed_train.trainer import heads_together, load, micro_batches, score_samples, update_policy


@pytest.fixture(scope="module")
def batch():
    """24-30 step samples of EZPoints, seeded advantages of both signs, skills on half the episodes,
    teacher and reference log-probs: every loss term (PPO, KL, OPD) has tokens."""
    cfg = SeedConfig(model=str(cached_tiny_model(seed=0)), lora=False)
    with torch.random.fork_rng(devices=[]):
        policy = load(cfg)
    spec = EnvSpec(env_id="seed/EZPoints-v0", split="test", template="compact", history=1, action_format="plain",
                   format_penalty=0.1, max_steps=4)
    pool = EnvPool(spec)
    try:
        tasks = list(gym.make("seed/EZPoints-v0", split="test").unwrapped.task_ids()[:3])
        trajectories = run_episodes(policy.backend, policy.codec, pool, group_jobs(tasks, 2, base_seed=3, prefix="it0"),
                                    max_new_tokens=6, seed=4)
    finally:
        pool.close()
    rng = np.random.default_rng(5)
    advantages = [list(rng.normal(size=len(t.steps))) for t in trajectories]
    skills = [Skill("", "Multiply the cards when the product is the target, else add them.") if i % 2 else None
              for i in range(len(trajectories))]
    samples = build_samples(trajectories, advantages, skills, policy.codec)
    reference = copy.deepcopy(policy.model)
    scored = score_samples(policy.model, samples, teacher=True, reference=True, reference_model=reference)
    return policy, samples, scored


def _count_forward_rows(module, monkeypatch) -> list[int]:
    """The row count of every ``response_logprobs`` forward ``module`` makes, in order, until ``monkeypatch.undo()``."""
    rows: list[int] = []
    real = module.response_logprobs
    monkeypatch.setattr(module, "response_logprobs", lambda m, prompts, *a, **k: rows.append(len(prompts))
                        or real(m, prompts, *a, **k))
    return rows


def _update(policy, samples, scored, micro_batch_size, monkeypatch):
    """One update_policy call on a copy of the model with plain SGD (the weights move by exactly the
    clipped gradient times lr, so equal weights mean equal gradients); returns the weights, the stats and
    the row count of every forward."""
    cfg = SeedConfig(model=policy.model.name_or_path, lora=False, kl_coef=0.01, opd_coef=0.5, minibatch_size=10,
                     ppo_epochs=2, micro_batch_size=micro_batch_size, grad_clip=1e9)
    model = copy.deepcopy(policy.model)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    rows = _count_forward_rows(trainer_module, monkeypatch)
    stats = update_policy(model, optimizer, samples, scored, cfg, np.random.default_rng(0))
    monkeypatch.undo()
    return [p.detach().clone() for p in model.parameters()], stats, rows


def test_micro_batches_give_the_minibatch_update_with_no_wider_forward(batch, monkeypatch):
    policy, samples, scored = batch
    n = len(samples)
    assert n > 20 and any(s.teacher_prompt_ids is not None for s in samples)
    whole_w, whole_stats, whole_rows = _update(policy, samples, scored, 0, monkeypatch)
    # ceil(n / 10) near-equal minibatches per epoch, each one forward.
    per_epoch = [len(a) for a in np.array_split(np.arange(n), -(-n // 10))]
    assert whole_rows == per_epoch * 2
    assert whole_stats["opd_tokens"] > 0 and whole_stats["kl"] > 0 and whole_stats["grad_norm"] > 0
    for micro in (3, 1):
        w, stats, rows = _update(policy, samples, scored, micro, monkeypatch)
        assert max(rows) <= micro and sum(rows) == 2 * n
        assert len(rows) == 2 * sum(-(-size // micro) for size in per_epoch)
        assert stats.keys() == whole_stats.keys()
        for k, v in whole_stats.items():
            assert stats[k] == pytest.approx(v, rel=1e-4, abs=1e-6), k
        moved = [not torch.equal(a, b) for a, b in zip(w, policy.model.parameters())]
        assert sum(moved) > 10  # the update did move the weights ...
        for a, b in zip(w, whole_w):  # ... and by the same step as the whole minibatch's
            torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5)


def test_micro_batches_split_near_equally_and_the_field_refuses_negatives():
    idx = np.arange(10)
    assert [len(p) for p in micro_batches(idx, 4)] == [4, 3, 3]
    assert micro_batches(idx, 0, order=lambda rows: rows[::-1])[0].tolist() == idx.tolist()  # one pass: as drawn
    assert [len(p) for p in micro_batches(idx, 0)] == [10] and [len(p) for p in micro_batches(idx, 10)] == [10]
    assert np.concatenate(micro_batches(idx, 3)).tolist() == idx.tolist()
    with pytest.raises(ValueError, match="micro_batch_size"):
        SeedConfig(micro_batch_size=-1)


def test_peak_rss_is_the_kernels_high_water_mark():
    from pathlib import Path

    from seed_train.trainer import peak_rss_mb

    status = Path("/proc/self/status")
    if not status.exists():
        pytest.skip("no /proc (not Linux): nothing independent to compare with")
    hwm_kb = next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("VmHWM:"))
    assert peak_rss_mb() == pytest.approx(hwm_kb / 1024, rel=0.05)


def test_rows_sharing_a_prompt_head_fall_into_one_micro_batch():
    """Two groups' turns drawn interleaved: ordered by prompt ids, each micro-batch holds one group's rows
    (whose shared head then runs once), and no row is lost or repeated."""
    from types import SimpleNamespace

    system, task_a, task_b = [1, 2, 3], [7, 7], [5, 5]
    prompts = [system + (task_a if i % 2 == 0 else task_b) + [100 + i] for i in range(6)]
    samples = [SimpleNamespace(prompt_ids=p) for p in prompts]
    drawn = np.array([3, 0, 5, 2, 1, 4])
    parts = micro_batches(drawn, 3, order=lambda rows: heads_together(rows, samples))
    assert [sorted(p.tolist()) for p in parts] == [[1, 3, 5], [0, 2, 4]]  # task_b's rows, then task_a's
    assert heads_together(drawn, samples).dtype == drawn.dtype


class _SGDLayout(ReplicatedWeights):
    """The one-process layout with plain SGD: the weights move by exactly the gradient times lr, so equal
    weights mean equal gradients (AdamW's first step is about the gradients' signs, which rounding can flip)."""

    def make_optimizer(self, model, lr, grad_clip):
        return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=lr)


def _sft(model, pairs, micro_batch_size, monkeypatch):
    """Two epochs of Stage 1 SFT on a copy of ``model``; returns the weights, the losses and every forward's rows."""
    model = copy.deepcopy(model)
    rows = _count_forward_rows(stage1_module, monkeypatch)
    losses = sft_train(model, pairs, lr=0.5, epochs=2, batch_size=5, seed=3, grad_clip=1e9, layout=_SGDLayout(),
                       micro_batch_size=micro_batch_size)
    monkeypatch.undo()
    return [p.detach().clone() for p in model.parameters()], losses, rows


def test_stage1_micro_batches_give_the_batch_update_with_no_wider_forward(monkeypatch):
    """Stage 1 takes the config's micro_batch_size as Stage 2 does: a batch of 5 pairs as passes of at most 2 rows
    (copies of a pair merged first, as in one pass) gives the one-pass losses and weights."""
    with torch.random.fork_rng(devices=[]):
        model = load(SeedConfig(model=str(cached_tiny_model(seed=0)), lora=False)).model
    rng = np.random.default_rng(7)
    head = [int(t) for t in rng.integers(5, 200, size=12)]  # a system prompt every pair shares
    pairs = [SFTPair(head + [int(t) for t in rng.integers(5, 200, size=int(rng.integers(2, 9)))],
                     [int(t) for t in rng.integers(5, 200, size=int(rng.integers(1, 6)))], "act") for _ in range(9)]
    pairs += [pairs[0], pairs[0], pairs[4]]  # copies, as repeat_skill_pairs makes them
    whole_w, whole_losses, whole_rows = _sft(model, pairs, 0, monkeypatch)
    assert max(whole_rows) > 2 and len(whole_losses) == 2 * 3  # ceil(12 / 5) batches an epoch, one pass each
    w, losses, rows = _sft(model, pairs, 2, monkeypatch)
    assert max(rows) <= 2 and len(rows) > len(whole_rows) and sum(rows) == sum(whole_rows)
    assert losses == pytest.approx(whole_losses, rel=1e-5)
    moved = [not torch.equal(a, b) for a, b in zip(w, model.parameters())]
    assert sum(moved) > 10  # SFT moved the weights ...
    for a, b in zip(w, whole_w):  # ... and by the one-pass step
        torch.testing.assert_close(a, b, atol=2e-6, rtol=1e-5)
