"""Rollout speed with and without prefix-shared prefill, against the model's own forward throughput.

    python benchmarks/bench_rollout.py [--model smollm2-135m] [--groups 3] [--group-size 4] [--repeats 1]
                                       [--threads N] [--settings quickstart,long] [--paths plain,shared,reuse]
                                       [--max-steps N] [--max-new-tokens N]

G rollouts x N tasks, in these prompt settings (``--settings``); each carries its own episode length and
tokens per step (``--max-steps`` / ``--max-new-tokens`` override them for every setting when given):
  quickstart  EZPoints with the quickstart's settings (compact template, history 0, plain answers,
              max_steps 5, max_new_tokens 8; the ezpoints-cpu recipe's too): ~150-token prompts
  long        EZPoints, the default ezpoints template with history 2 (same steps and tokens): longer
              prompts whose later turns differ within a group after the task description
  compact-h2  EZPoints, the compact template with history 2: a turn's history starts with the
              previous turn's observation and action until the window is full
  sokoban-h2  Sokoban, its default template, history 2, plain answers, max_steps 5, max_new_tokens 8:
              map observations, in the history too (what ``sokoban`` was before it followed its recipe)
The settings of the cpu recipes (seed_train/recipes/NAME-cpu.yaml: env, template, history, answer
format, max_steps, max_new_tokens; tests/test_benchmarks_env_iterations.py holds them equal):
  sokoban     Sokoban, its default template, history 0, plain, 15 steps, 4 new tokens (~290-token prompts)
  searchqa    SearchQA, its default template, history 1, its own tags, 4 steps, 24 new tokens
  alfworld    ALFWorld (generated games), its default template, history 1, plain, 15 steps, 16 new tokens
  webshop     WebShop (generated catalog), its default template, history 0, plain, 8 steps, 48 new tokens
Each setting plays the same jobs (same tasks, reset and sampling seeds) on each path (``--paths``):
  plain       every prompt run whole (``prefix_sharing=False``)
  shared      shared prompt heads within a call (``turn_reuse=False``)
  reuse       shared heads, and each episode's previous sequence (prompt + completion) reused where
              its next prompt extends it (``HFGenerateBackend`` defaults; the rollout keys rows by episode)
alternating ``--repeats`` times (medians reported, so a load that comes and goes hits all alike;
with one repeat the order rotates between settings). Columns:
  rollout s        wall time of run_episodes (generation + env steps)
  gen s            generation time of run_episodes
  prefill/step     prompt positions run through the model per generate call (padding included)
  reused/step      prompt positions taken from an episode's previous sequence per generate call
  prompt/step      the prompts' own tokens per generate call
  gen tok/s        generated tokens per second of generation time
  rollout tok/s    (prompt + generated tokens) per second of generation time
  fwd tok/s        the model's plain forward throughput: a no-grad forward over the same prompts,
                   batched as a generate call batched them (left padding, last logits only); timed on
                   the rollout's middle call (a rate: tokens over seconds; later turns dominate)
  ratio            rollout tok/s / fwd tok/s (the issue's goal: >= 50%)
  same             episodes whose token ids equal the first path's (plain by default: sharing and
                   reuse change no token)
"""
from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Sequence

import numpy as np
import torch

from seed_train.evaluate import panel_of
from seed_train.generation import HFGenerateBackend
from seed_train.policy import load_policy, resolve_model
from seed_train.rollout import EnvPool, EnvSpec, RolloutStats, group_jobs, run_episodes, sample_tasks

SETTINGS = {
    "quickstart": dict(env_id="seed/EZPoints-v0", template="compact", history=0),
    "long": dict(env_id="seed/EZPoints-v0", template=None, history=2),  # None: the env's own prompt
    "compact-h2": dict(env_id="seed/EZPoints-v0", template="compact", history=2),
    "sokoban-h2": dict(env_id="seed/Sokoban-v0", template=None, history=2),
    # The cpu recipes' settings (RECIPES; tests/test_benchmarks_env_iterations.py holds them equal).
    "sokoban": dict(env_id="seed/Sokoban-v0", template=None, history=0, max_steps=15, max_new_tokens=4),
    "searchqa": dict(env_id="seed/SearchQA-v0", template=None, history=1, action_format="tags", max_steps=4,
                     max_new_tokens=24),
    "alfworld": dict(env_id="seed/ALFWorld-v0", template=None, history=1, max_steps=15, max_new_tokens=16),
    "webshop": dict(env_id="seed/WebShop-v0", template=None, history=0, max_steps=8, max_new_tokens=48),
}
# What a setting leaves out: plain answers, 5 steps, 8 new tokens (the quickstart's).
SETTING_DEFAULTS = dict(action_format="plain", max_steps=5, max_new_tokens=8)
# The settings taken from a recipe, and its name.
RECIPES = {"sokoban": "sokoban-cpu", "searchqa": "searchqa-cpu", "alfworld": "alfworld-cpu",
           "webshop": "webshop-cpu"}
PATHS = {"plain": dict(prefix_sharing=False), "shared": dict(turn_reuse=False), "reuse": {}}


class RecordingBackend:
    """Delegates to a backend and keeps every batch of prompts it was asked to generate for."""

    def __init__(self, backend: HFGenerateBackend):
        self.backend = backend
        self.calls: list[list[list[int]]] = []

    @property
    def prefill_tokens(self) -> int:
        return self.backend.prefill_tokens

    def forget(self) -> None:
        self.backend.forget()

    def generate(self, prompts: Sequence[Sequence[int]], **kwargs: Any):
        self.calls.append([list(p) for p in prompts])
        return self.backend.generate(prompts, **kwargs)

    def sync_weights(self, model: Any) -> None:
        self.backend.sync_weights(model)


def forward_throughput(model: Any, calls: Sequence[Sequence[Sequence[int]]], pad_id: int) -> tuple[float, int]:
    """(seconds, prompt tokens) of a no-grad forward over the middle call's prompts, batched and left-padded
    as generate batched them."""
    seconds, tokens = 0.0, 0
    with torch.no_grad():
        for prompts in [calls[len(calls) // 2]]:
            width = max(len(p) for p in prompts)
            ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
            mask = torch.zeros((len(prompts), width), dtype=torch.long)
            for i, p in enumerate(prompts):
                ids[i, width - len(p):] = torch.tensor(p)
                mask[i, width - len(p):] = 1
            t0 = time.perf_counter()
            model(input_ids=ids, attention_mask=mask, use_cache=False, logits_to_keep=1)
            seconds += time.perf_counter() - t0
            tokens += sum(len(p) for p in prompts)
    return seconds, tokens


def resolve_setting(name: str, max_steps: int | None = None, max_new_tokens: int | None = None) -> dict:
    """Setting ``name`` whole (SETTING_DEFAULTS filled in), the flags' ``max_steps`` / ``max_new_tokens``
    over its own when given (not None)."""
    setting = {**SETTING_DEFAULTS, **SETTINGS[name]}
    for key, value in (("max_steps", max_steps), ("max_new_tokens", max_new_tokens)):
        if value is not None:
            setting[key] = value
    return setting


def play(model, tok, spec: EnvSpec, jobs, *, path: str, max_new_tokens: int, seed: int):
    backend = RecordingBackend(HFGenerateBackend(model, tok, **PATHS[path]))
    stats = RolloutStats()
    pool = EnvPool(spec)
    t0 = time.perf_counter()
    trajectories = run_episodes(backend, tok, pool, jobs, max_new_tokens=max_new_tokens, temperature=1.0,
                                seed=seed, stats=stats)
    wall = time.perf_counter() - t0
    pool.close()
    return wall, stats, trajectories, backend.calls, backend.backend.reused_tokens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--groups", type=int, default=3, help="tasks per batch (GRPO groups)")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-steps", type=int, default=None, help="episode length of every setting (default: each "
                   "setting's own)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens per step of every setting (default: "
                   "each setting's own)")
    p.add_argument("--repeats", type=int, default=1, help="rounds of every path per setting (medians reported)")
    p.add_argument("--settings", default="quickstart,long", help=f"comma-separated, of {sorted(SETTINGS)}")
    p.add_argument("--paths", default="plain,shared,reuse", help=f"comma-separated, of {list(PATHS)}")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok = load_policy(str(resolve_model(args.model)))
    model.eval()
    print(f"model {args.model}; torch threads {torch.get_num_threads()}; load average {os.getloadavg()}")
    paths = args.paths.split(",")
    header = (f"{'setting':<10} {'path':<7} {'rollout s':>9} {'gen s':>6} {'prefill/step':>12} {'reused/step':>11} "
              f"{'prompt/step':>11} {'gen tok/s':>9} {'rollout tok/s':>13} {'fwd tok/s':>9} {'ratio':>6} {'same':>6}")
    lines = []
    for setting_index, name in enumerate(args.settings.split(",")):
        setting = resolve_setting(name, args.max_steps, args.max_new_tokens)
        max_new_tokens = setting.pop("max_new_tokens")
        spec = EnvSpec(setting.pop("env_id"), "train", format_penalty=0.1, **setting)
        tasks = sample_tasks(panel_of(spec), args.groups, np.random.default_rng(0))
        jobs = group_jobs(tasks, args.group_size, base_seed=0, prefix="bench")
        runs: dict[str, list] = {path: [] for path in paths}
        for rep in range(args.repeats):
            shift = (rep + setting_index) % len(paths)
            for path in paths[shift:] + paths[:shift]:
                runs[path].append(play(model, tok, spec, jobs, path=path, max_new_tokens=max_new_tokens, seed=1))
                print(f"  {name} {path}: {runs[path][-1][0]:.1f}s", flush=True)
        first = runs[paths[0]][0]
        reference = [[s.response_token_ids for s in t.steps] for t in first[2]]
        # The forward baseline over the prompts the first path generated for (every path saw the same).
        fwd_runs = [forward_throughput(model, first[3], HFGenerateBackend(model, tok).pad_token_id)
                    for _ in range(max(1, args.repeats))]
        fwd_s = statistics.median(s for s, _ in fwd_runs)
        fwd_rate = fwd_runs[0][1] / fwd_s
        for path, results in runs.items():
            wall = statistics.median(r[0] for r in results)
            gen_s = statistics.median(r[1].generate_s for r in results)
            stats = results[0][1]
            calls = stats.generate_calls
            same = sum([[s.response_token_ids for s in t.steps] == ref for t, ref in zip(results[0][2], reference)])
            rollout_rate = (stats.prompt_tokens + stats.generated_tokens) / gen_s
            lines.append(f"{name:<10} {path:<7} {wall:>9.2f} {gen_s:>6.2f} {stats.prefill_tokens / calls:>12.0f} "
                         f"{results[0][4] / calls:>11.0f} "
                         f"{stats.prompt_tokens / calls:>11.0f} {stats.generated_tokens / gen_s:>9.1f} "
                         f"{rollout_rate:>13.0f} {fwd_rate:>9.0f} {rollout_rate / fwd_rate:>6.0%} "
                         f"{same:>3}/{len(reference)}")
        print(f"{name}: {len(jobs)} episodes (max_steps {spec.max_steps}, max_new_tokens {max_new_tokens}), "
              f"{first[1].generate_calls} generate calls, {first[1].generated_tokens} generated tokens")
        print("\n".join([header, *lines[-len(runs):]]), flush=True)  # each setting's rows as soon as done
    print(header)
    print("\n".join(lines))
    print(f"load average after {os.getloadavg()}")


if __name__ == "__main__":
    main()
