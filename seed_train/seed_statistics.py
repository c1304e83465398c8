"""Statistics with the training seed as the unit of analysis.

A claim about a training method ("SEED beats SFT+GRPO") is a claim about what happens when the method is
trained again: its replicates are training seeds, not evaluation episodes. The episodes of one policy are
nested in one trained model (and in tasks played several times), so pooling them into one test counts
correlated draws as independent and makes any difference between two trained models look significant.
Every comparison here therefore starts from one number per seed and arm (a success rate) and pairs the
arms by seed (both arms of a seed share Stage 1, tasks and rollout seeds):

- ``diffs``: the per-seed paired differences A - B;
- ``ci95``: a percentile interval of their mean from a stratified bootstrap over seeds (seeds resampled
  with replacement within each stratum, e.g. an env or split, as rliable's ``StratifiedBootstrap`` does);
- ``p_sign_flip``: the exact two-sided paired permutation test (every one of the 2^n sign assignments of
  the differences), with ``p_floor`` = the smallest p the design can give (2 / 2^n with n non-zero
  differences: 3 seeds cannot go below 0.25, 5 below 0.0625, so no 5-seed comparison is "significant at
  0.05" whatever the data; 6 seeds are the fewest that can be);
- ``prob_improvement``: P(A > B) over every (seed of A, seed of B) pair, ties counted half (rliable's
  probability of improvement for one task);
- ``detectable``: the smallest true mean difference that a paired t-test at alpha 0.05 would detect
  with 80% power given the observed between-seed sd of the differences and n seeds (exact, through the
  noncentral t distribution), i.e. what "no effect detected" can rule out.

:func:`holm` adjusts a table's p-values for the number of comparisons it makes (Holm-Bonferroni).

The functions are small and pure (numpy, scipy), written here: rliable 1.2.0 (the reference for the
stratified bootstrap and the probability of improvement) pins arch < 8, whose 7.x releases fail to import
with current pandas. The tests check each function against exact enumeration, scipy or simulation.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

ALPHA = 0.05
POWER = 0.8
BOOTSTRAP_REPS = 20_000
#: An sd of the per-seed differences at or below this is rounding, not spread (rates are k/n fractions).
SD_NOISE = 1e-12


def sample_sd(values: Sequence[float]) -> float:
    """Sample standard deviation (ddof 1); 0.0 for fewer than two values."""
    return float(np.std(np.asarray(values, dtype=float), ddof=1)) if len(values) > 1 else 0.0


def mean_sd_text(mean: float, sd: float, n: int) -> str:
    """'mean ± sd' over ``n`` training seeds; one seed has no spread, so 'mean (1 seed)' rather than '± 0.000'."""
    return f"{mean:.3f} ± {sd:.3f}" if n >= 2 else f"{mean:.3f} (1 seed)"


def stratified_bootstrap_ci(scores: Sequence[Sequence[float]] | Sequence[float], *, confidence: float = 0.95,
                            reps: int = BOOTSTRAP_REPS, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the mean of ``scores`` (runs x strata; a 1-D sequence is one stratum).

    Each bootstrap replicate resamples the runs (seeds) of every stratum independently, with replacement,
    and takes the mean over the whole resampled matrix. Deterministic for a given ``seed``.
    """
    data = np.asarray(scores, dtype=float)
    if data.ndim == 1:
        data = data[:, None]
    if data.ndim != 2 or data.shape[0] == 0:
        raise ValueError(f"stratified_bootstrap_ci: need a runs x strata array with at least one run; got {data.shape}")
    runs, strata = data.shape
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, runs, size=(reps, runs, strata))
    resampled = np.take_along_axis(np.broadcast_to(data, (reps, runs, strata)), picks, axis=1)
    means = resampled.mean(axis=(1, 2))
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def sign_flip_p(diffs: Sequence[float]) -> float:
    """Exact two-sided paired permutation test of mean(diffs) = 0: the share of the 2^n sign assignments
    whose |mean| is at least the observed one. 1.0 for no differences. n up to 20 (a million assignments)."""
    d = np.asarray(diffs, dtype=float)
    n = len(d)
    if n == 0:
        return 1.0
    if n > 20:
        raise ValueError(f"sign_flip_p: exact enumeration is for up to 20 seeds; got {n}")
    observed = abs(d.mean())
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    means = np.abs(signs @ d) / n
    # a tolerance so that assignments equal to the observed value up to rounding count as "as extreme"
    return float(np.mean(means >= observed - 1e-12 * max(1.0, observed)))


def sign_flip_floor(diffs: Sequence[float]) -> float:
    """The smallest p :func:`sign_flip_p` can return for this many non-zero differences: 2 / 2^n."""
    n = sum(1 for x in diffs if x != 0)
    return 1.0 if n == 0 else min(1.0, 2.0 / 2**n)


def probability_of_improvement(a: Sequence[float], b: Sequence[float]) -> float:
    """P(X > Y) for X drawn from ``a``'s runs and Y from ``b``'s, ties counted half (rliable's definition
    for one task: the Mann-Whitney U statistic over all run pairs, divided by their number)."""
    x, y = np.asarray(a, dtype=float)[:, None], np.asarray(b, dtype=float)[None, :]
    if x.size == 0 or y.size == 0:
        raise ValueError("probability_of_improvement: both arms need at least one run")
    return float(np.mean((x > y) + 0.5 * (x == y)))


def paired_t_power(effect: float, sd: float, n: int, alpha: float = ALPHA) -> float:
    """Power of the two-sided paired t-test with n pairs when the true mean difference is ``effect`` and
    the differences' sd is ``sd`` (noncentral t)."""
    from scipy import stats

    if n < 2:
        return float("nan")
    if sd <= 0:
        return 1.0 if effect != 0 else alpha
    df, nc = n - 1, effect / sd * math.sqrt(n)
    crit = stats.t.ppf(1 - alpha / 2, df)
    power = float(stats.nct.sf(crit, df, nc) + stats.nct.cdf(-crit, df, nc))
    if not math.isfinite(power):  # scipy's nct fails far in the tail (large n and effect): normal approximation
        power = float(stats.norm.sf(crit - nc) + stats.norm.cdf(-crit - nc))
    return power


def detectable_effect(sd: float, n: int, *, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest mean paired difference a two-sided paired t-test detects with ``power`` at ``alpha``,
    given n seeds and the differences' sd. nan below 2 seeds, and nan when the differences do not vary (sd 0):
    the formula would give 0 ("any effect is detected"), but a spread of zero seen in a few seeds is no estimate
    of the spread a new seed would show, so the design's size is unknown, not perfect."""
    from scipy import optimize

    if n < 2:
        return float("nan")
    if sd <= SD_NOISE:  # differences equal but for float rounding (k/48 - m/48 computed two ways)
        return float("nan")
    hi = sd
    while paired_t_power(hi, sd, n, alpha) < power:
        hi *= 2
    return float(optimize.brentq(lambda e: paired_t_power(e, sd, n, alpha) - power, 0.0, hi, xtol=1e-10))


def compare_over_seeds(a: Mapping[int, float], b: Mapping[int, float], *, label_a: str = "A", label_b: str = "B",
                       bootstrap_seed: int = 0) -> dict[str, Any]:
    """A vs B over the seeds both have: per-seed values and differences, the mean difference with its
    stratified-bootstrap 95% interval, the exact sign-flip p and its floor, the probability of improvement,
    the paired t statistic, and the smallest effect the design detects (power 0.8, alpha 0.05)."""
    seeds = sorted(set(a) & set(b))
    diffs = [float(a[s]) - float(b[s]) for s in seeds]
    n = len(seeds)
    out: dict[str, Any] = {"a": label_a, "b": label_b, "seeds": seeds, "n": n,
                           "a_per_seed": [float(a[s]) for s in seeds], "b_per_seed": [float(b[s]) for s in seeds],
                           "diffs": diffs}
    if n == 0:
        return {**out, "mean_diff": float("nan"), "sd_diff": float("nan"), "ci95": [float("nan")] * 2,
                "p_sign_flip": 1.0, "p_floor": 1.0, "prob_improvement": float("nan"), "t": float("nan"),
                "detectable": float("nan")}
    sd = sample_sd(diffs)
    mean = float(np.mean(diffs))
    return {**out, "mean_diff": mean, "sd_diff": sd,
            "ci95": list(stratified_bootstrap_ci(diffs, seed=bootstrap_seed)),
            "p_sign_flip": sign_flip_p(diffs), "p_floor": sign_flip_floor(diffs),
            "prob_improvement": probability_of_improvement(out["a_per_seed"], out["b_per_seed"]),
            "t": (mean / (sd / math.sqrt(n)) if sd > SD_NOISE else float("nan")) if n > 1 else float("nan"),
            "detectable": detectable_effect(sd, n)}


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (same order as given): controls the family-wise error rate of a
    table's comparisons at any alpha without assuming independence."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def with_holm(comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The comparisons with ``p_holm`` (their sign-flip p adjusted over the list) added."""
    adjusted = holm([c["p_sign_flip"] for c in comparisons])
    return [{**c, "p_holm": p, "family": len(comparisons)} for c, p in zip(comparisons, adjusted)]


COMPARISON_HEADER = ("| A | B | seeds | A per seed | B per seed | mean A − B [95% CI] | P(A > B) | sign-flip p (floor) "
                     "| Holm p | detectable |", "|---|---|---:|---|---|---|---:|---|---:|---:|")


def detectable_text(c: Mapping[str, Any], fmt: str = ".3f") -> str:
    """The 'detectable' cell of a :func:`compare_over_seeds` result: the size, or why there is none."""
    if math.isfinite(c["detectable"]):
        return format(c["detectable"], fmt)
    return {0: "n/a", 1: "n/a (1 seed)"}.get(c["n"], "n/a (no spread)")


def comparison_row(c: Mapping[str, Any], fmt: str = ".3f") -> str:
    """One markdown row of :data:`COMPARISON_HEADER` for a :func:`compare_over_seeds` result."""
    def values(vs: Sequence[float]) -> str:
        return " ".join(format(v, fmt) for v in vs)

    lo, hi = c["ci95"]
    # One seed has no between-seed spread: its bootstrap "interval" is the point itself and its P(A > B) just the
    # sign of that seed's difference (0, 0.5 or 1), so neither is printed.
    interval = f"[{lo:+{fmt}}, {hi:+{fmt}}]" if c["n"] >= 2 else "(1 seed: no interval)"
    prob_improvement = f"{c['prob_improvement']:.2f}" if c["n"] >= 2 else "-"
    detectable = detectable_text(c, fmt)
    holm_p = f"{c['p_holm']:.3g}" if "p_holm" in c else ""
    return (f"| {c['a']} | {c['b']} | {c['n']} | {values(c['a_per_seed'])} | {values(c['b_per_seed'])} "
            f"| {c['mean_diff']:+{fmt}} {interval} | {prob_improvement} "
            f"| {c['p_sign_flip']:.3g} ({c['p_floor']:.3g}) | {holm_p} | {detectable} |")


READING_NOTE = ("Seed-level comparisons: one success rate per training seed and policy, paired by seed. The interval "
                "is a stratified bootstrap over seeds; P(A > B) is the chance that A's rate on a seed drawn at random"
                " beats B's on a seed drawn independently (ties half: rliable's probability of improvement; '-' with "
                "one seed); p is the exact sign-flip test over seeds (its floor, 2/2^n, is the smallest p n seeds can"
                " give: below 6 seeds no comparison can reach 0.05); Holm p adjusts for the table's number of "
                "comparisons; 'detectable' is the smallest true mean difference a paired t-test would find with 80% "
                "power at the observed between-seed sd (a difference smaller than it going undetected says nothing; "
                "'n/a (no spread)' where every seed's difference is the same, which leaves that sd unknown).")
