"""Seed-level statistics: each function against an independent computation (enumeration, scipy's own
permutation test, simulation). rliable itself (1.2.0) pins arch < 8, whose 7.x fails to import with
current pandas, so the bootstrap is checked against exact enumeration instead."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from seed_train.seed_statistics import (compare_over_seeds, detectable_effect, holm, paired_t_power,
                                        probability_of_improvement, sign_flip_floor, sign_flip_p,
                                        stratified_bootstrap_ci)


def test_sign_flip_p_by_hand_and_against_scipy():
    # All positive: only the identity and the all-flipped assignment are as extreme: 2 / 2^n.
    assert sign_flip_p([0.1, 0.2, 0.3]) == pytest.approx(2 / 8)
    assert sign_flip_p([0.1, 0.2, 0.3, 0.1, 0.2]) == pytest.approx(2 / 32)
    assert sign_flip_p([0.1, 0.2, 0.3, 0.1, 0.2, 0.4]) == pytest.approx(2 / 64)
    assert sign_flip_p([0.5, -0.5]) == 1.0 and sign_flip_p([]) == 1.0 and sign_flip_p([0.0, 0.0]) == 1.0
    # [3, 1, -1]: observed |sum| 3; the sign assignments give |sums| 5, 3, 3, 1 (each twice): 6 of 8 as extreme.
    assert sign_flip_p([3.0, 1.0, -1.0]) == pytest.approx(6 / 8)
    from scipy import stats

    rng = np.random.default_rng(0)
    for n in (4, 7, 9):
        a, b = rng.normal(0.5, 0.1, n), rng.normal(0.45, 0.1, n)
        ref = stats.permutation_test((a, b), lambda x, y: np.mean(x - y), permutation_type="samples",
                                     n_resamples=10**6, alternative="two-sided").pvalue
        assert sign_flip_p(a - b) == pytest.approx(ref, rel=1e-9)


def test_sign_flip_floor_counts_nonzero_differences():
    assert sign_flip_floor([0.1, -0.2, 0.3]) == 0.25
    assert sign_flip_floor([0.1, 0.0, 0.3, 0.2, 0.1]) == pytest.approx(2 / 16)
    assert sign_flip_floor([0.1] * 6) == pytest.approx(1 / 32)  # 6 seeds: the fewest that can reach 0.05
    assert sign_flip_floor([0.1] * 5) > 0.05


def test_bootstrap_interval_matches_exact_enumeration():
    # With 3 seeds, the bootstrap distribution of the mean is the 27 equally likely resamples: its 2.5%
    # and 97.5% quantiles (of that discrete distribution), compared with 20,000 seeded draws.
    d = [0.10, -0.05, 0.30]
    exact = np.array([np.mean(c) for c in itertools.product(d, repeat=3)])
    lo, hi = stratified_bootstrap_ci(d, seed=1)
    assert lo == pytest.approx(np.percentile(exact, 2.5, method="inverted_cdf"), abs=1e-9)
    assert hi == pytest.approx(np.percentile(exact, 97.5, method="inverted_cdf"), abs=1e-9)
    assert stratified_bootstrap_ci([0.2, 0.2, 0.2]) == pytest.approx((0.2, 0.2))
    assert stratified_bootstrap_ci(d, seed=3) == stratified_bootstrap_ci(d, seed=3)  # deterministic
    # Stratified: two strata (e.g. two splits) of very different levels; every replicate keeps one mean per
    # stratum, so the interval stays inside what mixing them could give.
    lo2, hi2 = stratified_bootstrap_ci([[0.0, 1.0], [0.1, 0.9], [0.2, 1.0]])
    assert 0.45 <= lo2 <= hi2 <= 0.6


def test_probability_of_improvement_by_hand():
    # pairs (3 x 2): 0.5>0.4 yes, 0.5>0.6 no, 0.3 no, no, 0.6>0.4 yes, 0.6=0.6 half -> 2.5 / 6
    assert probability_of_improvement([0.5, 0.3, 0.6], [0.4, 0.6]) == pytest.approx(2.5 / 6)
    assert probability_of_improvement([1.0], [0.0]) == 1.0 and probability_of_improvement([0.2], [0.2]) == 0.5


def test_detectable_effect_has_the_asked_power_by_simulation():
    rng = np.random.default_rng(0)
    from scipy import stats

    for n, sd in ((5, 0.1), (8, 0.05)):
        effect = detectable_effect(sd, n)
        assert paired_t_power(effect, sd, n) == pytest.approx(0.8, abs=1e-6)
        diffs = rng.normal(effect, sd, size=(40_000, n))
        p = stats.ttest_1samp(diffs, 0.0, axis=1).pvalue
        assert np.mean(p < 0.05) == pytest.approx(0.8, abs=0.01)
    # large n: the normal approximation (z_.975 + z_.8) * sd / sqrt(n)
    assert detectable_effect(1.0, 400) == pytest.approx((1.959964 + 0.841621) / 20, rel=0.01)
    # One seed, or differences that do not vary: no size (the formula's 0 would read as 'detects anything').
    assert math.isnan(detectable_effect(0.1, 1)) and math.isnan(detectable_effect(0.0, 5))


def test_holm_adjustment_by_hand():
    # sorted 0.01, 0.02, 0.04 with m = 3: 0.03, 0.04, max(0.04, 0.04) -> in the given order
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0]) and holm([]) == []


def test_compare_over_seeds_pairs_by_seed():
    a = {0: 0.50, 1: 0.70, 2: 0.60, 3: 0.40}
    b = {0: 0.40, 1: 0.60, 2: 0.65, 9: 0.10}  # seed 3 and 9 unpaired: left out
    c = compare_over_seeds(a, b, label_a="seed", label_b="sft-grpo")
    assert c["seeds"] == [0, 1, 2] and c["n"] == 3
    assert c["diffs"] == pytest.approx([0.10, 0.10, -0.05])
    assert c["mean_diff"] == pytest.approx(0.05) and c["sd_diff"] == pytest.approx(np.std([0.1, 0.1, -0.05], ddof=1))
    assert c["p_floor"] == 0.25 and c["p_sign_flip"] == pytest.approx(sign_flip_p([0.1, 0.1, -0.05]))
    assert c["t"] == pytest.approx(0.05 / (c["sd_diff"] / math.sqrt(3)))
    assert c["ci95"][0] <= c["mean_diff"] <= c["ci95"][1]
    assert c["detectable"] == pytest.approx(detectable_effect(c["sd_diff"], 3))
    assert c["prob_improvement"] == pytest.approx(probability_of_improvement([0.5, 0.7, 0.6], [0.4, 0.6, 0.65]))


def cells(row: str) -> list[str]:
    """The cells of one markdown table row."""
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def test_a_row_of_one_seed_prints_no_interval():
    """One seed has no between-seed spread: the row gives the difference and no bootstrap interval (which
    would be the point itself), no P(A > B) (which would be the sign of that one difference) and no
    detectable size."""
    from seed_train.seed_statistics import COMPARISON_HEADER, comparison_row

    columns = cells(COMPARISON_HEADER[0])
    one = compare_over_seeds({0: 0.5}, {0: 0.25}, label_a="seed", label_b="sft-grpo")
    row = comparison_row(one)
    assert "+0.250 (1 seed: no interval)" in row and "[+0.250, +0.250]" not in row and row.endswith("| n/a (1 seed) |")
    assert len(cells(row)) == len(columns)
    assert cells(row)[columns.index("P(A > B)")] == "-"
    two = comparison_row(compare_over_seeds({0: 0.5, 1: 0.5}, {0: 0.25, 1: 0.5}, label_a="a", label_b="b"))
    assert "+0.125 [+0.000, +0.250]" in two
    # Run pairs (0.5, 0.25) twice win, (0.5, 0.5) twice tie: (1 + 1 + 0.5 + 0.5) / 4.
    assert cells(two)[columns.index("P(A > B)")] == "0.75"


def test_a_row_whose_seeds_differ_alike_prints_no_detectable_size():
    """Two policies that played alike on every seed differ by +0.000 each time: the paired t's sd is 0 and the
    formula's 'detectable 0.000' would claim any effect is seen; the row says the spread is unknown instead."""
    from seed_train.seed_statistics import COMPARISON_HEADER, comparison_row

    columns = cells(COMPARISON_HEADER[0])
    same = compare_over_seeds({0: 0.021, 1: 0.0, 2: 0.0}, {0: 0.021, 1: 0.0, 2: 0.0}, label_a="a", label_b="b")
    assert same["sd_diff"] == 0.0 and math.isnan(same["detectable"])
    assert cells(comparison_row(same))[columns.index("detectable")] == "n/a (no spread)"
    shifted = compare_over_seeds({0: 0.5, 1: 0.75}, {0: 0.25, 1: 0.5}, label_a="a", label_b="b")  # +0.25 on both
    assert comparison_row(shifted).endswith("| n/a (no spread) |")
    # The same difference through float rounding (0.7 - 0.6 is not 0.1 + 0.2 - 0.2) is no spread either.
    rounded = compare_over_seeds({0: 0.7, 1: 0.1 + 0.2}, {0: 0.6, 1: 0.2}, label_a="a", label_b="b")
    assert 0 < rounded["sd_diff"] < 1e-15 and math.isnan(rounded["detectable"])
    assert math.isnan(rounded["t"])  # the same rounding must not make a t of 10^15 either


def test_mean_sd_text_gives_no_spread_for_one_seed():
    from seed_train.seed_statistics import mean_sd_text

    assert mean_sd_text(0.5, 0.0, 1) == "0.500 (1 seed)"
    assert mean_sd_text(0.4583, 0.1031, 2) == "0.458 ± 0.103"
