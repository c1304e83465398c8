"""One SEED update on EZPoints in image mode vs text mode, with the tiny test models.

    python benchmarks/bench_vision_step.py [--episodes 8] [--repeats 3] [--max-steps 4]

Three policies play the same EZPoints train tasks (groups of 4) once:
  text model, text mode     the tiny Qwen2 text model (seed_train.tiny) on obs_mode="text"
  VLM, text mode            the tiny Qwen2.5-VL (seed_train.vision) on obs_mode="text": no image
  VLM, image mode           the same VLM on obs_mode="image": each prompt carries the table image
then, on each policy's own batch, one SEED update is timed: the reference pass (KL) and the teacher
pass under skill-augmented prompts (every step gets a valid skill, the worst case) and the PPO + OPD
update, full fine-tuning. Weights are restored before each repeat; the table shows medians and the
time per step sample (random policies play different numbers of steps). Prints the table and the
image/text time ratios. The tiny VLM turns a 300x300 table into 9 image tokens (its processor's pixel
budget, see seed_train.tiny.build_tiny_vlm), so the ratio measures the image path's machinery
(processor, vision tower, multimodal positions, no shared-prefix scoring), not a real VLM's image cost.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from seed_train.checkpoint import load_trainable_state, trainable_state
from seed_train.config import SeedConfig
from seed_train.evaluate import panel_of
from seed_train.policy import frozen_copy
from seed_train.rollout import EnvPool, group_jobs, run_episodes, sample_tasks
from seed_train.samples import build_samples, step_advantages
from seed_train.skills import Skill
from seed_train.tiny import cached_tiny_model, cached_tiny_vlm
from seed_train.trainer import env_spec, load, score_samples, update_policy
from seed_train.vision import image_token_id

SKILL = "Use each card's number once; add them if the sum is the target, else multiply, then finish with =."


def measure(name: str, model: str, obs_mode: str, args: argparse.Namespace) -> dict:
    cfg = SeedConfig(env_id="seed/EZPoints-v0", env_kwargs={"obs_mode": obs_mode}, model=model, lora=False,
                     template="compact", history=1, action_format="plain", max_steps=args.max_steps,
                     max_new_tokens=4, minibatch_size=16, kl_coef=0.01, lr=1e-5)
    policy = load(cfg)
    policy.reference = frozen_copy(policy.model)  # full fine-tuning: the KL reference is a frozen copy
    spec = env_spec(cfg, "train")
    rng = np.random.default_rng(0)
    jobs = group_jobs(sample_tasks(panel_of(spec), args.episodes // 4, rng), 4, base_seed=0, prefix="bench")
    t0 = time.perf_counter()
    trajs = run_episodes(policy.backend, policy.codec, EnvPool(spec), jobs, max_new_tokens=cfg.max_new_tokens, seed=0)
    rollout_s = time.perf_counter() - t0
    advantages = step_advantages(trajs)
    start = trainable_state(policy.model)
    runs = []
    for _ in range(args.repeats):
        load_trainable_state(policy.model, start)
        t0 = time.perf_counter()
        samples = build_samples(trajs, advantages, [Skill("", SKILL)] * len(trajs), policy.codec)
        build_s = time.perf_counter() - t0
        optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad], lr=cfg.lr)
        t0 = time.perf_counter()
        scored = score_samples(policy.model, samples, teacher=True, reference=True, reference_model=policy.reference)
        score_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        update_policy(policy.model, optimizer, samples, scored, cfg, np.random.default_rng(0))
        runs.append((build_s, score_s, time.perf_counter() - t0))
    image_id = image_token_id(policy.model)
    prompts = [s.prompt_ids for s in samples]
    return {
        "name": name, "samples": len(samples), "rollout_s": rollout_s,
        "prompt_tokens": statistics.mean(len(p) for p in prompts),
        "image_tokens": statistics.mean(p.count(image_id) for p in prompts) if image_id is not None else 0.0,
        "build_s": statistics.median(r[0] for r in runs), "score_s": statistics.median(r[1] for r in runs),
        "update_s": statistics.median(r[2] for r in runs), "total_s": statistics.median(sum(r) for r in runs),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--episodes", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--max-steps", type=int, default=4)
    args = p.parse_args()
    torch.manual_seed(0)
    text_model, vlm = str(cached_tiny_model(seed=0)), str(cached_tiny_vlm(seed=0))
    rows = [measure("text model, text mode", text_model, "text", args),
            measure("VLM, text mode", vlm, "text", args),
            measure("VLM, image mode", vlm, "image", args)]
    print(f"EZPoints train, {args.episodes} episodes, max {args.max_steps} steps, medians of {args.repeats}")
    print("| policy | samples | prompt tokens | image tokens | build samples s | scoring s | update s | total s | ms / sample |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['name']} | {r['samples']} | {r['prompt_tokens']:.0f} | {r['image_tokens']:.0f} | {r['build_s']:.3f} "
              f"| {r['score_s']:.3f} | {r['update_s']:.3f} | {r['total_s']:.3f} | {1000 * r['total_s'] / r['samples']:.1f} |")
    per = {r["name"]: r["total_s"] / r["samples"] for r in rows}
    print(f"time per sample, image mode / text mode: {per['VLM, image mode'] / per['text model, text mode']:.2f} "
          f"(vs the text model), {per['VLM, image mode'] / per['VLM, text mode']:.2f} (same VLM without the image)")


if __name__ == "__main__":
    main()
