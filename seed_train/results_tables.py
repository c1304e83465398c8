"""The published results tables, generated from data kept in the repository.

    python -m seed_train.results_tables          # rewrite the generated blocks of docs/results.md and README.md
    python -m seed_train.results_tables --check  # exit 1 if either differs from what the data give (a test runs it)

Two sources, both under ``docs/results/``:

- ``records/*.jsonl``: experiment records (:mod:`seed_train.records`): per-episode outcomes, skills,
  metrics and commands; every table is rebuilt from them with the experiment's own report code;
- ``transcribed.json``: per-seed success rates of experiments run before records were kept, transcribed
  from the narrative's tables (docs/results.md; their folders are gone: no per-episode data); restated at
  seed level.

Each comparison is one row of :data:`seed_train.seed_statistics.COMPARISON_HEADER`; p-values are Holm-
adjusted within each experiment (the family its conclusions are drawn from).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from seed_train.experiment_report import decoding_phrase
from seed_train.seed_statistics import (COMPARISON_HEADER, READING_NOTE, comparison_row, compare_over_seeds,
                                        detectable_text, mean_sd_text, sample_sd, with_holm)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
LABELS = {"after_stage1": "after Stage 1", "before": "before training"}
MARK = "<!-- {name}:{end} (generated: python -m seed_train.results_tables) -->"


def _label(name: str) -> str:
    return LABELS.get(name, name)


def transcribed_experiments(path: Path = RESULTS / "transcribed.json") -> list[dict[str, Any]]:
    """Each transcribed experiment with its seed-level comparisons per split (Holm over the experiment)."""
    data = json.loads(path.read_text())
    out = []
    for e in data["experiments"]:
        comparisons = []
        for split, policies in e["splits"].items():
            for a, b in e["comparisons"]:
                if a in policies and b in policies:
                    c = compare_over_seeds(dict(zip(e["seeds"], policies[a])), dict(zip(e["seeds"], policies[b])),
                                           label_a=_label(a), label_b=_label(b))
                    comparisons.append({**c, "split": split})
        out.append({**e, "seed_level": with_holm(comparisons)})
    return out


def recorded_experiments(folder: Path = RESULTS / "records") -> list[dict[str, Any]]:
    """Each committed record with its report (comparisons Holm-adjusted over the record's report)."""
    from seed_train.records import read_record, report_from_record

    out = []
    for path in sorted(folder.glob("*.jsonl")):
        record = read_record(path)
        report = report_from_record(record)
        comparisons = [{**c, "split": split + ("" if key == "seed_level" else " (score)"), "a": _label(c["a"]),
                        "b": _label(c["b"])}
                       for key in ("seed_level", "seed_level_score")
                       for split, section in report["splits"].items() for c in section.get(key, [])]
        out.append({"name": path.stem, "path": path.relative_to(ROOT).as_posix(), "record": record, "report": report,
                    "seed_level": comparisons})
    return out


def comparison_table(comparisons: list[dict[str, Any]]) -> list[str]:
    if not comparisons:  # a record of the base model and Stage 1 alone (seed-train experiment --baselines-only)
        return ["No seed-level comparison: no Stage 2 arm has run yet."]
    lines = ["| split " + COMPARISON_HEADER[0], "|---" + COMPARISON_HEADER[1]]
    return lines + [f"| {c['split']} " + comparison_row(c) for c in comparisons]


def _mean_cell(values: list[float | None], with_sd: bool = True) -> str:
    """Mean (± sd) over the seeds that have a value; with some missing (units still to run), the mean and how
    many seeds it is over."""
    present = [v for v in values if v is not None]
    if not present:
        return "-"
    mean = sum(present) / len(present)
    if len(present) < len(values):
        return f"{mean:.3f} ({len(present)} of {len(values)} seeds)"
    return mean_sd_text(mean, sample_sd(present), len(present)) if with_sd else f"{mean:.3f}"


def success_table(splits: dict[str, dict[str, list[float | None]]], seeds: list[int]) -> list[str]:
    """Per split and policy: per-seed success (``-`` where a seed's unit has not run) and mean ± sd over seeds."""
    lines = ["| split | policy | per seed (" + " / ".join(f"s{s}" for s in seeds) + ") | mean ± sd |",
             "|---|---|---|---:|"]
    for split, policies in splits.items():
        for name, values in policies.items():
            cells = " / ".join("-" if v is None else f"{v:.3f}" for v in values)
            lines.append(f"| {split} | {_label(name)} | {cells} | {_mean_cell(values)} |")
    return lines


def record_success(report: dict[str, Any]) -> tuple[dict[str, dict[str, list[float | None]]], list[int]]:
    """Per split and policy, success per training seed in ``report["seeds"]`` order (None: not run for it)."""
    seeds = report["seeds"]
    splits = {}
    for split, section in report["splits"].items():
        splits[split] = {}
        for name, row in section["policies"].items():
            by_seed = {r["seed"]: r["success"] for r in row["per_seed"]}
            splits[split][name] = [by_seed.get(s) for s in seeds]
    return splits, seeds


def update_sizes(record: Any, metric: str = "approx_kl", control: str = "sft-grpo") -> dict[str, dict[str, Any]]:
    """Per arm of a record: ``metric`` per seed at Stage 2 iteration 0 (every arm of a seed samples the same
    episodes there: the same Stage 1 policy and rollout seeds) and averaged over the iterations that updated
    (an iteration with no update logs none), with each seed's ratio to ``control``'s value. The trainer's
    ``approx_kl`` is KL(pi_rollout || pi_theta): how far an iteration's updates moved the policy."""
    from seed_train.logs import iteration_mean

    out: dict[str, dict[str, Any]] = {}
    for (kind, seed, arm), unit in sorted(record.units.items(), key=lambda kv: kv[0][1]):
        if kind == "arm":
            entry = out.setdefault(arm, {"iteration0": {}, "run": {}})
            entry["iteration0"][seed] = iteration_mean(unit.get("metrics", []), metric, iterations=(0,))
            entry["run"][seed] = iteration_mean(unit.get("metrics", []), metric)
    for entry in out.values():
        for key in ("iteration0", "run"):
            base = out.get(control, {}).get(key, {})
            entry[f"{key}_ratio"] = {s: v / base[s] for s, v in entry[key].items() if v is not None and base.get(s)}
    return out


def update_size_table(record: Any, seeds: list[int], control: str = "sft-grpo") -> list[str]:
    """The step-size table of :func:`update_sizes` (empty when the record logged no step or has no control)."""
    sizes = update_sizes(record, control=control)
    if control not in sizes or not any(v is not None for e in sizes.values() for v in e["run"].values()):
        return []

    def cells(values: dict[int, float | None]) -> str:
        return " / ".join("-" if values.get(s) is None else f"{values[s]:.4f}" for s in seeds)

    def ratio(values: dict[int, float]) -> str:
        return "-" if not values else f"{sum(values.values()) / len(values):.2f} ({len(values)})"

    per_seed = " / ".join(f"s{s}" for s in seeds)
    lines = [f"Update size: the trainer's `approx_kl` = KL(π_rollout ‖ π_θ) per seed ({per_seed}), at iteration 0"
             " (the same sampled episodes in every arm of a seed) and averaged over the iterations that "
             f"updated (`-`: no update); ratio: the arm's value over `{control}`'s on the same seed, mean over the "
             "seeds both have (how many):", "",
             "| arm | iteration 0 | ratio | over the run | ratio |", "|---|---|---:|---|---:|"]
    for arm, e in sizes.items():
        lines.append(f"| {arm} | {cells(e['iteration0'])} | {ratio(e['iteration0_ratio'])} | {cells(e['run'])} | "
                     f"{ratio(e['run_ratio'])} |")
    return lines


def results_block() -> str:
    """docs/results.md's generated part: every recorded experiment, then every transcribed one."""
    lines = [READING_NOTE, ""]
    for e in recorded_experiments():
        record, report = e["record"], e["report"]
        splits, seeds = record_success(report)
        commands = [" ".join(c) for s in record.sessions for c in s.get("commands", [])]
        lines += [f"### {e['name']} (record: `{e['path']}`)", "",
                  f"{record.header['env_id']}; arms {', '.join(report['arms']) or 'none yet'}; training seeds "
                  f"{', '.join(map(str, seeds))}; evaluation {decoding_phrase(report)}. Rebuild: `seed-train report "
                  f"{e['path']}`.", ""]
        lines += [f"Command: `{c}`" for c in dict.fromkeys(commands)] + [""]
        lines += success_table(splits, seeds) + [""] + comparison_table(e["seed_level"]) + [""]
        sizes = update_size_table(record, seeds)
        lines += sizes + ([""] if sizes else [])
    for e in transcribed_experiments():
        lines += [f"### {e['label']} (transcribed, no record)", "",
                  f"Seeds {', '.join(map(str, e['seeds']))}; commands and narrative: [below]"
                  f"({_link(e['section'])})." + (f" {e['precision']}." if e.get("precision") else ""), ""]
        lines += success_table(e["splits"], e["seeds"]) + [""] + comparison_table(e["seed_level"]) + [""]
    return "\n".join(lines).rstrip()


def _link(section: str) -> str:
    """A section of docs/results.md (``docs/results.md#x``) as a link from that page: ``#x``."""
    return "#" + section.split("#", 1)[1]


def _without_shared_override(a: str, b: str) -> tuple[str, str]:
    """Two arms with the same ``@field=value`` overrides (``seed@opd_coef=0.5`` against
    ``seed-wrong-rule@opd_coef=0.5``) compare as their base arms do; other pairs stay as named."""
    (base_a, _, over_a), (base_b, _, over_b) = a.partition("@"), b.partition("@")
    return (base_a, base_b) if over_a and over_a == over_b else (a, b)


def readme_block(sources: list[tuple[str, list[dict]]] | None = None) -> str:
    """README's compact table: per experiment with 3 seeds or more, SEED against SFT+GRPO and against its
    content controls on the test panel, at seed level (mean difference over seeds with its interval, and the
    exact test's p with its floor). ``sources``: (experiment name, seed-level comparisons) pairs; default,
    every recorded and transcribed experiment."""
    rows = ["| experiment | seeds | split | comparison | mean difference [95% CI] | sign-flip p (floor) | detectable |",
            "|---|---:|---|---|---|---|---:|"]
    wanted = {("seed", "sft-grpo"), ("seed", "seed-shuffled-tasks"),
              ("seed", "seed-empty"), ("seed", "seed-wrong-rule"), ("seed", "seed-shuffled-categories"),
              ("seed", "seed-constant-gate"), ("seed", "seed-frozen"),
              ("seed-static", "seed-static-wrong"), ("seed-static", "seed-empty"), ("seed-static", "sft-grpo")}
    if sources is None:
        sources = [(e["name"] + " (record)", e["seed_level"]) for e in recorded_experiments()]
        sources += [(e["name"], e["seed_level"]) for e in transcribed_experiments()]
    for name, comparisons in sources:
        success = {(c["a"], c["b"]): c for c in comparisons if c["split"] == "test"}
        for c in comparisons:  # the test panel, 3 seeds or more (unseen, fewer seeds, other pairs: docs/results.md)
            if c["split"] not in ("test", "test (score)") or c["n"] < 3:
                continue
            same = success.get((c["a"], c["b"]))
            if (c["split"] == "test (score)" and same is not None
                    and (same["a_per_seed"], same["b_per_seed"]) == (c["a_per_seed"], c["b_per_seed"])):
                continue  # an env whose score is its success (EZPoints): the score row would repeat it
            pair = _without_shared_override(c["a"], c["b"])
            if pair in wanted:
                a, b, diff, (lo, hi) = c["a"], c["b"], c["mean_diff"], c["ci95"]
            elif pair[::-1] in wanted:  # an experiment that ordered the pair the other way: SEED first
                a, b, diff, (lo, hi) = c["b"], c["a"], -c["mean_diff"], (-c["ci95"][1], -c["ci95"][0])
            else:
                continue
            # The sign-flip test is two-sided and 'detectable' is a size: both hold for either order.
            rows.append(f"| {name} | {c['n']} | {c['split']} | {a} − {b} | {diff:+.3f} "
                        f"[{lo:+.3f}, {hi:+.3f}] | {c['p_sign_flip']:.3g} ({c['p_floor']:.3g}) | {detectable_text(c)} |")
    return "\n".join(rows)


#: The paper's envs, in the order README's per-env table lists them.
PAPER_ENVS = ("seed/EZPoints-v0", "seed/Sokoban-v0", "seed/SearchQA-v0", "seed/WebShop-v0", "seed/ALFWorld-v0")


def cpu_recipes() -> dict[str, str]:
    """Each ``*-cpu`` recipe's env id -> the recipe's name (read from the recipes themselves)."""
    from seed_train.config import _read_yaml
    from seed_train.recipes import recipe_names, recipe_path

    return {_read_yaml(recipe_path(n))["env_id"]: n for n in recipe_names() if n.endswith("-cpu")}


#: The arm README's per-env table shows as SEED, and its content control: the first present of each.
SEED_ARMS = ("seed", "seed-static")
CONTROL_ARMS = ("seed-wrong-rule", "seed-static-wrong", "seed-empty", "seed-shuffled-tasks")


def shown_arms(policies: dict[str, list[float | None]]) -> tuple[str | None, str | None]:
    """The SEED arm README's per-env table shows and its content control. The SEED arm is the one over the most
    training seeds among :data:`SEED_ARMS` and their variants (``seed@opd_coef=0.5``), earlier in SEED_ARMS and
    the plain arm first on a tie; its control, the first of :data:`CONTROL_ARMS` run with the same overrides
    (``seed-wrong-rule@opd_coef=0.5``), else the first present."""
    def seeds(name: str) -> int:
        return sum(v is not None for v in policies[name])

    candidates = [n for base in SEED_ARMS for n in policies if n.split("@")[0] == base]
    if not candidates:
        return None, next((a for a in CONTROL_ARMS if a in policies), None)
    seed_arm = max(candidates, key=lambda n: (seeds(n), -SEED_ARMS.index(n.split("@")[0]), "@" not in n))
    overrides = seed_arm[len(seed_arm.split("@")[0]):]
    control = next((a + overrides for a in CONTROL_ARMS if a + overrides in policies),
                   next((a for a in CONTROL_ARMS if a in policies), None))
    return seed_arm, control


def env_block(experiments: list[dict[str, Any]] | None = None) -> str:
    """README's per-env table: for each paper env (then any other recorded env), each record's mean success
    over its training seeds before training, after Stage 1 and after Stage 2 per arm (SFT+GRPO, SEED, its
    content control: :func:`shown_arms`), per panel; an env with no record gets a row that says so.
    ``experiments``: default, every committed record."""
    experiments = recorded_experiments() if experiments is None else experiments
    rows = ["| env | record | seeds | panel | before | after Stage 1 | SFT+GRPO | SEED | content control |",
            "|---|---|---:|---|---:|---:|---:|---:|---|"]
    by_env: dict[str, list[dict[str, Any]]] = {}
    for e in experiments:
        by_env.setdefault(e["record"].header["env_id"], []).append(e)
    envs = [*PAPER_ENVS, *sorted(set(by_env) - set(PAPER_ENVS))]
    recipes = cpu_recipes()

    def mean(policies: dict[str, list[float | None]], name: str | None) -> str:
        return _mean_cell(policies.get(name) or [], with_sd=False) if name else "-"

    for env in envs:
        if env not in by_env:
            recipe = f"`{recipes[env]}`" if env in recipes else "no cpu recipe"
            rows.append(f"| {env} | none yet ({recipe}) | 0 | - | - | - | - | - | - |")
            continue
        for e in by_env[env]:
            splits, seeds = record_success(e["report"])
            for split in ("test", "unseen", *(s for s in splits if s not in ("test", "unseen"))):  # then panels
                policies = splits.get(split)
                if not policies:
                    continue
                seed_arm, control = shown_arms(policies)
                rows.append(f"| {env} | [{e['name']}](docs/results.md) | {len(seeds)} | {split} "
                            f"| {mean(policies, 'before')} | {mean(policies, 'after_stage1')} "
                            f"| {mean(policies, 'sft-grpo')} | {mean(policies, seed_arm)}"
                            + (f" ({seed_arm})" if seed_arm not in (None, "seed") else "")
                            + (f" | {control}: {mean(policies, control)} |" if control else " | - |"))
    return "\n".join(rows)


def replace_block(text: str, name: str, body: str, where: str) -> str:
    """``text`` with its generated block ``name`` (between the :data:`MARK` lines) replaced by ``body``."""
    from seed_envs.catalog import replace_between

    return replace_between(text, MARK.format(name=name, end="begin"), MARK.format(name=name, end="end"), body, where)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if a generated block differs from the data")
    args = p.parse_args(argv)
    stale = []
    for path, name, body in ((ROOT / "docs" / "results.md", "results", results_block()),
                             (ROOT / "README.md", "results", readme_block()),
                             (ROOT / "README.md", "envs", env_block())):
        text = path.read_text(encoding="utf-8")
        new = replace_block(text, name, body, str(path))
        if new != text:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(f"stale generated results in {', '.join(stale)}: run python -m seed_train.results_tables", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
