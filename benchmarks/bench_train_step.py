"""One SEED update vs one GRPO update on the same batch, plus rollout speed and the time split.

    python benchmarks/bench_train_step.py [--model smollm2-135m] [--env seed/EZPoints-v0] [--episodes 12]

Plays one batch of rollouts (groups of 4), then on that same batch times:
  GRPO   reference pass (KL) + PPO update                    (opd_coef = 0: no skills, no teacher pass)
  SEED   reference pass + teacher pass under skill-augmented prompts + PPO update with the OPD term
Every step gets a valid skill (the worst case for SEED's extra cost). The weights are restored
before each update so all update the same model. GRPO and SEED alternate ``--repeats`` times and the
table shows medians, so a load that comes and goes hits both alike. Prints the table and the
SEED/GRPO ratio of the medians. ``--compare-plain`` adds a third arm to each round: GRPO with every
prompt computed whole, i.e. without the shared prompt heads of the scoring passes and the update.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

from seed_train.checkpoint import load_trainable_state, trainable_state
from seed_train.config import SeedConfig
from seed_train.rollout import EnvPool, RolloutStats, group_jobs, run_episodes, sample_tasks
from seed_train.samples import build_samples, step_advantages
from seed_train.skills import Skill
from seed_train import trainer
from seed_train.threads import torch_threads
from seed_train.trainer import env_spec, load, score_samples, update_policy
from seed_train.evaluate import panel_of

SKILL = "Use each card's number once; add them if the sum is the target, else multiply, then finish with =."


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--env", default="seed/EZPoints-v0")
    p.add_argument("--episodes", type=int, default=12)
    p.add_argument("--max-new-tokens", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3, help="GRPO/SEED pairs timed (medians reported)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: the trainer's policy, seed_train/threads.py)")
    p.add_argument("--compare-plain", action="store_true",
                   help="also time GRPO with every prompt computed whole (no shared prompt heads) in each round")
    args = p.parse_args()
    with torch_threads(args.threads) as threads:
        print(f"torch threads {threads.threads}; load average {os.getloadavg()}")
        run(args)
        print(f"load average at end {os.getloadavg()}")


def whole_prompts(response_logprobs):
    """``response_logprobs`` that ignores ``prefix_groups``: every prompt runs whole (the old path)."""
    def plain(*a, prefix_groups=None, **kw):
        return response_logprobs(*a, **kw)
    return plain


def run(args) -> None:
    cfg = SeedConfig(env_id=args.env, model=args.model, template="compact", history=0, action_format="plain",
                     max_new_tokens=args.max_new_tokens, minibatch_size=16, kl_coef=0.01, lr=1e-5)
    policy = load(cfg)
    spec = env_spec(cfg, "train")
    rng = np.random.default_rng(0)
    jobs = group_jobs(sample_tasks(panel_of(spec), args.episodes // 4, rng), 4, base_seed=0, prefix="bench")
    stats = RolloutStats()
    t0 = time.perf_counter()
    trajs = run_episodes(policy.backend, policy.codec, EnvPool(spec), jobs, max_new_tokens=cfg.max_new_tokens,
                         seed=0, stats=stats)
    rollout_s = time.perf_counter() - t0
    advantages = step_advantages(trajs)
    start = trainable_state(policy.model)
    import torch

    timings: dict[str, list[tuple[float, float]]] = {"GRPO": [], "SEED": []}
    arms = [("GRPO", 0.0, None), ("SEED", 0.01, Skill("", SKILL))]
    if args.compare_plain:
        timings["GRPO whole prompts"] = []
        arms.append(("GRPO whole prompts", 0.0, None))
    n_samples = 0
    shared_logprobs = trainer.response_logprobs
    for _ in range(args.repeats):
        for name, opd_coef, skill in arms:
            trainer.response_logprobs = whole_prompts(shared_logprobs) if name.endswith("whole prompts") else shared_logprobs
            load_trainable_state(policy.model, start)
            run_cfg = SeedConfig(**{**cfg.to_dict(), "opd_coef": opd_coef})
            samples = build_samples(trajs, advantages, [skill] * len(trajs), policy.codec)
            n_samples = len(samples)
            optimizer = torch.optim.AdamW([q for q in policy.model.parameters() if q.requires_grad], lr=run_cfg.lr)
            t0 = time.perf_counter()
            scored = score_samples(policy.model, samples, teacher=skill is not None, reference=True)
            score_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            update_policy(policy.model, optimizer, samples, scored, run_cfg, np.random.default_rng(0))
            timings[name].append((score_s, time.perf_counter() - t0))
    rows = []
    for name, runs in timings.items():
        score_s = statistics.median(r[0] for r in runs)
        update_s = statistics.median(r[1] for r in runs)
        total = statistics.median(r[0] + r[1] for r in runs)
        rows.append((name, n_samples, score_s, update_s, total))
    print(f"model {args.model}, env {args.env}, {len(trajs)} episodes, {rows[0][1]} step samples")
    print(f"rollout: {rollout_s:.1f}s total, generate {stats.generate_s:.1f}s, env {stats.env_s:.3f}s, "
          f"{stats.generated_tokens} tokens, {stats.generated_tokens / stats.generate_s:.1f} generated tokens/s")
    print(f"{'update':<18} {'samples':>7} {'score s':>8} {'update s':>9} {'total s':>8}")
    for name, n, score_s, update_s, total in rows:
        print(f"{name:<18} {n:>7} {score_s:>8.2f} {update_s:>9.2f} {total:>8.2f}")
    if args.compare_plain:
        print(f"GRPO whole prompts / GRPO shared heads (medians): {rows[2][4] / rows[0][4]:.2f}")
    print(f"SEED / GRPO time ratio (medians of {args.repeats}): {rows[1][4] / rows[0][4]:.2f}; "
          f"per pair: {', '.join(f'{(s[0] + s[1]) / (g[0] + g[1]):.2f}' for g, s in zip(timings['GRPO'], timings['SEED']))}")


if __name__ == "__main__":
    main()
