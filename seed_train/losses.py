"""Loss terms of the SEED trainer: PPO-clip (GRPO), low-variance KL, and the gated on-policy
distillation (OPD) term of SEED Stage 2.

Pure functions on per-token tensors ``[B, T]`` (response tokens only, right-padded), with
``response_mask`` ``[B, T]`` (1.0 real token, 0.0 padding). Log-probs are those of the sampled tokens.
Masks combine by multiplication; every term is a token mean ``sum(x * m) / max(sum(m), 1)`` over the
batch. Statistics are returned as Python floats (detached).

Data-parallel training replaces the denominators ``sum(m)`` by the token counts of the whole global
minibatch divided by the world size (``token_count`` / ``opd_token_count`` of :func:`seed_loss`), so
that averaging the ranks' gradients gives the gradient of the global token mean. The trainer's
micro-batches (gradient accumulation inside a minibatch) pass the minibatch's counts the same way. The
statistics that are token means use the same denominators, so a minibatch's statistic is the sum of its
micro-batches' (and, over ranks, the mean of the ranks').

    L = L_PPO + kl_coef * mean_tokens(k3(ref || theta)) + opd_coef * mean_tokens(m * g * (sg[l_skill] - l_theta))

``L_PPO`` is PPO-clip with the dual clip of the paper's released code (c = 3); ``g`` the sigmoid gate,
or 1 for the constant-gate control.
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
    dual_clip_c: float | None = None,
    token_count: Tensor | float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO-clip surrogate, token mean: ``L = mean_m( max(-A r, -A clip(r, 1 - eps, 1 + eps_high)) )``.

    ``r = exp(l_theta - l_old)`` (log-ratio clamped to [-20, 20] as verl does); ``eps_high`` defaults to
    ``eps`` (set it for DAPO-style clip-higher). Where the clipped branch is the larger loss the token's
    gradient is 0.

    Dual clip (Ye et al. 2020; verl ``compute_policy_loss`` with ``clip_ratio_c``): with ``dual_clip_c = c``
    (> 1), a token with ``A < 0`` has its loss capped at ``-c A``: ``min(max(-A r, -A clip(r)), -c A)``.
    Without the cap a negative-advantage token whose ratio has run far above 1 (a stale or off-policy
    sample) gives a loss and gradient that grow with ``r`` without bound; past ``r = c`` its gradient
    is 0. ``None`` or 0 disables it (plain PPO-clip).

    Args:
        logprobs: ``[B, T]`` current log-probs (with grad).
        old_logprobs: ``[B, T]`` log-probs at sampling time (no grad).
        advantages: ``[B, T]`` token advantages (see ``advantages.broadcast_to_tokens``).
    Returns:
        ``(loss, stats)``; stats: ``pg_loss``, ``clip_fraction`` (share of tokens where the clipped branch
        is active), ``approx_kl`` (``mean(r - 1 - log r)``, as CleanRL), ``ratio_mean``, and with the
        dual clip ``dual_clip_fraction`` (share of tokens where the ``-c A`` cap is active).
    """
    if advantages.shape != logprobs.shape:
        raise ValueError(f"advantages must be per token {tuple(logprobs.shape)}, got {tuple(advantages.shape)}")
    if dual_clip_c is not None and dual_clip_c != 0 and not dual_clip_c > 1.0:
        raise ValueError(f"dual_clip_c must be > 1 (or None/0 to disable), got {dual_clip_c}")
    eps_high = clip_eps if clip_eps_high is None else clip_eps_high
    log_ratio = (logprobs - old_logprobs.detach()).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    advantages = advantages.detach()
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_eps, 1.0 + eps_high)
    per_token = torch.maximum(unclipped, clipped)
    dual_active = None
    if dual_clip_c:
        cap = -advantages * dual_clip_c  # a constant: where it is the smaller loss the token's gradient is 0
        dual_active = (advantages < 0) & (per_token > cap)
        per_token = torch.where(advantages < 0, torch.minimum(per_token, cap), per_token)
    loss = masked_token_mean(per_token, response_mask, token_count)
    with torch.no_grad():
        stats = {
            "pg_loss": loss.item(),
            "clip_fraction": masked_token_mean((clipped > unclipped).to(ratio.dtype), response_mask, token_count).item(),
            "approx_kl": masked_token_mean((ratio - 1.0) - log_ratio, response_mask, token_count).item(),
            "ratio_mean": masked_token_mean(ratio, response_mask, token_count).item(),
        }
        if dual_active is not None:
            stats["dual_clip_fraction"] = masked_token_mean(dual_active.to(ratio.dtype), response_mask,
                                                            token_count).item()
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


GATES = ("sigmoid", "constant")


def opd_gate(logprobs: Tensor, teacher_logprobs: Tensor, *, beta: float = 5.0, kind: str = "sigmoid") -> Tensor:
    """The OPD gate, detached, ``[B, T]``.

    ``sigmoid`` (SEED): ``g = sigmoid(beta * (l_skill - l_theta))``. ``constant`` (the constant-gate
    control): ``g = 1``. The OPD loss's gradient is ``-g * grad(l_theta)`` on the student's own sampled tokens
    (``l_skill`` is detached), so with ``g = 1`` the teacher drops out: content-free self-imitation, not
    distillation towards the teacher; the teacher reaches the update only through a gate that varies.
    """
    if kind == "sigmoid":
        return torch.sigmoid(beta * (teacher_logprobs - logprobs)).detach()
    if kind == "constant":
        return torch.ones_like(logprobs).detach()
    raise ValueError(f"gate: expected one of {GATES}, got {kind!r}")


def opd_loss(
    logprobs: Tensor,
    teacher_logprobs: Tensor,
    response_mask: Tensor,
    skill_valid: Tensor,
    *,
    beta: float = 5.0,
    gate: str = "sigmoid",
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
    ``gate="constant"`` (control): ``g = 1`` everywhere, so the gradient is ``-m / sum(m)``.

    Denominator: the tokens with ``m = 1`` only, i.e. of samples whose skill passed the format check;
    a dropped skill contributes nothing (value or gradient) and does not dilute the others, so the term's
    scale does not depend on the skill validity rate. No valid token: term 0 (zero gradient).

    Args:
        logprobs: ``[B, T]`` policy log-probs (with grad).
        teacher_logprobs: ``[B, T]`` log-probs under the skill-augmented prompt (never receives grad).
        response_mask: ``[B, T]``.
        skill_valid: ``[B]`` bool or float, 1 where the sample's skill is valid.
        gate: ``sigmoid`` (SEED) or ``constant`` (see :func:`opd_gate`).
    Returns:
        ``(term, stats)``; stats over ``m``: ``opd_term``, ``mean_gate``, ``frac_delta_pos``
        (share of tokens with Delta > 0), ``mean_delta``, ``opd_tokens`` (``sum(m)``).
    """
    l_skill = teacher_logprobs.detach()
    mask = response_mask * skill_valid.to(response_mask.dtype)[:, None]
    delta = (l_skill - logprobs).detach()
    g = opd_gate(logprobs, l_skill, beta=beta, kind=gate)
    term = masked_token_mean(g * (l_skill - logprobs), mask, token_count)
    with torch.no_grad():
        stats = {
            "opd_term": term.item(),
            "mean_gate": masked_token_mean(g, mask, token_count).item(),
            "frac_delta_pos": masked_token_mean((delta > 0).to(mask.dtype), mask, token_count).item(),
            "mean_delta": masked_token_mean(delta, mask, token_count).item(),
            "opd_tokens": mask.sum().item(),
        }
    return term, stats


def gate_advantage_covariance(gate: Tensor, advantages: Tensor, mask: Tensor,
                              contexts: Tensor | None = None) -> float:
    """``Cov(g, A)`` over the tokens with ``mask = 1``, within contexts (the paper's Eq. 8 diagnostic).

    The one definition behind both logged values. Tokens are grouped by the context of their sample
    (``contexts``: ``[B]`` integer label per row); within each context ``c`` the gate and the advantage
    are centred on their token means there, and the result is the token-weighted average over contexts:

        Cov = sum_c sum_{t in c} m_t (g_t - gbar_c)(A_t - Abar_c) / sum_c sum_{t in c} m_t,

    over the contexts holding at least 2 samples (rows) with a masked token; a context of one sample
    has no within-context variation of the advantage (every token of a sample shares it). Population
    normalisation (divide by the token count, not count - 1). 0.0 when no context qualifies.

    - ``contexts=None``: every row in one context: the *pooled* covariance over all tokens
      (``numpy.cov(g, A, bias=True)``). It mixes the variation of the gate between states with that
      within a state, so it is only a proxy for Eq. 8.
    - The trainer's ``gate_adv_cov_context``: the context of a step sample is its GRPO group and its step
      index (the same task and reset seed, the same turn): the paper's condition on the context,
      approximated by the turn, since only the first turn's prompt is the same for the whole group.
    """
    with torch.no_grad():
        rows = mask.shape[0]
        labels = torch.zeros(rows, dtype=torch.long, device=mask.device) if contexts is None else contexts.to(mask.device)
        if labels.shape != (rows,):
            raise ValueError(f"contexts must be one label per row ({rows}), got {tuple(labels.shape)}")
        _, inverse = torch.unique(labels, return_inverse=True)
        n_ctx = int(inverse.max()) + 1 if rows else 0
        mask = mask.to(torch.float64)
        g, a = gate.to(torch.float64) * mask, advantages.to(torch.float64) * mask

        def per_context(x: Tensor) -> Tensor:  # [B, T] -> [C]: the sum of x over each context's tokens
            return torch.zeros(n_ctx, dtype=x.dtype, device=x.device).index_add_(0, inverse, x.sum(dim=1))

        tokens = per_context(mask)
        rows_with_tokens = torch.zeros(n_ctx, dtype=torch.float64, device=mask.device).index_add_(
            0, inverse, (mask.sum(dim=1) > 0).to(torch.float64))
        keep = rows_with_tokens >= 2
        if not bool(keep.any()):
            return 0.0
        g_mean = (per_context(g) / tokens.clamp(min=1))[inverse][:, None]
        a_mean = (per_context(a) / tokens.clamp(min=1))[inverse][:, None]
        co = per_context((gate.to(torch.float64) - g_mean) * (advantages.to(torch.float64) - a_mean) * mask)
        return (co[keep].sum() / tokens[keep].sum()).item()


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
    dual_clip_c: float | None = 3.0,
    kl_coef: float = 0.0,
    opd_coef: float = 0.01,
    opd_beta: float = 5.0,
    opd_gate: str = "sigmoid",
    token_count: Tensor | float | None = None,
    opd_token_count: Tensor | float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """SEED Stage 2 loss: ``L = L_PPO + kl_coef * KL + opd_coef * OPD``.

    The KL term is used when ``ref_logprobs`` is given and ``kl_coef != 0``; the OPD term is added when
    ``teacher_logprobs`` is given and ``opd_coef != 0`` (GRPO baseline: ``opd_coef=0``). With
    ``teacher_logprobs`` given, OPD statistics are logged even when ``opd_coef == 0``.
    ``skill_valid=None`` means every skill is valid.
    Paper defaults: clip 0.2, dual clip 3 (the released verl-agent code), KL 0.01 (the caller passes
    it), opd_coef 0.01, opd_beta 5, sigmoid gate.
    ``token_count`` / ``opd_token_count``: denominators of the PPO+KL and OPD token means (default: this
    batch's counts; see the module docstring for data parallelism). The gate/advantage covariance is
    not computed here: it needs the whole batch's contexts (the trainer's ``gate_diagnostics``, with
    :func:`gate_advantage_covariance`).

    Returns:
        ``(loss, stats)``: stats of :func:`ppo_clip_loss`, ``kl`` if used, those of :func:`opd_loss` if a
        teacher is given, and ``loss``.
    """
    loss, stats = ppo_clip_loss(
        logprobs, old_logprobs, advantages, response_mask, clip_eps=clip_eps, clip_eps_high=clip_eps_high,
        dual_clip_c=dual_clip_c, token_count=token_count,
    )
    if ref_logprobs is not None and kl_coef != 0.0:
        kl = masked_token_mean(kl_low_var(logprobs, ref_logprobs), response_mask, token_count)
        loss = loss + kl_coef * kl
        stats["kl"] = kl.item()
    if teacher_logprobs is not None:
        valid = torch.ones(logprobs.shape[0], device=logprobs.device) if skill_valid is None else skill_valid
        term, opd_stats = opd_loss(logprobs, teacher_logprobs, response_mask, valid, beta=opd_beta, gate=opd_gate,
                                   token_count=opd_token_count)
        stats |= opd_stats
        if opd_coef != 0.0:
            loss = loss + opd_coef * term
    stats["loss"] = loss.item()
    return loss, stats
