"""Advantage estimators for the SEED trainer: GRPO (episode level) and GiGPO (episode + step level).

Pure functions, tensors in and tensors out. Advantages are data, not part of the graph: compute them
from returns under ``torch.no_grad()`` (or from tensors that do not require grad).

Layout. An *episode* is one trajectory; episodes started from the same task and seed form a *group*
(``group_ids``). The trainer's samples are env *steps* (as in verl-agent): every step carries its
episode's advantage, broadcast to each of its response tokens with :func:`broadcast_to_tokens`.

Typical use::

    ep_adv = grpo_episode_advantages(episode_returns, episode_group_ids)        # [E]
    step_adv = ep_adv[step_episode_index]                                       # [S] (S = B samples)
    # the paper's released code (verl-agent): penalty on the invalid step, statistics over step samples
    scores, _ = step_scores(episode_returns, step_episode_index, step_format_error, 0.1, penalty_on="step")
    step_adv = grpo_step_sample_advantages(scores, episode_group_ids[step_episode_index], stats_over="steps")
    # GiGPO instead:
    step_adv = gigpo_step_advantages(ep_adv[step_episode_index], step_rewards, step_episode_index,
                                     step_index, step_group_ids, step_observation_texts)
    token_adv = broadcast_to_tokens(step_adv, response_mask)                    # [B, T]
"""
from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor


def group_normalize(
    values: Tensor,
    group_ids: Tensor,
    *,
    normalize_std: bool = True,
    eps: float = 1e-6,
    stats_values: Tensor | None = None,
    stats_group_ids: Tensor | None = None,
) -> Tensor:
    """Normalise ``values`` within the groups given by ``group_ids``.

    ``A_i = (x_i - mean_g) / (std_g + eps)`` where ``g`` is the group of ``i``, ``mean_g`` the group mean
    and ``std_g`` the *unbiased* standard deviation (``torch.std``, ddof=1, as verl / verl-agent).
    With ``normalize_std=False``: ``A_i = x_i - mean_g`` (Dr. GRPO / verl-agent ``mean_norm``).

    The statistics come from ``values`` itself, or, when given, from ``stats_values`` labelled by
    ``stats_group_ids`` (e.g. one return per episode normalising one score per step); every group of
    ``group_ids`` must then have members there.

    A group whose statistics have a single member has no spread to compare with: its std is taken as
    1 (to avoid 0/0). Without ``stats_values`` its ``x_i - mean_g`` is exactly 0, so its advantage is 0
    in both modes.

    Args:
        values: ``[N]`` float values (returns).
        group_ids: ``[N]`` integer group labels (any integers, not necessarily contiguous).
        stats_values: ``[M]`` the values the group mean/std are taken over (default: ``values``).
        stats_group_ids: ``[M]`` their group labels.
    Returns:
        ``[N]`` normalised values, same dtype as ``values`` (float32 for integer input).
    """
    values = values if values.is_floating_point() else values.float()
    if (stats_values is None) != (stats_group_ids is None):
        raise ValueError("group_normalize: give stats_values and stats_group_ids together")
    if stats_values is None:
        stats_values, stats_group_ids = values, group_ids
    stats_values = stats_values.to(values.dtype)
    # One label space for both: the first len(stats) entries define the groups' statistics.
    labels, inverse = torch.unique(torch.cat([stats_group_ids.reshape(-1), group_ids.reshape(-1)]), return_inverse=True)
    stats_inverse, inverse = inverse[: stats_values.numel()], inverse[stats_values.numel():]
    counts = torch.zeros(labels.numel(), dtype=values.dtype, device=values.device).index_add_(
        0, stats_inverse, torch.ones_like(stats_values))
    if bool((counts[inverse] == 0).any()):
        raise ValueError("group_normalize: a group of group_ids has no member in stats_group_ids")
    sums = torch.zeros_like(counts).index_add_(0, stats_inverse, stats_values)
    means = sums / counts.clamp(min=1)
    centered = values - means[inverse]
    if not normalize_std:
        return centered
    sq_sums = torch.zeros_like(counts).index_add_(0, stats_inverse, (stats_values - means[stats_inverse]) ** 2)
    std = torch.where(counts > 1, (sq_sums / (counts - 1).clamp(min=1)).sqrt(), torch.ones_like(counts))
    return centered / (std[inverse] + eps)


def grpo_episode_advantages(
    returns: Tensor, group_ids: Tensor, *, normalize_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """GRPO episode advantages: ``A_i = (R_i - mean_{j in G(i)} R_j) / (std_{j in G(i)} R_j + eps)``.

    One entry per episode. ``std`` is unbiased (ddof=1) as in verl's ``compute_grpo_outcome_advantage``;
    ``normalize_std=False`` gives the mean-only (Dr. GRPO) advantage ``R_i - mean``. A singleton group
    gets advantage 0 (verl instead uses mean 0 / std 1 there, i.e. the raw return; we prefer no signal
    over an un-baselined one). Identical returns in a group give 0.

    For verl-agent's statistics over step samples (``compute_mean_std_cross_steps``) and its format
    penalty on the invalid step, see :func:`grpo_step_sample_advantages`.

    Args:
        returns: ``[E]`` episode returns.
        group_ids: ``[E]`` integer group index of each episode.
    Returns:
        ``[E]`` advantages.
    """
    return group_normalize(returns, group_ids, normalize_std=normalize_std, eps=eps)


def step_scores(
    episode_returns: Tensor,
    step_episode_index: Tensor,
    step_format_error: Tensor,
    format_penalty: float,
    *,
    penalty_on: str = "step",
) -> tuple[Tensor, Tensor]:
    """The score of every step sample, and the return of every episode, as a format penalty is charged.

    ``episode_returns`` are recorded returns, which hold ``format_penalty`` once per format-error step
    (the ``LLMActionParser`` wrapper subtracts it from that step's reward). With ``n_e`` such steps in
    episode ``e``, its return without penalties is ``R_e + p n_e``.

    - ``penalty_on="episode"``: every step of ``e`` scores ``R_e`` (the penalty lands on the whole
      episode); the episode's return is ``R_e``.
    - ``penalty_on="step"`` (verl-agent ``apply_invalid_action_penalty``): step ``i`` of ``e`` scores
      ``R_e + p n_e - p [i had a format error]``; the episode's return is ``R_e + p n_e``.

    Args:
        episode_returns: ``[E]`` recorded episode returns (penalties included).
        step_episode_index: ``[S]`` index into ``episode_returns`` of each step.
        step_format_error: ``[S]`` bool, the step's output could not be parsed.
        format_penalty: ``p``, the penalty the wrapper charged per format error.
    Returns:
        ``(scores [S], episode_values [E])``.
    """
    if penalty_on not in ("step", "episode"):
        raise ValueError(f"penalty_on: expected 'step' or 'episode', got {penalty_on!r}")
    returns = episode_returns if episode_returns.is_floating_point() else episode_returns.float()
    if penalty_on == "episode":
        return returns[step_episode_index], returns
    errors = step_format_error.to(returns.dtype)
    n_errors = torch.zeros_like(returns).index_add_(0, step_episode_index, errors)
    clean = returns + format_penalty * n_errors
    return clean[step_episode_index] - format_penalty * errors, clean


def grpo_step_sample_advantages(
    scores: Tensor,
    step_group_ids: Tensor,
    *,
    stats_over: str = "steps",
    episode_values: Tensor | None = None,
    episode_group_ids: Tensor | None = None,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """GRPO advantage of every step sample, from its score (see :func:`step_scores`).

    ``A_i = (s_i - mean) / (std + eps)`` with the group's mean and unbiased std taken over

    - ``stats_over="steps"`` (verl-agent ``compute_mean_std_cross_steps=True``, its default): the step
      samples of the group, so an episode weighs as many times as it has steps;
    - ``stats_over="episodes"``: one value per episode of the group (``episode_values``, labelled by
      ``episode_group_ids``), every episode once.

    With scores equal to the episode return on every step and ``stats_over="episodes"`` this is
    :func:`grpo_episode_advantages` broadcast to the steps.

    Args:
        scores: ``[S]`` per-step-sample scores.
        step_group_ids: ``[S]`` integer group of each step.
        episode_values: ``[E]`` per-episode values (``stats_over="episodes"`` only).
        episode_group_ids: ``[E]`` their groups.
    Returns:
        ``[S]`` advantages.
    """
    if stats_over == "steps":
        return group_normalize(scores, step_group_ids, normalize_std=normalize_std, eps=eps)
    if stats_over == "episodes":
        if episode_values is None or episode_group_ids is None:
            raise ValueError("stats_over='episodes' needs episode_values and episode_group_ids")
        return group_normalize(scores, step_group_ids, normalize_std=normalize_std, eps=eps,
                               stats_values=episode_values, stats_group_ids=episode_group_ids)
    raise ValueError(f"stats_over: expected 'steps' or 'episodes', got {stats_over!r}")


def broadcast_to_tokens(values: Tensor, response_mask: Tensor) -> Tensor:
    """Per-sample value to every response token: ``A[b, t] = values[b] * mask[b, t]``.

    Args:
        values: ``[B]`` one value per sample (step).
        response_mask: ``[B, T]`` 1.0 for real response tokens, 0.0 for padding.
    Returns:
        ``[B, T]`` in ``response_mask``'s dtype, zero on padding.
    """
    return values.to(response_mask.dtype)[:, None] * response_mask


def discounted_returns(
    rewards: Tensor, episode_index: Tensor, step_index: Tensor, gamma: float = 0.95
) -> Tensor:
    """Discounted return of every step within its episode: ``G_t = sum_{t' >= t} gamma^(t'-t) r_t'``.

    Equivalently ``G_t = r_t + gamma * G_{t+1}`` (GiGPO Eq. 5). Steps may come in any order; each
    ``(episode_index, step_index)`` pair must be unique. A missing step index counts as reward 0.
    Computed without loops: rewards are scattered into a dense ``[E, T_max]`` table and multiplied by
    the upper-triangular discount matrix ``D[t, t'] = gamma^(t'-t) [t' >= t]``.

    Args:
        rewards: ``[S]`` reward of each step (env reward plus any format penalty).
        episode_index: ``[S]`` integer episode label of each step.
        step_index: ``[S]`` integer position of the step in its episode, from 0.
    Returns:
        ``[S]`` discounted returns, in the input's order.
    """
    rewards = rewards if rewards.is_floating_point() else rewards.float()
    _, episode = torch.unique(episode_index, return_inverse=True)
    step = step_index.long()
    n_episodes, n_steps = int(episode.max()) + 1, int(step.max()) + 1
    if torch.unique(episode * n_steps + step).numel() != rewards.numel():
        raise ValueError("discounted_returns: (episode_index, step_index) pairs must be unique")
    dense = rewards.new_zeros(n_episodes, n_steps).index_put_((episode, step), rewards)
    t = torch.arange(n_steps, device=rewards.device)
    lag = (t[None, :] - t[:, None]).to(rewards.dtype)  # lag[t, t'] = t' - t
    discount = torch.where(lag >= 0, torch.pow(gamma, lag.clamp(min=0)), torch.zeros_like(lag))
    return (dense @ discount.T)[episode, step]


def anchor_state_groups(group_ids: Tensor, state_keys: Sequence[Hashable]) -> Tensor:
    """Step-group label of each step: steps of the same episode group with identical anchor state.

    GiGPO Eq. 6: the anchor state is the env observation the step acted on (the observation text or a
    hash of it, *not* the rendered prompt with its history). Groups are never shared across episode
    groups, as in verl-agent's ``build_step_group`` (exact-match mode).

    Args:
        group_ids: ``[S]`` integer episode-group index of each step.
        state_keys: ``S`` hashable anchor-state keys (str or hash).
    Returns:
        ``[S]`` int64 step-group labels ``0..K-1`` in order of first appearance.
    """
    if len(state_keys) != group_ids.numel():
        raise ValueError(f"anchor_state_groups: {len(state_keys)} state keys for {group_ids.numel()} steps")
    labels: dict[tuple[int, Hashable], int] = {}
    step_groups = [labels.setdefault(key, len(labels)) for key in zip(group_ids.tolist(), state_keys)]
    return torch.tensor(step_groups, dtype=torch.long, device=group_ids.device)


def step_relative_advantages(
    step_rewards: Tensor,
    episode_index: Tensor,
    step_index: Tensor,
    group_ids: Tensor,
    state_keys: Sequence[Hashable],
    *,
    gamma: float = 0.95,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """GiGPO step-level advantage (Eq. 7): ``A^S_t = (G_t - mean_{anchor group} G) / (std + eps)``.

    ``G_t`` is the discounted return of the step (:func:`discounted_returns`); the anchor group is
    :func:`anchor_state_groups`. Unbiased std as elsewhere; a step whose anchor state is unique gets 0.
    """
    returns = discounted_returns(step_rewards, episode_index, step_index, gamma)
    step_groups = anchor_state_groups(group_ids, state_keys).to(returns.device)
    return group_normalize(returns, step_groups, normalize_std=normalize_std, eps=eps)


def gigpo_step_advantages(
    episode_advantages_per_step: Tensor,
    step_rewards: Tensor,
    episode_index: Tensor,
    step_index: Tensor,
    group_ids: Tensor,
    state_keys: Sequence[Hashable],
    *,
    gamma: float = 0.95,
    omega: float = 1.0,
    normalize_std: bool = True,
    eps: float = 1e-6,
) -> Tensor:
    """GiGPO (Feng et al. 2025) advantage of every step: ``A_t = A^E(episode) + omega * A^S_t`` (Eq. 8).

    Args:
        episode_advantages_per_step: ``[S]`` the step's episode advantage ``A^E``, e.g.
            ``grpo_episode_advantages(returns, groups)[episode_index]``.
        step_rewards: ``[S]`` per-step rewards.
        episode_index: ``[S]`` episode label of each step.
        step_index: ``[S]`` position of each step in its episode (0-based).
        group_ids: ``[S]`` episode-group label of each step.
        state_keys: ``S`` anchor observations (text or hashes).
    Returns:
        ``[S]`` combined advantages.
    """
    step_advantages = step_relative_advantages(
        step_rewards, episode_index, step_index, group_ids, state_keys,
        gamma=gamma, normalize_std=normalize_std, eps=eps,
    )
    return episode_advantages_per_step + omega * step_advantages
