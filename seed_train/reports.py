"""Evaluation reports one can look at: bar charts of success by category with 95% intervals, and
side-by-side comparisons of several result files (e.g. GRPO vs SEED vs the shuffled-skill control).

A result file is what ``seed-eval`` / the trainer write: a summary JSON with ``categories`` (see
``seed_train.evaluate.summarize``), or a trainer's ``results.json``, whose ``after`` evaluation is used.

    seed-eval compare runs/grpo/eval_after.json runs/seed/eval_after.json --labels GRPO SEED --out runs/cmp
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from seed_train.logs import read_metrics

FIGURE_DPI = 100


def load_summary(path: str | Path) -> dict[str, Any]:
    """An evaluation summary from a result file (a trainer's results.json gives its ``after`` summary)."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict) and "categories" not in data and isinstance(data.get("after"), dict):
        data = data["after"]
    if not isinstance(data, dict) or not isinstance(data.get("categories"), dict):
        raise ValueError(f"{path}: not an evaluation result (expected a 'categories' mapping, as seed-eval writes)")
    return data


def run_labels(paths: Sequence[str | Path]) -> list[str]:
    """Short distinct labels: file stems, or parent/stem where stems repeat (runs/a/eval.json, runs/b/eval.json)."""
    paths = [Path(p) for p in paths]
    stems = [p.stem for p in paths]
    if len(set(stems)) == len(stems):
        return stems
    return [f"{p.parent.name}/{p.stem}" for p in paths]


def category_order(summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every category of any run, sorted, with the overall row ``all`` last."""
    names = sorted({c for s in summaries for c in s["categories"] if c != "all"})
    return names + ["all"] if any("all" in s["categories"] for s in summaries) else names


def comparison_table(summaries: Sequence[Mapping[str, Any]], labels: Sequence[str], title: str = "") -> str:
    """Markdown: one row per category, one column group (success, 95% CI, n) per run."""
    lines = [f"### {title}", ""] if title else []
    head = "| category | " + " | ".join(f"{lab} success | {lab} 95% CI | {lab} n" for lab in labels) + " |"
    lines += [head, "|---|" + "---:|---|---:|" * len(labels)]
    for name in category_order(summaries):
        cells = []
        for s in summaries:
            r = s["categories"].get(name)
            if r is None:
                cells += ["-", "-", "-"]
            else:
                lo, hi = r["ci95"]
                cells += [f"{r['success']:.3f}", f"[{lo:.3f}, {hi:.3f}]", str(r["episodes"])]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


#: The trainer's evaluation files and what each one is (a chart of one evaluation is titled with it).
EVALUATIONS = {"eval_before": "before training", "eval_after_stage1": "after Stage 1",
               "eval_after": "after training"}


def evaluation_label(name: str) -> str:
    """``eval_before`` -> "before training" (the trainer's evaluation names); any other name as given."""
    return EVALUATIONS.get(name, name)


def success_chart(summaries: Sequence[Mapping[str, Any]], labels: Sequence[str], path: str | Path,
                  title: str = "") -> Path:
    """PNG bar chart of success by category, one bar per run in each group, Wilson 95% intervals as error bars."""
    import matplotlib.pyplot as plt

    fig = success_figure(summaries, labels, title)
    path = Path(path)
    fig.savefig(path, dpi=FIGURE_DPI)
    plt.close(fig)
    return path


def success_figure(summaries: Sequence[Mapping[str, Any]], labels: Sequence[str], title: str = ""):
    """The matplotlib figure of :func:`success_chart`. With one run there is no legend, so its label goes
    into the title ("eval_before" as "before training", see :func:`evaluation_label`)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    import numpy as np

    names = category_order(summaries)
    n_runs = len(summaries)
    width = 0.8 / n_runs
    xs = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.0 + 0.9 * len(names) * max(1, n_runs) ** 0.5), 3.6))
    for k, (s, label) in enumerate(zip(summaries, labels)):
        rows = [s["categories"].get(n) for n in names]
        heights = [r["success"] if r else 0.0 for r in rows]
        # Clipped at 0: at a success rate of 1.0 (or 0.0) the Wilson bound equals it up to rounding.
        lower = [max(0.0, r["success"] - r["ci95"][0]) if r else 0.0 for r in rows]
        upper = [max(0.0, r["ci95"][1] - r["success"]) if r else 0.0 for r in rows]
        # Outlined, and each bar's value printed over its interval: a success of 0 is a visible "0.00", not
        # an empty slot that reads as "not evaluated".
        bars = ax.bar(xs + (k - (n_runs - 1) / 2) * width, heights, width, yerr=[lower, upper], capsize=3,
                      label=label, color=f"C{k}", edgecolor="black", linewidth=0.6)
        for bar, r, up in zip(bars, rows, upper):
            if r is not None:
                ax.text(bar.get_x() + bar.get_width() / 2, r["success"] + up + 0.02, f"{r['success']:.2f}",
                        ha="center", va="bottom", fontsize=7)
    ax.set_xticks(xs, names, rotation=30 if len(names) > 4 else 0, ha="right" if len(names) > 4 else "center",
                  fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.set_yticks(np.linspace(0, 1, 6))
    ax.set_ylabel("success (95% CI)")
    if n_runs == 1 and labels:  # no legend with one run: the title says which evaluation this is
        title = f"{title}: {evaluation_label(labels[0])}" if title else evaluation_label(labels[0])
    if title:
        ax.set_title(title, fontsize=10)
    if n_runs > 1:  # below the axes: inside, it covers the bars that reach 1.0
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=min(n_runs, 4), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def write_comparison(paths: Sequence[str | Path], out_dir: str | Path, labels: Sequence[str] | None = None,
                     name: str = "compare") -> tuple[Path, Path]:
    """``compare.md`` and ``compare.png`` in ``out_dir`` for two or more result files; returns their paths."""
    if len(paths) < 2:
        raise ValueError("compare: give two or more result files")
    labels = list(labels) if labels else run_labels(paths)
    if len(labels) != len(paths):
        raise ValueError(f"compare: {len(labels)} labels for {len(paths)} result files")
    summaries = [load_summary(p) for p in paths]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    title = _title(summaries[0])
    md = out / f"{name}.md"
    md.write_text(comparison_table(summaries, labels, title) + "\n")
    png = success_chart(summaries, labels, out / f"{name}.png", title)
    return md, png


def _title(summary: Mapping[str, Any]) -> str:
    meta = summary.get("meta", {})
    return f"{meta.get('env_id', '')} {meta.get('split', '')}".strip()


# ------------------------------------------------------------------------------------ run report
#: Runs whose trajectory files exceed this get the viewer command in their report instead of the file
#: (the viewer embeds every episode: a long run's would be hundreds of MB).
VIEWER_MAX_BYTES = 200 * 2**20
#: Columns of the per-iteration table, when logged: (metrics key, heading, format).
ITERATION_COLUMNS = (("success", "success", ".3f"), ("return", "return", ".2f"), ("loss", "loss", ".4f"),
                     ("opd_term", "OPD term", ".4g"), ("mean_gate", "mean gate", ".3f"),
                     ("skill_valid_rate", "valid skills", ".2f"), ("format_error_rate", "format errors", ".3f"),
                     ("iteration_s", "seconds", ".0f"))


def run_evaluations(run_dir: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """(label, summary) of each evaluation a run folder holds, in stage order: before training, after
    Stage 1, after training (read from the ``eval_*.json`` files, so a resumed run keeps the first
    process's "before")."""
    run = Path(run_dir)
    found = []
    for name in EVALUATIONS:  # (in stage order)
        path = run / f"{name}.json"
        if path.is_file():
            try:
                found.append((evaluation_label(name), load_summary(path)))
            except (ValueError, OSError):  # a torn or foreign file: left out, the rest of the report stands
                continue
    return found


def skill_samples(trajectories: str | Path, n: int = 6) -> list[dict[str, Any]]:
    """Up to ``n`` skills the policy wrote in the last Stage 2 iteration that has any (``meta["skill"]``),
    half from successes and half from failures where both exist: iteration (from 1), task, outcome, skill."""
    from wrappers import read_trajectories

    path = Path(trajectories)
    if not path.is_file():
        return []
    last: dict[int, list[dict[str, Any]]] = {}
    for t in read_trajectories(path):
        skill = t.meta.get("skill")
        if not isinstance(skill, str) or not skill.strip():
            continue
        it = t.meta.get("iteration", -1)
        it = it if isinstance(it, int) else -1
        if last and it < max(last):
            continue
        last.setdefault(it, []).append({"iteration": it + 1 if it >= 0 else None,
                                        "task": t.task, "category": t.category, "success": bool(t.success),
                                        "skill": skill})
    if not last:
        return []
    rows = last[max(last)]
    wins = [r for r in rows if r["success"]]
    losses = [r for r in rows if not r["success"]]
    n_wins = min(len(wins), max(n // 2, n - len(losses)))  # half each; the other kind fills a shortfall
    return wins[:n_wins] + losses[:n - n_wins]


def _image_tag(path: Path, alt: str) -> str:
    """A PNG inlined as a data URI (the report is one file one can mail), or a note where it is missing."""
    import base64
    import html

    if not path.is_file():
        return f"<p class=note>{html.escape(path.name)}: not written (yet).</p>"
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _evaluation_table(evaluations: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """Per category, for each evaluation (before training, after Stage 1, after training): success with its
    Wilson interval and n, the mean steps per episode and the share of steps whose output parsed as an action
    (format-valid: 1 - the summary's ``format_error_rate``), so a stage that taught the format shows apart
    from one that taught the task."""
    import html

    summaries = [s for _, s in evaluations]
    columns = ("success", "95% CI (Wilson)", "n", "steps", "format-valid")
    head = "".join(f"<th colspan={len(columns)}>{html.escape(label)}</th>" for label, _ in evaluations)
    sub = "".join(f"<th>{c}</th>" for c in columns) * len(evaluations)
    rows = []
    for name in category_order(summaries):
        cells = []
        for s in summaries:
            r = s["categories"].get(name)
            if r is None:
                cells.append("<td>-</td>" * len(columns))
            else:
                lo, hi = r["ci95"]
                cells.append(f"<td>{r['success']:.3f}</td><td>[{lo:.3f}, {hi:.3f}]</td><td>{r['episodes']}</td>"
                             f"<td>{r['length']:.1f}</td><td>{1.0 - r.get('format_error_rate', 0.0):.3f}</td>")
        cls = " class=total" if name == "all" else ""
        rows.append(f"<tr{cls}><td>{html.escape(name)}</td>{''.join(cells)}</tr>")
    score = "".join(f"<td colspan={len(columns)}>{s['categories']['all']['score']:.3f}</td>" if "all" in s["categories"]
                    else f"<td colspan={len(columns)}>-</td>" for s in summaries)
    return (f"<table><tr><th rowspan=2>category</th>{head}</tr><tr>{sub}</tr>{''.join(rows)}"
            f"<tr><td>mean score (all)</td>{score}</tr></table>")


def _iteration_table(rows: Sequence[Mapping[str, Any]]) -> str:
    columns = [c for c in ITERATION_COLUMNS if any(isinstance(r.get(c[0]), (int, float)) for r in rows)]
    head = "<th>iteration</th>" + "".join(f"<th>{title}</th>" for _, title, _ in columns)
    body = []
    for r in rows:
        cells = "".join(f"<td>{format(r[key], fmt)}</td>" if isinstance(r.get(key), (int, float)) else "<td>-</td>"
                        for key, _, fmt in columns)
        body.append(f"<tr><td>{r.get('iteration', -1) + 1}</td>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _viewer(run: Path, write: bool) -> str:
    """The trajectory viewer's section: writes RUN/viewer.html (wrappers.viewer) when asked and the run's
    trajectory files are small enough, and links it; else says how to make it."""
    import html

    from wrappers.viewer import find_trajectory_files, write_viewer

    command = f"seed-envs view {run} --out {run / 'viewer.html'}"
    try:
        files = find_trajectory_files(run)
    except ValueError:
        return "<p class=note>No trajectory files in this run folder.</p>"
    size = sum(f.stat().st_size for f in files)
    out = run / "viewer.html"
    if write and size <= VIEWER_MAX_BYTES:
        write_viewer(files, out)
    elif write:
        return (f"<p>The run's trajectory files take {size / 2**20:.0f} MB; the viewer was not written. "
                f"Make it with <code>{html.escape(command)}</code> (<code>--no-images</code> for a smaller file).</p>")
    if not out.is_file():
        return f"<p>Make the trajectory viewer with <code>{html.escape(command)}</code>.</p>"
    names = ", ".join(html.escape(str(f.relative_to(run))) for f in files)
    return (f'<p><a href="viewer.html">viewer.html</a>: every episode of this run, step by step ({names}); '
            f"rewrite it with <code>{html.escape(command)}</code>.</p>")


REPORT_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1200px;padding:0 1em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0;font-size:.9em}td,th{border:1px solid #ccc;padding:.2em .5em}
td{text-align:right}td:first-child,td.text{text-align:left}tr.total{font-weight:bold}
img{max-width:100%;border:1px solid #eee}.note{color:#777}.skill{white-space:pre-wrap}
.ok{color:#17692e}.fail{color:#a11}td.text{max-width:40em}code{background:#f4f4f4;padding:0 .2em}
"""


def write_run_report(run_dir: str | Path, *, viewer: bool = True, samples: int = 6) -> Path:
    """``RUN/report.html``: one self-contained page for a trainer's run folder (images inlined).

    Evaluations before training, after Stage 1 and after training, per category: success with Wilson 95%
    intervals, mean steps and the format-valid share of steps; a
    before-vs-after chart (``before_after.png``, also written), Stage 1's figures, the training curves and
    a table per iteration, a few skills the policy wrote (``trajectories.jsonl``), the config, and a link
    to the trajectory viewer (``viewer.html``, written here when ``viewer`` and the run is small enough).
    Everything taken from the run's files is HTML-escaped: skills and tasks are model/env text.
    """
    import html

    run = Path(run_dir)
    config = _read_json(run / "config.json")
    results = _read_json(run / "results.json")
    evaluations = run_evaluations(run)
    env_id = str(config.get("env_id", "")) or next((s.get("meta", {}).get("env_id", "") for _, s in evaluations), "")
    split = str(config.get("eval_split", "")) or next((s.get("meta", {}).get("split", "") for _, s in evaluations), "")
    title = f"{env_id} {split}".strip()
    parts = [f"<h1>Run report: {html.escape(run.name)}</h1>",
             f"<p>{html.escape(title)} &middot; folder <code>{html.escape(str(run))}</code></p>"]

    parts.append("<h2>Evaluation</h2>")
    if evaluations:
        parts.append(_evaluation_table(evaluations))
        chart = success_chart([s for _, s in evaluations], [label for label, _ in evaluations],
                              run / "before_after.png", title)
        parts.append(_image_tag(chart, "success by category and evaluation"))
        parts.append("<p>" + " &middot; ".join(f'<a href="{name}.md">{name}.md</a>' for name in EVALUATIONS
                                               if (run / f"{name}.md").is_file()) + "</p>")
    else:
        parts.append("<p class=note>No evaluation in this run folder.</p>")

    stage1 = results.get("stage1") if isinstance(results.get("stage1"), dict) else None
    if stage1 or results.get("stage1_from"):
        parts.append("<h2>Stage 1 (skill SFT)</h2>")
        if stage1:
            parts.append(f"<p>{stage1.get('stage1_pairs', '?')} SFT pairs; loss "
                         f"{stage1.get('stage1_loss_first', float('nan')):.3f} &rarr; "
                         f"{stage1.get('stage1_loss_last', float('nan')):.3f}</p>")
        else:
            parts.append(f"<p>Loaded from <code>{html.escape(str(results['stage1_from']))}</code></p>")

    parts.append("<h2>Training (Stage 2)</h2>")
    rows = read_metrics(run)
    if rows:
        parts.append(_image_tag(_replot_curves(run, rows), "training curves"))
        parts.append(_iteration_table(rows))
    else:
        parts.append("<p class=note>No Stage 2 iteration logged.</p>")

    picked = skill_samples(run / "trajectories.jsonl", samples)
    if picked:
        when = f" (iteration {picked[0]['iteration']})" if picked[0]["iteration"] else ""
        parts.append(f"<h2>Skills the policy wrote{when}</h2><table>"
                     "<tr><th>category</th><th>outcome</th><th>task</th><th>skill</th></tr>")
        for r in picked:
            outcome = "<span class=ok>success</span>" if r["success"] else "<span class=fail>failure</span>"
            parts.append(f"<tr><td>{html.escape(str(r['category']))}</td><td class=text>{outcome}</td>"
                         f"<td class=text>{html.escape(str(r['task']))}</td>"
                         f"<td class='text skill'>{html.escape(r['skill'])}</td></tr>")
        parts.append("</table>")

    parts.append("<h2>Trajectories</h2>")
    parts.append(_viewer(run, viewer))

    parts.append("<h2>Config</h2>")
    if config:
        cells = "".join(f"<tr><td>{html.escape(str(k))}</td><td>{html.escape(json.dumps(v))}</td></tr>"
                        for k, v in config.items())
        parts.append(f"<details><summary>{len(config)} fields (config.json)</summary><table>{cells}</table></details>")
    else:
        parts.append("<p class=note>No config.json.</p>")

    page = (f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(run.name)}: {html.escape(title)}"
            f"</title><style>{REPORT_CSS}</style></head><body>{''.join(parts)}</body></html>\n")
    out = run / "report.html"
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out)  # a browser refreshing it never reads half a page
    return out


def _replot_curves(run: Path, rows: list[dict[str, Any]]) -> Path:
    """RUN/curves.png redrawn from metrics.jsonl (a run from an older version gets today's axes)."""
    import matplotlib.pyplot as plt

    from seed_train.logs import curves_figure

    fig = curves_figure(rows)
    out = run / "curves.png"
    tmp = out.with_name(out.name + ".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    tmp.replace(out)
    return out


def _read_json(path: Path) -> dict[str, Any]:
    """A JSON object from a run file, or {} where it is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
