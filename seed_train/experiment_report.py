"""An experiment's report from its units' results: per split each policy's success per training seed and over
seeds, the seed-level comparisons (the evidence), within-seed McNemar diagnostics, per-category tables, the
markdown and the training curves.

Model-free and folder-free: :func:`report_from_results` takes (kind, seed, arm) -> a unit's results, whether an
experiment folder's (:func:`seed_train.experiment.build_report`) or a committed record's
(:func:`seed_train.records.report_from_record`).
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seed_train.arms import arm_overrides
from seed_train.config import SeedConfig
from seed_train.seed_statistics import COMPARISON_HEADER, READING_NOTE, comparison_row, mean_sd_text, sample_sd

# Metrics drawn per arm over iterations when a run logs them (others' diagnostics included as they appear).
CURVE_KEYS = ("success", "skill_valid_rate", "opd_grad_share", "gate_adv_cov", "gate_adv_cov_context",
              "gate_adv_cov_pooled")


def report_from_results(results: dict[tuple[str, int, str | None], dict[str, Any] | None], *, env_id: str,
                        arms: Sequence[str], seeds: Sequence[int], splits: Sequence[str],
                        eval_decoding: dict[str, Any], starts: dict[str, str], has_stage1: bool,
                        unfinished: Sequence[str]) -> dict[str, Any]:
    """Per split: each policy's success per seed (Wilson 95% CI), mean ± sd over seeds, per-category
    aggregates; the seed-level comparisons (:func:`seed_train.seed_statistics.compare_over_seeds`: every pair
    of arms, and every arm against its Stage 2 start, ``starts``), Holm-adjusted over the whole report; and,
    as within-seed diagnostics, exact McNemar tests on episodes paired by (seed, task, sample), per seed and
    pooled. ``results``: (kind, seed, arm) -> a unit's results (``evals``: per split ``summary`` and ``tasks``),
    None where unfinished; an experiment folder's (:func:`build_report`) or a record's
    (:func:`seed_train.records.report_from_record`)."""
    from seed_train.evaluate import aggregate_runs, paired_test, wilson_interval
    from seed_train.seed_statistics import compare_over_seeds, holm

    policies = [("before", "before", None)]
    if has_stage1:
        policies.append(("after_stage1", "stage1", None))
    policies += [(arm, "arm", arm) for arm in arms]
    report: dict[str, Any] = {"env_id": env_id, "arms": list(arms), "seeds": list(seeds),
                              "overrides": {a: arm_overrides(a) for a in arms}, "eval_decoding": dict(eval_decoding),
                              "unfinished": list(unfinished), "splits": {}}
    for split in splits:
        rows: dict[str, Any] = {}
        outcomes: dict[str, dict[tuple[int, str], bool]] = {}
        for name, kind, arm in policies:
            per_seed, summaries, paired = [], [], {}
            for seed in seeds:
                result = results.get((kind, seed, arm))
                if result is None or split not in result["evals"]:
                    continue
                evaluation = result["evals"][split]
                overall = evaluation["summary"]["categories"]["all"]
                per_seed.append({"seed": seed, "success": overall["success"], "score": overall["score"],
                                 "successes": overall["successes"],
                                 "episodes": overall["episodes"],
                                 "ci95": list(wilson_interval(overall["successes"], overall["episodes"]))})
                summaries.append(evaluation["summary"])
                paired.update({(seed, task): ok for task, ok in evaluation["tasks"].items()})
            if not per_seed:
                continue
            success = [r["success"] for r in per_seed]
            rows[name] = {"per_seed": per_seed, "success_mean": sum(success) / len(success),
                          "success_sd": sample_sd(success), "categories": aggregate_runs(summaries)}
            outcomes[name] = paired
        tested = [a for a in arms if a in outcomes]
        comparisons = [(a, b) for i, a in enumerate(tested) for b in tested[i + 1:]]
        comparisons += [(arm, starts[arm]) for arm in tested if starts[arm] in outcomes]
        by_metric = {metric: {name: {r["seed"]: r[metric] for r in row["per_seed"]} for name, row in rows.items()}
                     for metric in ("success", "score")}
        seed_level, seed_level_score = ([compare_over_seeds(values[a], values[b], label_a=a, label_b=b)
                                         for a, b in comparisons] for values in by_metric.values())
        diagnostics = [{"a": a, "b": b, **paired_test(outcomes[a], outcomes[b]),
                        "per_seed": per_seed_mcnemar(outcomes[a], outcomes[b])} for a, b in comparisons]
        report["splits"][split] = {"policies": rows, "seed_level": seed_level, "seed_level_score": seed_level_score,
                                   "paired": [d for d in diagnostics if d["b"] in tested],
                                   "vs_start": [d for d in diagnostics if d["b"] not in tested]}
    # Success is the primary measure (Holm over its comparisons); the score (the env's partial credit) a
    # secondary one, adjusted as its own family.
    for key in ("seed_level", "seed_level_score"):
        family = [c for section in report["splits"].values() for c in section[key]]
        for c, p_holm in zip(family, holm([c["p_sign_flip"] for c in family])):
            c["p_holm"], c["family"] = p_holm, len(family)
        if key == "seed_level":
            report["comparisons"] = len(family)
    return report


def per_seed_mcnemar(a: dict[tuple[int, str], bool], b: dict[tuple[int, str], bool]) -> list[dict[str, Any]]:
    """The exact McNemar test within each training seed (episodes of one seed's two policies paired by task
    and sample): a diagnostic of where two trained policies differ, not evidence about the methods."""
    from seed_train.evaluate import paired_test

    seeds = sorted({k[0] for k in a} & {k[0] for k in b})
    return [{"seed": s, **paired_test({k: v for k, v in a.items() if k[0] == s}, {k: v for k, v in b.items() if k[0] == s})}
            for s in seeds]


POLICY_LABELS = {"before": "before training (base model)", "after_stage1": "after Stage 1"}


def recorded_decoding(base: SeedConfig) -> dict[str, Any]:
    """How an experiment's evaluations decode, as its report and record keep it: the temperature and samples per
    task, and the nucleus where sampled evaluations draw from one (``top_p`` < 1; absent: the whole distribution,
    as in every record before it was kept)."""
    decoding = {"eval_temperature": base.eval_temperature, "eval_samples": base.eval_samples}
    if base.eval_temperature > 0 and base.top_p < 1:
        decoding["top_p"] = base.top_p
    return decoding


def decoding_phrase(report: dict[str, Any]) -> str:
    """How the report's evaluations decoded, from the base config it records."""
    decoding = report.get("eval_decoding", {})
    temperature, samples = decoding.get("eval_temperature", 0.0), decoding.get("eval_samples", 1)
    nucleus = f", top_p {decoding['top_p']:g}" if "top_p" in decoding else ""
    return "greedy" if not temperature else f"sampled (T={temperature:g}{nucleus}, {samples} episode(s) per task)"


def report_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Experiment: {report['env_id']}", "",
             f"Arms: {', '.join(report['arms']) or 'none yet (the base model and Stage 1 only)'}; training seeds: {', '.join(map(str, report['seeds']))}. "
             f"Success is the {decoding_phrase(report)} success rate on the split's panel; mean ± sd over training "
             "seeds; per seed the Wilson 95% interval (of that one trained policy, over episodes).", "",
             READING_NOTE + f" This report makes {report.get('comparisons', 0)} seed-level comparisons."]
    if report["unfinished"]:
        lines += ["", f"**Unfinished units** (rerun the command to complete them): {', '.join(report['unfinished'])}"]
    for split, section in report["splits"].items():
        lines += ["", f"## {split}", "", "| policy | seeds | success mean ± sd | per seed: success [95% CI] |",
                  "|---|---:|---|---|"]
        for name, row in section["policies"].items():
            per_seed = "; ".join(f"s{r['seed']} {r['success']:.3f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] "
                                 f"(n={r['episodes']})" for r in row["per_seed"])
            label = POLICY_LABELS.get(name, f"`{name}` after Stage 2")
            lines.append(f"| {label} | {len(row['per_seed'])} "
                         f"| {mean_sd_text(row['success_mean'], row['success_sd'], len(row['per_seed']))} "
                         f"| {per_seed} |")
        lines += category_table(section["policies"])
        if section.get("seed_level"):
            lines += ["", "Comparisons over training seeds (the evidence; success):", "", *COMPARISON_HEADER]
            lines += [comparison_row(c) for c in section["seed_level"]]
        if section.get("seed_level_score"):
            lines += ["", "The same on the score (the env's partial credit; a secondary measure, Holm-adjusted as "
                      "its own family):", "", *COMPARISON_HEADER]
            lines += [comparison_row(c) for c in section["seed_level_score"]]
        tests = section["paired"] + section["vs_start"]
        if tests:
            lines += ["", "Within-seed diagnostics (exact McNemar on episodes paired by task and sample inside each "
                      "training seed; episodes are not replicates of a method, so these say where two trained "
                      "policies differ, not whether the methods do):", "",
                      "| A | B | per seed: A only / B only (p) | pooled A only / B only |", "|---|---|---|---|"]
            for t in tests:
                per_seed = "; ".join(f"s{r['seed']} {r['a_only']} / {r['b_only']} ({r['p_value']:.3g})"
                                     for r in t.get("per_seed", []))
                lines.append(f"| {t['a']} | {t['b']} | {per_seed} | {t['a_only']} / {t['b_only']} |")
    curves = report.get("files", {}).get("curves", [])
    if curves:
        lines += ["", "## Curves (mean over seeds, band ± sd)", ""]
        lines += [f"![{Path(p).stem}]({Path(p).name})" for p in curves]
    return "\n".join(lines)


def category_table(policies: dict[str, Any]) -> list[str]:
    """Markdown lines: each policy's success per task category (mean ± sd over seeds, then per seed), when
    the panel has more than one category: a policy that learned one category's answer for all shows there."""
    names = sorted({c for row in policies.values() for c in row["categories"] if c != "all"})
    if len(names) < 2:
        return []
    lines = ["", "Per category (success mean ± sd over seeds; per seed):", "",
             "| policy | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for name, row in policies.items():
        seeds = [r["seed"] for r in row["per_seed"]]  # the order of the runs aggregate_runs was given
        cells = []
        for c in names:
            r = row["categories"].get(c)
            per_seed = " ".join(f"s{s} {v:.2f}" for s, v in zip(seeds, r["success_per_run"])) if r else ""
            cells.append("" if r is None else
                         f"{mean_sd_text(r['success_mean'], r['success_sd'], len(r['success_per_run']))} ({per_seed})")
        lines.append(f"| {POLICY_LABELS.get(name, f'`{name}`')} | " + " | ".join(cells) + " |")
    return lines


def plot_histories(histories: dict[str, list[list[dict[str, Any]]]], env_id: str, out: Path) -> list[Path]:
    """``curves_<metric>.png`` in ``out`` for each of :data:`CURVE_KEYS` some arm logged: per arm (its seeds'
    per-iteration metrics), the mean over seeds at each iteration with a ± sd band. Returns the files written."""
    keys = [k for k in CURVE_KEYS if any(k in m for runs in histories.values() for run in runs for m in run)]
    if not keys:
        return []
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    written = []
    for key in keys:
        fig, ax = plt.subplots(figsize=(6, 4))
        for arm, runs in histories.items():
            by_iteration: dict[int, list[float]] = {}
            for run in runs:
                for m in run:
                    if isinstance(m.get(key), (int, float)):
                        by_iteration.setdefault(int(m["iteration"]), []).append(float(m[key]))
            if not by_iteration:
                continue
            its = sorted(by_iteration)
            mean = [sum(by_iteration[i]) / len(by_iteration[i]) for i in its]
            sd = [sample_sd(by_iteration[i]) for i in its]
            (line,) = ax.plot([i + 1 for i in its], mean, marker="o", label=arm)
            ax.fill_between([i + 1 for i in its], [m - s for m, s in zip(mean, sd)], [m + s for m, s in zip(mean, sd)],
                            color=line.get_color(), alpha=0.2)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("Stage 2 iteration")
        ax.set_ylabel(key)
        ax.set_title(f"{env_id}: {key}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out / f"curves_{key}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
