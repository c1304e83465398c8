"""Advantage estimators (seed_train.advantages) against hand-computed values."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from seed_train.advantages import (  # noqa: E402
    anchor_state_groups,
    broadcast_to_tokens,
    discounted_returns,
    gigpo_step_advantages,
    grpo_episode_advantages,
    group_normalize,
    step_relative_advantages,
    step_scores,
)

SQRT_HALF = math.sqrt(0.5)


def test_grpo_hand_computed_unbiased_std():
    # group 5: returns [1, 0, 0, 1] -> mean 0.5, unbiased var 4*0.25/3 = 1/3, std 0.57735 -> +-0.866025
    # group 2: returns [2, 4, 9] -> mean 5, centered [-3, -1, 4], var 26/2 = 13, std 3.605551
    # group 9: singleton -> 0; group 4: identical returns -> 0. Groups interleaved, ids non-contiguous.
    returns = torch.tensor([1.0, 2.0, 0.0, 7.0, 4.0, 0.0, 3.0, 9.0, 1.0, 3.0])
    groups = torch.tensor([5, 2, 5, 9, 2, 5, 4, 2, 5, 4])
    adv = grpo_episode_advantages(returns, groups)
    a = 0.5 / math.sqrt(1.0 / 3.0)  # 0.8660254
    s = math.sqrt(13.0)
    expected = torch.tensor([a, -3 / s, -a, 0.0, -1 / s, -a, 0.0, 4 / s, a, 0.0])
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=1e-5)
    assert adv[0].item() == pytest.approx(0.8660254, abs=1e-5)
    assert adv[3].item() == 0.0 and adv[6].item() == 0.0 and adv[9].item() == 0.0


def test_grpo_mean_only():
    returns = torch.tensor([1.0, 2.0, 0.0, 7.0, 4.0, 0.0, 3.0, 9.0, 1.0, 3.0])
    groups = torch.tensor([5, 2, 5, 9, 2, 5, 4, 2, 5, 4])
    adv = grpo_episode_advantages(returns, groups, normalize_std=False)
    expected = torch.tensor([0.5, -3.0, -0.5, 0.0, -1.0, -0.5, 0.0, 4.0, 0.5, 0.0])
    torch.testing.assert_close(adv, expected)


def test_grpo_matches_loop_reference():
    gen = torch.Generator().manual_seed(0)
    returns = torch.randn(64, generator=gen, dtype=torch.float64)
    groups = torch.randint(0, 9, (64,), generator=gen)
    adv = grpo_episode_advantages(returns, groups)
    for g in groups.unique():
        sel = groups == g
        r = returns[sel]
        ref = torch.zeros_like(r) if r.numel() == 1 else (r - r.mean()) / (r.std() + 1e-6)
        torch.testing.assert_close(adv[sel], ref)


def test_grpo_integer_returns_give_float():
    adv = grpo_episode_advantages(torch.tensor([10, 0]), torch.tensor([0, 0]))
    assert adv.dtype == torch.float32
    torch.testing.assert_close(adv, torch.tensor([SQRT_HALF, -SQRT_HALF]), atol=1e-5, rtol=1e-5)


def test_broadcast_to_tokens():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    out = broadcast_to_tokens(torch.tensor([2.0, -1.0]), mask)
    torch.testing.assert_close(out, torch.tensor([[2.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]))


def test_discounted_returns_any_order():
    # episode 3: rewards [0, 0, 10], gamma 0.5 -> [2.5, 5, 10]; episode 8: [1, 2] -> [2, 2]. Shuffled rows.
    rewards = torch.tensor([10.0, 1.0, 0.0, 2.0, 0.0])
    episode = torch.tensor([3, 8, 3, 8, 3])
    step = torch.tensor([2, 0, 0, 1, 1])
    out = discounted_returns(rewards, episode, step, gamma=0.5)
    torch.testing.assert_close(out, torch.tensor([10.0, 2.0, 2.5, 2.0, 5.0]))


def test_discounted_returns_rejects_duplicate_steps():
    with pytest.raises(ValueError, match="unique"):
        discounted_returns(torch.ones(2), torch.tensor([0, 0]), torch.tensor([1, 1]))


# GiGPO hand-built example, gamma = 0.5.
# group 0: ep0 states [s0, sA, sB] rewards [0, 0, 10] -> G [2.5, 5, 10], return 10
#          ep1 states [s0, sC]     rewards [0, 0]     -> G [0, 0],       return 0
# group 1: ep2 states [s0, sA]     rewards [0, 4]     -> G [2, 4],       return 4
#          ep3 states [s0, sA, sA] rewards [0, 0, 8]  -> G [2, 4, 8],    return 8
# Anchor groups (never across episode groups):
#   g0/s0: {2.5, 0} -> +-1/sqrt(2); g0/sA, g0/sB, g0/sC: singletons -> 0
#   g1/s0: {2, 2} -> 0 (identical); g1/sA: {4, 4, 8} -> mean 16/3, centered [-4/3, -4/3, 8/3],
#          unbiased var (16+16+64)/9/2 = 48/9, std 2.309401 -> [-0.57735, -0.57735, 1.154701]
# Episode advantages: group 0 [ep0 +1/sqrt2, ep1 -1/sqrt2], group 1 [ep2 -1/sqrt2, ep3 +1/sqrt2].
GIGPO_EPISODE = torch.tensor([0, 0, 0, 1, 1, 2, 2, 3, 3, 3])
GIGPO_STEP = torch.tensor([0, 1, 2, 0, 1, 0, 1, 0, 1, 2])
GIGPO_GROUP = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1, 1, 1])
GIGPO_REWARDS = torch.tensor([0.0, 0.0, 10.0, 0.0, 0.0, 0.0, 4.0, 0.0, 0.0, 8.0])
GIGPO_STATES = ["s0", "sA", "sB", "s0", "sC", "s0", "sA", "s0", "sA", "sA"]
C = 1 / math.sqrt(3.0)  # 0.57735 = (4/3) / std
GIGPO_STEP_ADV = [SQRT_HALF, 0.0, 0.0, -SQRT_HALF, 0.0, 0.0, -C, 0.0, -C, 2 * C]


def test_anchor_state_groups_stay_within_episode_group():
    labels = anchor_state_groups(GIGPO_GROUP, GIGPO_STATES).tolist()
    assert labels == [0, 1, 2, 0, 3, 4, 5, 4, 5, 5]


def test_gigpo_step_level_hand_computed():
    step_adv = step_relative_advantages(GIGPO_REWARDS, GIGPO_EPISODE, GIGPO_STEP, GIGPO_GROUP, GIGPO_STATES, gamma=0.5)
    torch.testing.assert_close(step_adv, torch.tensor(GIGPO_STEP_ADV), atol=1e-5, rtol=1e-5)
    # unique anchor states (sB, sC and ep0's sA) get exactly 0
    assert step_adv[1].item() == 0.0 and step_adv[2].item() == 0.0 and step_adv[4].item() == 0.0


def test_gigpo_combined_hand_computed():
    episode_returns = torch.tensor([10.0, 0.0, 4.0, 8.0])
    episode_adv = grpo_episode_advantages(episode_returns, torch.tensor([0, 0, 1, 1]))
    torch.testing.assert_close(episode_adv, torch.tensor([SQRT_HALF, -SQRT_HALF, -SQRT_HALF, SQRT_HALF]),
                               atol=1e-5, rtol=1e-5)
    per_step = episode_adv[GIGPO_EPISODE]
    out = gigpo_step_advantages(per_step, GIGPO_REWARDS, GIGPO_EPISODE, GIGPO_STEP, GIGPO_GROUP, GIGPO_STATES,
                                gamma=0.5, omega=0.5)
    h = SQRT_HALF
    expected = [h + 0.5 * h, h, h, -h - 0.5 * h, -h, -h, -h - 0.5 * C, h, h - 0.5 * C, h + C]
    torch.testing.assert_close(out, torch.tensor(expected), atol=1e-5, rtol=1e-5)


def test_gigpo_mean_only():
    step_adv = step_relative_advantages(GIGPO_REWARDS, GIGPO_EPISODE, GIGPO_STEP, GIGPO_GROUP, GIGPO_STATES,
                                        gamma=0.5, normalize_std=False)
    expected = [1.25, 0.0, 0.0, -1.25, 0.0, 0.0, -4 / 3, 0.0, -4 / 3, 8 / 3]
    torch.testing.assert_close(step_adv, torch.tensor(expected), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------- the paper's code's conventions
def test_group_normalize_with_statistics_of_other_values():
    # steps [10, 9.9, 10 | 0] normalised by their episodes' returns [10, 0]: mean 5, unbiased std sqrt(50)
    out = group_normalize(torch.tensor([10.0, 9.9, 10.0, 0.0], dtype=torch.float64), torch.tensor([4, 4, 4, 4]),
                          stats_values=torch.tensor([10.0, 0.0], dtype=torch.float64),
                          stats_group_ids=torch.tensor([4, 4]))
    s = math.sqrt(50.0) + 1e-6
    torch.testing.assert_close(out, torch.tensor([5 / s, 4.9 / s, 5 / s, -5 / s], dtype=torch.float64))
    with pytest.raises(ValueError, match="no member"):
        group_normalize(torch.ones(2), torch.tensor([0, 1]), stats_values=torch.ones(1), stats_group_ids=torch.tensor([0]))


def test_step_scores_charge_the_penalty_to_the_invalid_step():
    # episode 0: rewards [0, -0.1 (format error), 10] -> recorded return 9.9; episode 1: [-0.1 (error), -0.1 (error)]
    returns = torch.tensor([9.9, -0.2], dtype=torch.float64)
    episode = torch.tensor([0, 0, 0, 1, 1])
    errors = torch.tensor([False, True, False, True, True])
    scores, per_episode = step_scores(returns, episode, errors, 0.1, penalty_on="step")
    torch.testing.assert_close(scores, torch.tensor([10.0, 9.9, 10.0, -0.1, -0.1], dtype=torch.float64))
    torch.testing.assert_close(per_episode, torch.tensor([10.0, 0.0], dtype=torch.float64))
    scores, per_episode = step_scores(returns, episode, errors, 0.1, penalty_on="episode")
    torch.testing.assert_close(scores, torch.tensor([9.9, 9.9, 9.9, -0.2, -0.2], dtype=torch.float64))
    torch.testing.assert_close(per_episode, returns)


def _z(values: list[float], stats: list[float]) -> list[float]:
    """(x - mean) / (unbiased std + 1e-6), by the statistics module (independent of the torch code)."""
    import statistics

    mean, std = statistics.mean(stats), statistics.stdev(stats)
    return [(x - mean) / (std + 1e-6) for x in values]


def _episodes():
    """Two groups; rewards as the LLMActionParser records them (format penalty 0.1 on the error steps).

    g1: A = [0, -0.1 (error), 10] (return 9.9),  B = [0] (return 0)
    g2: C = [-0.1 (error), -0.1 (error)] (return -0.2),  D = [0, 10] (return 10)
    """
    from wrappers import Step, Trajectory

    def episode(name, group, rewards, errors):
        steps = [Step(index=i, observation=f"{name}{i}", action="a", reward=r, format_error=e)
                 for i, (r, e) in enumerate(zip(rewards, errors))]
        return Trajectory(episode_id=name, env_id="x", task_id=group, task="t", category="c", split="train",
                          group_id=group, steps=steps).finish(success=rewards[-1] > 0, score=0.0)

    return [episode("A", "g1", [0.0, -0.1, 10.0], [False, True, False]), episode("B", "g1", [0.0], [False]),
            episode("C", "g2", [-0.1, -0.1], [True, True]), episode("D", "g2", [0.0, 10.0], [False, False])]


@pytest.mark.parametrize("group_stats,penalty_on,expected", [
    # verl-agent: step scores (penalty on the invalid step), statistics over the group's step samples
    ("steps", "step", _z([10, 9.9, 10, 0], [10, 9.9, 10, 0]) + _z([-0.1, -0.1, 10, 10], [-0.1, -0.1, 10, 10])),
    # step scores normalised by one penalty-free return per episode: g1 [10, 0], g2 [0, 10]
    ("episodes", "step", _z([10, 9.9, 10, 0], [10, 0]) + _z([-0.1, -0.1, 10, 10], [0, 10])),
    # recorded returns on every step, statistics over the steps (episodes weighted by length)
    ("steps", "episode", _z([9.9, 9.9, 9.9, 0], [9.9, 9.9, 9.9, 0]) + _z([-0.2, -0.2, 10, 10], [-0.2, -0.2, 10, 10])),
    # plain GRPO on episode returns, broadcast: g1 [9.9, 0], g2 [-0.2, 10]
    ("episodes", "episode", _z([9.9, 9.9, 9.9, 0], [9.9, 0]) + _z([-0.2, -0.2, 10, 10], [-0.2, 10])),
])
def test_step_advantages_conventions_hand_computed(group_stats, penalty_on, expected):
    from seed_train.samples import step_advantages

    adv = step_advantages(_episodes(), group_stats=group_stats, format_penalty_on=penalty_on, format_penalty=0.1)
    assert [len(a) for a in adv] == [3, 1, 2, 2]
    assert [a for episode in adv for a in episode] == pytest.approx(expected, abs=1e-6)


def test_step_advantages_step_penalty_needs_the_penalty():
    from seed_train.samples import step_advantages

    with pytest.raises(ValueError, match="format_penalty"):
        step_advantages(_episodes(), format_penalty_on="step")
    with pytest.raises(ValueError, match="group_stats"):
        step_advantages(_episodes(), group_stats="tokens")
