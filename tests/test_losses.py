"""Loss terms (seed_train.losses) against hand-computed values and gradients."""
from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from seed_train.losses import (  # noqa: E402
    gate_advantage_covariance,
    kl_low_var,
    masked_token_mean,
    opd_gate,
    opd_loss,
    ppo_clip_loss,
    seed_loss,
)

F64 = torch.float64


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_masked_token_mean():
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert masked_token_mean(x, mask).item() == pytest.approx(2.0)
    assert masked_token_mean(x, torch.zeros_like(mask)).item() == 0.0


# PPO: six real tokens (clip 0.2), two pads. Per token: ratio r, advantage A, loss max(-A r, -A clip(r)):
#   r=1.1 A=+2: -2.2 (inside)          grad -A r = -2.2
#   r=1.5 A=+2: max(-3.0, -2.4) = -2.4  clipped, grad 0
#   r=0.5 A=+2: max(-1.0, -1.6) = -1.0  below range with A>0 is not clipped, grad -1.0
#   r=0.5 A=-1: max(0.5, 0.8) = 0.8     clipped, grad 0
#   r=1.5 A=-1: max(1.5, 1.2) = 1.5     not clipped, grad +1.5
#   r=0.9 A=-1: 0.9 (inside)           grad +0.9
# mean = (-2.2 - 2.4 - 1.0 + 0.8 + 1.5 + 0.9) / 6 = -0.4; clip fraction 2/6; ratio mean 6.0/6 = 1.
def ppo_inputs():
    ratios = torch.tensor([[1.1, 1.5, 0.5, 1.0], [0.5, 1.5, 0.9, 1.0]], dtype=F64)
    old = torch.tensor([[-1.0, -2.0, -0.3, 0.0], [-0.7, -1.2, -3.0, 0.0]], dtype=F64)
    logprobs = (old + ratios.log()).requires_grad_(True)
    adv = torch.tensor([[2.0, 2.0, 2.0, 0.0], [-1.0, -1.0, -1.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]], dtype=F64)
    return logprobs, old, adv, mask


def test_ppo_clip_hand_computed_value_and_grad():
    logprobs, old, adv, mask = ppo_inputs()
    loss, stats = ppo_clip_loss(logprobs, old, adv, mask, clip_eps=0.2)
    assert loss.item() == pytest.approx(-0.4)
    loss.backward()
    expected = torch.tensor([[-2.2, 0.0, -1.0, 0.0], [0.0, 1.5, 0.9, 0.0]], dtype=F64) / 6
    torch.testing.assert_close(logprobs.grad, expected)
    assert stats["clip_fraction"] == pytest.approx(2 / 6)
    assert stats["ratio_mean"] == pytest.approx(1.0)
    r = [1.1, 1.5, 0.5, 0.5, 1.5, 0.9]
    assert stats["approx_kl"] == pytest.approx(sum(x - 1 - math.log(x) for x in r) / 6)
    assert stats["pg_loss"] == pytest.approx(-0.4)


def test_ppo_clip_eps_high():
    logprobs, old, adv, mask = ppo_inputs()
    loss, _ = ppo_clip_loss(logprobs, old, adv, mask, clip_eps=0.2, clip_eps_high=0.6)
    # token 2 (r=1.5, A=+2) is now inside [0.8, 1.6]: -3.0 instead of -2.4
    assert loss.item() == pytest.approx((-2.2 - 3.0 - 1.0 + 0.8 + 1.5 + 0.9) / 6)
    loss.backward()
    assert logprobs.grad[0, 1].item() == pytest.approx(-3.0 / 6)


def test_ppo_rejects_per_sample_advantages():
    logprobs, old, _, mask = ppo_inputs()
    with pytest.raises(ValueError, match="per token"):
        ppo_clip_loss(logprobs, old, torch.ones(2, dtype=F64), mask)


def test_kl_low_var():
    logp = torch.tensor([[-1.0, -2.0, -0.3]], dtype=F64)
    assert torch.all(kl_low_var(logp, logp) == 0)
    ref = torch.tensor([[-1.5, -0.5, 29.7]], dtype=F64)  # d = ref - logp = [-0.5, 1.5, 30 -> clamped 20]
    k3 = kl_low_var(logp, ref)
    expected = [math.exp(-0.5) + 0.5 - 1, math.exp(1.5) - 1.5 - 1, 10.0]
    torch.testing.assert_close(k3, torch.tensor([expected], dtype=F64))
    assert torch.all(k3 > 0)


# OPD, beta = 2:
#   l_theta = [[-1.0, -2.0, -0.5], [-1.5, -0.7, -9.0]]    l_skill = [[-0.5, -2.0, -1.0], [-1.0, -0.2, -4.0]]
#   Delta = [[0.5, 0, -0.5], [0.5, 0.5, (pad)]]          g = sigma(2 Delta) = [[s1, 0.5, 1 - s1], [s1, s1, -]]
#   with s1 = sigma(1) = 0.7310586; mask has 5 real tokens (last one padding).
#   term = (s1 * 0.5 + 0.5 * 0 + (1 - s1) * (-0.5) + s1 * 0.5 + s1 * 0.5) / 5 = 0.1924234
#   d term / d l_theta = -g * m / 5
S1 = sigmoid(1.0)


def opd_inputs():
    logprobs = torch.tensor([[-1.0, -2.0, -0.5], [-1.5, -0.7, -9.0]], dtype=F64, requires_grad=True)
    teacher = torch.tensor([[-0.5, -2.0, -1.0], [-1.0, -0.2, -4.0]], dtype=F64, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]], dtype=F64)
    return logprobs, teacher, mask


def test_opd_value_and_gradient_hand_computed():
    logprobs, teacher, mask = opd_inputs()
    term, stats = opd_loss(logprobs, teacher, mask, torch.tensor([True, True]), beta=2.0)
    expected_term = (S1 * 0.5 + 0.0 + (1 - S1) * -0.5 + S1 * 0.5 + S1 * 0.5) / 5
    assert expected_term == pytest.approx(0.1924234, abs=1e-7)
    assert term.item() == pytest.approx(expected_term)
    term.backward()
    # the gate is detached: exactly -g/N, no sigma' term
    expected_grad = -torch.tensor([[S1, 0.5, 1 - S1], [S1, S1, 0.0]], dtype=F64) / 5
    torch.testing.assert_close(logprobs.grad, expected_grad)
    assert torch.all(logprobs.grad <= 0)  # descent raises l_theta: pulls toward the teacher's tokens
    assert teacher.grad is None  # the teacher never receives gradient
    assert stats["opd_term"] == pytest.approx(expected_term)
    assert stats["mean_gate"] == pytest.approx((3 * S1 + 0.5 + (1 - S1)) / 5)
    assert stats["frac_delta_pos"] == pytest.approx(3 / 5)
    assert stats["mean_delta"] == pytest.approx(0.2)
    assert stats["opd_tokens"] == 5


def test_opd_invalid_skill_rows_are_dropped():
    logprobs, teacher, mask = opd_inputs()
    term, stats = opd_loss(logprobs, teacher, mask, torch.tensor([1.0, 0.0], dtype=F64), beta=2.0)
    # only row 0 counts, and the denominator is its 3 tokens
    assert term.item() == pytest.approx((S1 * 0.5 + 0.0 + (1 - S1) * -0.5) / 3)
    term.backward()
    expected_grad = -torch.tensor([[S1, 0.5, 1 - S1], [0.0, 0.0, 0.0]], dtype=F64) / 3
    torch.testing.assert_close(logprobs.grad, expected_grad)
    assert stats["opd_tokens"] == 3


def test_opd_masked_tokens_change_nothing():
    valid = torch.tensor([True, False])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]], dtype=F64)
    gen = torch.Generator().manual_seed(1)
    base_l = -torch.rand(2, 3, generator=gen, dtype=F64)
    base_t = -torch.rand(2, 3, generator=gen, dtype=F64)

    def run(l_values, t_values):
        logprobs = l_values.clone().requires_grad_(True)
        term, _ = opd_loss(logprobs, t_values, mask, valid, beta=5.0)
        term.backward()
        return term.detach(), logprobs.grad

    term_a, grad_a = run(base_l, base_t)
    changed = torch.tensor([[0.0, 0.0, 1.0], [1.0, 1.0, 1.0]], dtype=F64).bool()  # pad + invalid-skill row
    term_b, grad_b = run(torch.where(changed, -7.0, base_l), torch.where(changed, -0.01, base_t))
    torch.testing.assert_close(term_a, term_b)
    torch.testing.assert_close(grad_a, grad_b)
    assert torch.all(grad_a[changed] == 0)


def test_opd_no_valid_token_is_zero():
    logprobs, teacher, mask = opd_inputs()
    term, stats = opd_loss(logprobs, teacher, mask, torch.zeros(2), beta=5.0)
    term.backward()
    assert term.item() == 0.0 and torch.all(logprobs.grad == 0)
    assert stats["mean_gate"] == 0.0


# Dual clip, c = 3, eps = 0.2. Per token (r, A): PPO-clip loss max(-A r, -A clip(r)), then for A < 0 min(., -3 A):
#   (5.0, -1):  max(5.0, 1.2) = 5.0 -> capped at 3.0      dual clip active, grad 0
#   (2.0, -1):  max(2.0, 1.2) = 2.0 (< 3)                 grad -A r = 2.0
#   (0.5, -1):  max(0.5, 0.8) = 0.8 (clipped, < 3)         grad 0
#   (5.0, +2):  max(-10, -2.4) = -2.4 (A > 0: no cap)      grad 0
#   (4.0, -0.5): max(2.0, 0.6) = 2.0 -> capped at 1.5     dual clip active, grad 0
#   (1.1, -2):  2.2 inside the range (< 6)                 grad -A r = 2.2
# mean = (3 + 2 + 0.8 - 2.4 + 1.5 + 2.2) / 6 = 7.1 / 6; without the cap (5 + 2 + 0.8 - 2.4 + 2 + 2.2) / 6 = 1.6.
def dual_clip_inputs():
    ratios = torch.tensor([[5.0, 2.0, 0.5, 1.0], [5.0, 4.0, 1.1, 1.0]], dtype=F64)
    old = torch.tensor([[-1.0, -2.0, -0.3, 0.0], [-0.7, -1.2, -3.0, 0.0]], dtype=F64)
    logprobs = (old + ratios.log()).requires_grad_(True)
    adv = torch.tensor([[-1.0, -1.0, -1.0, 0.0], [2.0, -0.5, -2.0, 0.0]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]], dtype=F64)
    return logprobs, old, adv, mask


def test_dual_clip_hand_computed_value_and_zero_grad_where_active():
    logprobs, old, adv, mask = dual_clip_inputs()
    loss, stats = ppo_clip_loss(logprobs, old, adv, mask, clip_eps=0.2, dual_clip_c=3.0)
    assert loss.item() == pytest.approx(7.1 / 6)
    loss.backward()
    expected = torch.tensor([[0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 2.2, 0.0]], dtype=F64) / 6
    torch.testing.assert_close(logprobs.grad, expected)
    assert logprobs.grad[0, 0].item() == 0.0 and logprobs.grad[1, 1].item() == 0.0  # the cap is a constant
    assert stats["dual_clip_fraction"] == pytest.approx(2 / 6)
    assert stats["clip_fraction"] == pytest.approx(2 / 6)
    for off in (None, 0):  # disabled: plain PPO-clip, the far-off negative token keeps its gradient
        logprobs, old, adv, mask = dual_clip_inputs()
        loss, stats = ppo_clip_loss(logprobs, old, adv, mask, clip_eps=0.2, dual_clip_c=off)
        assert loss.item() == pytest.approx(1.6) and "dual_clip_fraction" not in stats
        loss.backward()
        assert logprobs.grad[0, 0].item() == pytest.approx(5.0 / 6)


def test_dual_clip_rejects_c_not_above_one():
    logprobs, old, adv, mask = dual_clip_inputs()
    with pytest.raises(ValueError, match="dual_clip_c"):
        ppo_clip_loss(logprobs, old, adv, mask, dual_clip_c=0.5)


def test_constant_gate_is_plain_distillation():
    logprobs, teacher, mask = opd_inputs()
    term, stats = opd_loss(logprobs, teacher, mask, torch.tensor([True, True]), beta=2.0, gate="constant")
    # g = 1: term = mean over the 5 real tokens of (l_skill - l_theta) = (0.5 + 0 - 0.5 + 0.5 + 0.5) / 5
    assert term.item() == pytest.approx(0.2)
    term.backward()
    torch.testing.assert_close(logprobs.grad, -mask / mask.sum())  # d term / d l_theta = -m / sum(m)
    assert stats["mean_gate"] == 1.0
    torch.testing.assert_close(opd_gate(logprobs, teacher, kind="constant"), torch.ones_like(logprobs))
    with pytest.raises(ValueError, match="gate"):
        opd_gate(logprobs, teacher, kind="step")


# Gate/advantage covariance. Rows (context, gate on real tokens, advantage, real tokens):
#   row 0: ctx 0, g [0.2, 0.4], A 1;   row 1: ctx 0, g [0.8], A -2
#   row 2: ctx 1, g [0.5, 0.9], A 3;   row 3: ctx 1, g [0.1], A -1;   row 4: ctx 2 alone, g [0.3], A 5
# ctx 0: gbar 1.4/3, Abar 0; sum (g - gbar)(A - Abar) = -0.26667 - 0.06667 - 0.66667 = -1.0 over 3 tokens
# ctx 1: gbar 0.5, Abar 5/3; sum = 0 + 0.4 * 4/3 + (-0.4)(-8/3) = 1.6 over 3 tokens
# ctx 2 has one sample: left out. Within-context covariance = (-1.0 + 1.6) / (3 + 3) = 0.1.
def covariance_inputs():
    pad = 77.0  # padding and anything masked must not count
    gate = torch.tensor([[0.2, 0.4], [0.8, pad], [0.5, 0.9], [0.1, pad], [0.3, pad]], dtype=F64)
    adv = torch.tensor([[1.0, 1.0], [-2.0, pad], [3.0, 3.0], [-1.0, pad], [5.0, pad]], dtype=F64)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0], [1.0, 0.0]], dtype=F64)
    return gate, adv, mask, torch.tensor([0, 0, 1, 1, 2])


def test_gate_advantage_covariance_within_contexts_hand_computed():
    gate, adv, mask, contexts = covariance_inputs()
    assert gate_advantage_covariance(gate, adv, mask, contexts) == pytest.approx(0.1)
    # context labels are any integers; only ctx 0 left (ctx 1 made single-sample): -1/3
    one = mask.clone()
    one[3] = 0.0
    assert gate_advantage_covariance(gate, adv, one, torch.tensor([7, 7, 3, 3, 9])) == pytest.approx(-1.0 / 3)
    # no context with 2 samples: 0
    assert gate_advantage_covariance(gate, adv, mask, torch.arange(5)) == 0.0


def test_gate_advantage_covariance_pooled_matches_numpy():
    gate, adv, mask, _ = covariance_inputs()
    # pooled: one context of the 7 real tokens, population covariance (divide by 7)
    g = [0.2, 0.4, 0.8, 0.5, 0.9, 0.1, 0.3]
    a = [1.0, 1.0, -2.0, 3.0, 3.0, -1.0, 5.0]
    expected = sum((x - sum(g) / 7) * (y - sum(a) / 7) for x, y in zip(g, a)) / 7
    assert gate_advantage_covariance(gate, adv, mask) == pytest.approx(expected)
    gen = torch.Generator().manual_seed(2)
    gate = torch.rand(4, 7, generator=gen, dtype=F64)
    adv = torch.randn(4, 7, generator=gen, dtype=F64)
    mask = (torch.rand(4, 7, generator=gen) > 0.3).to(F64)
    sel = mask.bool().numpy()
    assert gate_advantage_covariance(gate, adv, mask) == pytest.approx(
        np.cov(gate.numpy()[sel], adv.numpy()[sel], bias=True)[0, 1])
    assert gate_advantage_covariance(gate, adv, torch.zeros_like(mask)) == 0.0


def seed_inputs():
    logprobs, old, adv, mask = ppo_inputs()
    teacher = old + torch.tensor([[0.3, -0.2, 0.1, 0.0], [0.0, 0.4, -0.6, 0.0]], dtype=F64)
    ref = old - 0.1
    return logprobs, old, adv, mask, teacher, ref


def test_seed_loss_without_opd_equals_ppo():
    logprobs, old, adv, mask, teacher, _ = seed_inputs()
    ppo, _ = ppo_clip_loss(logprobs, old, adv, mask)
    (ppo_grad,) = torch.autograd.grad(ppo, logprobs)
    for kwargs in ({"teacher_logprobs": teacher, "opd_coef": 0.0}, {"teacher_logprobs": None}):
        loss, stats = seed_loss(logprobs, old, adv, mask, dual_clip_c=None, **kwargs)
        (grad,) = torch.autograd.grad(loss, logprobs)
        assert loss.item() == ppo.item()
        torch.testing.assert_close(grad, ppo_grad, rtol=0, atol=0)
        assert stats["loss"] == ppo.item()
    # with a teacher but opd_coef 0, the diagnostics are still logged
    _, stats = seed_loss(logprobs, old, adv, mask, teacher_logprobs=teacher, opd_coef=0.0)
    assert {"opd_term", "mean_gate", "frac_delta_pos", "mean_delta"} <= stats.keys()


def test_seed_loss_sums_terms():
    logprobs, old, adv, mask, teacher, ref = seed_inputs()
    valid = torch.tensor([True, False])
    loss, stats = seed_loss(logprobs, old, adv, mask, ref_logprobs=ref, teacher_logprobs=teacher,
                            skill_valid=valid, kl_coef=0.01, opd_coef=0.01, opd_beta=5.0)
    ppo, _ = ppo_clip_loss(logprobs, old, adv, mask)
    kl = masked_token_mean(kl_low_var(logprobs, ref), mask)
    opd, _ = opd_loss(logprobs, teacher, mask, valid, beta=5.0)
    expected = ppo + 0.01 * kl + 0.01 * opd
    assert loss.item() == pytest.approx(expected.item())
    torch.testing.assert_close(torch.autograd.grad(loss, logprobs)[0], torch.autograd.grad(expected, logprobs)[0])
    assert stats["kl"] == pytest.approx(kl.item())


def test_seed_loss_passes_the_dual_clip_and_the_gate_through():
    logprobs, old, adv, mask = dual_clip_inputs()
    teacher = old + 0.3
    valid = torch.tensor([True, True])
    loss, stats = seed_loss(logprobs, old, adv, mask, teacher_logprobs=teacher, skill_valid=valid,
                            dual_clip_c=3.0, opd_coef=0.5, opd_gate="constant")
    ppo, _ = ppo_clip_loss(logprobs, old, adv, mask, dual_clip_c=3.0)
    opd, _ = opd_loss(logprobs, teacher, mask, valid, gate="constant")
    assert ppo.item() == pytest.approx(7.1 / 6)
    assert loss.item() == pytest.approx((ppo + 0.5 * opd).item())
    assert stats["mean_gate"] == 1.0 and stats["dual_clip_fraction"] == pytest.approx(2 / 6)
