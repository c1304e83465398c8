"""One Stage 2 iteration of ``seed-train train`` on every env's cpu recipe, side by side: wall time split and
time per generated token, against EZPoints'.

    python benchmarks/bench_env_iterations.py [--envs ezpoints sokoban searchqa alfworld webshop] [--repeats 1]
                                              [--threads 1] [--seed 0] [--stage1-demos 0]
                                              [--tasks-per-iteration N] [--group-size N] [--keep DIR]
    python benchmarks/bench_env_iterations.py --record RECORD.jsonl [--arm seed]

Each env NAME runs the recipe ``seed_train/recipes/NAME-cpu.yaml`` (``seed-train train --config NAME-cpu``)
as a subprocess, with its settings except ``--iterations 1 --no-eval-before --no-eval-after
--checkpoint-every 0 --no-save-final``, ``--stage1-demos`` (default 0: the untrained policy; N > 0 runs
the recipe's Stage 1 on N demos first, outside the timed iteration), ``--threads``, ``--seed`` and, when
given, ``--tasks-per-iteration`` / ``--group-size`` (default: the recipe's), into a temporary folder (or
``--keep DIR``/ROUND-NAME). The envs run one after another in one invocation, so their ratios are taken
under the same load; ``--repeats R`` plays R rounds, the order rotated each round, and reports medians.
The figures are the run's ``metrics.jsonl`` (seed_train/trainer.py ``seed_iteration``). Columns:
  episodes         episodes trained on (``episodes_trained``; failed ones are left out)
  steps            mean steps per episode (``length``)
  gen tok          tokens the rollout generated (``tokens_per_s * generate_s``; the analyzer's not counted)
  prompt/step      prompt tokens per rollout step (``prompt_tokens`` over episodes x steps)
  skills           valid skills / skills written by the analyzer
  iter s           the iteration's wall time (``iteration_s``)
  rollout, analyze, score, update
                   each phase's seconds and its share of ``iter s`` (the rest: advantages, logging)
  gen s, env s     of the rollout: generation time and the env's own reset/step time
  s/gen tok        iter s / gen tok
  x ezpoints       s/gen tok over EZPoints' (issue 30's goal: WebShop and ALFWorld <= 2x)
An env that cannot run here has the reason on its row. ``--record`` runs nothing: it prints the same columns
for every recorded Stage 2 iteration of ``--arm`` in a committed experiment record (docs/results/records/),
the cost of a trained iteration, which an untrained run cannot show. Load average at the start and end, and the torch
threads the runs report (``torch_threads``), are printed with the table.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a bare checkout too

DEFAULT_ENVS = ("ezpoints", "sokoban", "searchqa", "alfworld", "webshop")
REFERENCE = "ezpoints"
GOAL_ENVS, GOAL_RATIO = ("alfworld", "webshop"), 2.0
PHASES = ("rollout", "analyze", "score", "update")
FIELDS = ("episodes", "steps", "gen_tokens", "prompt_per_step", "skills_valid", "skills_written", "iteration_s",
          *(f"{p}_s" for p in PHASES), "generate_s", "env_s", "peak_rss_mb", "s_per_token", "torch_threads")


def recipe_of(env: str) -> str:
    """The recipe an env name runs: ``NAME-cpu``."""
    return f"{env}-cpu"


def train_command(env: str, out_dir: Path, *, stage1_demos: int = 0, threads: int = 1, seed: int = 0,
                  tasks_per_iteration: int | None = None, group_size: int | None = None) -> list[str]:
    """The ``seed-train train`` command line of one env's timed iteration."""
    cmd = [sys.executable, "-m", "seed_train", "train", "--config", recipe_of(env), "--iterations", "1",
           "--no-eval-before", "--no-eval-after", "--checkpoint-every", "0", "--no-save-final",
           "--stage1-demos", str(stage1_demos), "--threads", str(threads), "--seed", str(seed),
           "--output-dir", str(out_dir)]
    if tasks_per_iteration is not None:
        cmd += ["--tasks-per-iteration", str(tasks_per_iteration)]
    if group_size is not None:
        cmd += ["--group-size", str(group_size)]
    return cmd


def read_iteration(path: Path) -> dict[str, Any]:
    """The last Stage 2 iteration record (one with ``iteration_s``) of a run's ``metrics.jsonl``; ValueError
    when none."""
    from seed_train.logs import read_metrics

    records = [r for r in read_metrics(path) if "iteration_s" in r]
    if not records:
        raise ValueError(f"{path}: no iteration recorded")
    return records[-1]


def row_values(metrics: dict[str, Any]) -> dict[str, float]:
    """The table's figures (FIELDS) from one iteration's metrics record."""
    episodes = float(metrics["episodes_trained"])
    steps = float(metrics["length"]) if episodes else 0.0
    gen_tokens = float(round(metrics["tokens_per_s"] * metrics["generate_s"]))
    step_count = episodes * steps
    values = {
        "episodes": episodes,
        "steps": steps,
        "gen_tokens": gen_tokens,
        "prompt_per_step": metrics["prompt_tokens"] / step_count if step_count else math.nan,
        "skills_valid": float(metrics.get("skills_valid", math.nan)),
        "skills_written": float(metrics.get("skills_written", math.nan)),
        "iteration_s": float(metrics["iteration_s"]),
        "generate_s": float(metrics["generate_s"]),
        "env_s": float(metrics["env_s"]),
        "s_per_token": metrics["iteration_s"] / gen_tokens if gen_tokens else math.nan,
        "torch_threads": float(metrics.get("torch_threads", math.nan)),
        # The run's peak resident memory by the end of the iteration (records from before it was logged: nan).
        "peak_rss_mb": float(metrics.get("peak_rss_mb", math.nan)),
    }
    for phase in PHASES:
        values[f"{phase}_s"] = float(metrics[f"{phase}_s"])
    return values


def median_values(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the rounds (``s/gen tok`` too: the median of the rounds' own ratios)."""
    return {k: statistics.median(r[k] for r in runs) for k in FIELDS}


def _num(value: float, fmt: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, fmt)


HEADER = (f"{'env':<9} {'episodes':>8} {'steps':>5} {'gen tok':>7} {'prompt/step':>11} {'skills':>6} {'iter s':>7} "
          f"{'rollout':>12} {'analyze':>12} {'score':>12} {'update':>12} {'gen s':>6} {'env s':>6} {'peak MB':>7} "
          f"{'s/gen tok':>9} {'x ezpoints':>10}")


def table_lines(results: dict[str, dict[str, float] | str], reference: str = REFERENCE) -> list[str]:
    """The table: a row per env, its figures (medians) or the reason it did not run; ``x ezpoints`` is the
    row's s/gen tok over ``reference``'s (``-`` when that did not run)."""
    ref = results.get(reference)
    ref_rate = ref["s_per_token"] if isinstance(ref, dict) else math.nan
    lines = [HEADER]
    for env, r in results.items():
        if isinstance(r, str):
            lines.append(f"{env:<9} not run: {r}")
            continue
        skills = ("-" if math.isnan(r["skills_written"])
                  else f"{r['skills_valid']:.0f}/{r['skills_written']:.0f}")
        phases = " ".join(f"{_num(r[f'{p}_s'], '.1f'):>6} {_num(r[f'{p}_s'] / r['iteration_s'], '.0%'):>5}"
                          for p in PHASES)
        ratio = r["s_per_token"] / ref_rate if ref_rate and not math.isnan(ref_rate) else math.nan
        lines.append(f"{env:<9} {r['episodes']:>8.0f} {_num(r['steps'], '.1f'):>5} {r['gen_tokens']:>7.0f} "
                     f"{_num(r['prompt_per_step'], '.0f'):>11} {skills:>6} {r['iteration_s']:>7.1f} {phases} "
                     f"{r['generate_s']:>6.1f} {r['env_s']:>6.1f} {_num(r['peak_rss_mb'], '.0f'):>7} {_num(r['s_per_token'], '.3f'):>9} "
                     f"{_num(ratio, '.2f') + ('x' if not math.isnan(ratio) else ''):>10}")
    return lines


def goal_line(results: dict[str, dict[str, float] | str], reference: str = REFERENCE) -> str:
    """Issue 30's goal on the envs it names that ran: s/gen tok <= GOAL_RATIO x the reference's."""
    ref = results.get(reference)
    if not isinstance(ref, dict) or math.isnan(ref["s_per_token"]):
        return f"goal (s/gen tok <= {GOAL_RATIO:g}x {reference}'s): {reference} did not run"
    parts = []
    for env in GOAL_ENVS:
        r = results.get(env)
        if isinstance(r, dict) and not math.isnan(r["s_per_token"]):
            ratio = r["s_per_token"] / ref["s_per_token"]
            parts.append(f"{env} {ratio:.2f}x ({'met' if ratio <= GOAL_RATIO else 'not met'})")
    return (f"goal (s/gen tok <= {GOAL_RATIO:g}x {reference}'s): "
            + (", ".join(parts) if parts else f"none of {', '.join(GOAL_ENVS)} ran"))


def failure_reason(log: str, returncode: int) -> str:
    """One line from a failed run's output: the signal that killed it (SIGKILL: most often the kernel's
    out-of-memory killer), else its last line naming an error, else its last line."""
    if returncode < 0:
        name = signal.Signals(-returncode).name
        return f"killed by {name}" + (" (out of memory? see dmesg)" if name == "SIGKILL" else "")
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    named = [line for line in lines if "error" in line.lower() or line.startswith("seed-train")]
    last = (named or lines or [f"exit status {returncode}"])[-1]
    return f"exit {returncode}: {last[:160]}"


def run_env(env: str, out_dir: Path, args: argparse.Namespace) -> dict[str, float] | str:
    """One env's timed iteration: its figures, or why it did not run."""
    from seed_train.recipes import recipe_names

    if recipe_of(env) not in recipe_names():
        return f"no recipe {recipe_of(env)!r} in seed_train/recipes"
    cmd = train_command(env, out_dir, stage1_demos=args.stage1_demos, threads=args.threads, seed=args.seed,
                        tasks_per_iteration=args.tasks_per_iteration, group_size=args.group_size)
    environ = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "SEED_PROGRESS": "0"}
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, cwd=ROOT, env=environ, capture_output=True, text=True, timeout=args.timeout_s)
    except subprocess.TimeoutExpired:
        return f"timed out after {args.timeout_s:.0f}s"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.log").write_text(done.stdout + done.stderr, encoding="utf-8")
    if done.returncode != 0:
        return failure_reason(done.stdout + "\n" + done.stderr, done.returncode)
    try:
        values = row_values(read_iteration(out_dir / "metrics.jsonl"))
    except (OSError, ValueError, KeyError) as e:
        return f"no usable metrics.jsonl ({type(e).__name__}: {e})"
    print(f"  {env}: iteration {values['iteration_s']:.1f}s, process {time.perf_counter() - t0:.0f}s", flush=True)
    return values


def record_lines(record_path: str | Path, arm: str) -> list[str]:
    """The same figures for every Stage 2 iteration of ``arm`` in a committed experiment record (its units'
    per-iteration metrics): what a trained iteration costs, as the reference an untrained run cannot give."""
    from seed_train.records import read_record

    record = read_record(record_path)
    results = {f"s{seed}-it{row['iteration']}": row_values(row)
               for (kind, seed, name), unit in sorted(record.units.items(), key=lambda kv: kv[0][1])
               if kind == "arm" and name == arm for row in unit.get("metrics", []) if "iteration_s" in row}
    return table_lines(results, reference="")


def round_order(envs: Sequence[str], round_index: int) -> list[str]:
    """The envs' order in round ``round_index``: rotated by one each round."""
    shift = round_index % len(envs)
    return list(envs[shift:]) + list(envs[:shift])


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as uptime prints them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS), help="env names, each with a NAME-cpu recipe")
    p.add_argument("--repeats", type=int, default=1, help="rounds over the envs, order rotated (medians reported)")
    p.add_argument("--threads", type=int, default=1, help="torch threads of each run (--threads)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--stage1-demos", type=int, default=0, help="Stage 1 demos before the iteration (0: untrained)")
    p.add_argument("--tasks-per-iteration", type=int, default=None, help="default: the recipe's")
    p.add_argument("--group-size", type=int, default=None, help="default: the recipe's")
    p.add_argument("--timeout-s", type=float, default=3600.0, help="seconds one run may take")
    p.add_argument("--keep", default=None, help="keep the run folders under this folder (default: a temporary one)")
    p.add_argument("--record", default=None, help="instead of running: the figures of every iteration of --arm in "
                   "this committed experiment record (e.g. docs/results/records/ezpoints-mechanism.jsonl)")
    p.add_argument("--arm", default="seed", help="the record's arm (with --record)")
    args = p.parse_args(argv)
    if args.record:
        print("\n".join(record_lines(args.record, args.arm)))
        return
    load_start = load_average()
    print(f"envs {' '.join(args.envs)}; {args.repeats} round(s); --threads {args.threads} --seed {args.seed} "
          f"--stage1-demos {args.stage1_demos}; tasks x group: "
          f"{args.tasks_per_iteration or 'recipe'} x {args.group_size or 'recipe'}; load average {load_start}",
          flush=True)
    runs: dict[str, list[dict[str, float]]] = {env: [] for env in args.envs}
    reasons: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="bench-env-iterations-") as tmp:
        base = Path(args.keep) if args.keep else Path(tmp)
        for round_index in range(args.repeats):
            for env in round_order(args.envs, round_index):
                if env in reasons:  # an env that cannot run here fails the same way every round
                    continue
                result = run_env(env, base / f"r{round_index}-{env}", args)
                if isinstance(result, str):
                    reasons[env] = result
                    print(f"  {env}: not run: {result}", flush=True)
                else:
                    runs[env].append(result)
    results = {env: reasons.get(env) or median_values(runs[env]) for env in args.envs}
    threads = sorted({int(r["torch_threads"]) for r in results.values()
                      if isinstance(r, dict) and not math.isnan(r["torch_threads"])})
    print("\n".join(table_lines(results)))
    print(goal_line(results))
    print(f"torch threads (as the runs report) {threads}; load average at start {load_start}, "
          f"at end {load_average()}")


if __name__ == "__main__":
    main()
