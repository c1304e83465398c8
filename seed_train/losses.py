"""Loss terms of the SEED trainer: PPO-clip (GRPO), low-variance KL, and the gated on-policy
distillation (OPD) term of SEED Stage 2.

Pure functions on per-token tensors ``[B, T]`` (response tokens only, right-padded), with
``response_mask`` ``[B, T]`` (1.0 real token, 0.0 padding). Log-probs are those of the sampled tokens.
Masks combine by multiplication; every term is a token mean ``sum(x * m) / max(sum(m), 1)`` over the
micro-batch. Statistics are returned as Python floats (detached).

Data-parallel training replaces the denominators ``sum(m)`` by the token counts of the whole global
minibatch divided by the world size (``token_count`` / ``opd_token_count`` of :func:`seed_loss`), so
that averaging the ranks' gradients gives the gradient of the global token mean.

    L = L_PPO + kl_coef * mean_tokens(k3(ref || theta)) + opd_coef * mean_tokens(m * g * (sg[l_skill] - l_theta))
"""
from __future__ import annotations

import torch
from torch import Tensor


def masked_token_mean(x: Tensor, mask: Tensor, denominator: Tensor | float | None = None) -> Tensor:
    """Token mean over the mask: ``sum(x * m) / max(sum(m), 1)``; 0 when the mask is empty.

    ``denominator`` replaces ``sum(m)`` (data parallelism: the global count over the world size).
    """
    if denominator is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum() / max(float(denominator), 1e-12)


def ppo_clip_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    token_count: Tensor | float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO-clip surrogate, token mean: ``L = mean_m( max(-A r, -A clip(r, 1 - eps, 1 + eps_high)) )``.

    ``r = exp(l_theta - l_old)`` (log-ratio clamped to [-20, 20] as verl does); ``eps_high`` defaults to
    ``eps`` (set it for DAPO-style clip-higher). Where the clipped branch is the larger loss the token's
    gradient is 0.

    Args:
        logprobs: ``[B, T]`` current log-probs (with grad).
        old_logprobs: ``[B, T]`` log-probs at sampling time (no grad).
        advantages: ``[B, T]`` token advantages (see ``advantages.broadcast_to_tokens``).
    Returns:
        ``(loss, stats)``; stats: ``pg_loss``, ``clip_fraction`` (share of tokens where the clipped branch
        is active), ``approx_kl`` (``mean(r - 1 - log r)``, as CleanRL), ``ratio_mean``.
    """
    if advantages.shape != logprobs.shape:
        raise ValueError(f"advantages must be per token {tuple(logprobs.shape)}, got {tuple(advantages.shape)}")
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    advantages = advantages.detach()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_eps, 1.0 + eps_high)
    loss = masked_token_mean(torch.maximum(unclipped, clipped), response_mask, token_count)
    with torch.no_grad():
        stats = {
            "pg_loss": loss.item(),
            "clip_fraction": masked_token_mean((clipped > unclipped).to(ratio.dtype), response_mask).item(),
            "approx_kl": masked_token_mean((ratio - 1.0) - log_ratio, response_mask).item(),
            "ratio_mean": masked_token_mean(ratio, response_mask).item(),
        }
    return loss, stats


def kl_low_var(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Schulman's k3 estimator of KL(pi_theta || pi_ref), per token (verl ``low_var_kl``).

    With ``d = l_ref - l_theta`` (clamped to [-20, 20]): ``k3 = exp(d) - d - 1 >= 0``, clamped to
    [-10, 10]. Gradient flows to ``logprobs`` only.

    Returns:
        ``[B, T]``; aggregate with ``kl_coef * masked_token_mean(k3, response_mask)``.
    """
    d = (ref_logprobs.detach() - logprobs).clamp(-20.0, 20.0)
    return (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)


def opd_loss(
    logprobs: Tensor,
    teacher_logprobs: Tensor,
    response_mask: Tensor,
    skill_valid: Tensor,
    *,
    beta: float = 5.0,
    token_count: Tensor | float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """SEED gated on-policy distillation term.

    With ``l_theta = logprobs`` and ``l_skill = teacher_logprobs`` (the same policy scoring the same
    sampled tokens under the skill-augmented prompt):

        Delta = sg[l_skill - l_theta],   g = sigmoid(beta * Delta)   (detached),
        m = response_mask * skill_valid[:, None],
        term = sum(m * g * (sg[l_skill] - l_theta)) / max(sum(m), 1).

    ``d term / d l_theta = -g * m / sum(m)``: minimising raises ``l_theta`` on the tokens, most where
    the skill-conditioned teacher prefers them (g -> 1), little where it does not (g -> 0).

    Denominator: the tokens with ``m = 1`` only, i.e. of samples whose skill passed the format check;
    a dropped skill contributes nothing (value or gradient) and does not dilute the others, so the term's
    scale does not depend on the skill validity rate. No valid token: term 0 (zero gradient).

    Args:
        logprobs: ``[B, T]`` policy log-probs (with grad).
        teacher_logprobs: ``[B, T]`` log-probs under the skill-augmented prompt (never receives grad).
        response_mask: ``[B, T]``.
        skill_valid: ``[B]`` bool or float, 1 where the sample's skill is valid.
    Returns:
        ``(term, stats)``; stats over ``m``: ``opd_term``, ``mean_gate``, ``frac_delta_pos``
        (share of tokens with Delta > 0), ``mean_delta``, ``opd_tokens`` (``sum(m)``).
    """
    l_skill = teacher_logprobs.detach()
    mask = response_mask * skill_valid.to(response_mask.dtype)[:, None]
    delta = (l_skill - logprobs).detach()
    gate = torch.sigmoid(beta * delta)
    term = masked_token_mean(gate * (l_skill - logprobs), mask, token_count)
    with torch.no_grad():
        stats = {
            "opd_term": term.item(),
            "mean_gate": masked_token_mean(gate, mask).item(),
            "frac_delta_pos": masked_token_mean((delta > 0).to(mask.dtype), mask).item(),
            "mean_delta": masked_token_mean(delta, mask).item(),
            "opd_tokens": mask.sum().item(),
        }
    return term, stats


def opd_gate(logprobs: Tensor, teacher_logprobs: Tensor, *, beta: float = 5.0) -> Tensor:
    """The OPD gate ``g = sigmoid(beta * (l_skill - l_theta))``, detached, ``[B, T]``."""
    return torch.sigmoid(beta * (teacher_logprobs - logprobs)).detach()


def gate_advantage_covariance(gate: Tensor, advantages: Tensor, mask: Tensor) -> float:
    """``Cov(g, A)`` over the tokens with ``mask = 1`` (the paper's Eq. 8 diagnostic).

    Unbiased, like ``numpy.cov``: ``sum(m (g - mean g)(A - mean A)) / (sum(m) - 1)``, means over the
    mask; 0.0 with fewer than 2 tokens.
    """
    with torch.no_grad():
        n = mask.sum()
        if n < 2:
            return 0.0
        g_centered = gate - masked_token_mean(gate, mask)
        a_centered = advantages - masked_token_mean(advantages, mask)
        return ((g_centered * a_centered * mask).sum() / (n - 1)).item()


def seed_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    ref_logprobs: Tensor | None = None,
    teacher_logprobs: Tensor | None = None,
    skill_valid: Tensor | None = None,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    kl_coef: float = 0.0,
    opd_coef: float = 0.01,
    opd_beta: float = 5.0,
    token_count: Tensor | float | None = None,
    opd_token_count: Tensor | float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """SEED Stage 2 loss: ``L = L_PPO + kl_coef * KL + opd_coef * OPD``.

    The KL term is used when ``ref_logprobs`` is given and ``kl_coef != 0``; the OPD term is added when
    ``teacher_logprobs`` is given and ``opd_coef != 0`` (GRPO baseline: ``opd_coef=0``). With
    ``teacher_logprobs`` given, OPD statistics and ``gate_adv_cov`` are logged even when
    ``opd_coef == 0``. ``skill_valid=None`` means every skill is valid.
    Paper defaults: clip 0.2, KL 0.01 (the caller passes it), opd_coef 0.01, opd_beta 5.
    ``token_count`` / ``opd_token_count``: denominators of the PPO+KL and OPD token means (default: this
    batch's counts; see the module docstring for data parallelism).

    Returns:
        ``(loss, stats)``: stats of :func:`ppo_clip_loss`, ``kl`` if used, those of :func:`opd_loss`
        plus ``gate_adv_cov`` if a teacher is given, and ``loss``.
    """
    loss, stats = ppo_clip_loss(
        logprobs, old_logprobs, advantages, response_mask, clip_eps=clip_eps, clip_eps_high=clip_eps_high,
        token_count=token_count,
    )
    if ref_logprobs is not None and kl_coef != 0.0:
        kl = masked_token_mean(kl_low_var(logprobs, ref_logprobs), response_mask, token_count)
        loss = loss + kl_coef * kl
        stats["kl"] = kl.item()
    if teacher_logprobs is not None:
        valid = torch.ones(logprobs.shape[0], device=logprobs.device) if skill_valid is None else skill_valid
        term, opd_stats = opd_loss(logprobs, teacher_logprobs, response_mask, valid, beta=opd_beta,
                                   token_count=opd_token_count)
        opd_mask = response_mask * valid.to(response_mask.dtype)[:, None]
        gate = opd_gate(logprobs, teacher_logprobs, beta=opd_beta)
        stats |= opd_stats | {"gate_adv_cov": gate_advantage_covariance(gate, advantages, opd_mask)}
        if opd_coef != 0.0:
            loss = loss + opd_coef * term
    stats["loss"] = loss.item()
    return loss, stats
