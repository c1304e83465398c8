"""Evaluation on a split's full panel: each task exactly once, results by category with 95% intervals.

The panel comes from ``env.unwrapped.task_ids()`` (fixed and sorted), tasks are played in panel order
in batches, and every task's reset seed is its panel index (and its sampling seed a function of the
task alone), so results do not depend on batch size, worker count or process. Under data parallelism
each rank plays a contiguous share of the panel and every rank gets the whole panel's summary; only
the main process writes files.
"""
from __future__ import annotations

import dataclasses

import json
import math
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from seed_train.distributed import dist_info, gather_lists, sharded_range
from seed_train.generation import GenerationBackend
from seed_train.rollout import EnvPool, EnvSpec, EpisodeJob, RolloutStats, run_episodes
from seed_train.seed_statistics import sample_sd
from wrappers import Trajectory, TrajectoryWriter


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (95% by default)."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # The interval always contains p (at p = 0 or 1 the formula meets it only up to rounding).
    return (max(0.0, min(centre - half, p)), min(1.0, max(centre + half, p)))


def panel_of(spec: EnvSpec) -> tuple[str, ...]:
    env = gym.make(spec.env_id, split=spec.split, **spec.env_kwargs)
    try:
        return env.unwrapped.task_ids()
    finally:
        env.close()


def subsample_panel(panel: Sequence[str], limit: int) -> tuple[str, ...]:
    """``limit`` tasks spread evenly over the sorted panel (all of it when limit is 0 or too large).

    Sorted panels group tasks by category, so the first N would over-represent one category.
    """
    if not limit or limit >= len(panel):
        return tuple(panel)
    return tuple(panel[(i * len(panel)) // limit] for i in range(limit))


def evaluate_policy(
    backend: GenerationBackend,
    codec: Any,
    spec: EnvSpec,
    *,
    max_new_tokens: int,
    limit: int = 0,
    greedy: bool = True,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int = 0,
    batch_size: int = 64,
    trajectories_path: str | Path | None = None,
    env_backend: str = "sync",
    samples_per_task: int = 1,
    progress: str | None = None,
    max_prompt_tokens: int = 0,
) -> dict[str, Any]:
    """Play the split's panel (``limit`` > 0: that many tasks spread over it) ``samples_per_task`` times;
    returns the summary. ``progress``: a name for this evaluation ("before training"); with one, the main
    process prints a line as it starts and shows a bar of episodes (:mod:`seed_train.progress`).

    Sampled episodes draw their noise from ``seed``, the task's panel index and the sample index alone
    (:meth:`EpisodeJob.sampling_seed`), so two policies evaluated with the same seed face the same draws:
    their per-episode outcomes pair (:func:`episode_outcomes`).

    ``max_prompt_tokens`` > 0: the model's prompt budget; history is left out first, then an episode whose
    prompt still does not fit ends truncated (counted in the summary's ``prompt_overflows``).
    """
    if samples_per_task < 1 or (samples_per_task > 1 and greedy):
        raise ValueError(f"samples_per_task: {samples_per_task} needs sampling (greedy plays each task one way)"
                         if samples_per_task > 1 else f"samples_per_task: must be >= 1, got {samples_per_task}")
    panel = subsample_panel(panel_of(spec), limit)
    units = [(k, j) for k in range(len(panel)) for j in range(samples_per_task)]
    mine = [units[i] for i in sharded_range(len(units), dist_info())]
    spec = with_prompt_budget(spec, codec, max_prompt_tokens)
    pool = EnvPool(spec, env_backend)
    stats = RolloutStats()
    trajectories: list[Trajectory] = []
    bar = None
    if progress is not None:
        from seed_train.progress import progress_bar, say, turn_reporter

        if dist_info().is_main:
            say(f"evaluating {progress}: {spec.env_id} {spec.split}, {len(units)} episodes "
                f"({len(panel)} tasks{f' x {samples_per_task}' if samples_per_task > 1 else ''}) ...")
        bar = progress_bar(total=len(mine), desc=f"eval {progress}", unit="episode")
    # One process: each episode is written as it ends (a crash loses nothing played); the file is put in
    # panel order at the end. Several ranks: the main one writes the gathered panel at the end.
    streaming = bool(trajectories_path) and dist_info().world_size == 1
    writer = None
    if streaming:
        Path(trajectories_path).unlink(missing_ok=True)  # one evaluation, one file
        writer = TrajectoryWriter(trajectories_path)
    for start in range(0, len(mine), batch_size):
        jobs = [EpisodeJob(task_id=panel[k], seed=k, group_id=f"eval-{k}", meta={"eval": True, "sample": j}, member=j)
                for k, j in mine[start:start + batch_size]]
        trajectories += run_episodes(backend, codec, pool, jobs, max_new_tokens=max_new_tokens, greedy=greedy,
                                     temperature=temperature, top_p=top_p, seed=seed * 1_000_003, stats=stats,
                                     on_finished=None if bar is None else bar.update,
                                     on_turn=None if bar is None else turn_reporter(bar, spec.step_limit()),
                                     max_prompt_tokens=max_prompt_tokens,
                                     on_trajectory=None if writer is None else writer.write)
    if bar is not None:
        bar.close()
    pool.close()
    if writer is not None:
        writer.close()
    trajectories = gather_lists(trajectories)  # the whole panel, in panel order
    if trajectories_path and dist_info().is_main:
        write_in_order(trajectories, trajectories_path)
    summary = summarize(trajectories)
    summary["meta"] = {"env_id": spec.env_id, "split": spec.split, "tasks": len(panel), "greedy": greedy,
                       "temperature": None if greedy else temperature, "top_p": None if greedy else top_p,
                       "samples_per_task": samples_per_task, "seed": seed, "generate_s": stats.generate_s,
                       "env_s": stats.env_s, "generated_tokens": stats.generated_tokens}
    return summary


def write_in_order(trajectories: Sequence[Trajectory], path: str | Path) -> None:
    """``path`` holding ``trajectories`` in this order, replaced atomically (a reader never sees half)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with TrajectoryWriter(tmp) as writer:
        for t in trajectories:
            writer.write(t)
    os.replace(tmp, path)


def evaluate_endpoint(
    agent: Any,
    spec: EnvSpec,
    *,
    limit: int = 0,
    concurrency: int = 4,
    trajectories_path: str | Path | None = None,
    progress: str | None = None,
) -> dict[str, Any]:
    """:func:`evaluate_policy` for a model behind an endpoint: ``agent`` (e.g. a
    :class:`seed_agents.openai_endpoint.OpenAIChatAgent`) plays the same panel on the same env stack
    (``spec.make``) with the same reset seeds, ``concurrency`` tasks at a time; same summary and reports.

    Episodes are written as they finish (an endpoint failure loses nothing; it ends its episode as a
    recorded failure, ``meta["error"]``); the summary's meta adds the endpoint, error count and token totals.
    """
    import threading
    import time

    from seed_agents.runner import play_panel  # the runner above the envs; it never imports seed_train

    panel = subsample_panel(panel_of(spec), limit)
    trajectories: list[Trajectory] = []
    lock = threading.Lock()
    writer = None
    if trajectories_path:
        Path(trajectories_path).unlink(missing_ok=True)  # one evaluation, one file
        writer = TrajectoryWriter(trajectories_path)

    def collect(trajectory: Trajectory) -> None:
        with lock:
            trajectories.append(trajectory)
        if writer is not None:
            writer.write(trajectory)  # (the writer locks itself)

    bar = None
    if progress is not None:
        from seed_train.progress import progress_bar, say

        say(f"evaluating {progress}: {spec.env_id} {spec.split}, {len(panel)} episodes on {agent!r} ...")
        bar = progress_bar(total=len(panel), desc=f"eval {progress}", unit="episode")
    start = time.perf_counter()
    try:
        play_panel(lambda: spec.make(sink=collect), lambda env: agent, panel, concurrency=concurrency,
                   seeds=list(range(len(panel))),
                   options=[{"group_id": f"eval-{k}", "trajectory_meta": {"eval": True, "sample": 0}}
                            for k in range(len(panel))],
                   on_finished=None if bar is None else (lambda result: bar.update()))
    finally:
        if bar is not None:
            bar.close()
        if writer is not None:
            writer.close()
    trajectories.sort(key=lambda t: int(str(t.group_id).rpartition("-")[2]))  # panel order
    usage = [s.usage for t in trajectories for s in t.steps if s.usage]
    summary = summarize(trajectories)
    summary["meta"] = {"env_id": spec.env_id, "split": spec.split, "tasks": len(panel),
                       "greedy": getattr(agent, "temperature", None) == 0,
                       "temperature": getattr(agent, "temperature", None), "samples_per_task": 1,
                       "seed": getattr(agent, "seed", None), "endpoint": getattr(agent, "base_url", None),
                       "model": getattr(agent, "model", None), "concurrency": concurrency,
                       "errors": sum("error" in t.meta for t in trajectories),
                       "prompt_tokens": sum(u.get("prompt_tokens") or 0 for u in usage),
                       "generated_tokens": sum(u.get("completion_tokens") or 0 for u in usage),
                       "wall_s": time.perf_counter() - start}
    return summary


def episode_outcomes(trajectories: Sequence[Trajectory]) -> dict[str, bool]:
    """Success of each evaluation episode keyed by task (``task_id``, or ``task_id#sJ`` for sample J when a
    task was played several times): the keys two evaluations of one panel share, for paired tests.

    An episode whose env or endpoint failed (``meta["env_failed"]``, ``meta["error"]``) has no outcome of
    the policy's: it is left out, so a paired test (:func:`paired_test`, over the keys both arms have)
    leaves that task out of both arms rather than count the fault as the policy's failure. Summaries
    count such episodes apart (``env_failures``, ``errors``)."""
    several = any(t.meta.get("sample", 0) for t in trajectories)
    return {(f"{t.task_id}#s{t.meta.get('sample', 0)}" if several else t.task_id): bool(t.success)
            for t in trajectories if has_outcome(t)}


def with_prompt_budget(spec: EnvSpec, codec: Any, max_prompt_tokens: int) -> EnvSpec:
    """``spec`` whose renderer leaves out the oldest history while a prompt is over ``max_prompt_tokens``
    (0: ``spec`` as it is)."""
    from seed_train.codec import PromptTokenBudget

    return dataclasses.replace(spec, prompt_fits=PromptTokenBudget(codec, max_prompt_tokens)) if max_prompt_tokens else spec


def has_outcome(t: Trajectory) -> bool:
    """Whether an episode says something of the policy: not ended by its env's or endpoint's failure."""
    return not (t.meta.get("env_failed") or t.meta.get("error"))


def summarize(trajectories: Sequence[Trajectory]) -> dict[str, Any]:
    """Per category and overall: episodes, successes, success rate with Wilson 95% CI, score, length.

    Rates (success, score, length) are over the episodes with an outcome (:func:`has_outcome`): an env that
    failed is counted apart (``env_failures``, ``errors``), never as the policy's failure, so per-seed rates
    and the seed-level comparisons built on them leave faults out, as the paired tests do."""
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[t.category].append(t)
    rows = {}
    for name, played in [*sorted(groups.items()), ("all", list(trajectories))]:
        ts = [t for t in played if has_outcome(t)]
        wins = sum(t.success for t in ts)
        lo, hi = wilson_interval(wins, len(ts))
        rows[name] = {
            "episodes": len(played),
            "successes": wins,
            "success": wins / len(ts) if ts else 0.0,
            "ci95": [lo, hi],
            "score": float(np.mean([t.score for t in ts])) if ts else 0.0,
            "length": float(np.mean([t.length for t in ts])) if ts else 0.0,
            "format_error_rate": _format_error_rate(ts),
            "prompt_overflows": sum(t.meta.get("ended_by") == "prompt_overflow" for t in ts),
            "env_failures": sum(bool(t.meta.get("env_failed")) for t in played),  # the env's fault, not the task's
            "errors": sum(bool(t.meta.get("error")) and not t.meta.get("env_failed") for t in played),
        }
    return {"categories": rows}


def _format_error_rate(ts: Sequence[Trajectory]) -> float:
    steps = [s for t in ts for s in t.steps]
    return sum(s.format_error for s in steps) / len(steps) if steps else 0.0


def markdown_table(summary: dict[str, Any], title: str = "") -> str:
    lines = [f"### {title}", ""] if title else []
    lines += ["| category | episodes | success | 95% CI | score | steps | format errors |",
              "|---|---:|---:|---|---:|---:|---:|"]
    for name, r in summary["categories"].items():
        lo, hi = r["ci95"]
        lines.append(f"| {name} | {r['episodes']} | {r['success']:.3f} | [{lo:.3f}, {hi:.3f}] | {r['score']:.3f} "
                     f"| {r['length']:.1f} | {r['format_error_rate']:.3f} |")
    return "\n".join(lines)


def aggregate_seeds(summaries: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Success and score per category across several evaluation seeds: mean and sample sd."""
    names = summaries[0]["categories"].keys()
    out = {}
    for name in names:
        succ = [s["categories"][name]["success"] for s in summaries]
        score = [s["categories"][name]["score"] for s in summaries]
        out[name] = {"success_mean": float(np.mean(succ)), "success_sd": float(np.std(succ, ddof=1)) if len(succ) > 1 else 0.0,
                     "score_mean": float(np.mean(score)), "score_sd": float(np.std(score, ddof=1)) if len(score) > 1 else 0.0,
                     "seeds": len(summaries)}
    return out


def aggregate_runs(summaries: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Success and score per category across runs (e.g. training seeds): mean, sample sd, and each run's value.

    A category missing from some runs is aggregated over the runs that have it (``runs`` says how many).
    """
    names = sorted({c for s in summaries for c in s["categories"] if c != "all"})
    names += ["all"] if any("all" in s["categories"] for s in summaries) else []
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        rows = [s["categories"][name] for s in summaries if name in s["categories"]]
        succ, score = [r["success"] for r in rows], [r["score"] for r in rows]
        out[name] = {"success_mean": float(np.mean(succ)), "success_sd": sample_sd(succ),
                     "score_mean": float(np.mean(score)), "score_sd": sample_sd(score), "runs": len(rows),
                     "success_per_run": succ, "ci95_per_run": [list(r["ci95"]) for r in rows]}
    return out


def aggregate_markdown(aggregate: dict[str, dict[str, Any]], labels: Sequence[str] = (), title: str = "") -> str:
    """Markdown: per category, success and score mean ± sd over runs, and each run's success with its 95% CI."""
    lines = [f"### {title}", ""] if title else []
    lines += ["| category | runs | success mean ± sd | score mean ± sd | per run: success [95% CI] |",
              "|---|---:|---|---|---|"]
    for name, r in aggregate.items():
        per_run = "; ".join(f"{lab + ' ' if lab else ''}{v:.3f} [{lo:.2f}, {hi:.2f}]" for lab, v, (lo, hi) in
                            zip(list(labels) or [""] * r["runs"], r["success_per_run"], r["ci95_per_run"]))
        lines.append(f"| {name} | {r['runs']} | {r['success_mean']:.3f} ± {r['success_sd']:.3f} "
                     f"| {r['score_mean']:.3f} ± {r['score_sd']:.3f} | {per_run} |")
    return "\n".join(lines)


def mcnemar_exact(a_only: int, b_only: int) -> float:
    """Two-sided exact McNemar test: the binomial(n = a_only + b_only, 1/2) p-value of the discordant pairs.

    ``a_only``: pairs where only A succeeded; ``b_only``: only B. Concordant pairs carry no information
    about the difference. p = min(1, 2 * P[X <= min(a_only, b_only)]), X ~ Bin(n, 1/2); 1 when n = 0.
    Integer arithmetic (math.comb), so large n neither overflows nor underflows before the division.
    """
    if a_only < 0 or b_only < 0:
        raise ValueError(f"discordant counts must be >= 0; got {a_only}, {b_only}")
    n = a_only + b_only
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(a_only, b_only) + 1))
    return min(1.0, 2 * tail / 2**n)


def paired_test(a: dict[Any, bool], b: dict[Any, bool]) -> dict[str, Any]:
    """Per-task outcomes of two policies paired by key (e.g. (training seed, task_id)): the 2x2 counts
    over the shared keys and the exact McNemar p-value."""
    keys = sorted(set(a) & set(b), key=str)
    both = sum(bool(a[k]) and bool(b[k]) for k in keys)
    a_only = sum(bool(a[k]) and not b[k] for k in keys)
    b_only = sum(bool(b[k]) and not a[k] for k in keys)
    return {"pairs": len(keys), "both": both, "a_only": a_only, "b_only": b_only,
            "neither": len(keys) - both - a_only - b_only, "p_value": mcnemar_exact(a_only, b_only)}


def write_report(summary: dict[str, Any], out_dir: str | Path, name: str = "eval") -> tuple[Path, Path, Path]:
    """``<name>.json``, ``<name>.md`` (table by category) and ``<name>.png`` (success by category, 95% CI)."""
    from seed_train.reports import success_chart

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    json_path.write_text(json.dumps(summary, indent=1))
    meta = summary.get("meta", {})
    title = f"{meta.get('env_id', '')} {meta.get('split', '')}".strip()
    md_path.write_text(markdown_table(summary, title) + "\n")
    png_path = success_chart([summary], [name], out / f"{name}.png", title)
    return json_path, md_path, png_path
