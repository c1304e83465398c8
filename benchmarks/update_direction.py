"""Where one GRPO update moves the operator choice on EZPoints: the policy gradient vs what AdamW does with it.

    OMP_NUM_THREADS=1 python benchmarks/update_direction.py [--stage1 RUN/checkpoints/stage1.safetensors]
        [--epochs 3] [--stage1-lr 5e-4] [--demos 24] [--skill-repeats 1] [--skill-acting] [--steering-only]
        [--group-size 8] [--lrs 1e-5 5e-5 2e-4] [--sgd-lr 0.5] [--seed 0]

EZPoints deals two cards whose values reach 12 by ``+`` (sum deals) or by ``*`` (product deals: 2 and 6,
3 and 4). After Stage 1 on the expert's demonstrations SmolLM2-135M writes ``+`` at the operator step
whatever the cards (P(*) ~ 0.1 on both kinds), so greedy decoding never solves a product deal. Stage 2
can only teach the product rule through groups in which a sampled ``*`` won. This script builds such a
batch (half product, half sum tasks, ``--group-size`` rollouts each, at T = 1, with the Stage 1 policy),
computes the trainer's advantages (the paper's conventions: step-sample group statistics, 10/0 reward),
prints P(+) and P(*) at the operator step with a skill block in the prompt (the env's own hindsight
rules, as a valid skill states them: does the skill steer the policy, i.e. can OPD's teacher differ from
the student in the skill's direction?), then applies ONE update of the trainer (``seed_train.trainer.update_policy``, no KL, no OPD) from the
same start with different optimizers, and prints P(+) and P(*) at the operator step of a product and
of a sum prompt before and after:

- plain SGD: a small step along the policy gradient (the first-order direction of the objective);
- AdamW at each ``--lrs`` value (the trainer's optimizer; its first steps move every parameter by about
  ``lr`` in the sign of its gradient, whatever that gradient's size).

The group signal on ``*`` is the sum of its advantages: positive when ``*`` wins product groups more than
it loses sum groups. Where SGD raises P(*) and AdamW lowers it, the trainer's optimizer, not the reward,
is what removes ``*`` (measured in docs/trainer.md, "What Stage 2 changes on EZPoints").
"""
from __future__ import annotations

import argparse
import copy
import time

import numpy as np
import torch
from safetensors.torch import load_file

from seed_envs.ezpoints.hindsight import FAILURE_RULES, SUCCESS_RULES
from seed_train.checkpoint import load_trainable_state
from seed_train.cli import QUICKSTART
from seed_train.config import SeedConfig
from seed_train.evaluate import panel_of
from seed_train.rollout import EnvPool, group_jobs, run_episodes
from seed_train.samples import build_samples, step_advantages
from seed_train.threads import torch_threads
from seed_train.trainer import env_spec, load, run_stage1, update_policy

OPERATOR_STEP = 1  # EZPoints in token mode: value, operator, value, =


def config(args: argparse.Namespace) -> SeedConfig:
    return SeedConfig.from_dict({**QUICKSTART, "seed": args.seed, "stage1_epochs": args.epochs, "kl_coef": 0.0,
                                 "stage1_lr": args.stage1_lr, "stage1_demos": args.demos,
                                 "stage1_skill_repeats": args.skill_repeats, "stage1_skill_acting": args.skill_acting,
                                 "opd_coef": 0.0, "minibatch_size": 32, "group_size": args.group_size,
                                 "eval_before": False, "eval_after": False, "threads": 1,
                                 "output_dir": "runs/update_direction"})


def tasks_by_category(cfg: SeedConfig, per_category: int, rng: np.random.Generator) -> list[str]:
    """``per_category`` train tasks of each category (the deal's category is in the env's task info)."""
    import gymnasium as gym

    env = gym.make(cfg.env_id, split=cfg.train_split)
    by: dict[str, list[str]] = {}
    for task_id in panel_of(env_spec(cfg, cfg.train_split)):
        _, info = env.reset(options={"task_id": task_id})
        by.setdefault(info["category"], []).append(task_id)
    env.close()
    picks = []
    for category in sorted(by):
        ids = by[category]
        picks += [ids[int(i)] for i in rng.choice(len(ids), per_category, replace=False)]
    return picks


def operator_probs(model, tokenizer, prompts: dict[str, list[list[int]]]) -> dict[str, tuple[float, float]]:
    """Mean P(+) and P(*) as the next token over each category's prompts."""
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # the policy's prompt codec holds it
    plus, star = (tokenizer.encode(t, add_special_tokens=False)[0] for t in ("+", "*"))
    out = {}
    with torch.no_grad():
        for name, batch in prompts.items():
            probs = [torch.softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1) for ids in batch]
            out[name] = (float(np.mean([float(q[plus]) for q in probs])), float(np.mean([float(q[star]) for q in probs])))
    return out


def skill_steering(model, tokenizer, steps: dict, skills: dict[str, str]) -> list[tuple[str, dict]]:
    """P(+), P(*) at the operator step with each skill in the prompt (the teacher prompt OPD scores with)."""
    from seed_train.codec import prompt_codec
    from seed_train.skills import skill_augmented_prompt

    codec = prompt_codec(tokenizer)

    rows = []
    for name, text in skills.items():
        prompts = {cat: [codec.encode(skill_augmented_prompt(step.prompt_parts, text)) for step in group]
                   for cat, group in steps.items()}
        rows.append((f"skill: {name}", operator_probs(model, tokenizer, prompts)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stage1", help="a finished Stage 1's trainable weights (else Stage 1 runs here)")
    parser.add_argument("--epochs", type=int, default=3, help="Stage 1 epochs when it runs here")
    parser.add_argument("--stage1-lr", type=float, default=QUICKSTART["stage1_lr"], help="Stage 1 learning rate when it runs here")
    parser.add_argument("--demos", type=int, default=QUICKSTART["stage1_demos"], help="Stage 1 demonstrations when it runs here")
    parser.add_argument("--skill-repeats", type=int, default=1, help="Stage 1 skill pair repeats when it runs here")
    parser.add_argument("--skill-acting", action="store_true",
                        help="Stage 1 also trains acting with the demo's skill in the prompt (stage1_skill_acting)")
    parser.add_argument("--steering-only", action="store_true", help="print the skill-steering table, skip the updates")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--per-category", type=int, default=2, help="tasks of each category in the batch")
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-5, 5e-5, 2e-4], help="AdamW learning rates")
    parser.add_argument("--sgd-lr", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = config(args)
    with torch_threads(1):
        t0 = time.perf_counter()
        policy = load(cfg)
        if args.stage1:
            load_trainable_state(policy.model, load_file(args.stage1))
        else:
            run_stage1(policy, cfg, print)
        rng = np.random.default_rng(args.seed)
        tasks = tasks_by_category(cfg, args.per_category, rng)
        jobs = group_jobs(tasks, cfg.group_size, base_seed=args.seed, prefix="probe")
        pool = EnvPool(env_spec(cfg, cfg.train_split), "sync")
        trajectories = run_episodes(policy.backend, policy.codec, pool, jobs, max_new_tokens=cfg.max_new_tokens,
                                    temperature=1.0, seed=args.seed)
        pool.close()
        advantages = step_advantages(trajectories, group_stats=cfg.group_stats, format_penalty_on=cfg.format_penalty_on,
                                     format_penalty=cfg.format_penalty)
        samples = build_samples(trajectories, advantages, [None] * len(trajectories), policy.codec)
        signal: dict[tuple[str, str], list[float]] = {}
        prompts: dict[str, list[list[int]]] = {}
        operator_steps: dict[str, list] = {}
        seen_tasks = set()
        for t, adv in zip(trajectories, advantages):
            if len(t.steps) > OPERATOR_STEP:
                step = t.steps[OPERATOR_STEP]
                signal.setdefault((t.category, step.action.strip()), []).append(adv[OPERATOR_STEP])
                if t.task_id not in seen_tasks:  # one operator-step prompt per task (the first rollout's)
                    seen_tasks.add(t.task_id)
                    prompts.setdefault(t.category, []).append(list(step.prompt_token_ids))
                    operator_steps.setdefault(t.category, []).append(step)
        print(f"batch: {len(trajectories)} episodes of {len(tasks)} tasks, {len(samples)} step samples "
              f"({time.perf_counter() - t0:.0f} s so far)")
        print("\noperator-step actions: count and summed advantage (the policy-gradient signal on that choice)")
        for (category, action), values in sorted(signal.items()):
            print(f"  {category:8s} {action!r:6s} n={len(values):3d} sum A = {sum(values):+.2f}")
        start = copy.deepcopy(policy.model.state_dict())
        before = operator_probs(policy.model, policy.codec, prompts)
        # The env's own hindsight rules (what a valid skill says), as the teacher prompt carries them.
        steering = [("no skill (the student)", before)] + skill_steering(
            policy.model, policy.codec, operator_steps,
            {"product rule": FAILURE_RULES["wrong_operation_product"], "product workflow": SUCCESS_RULES["product"],
             "sum rule": FAILURE_RULES["wrong_operation_sum"], "sum workflow": SUCCESS_RULES["sum"],
             "check the value": FAILURE_RULES["wrong_value"]})
        rows = [("Stage 1 (no update)", before)]
        arms = [(f"SGD lr {args.sgd_lr:g}", lambda params: torch.optim.SGD(params, lr=args.sgd_lr))]
        arms += [(f"AdamW lr {lr:g}", lambda params, lr=lr: torch.optim.AdamW(params, lr=lr)) for lr in args.lrs]
        arms = [] if args.steering_only else arms
        for name, make in arms:
            policy.model.load_state_dict(start)
            params = [p for p in policy.model.parameters() if p.requires_grad]
            update_policy(policy.model, make(params), samples, {"ref_logprobs": None, "teacher_logprobs": None},
                          cfg, np.random.default_rng(args.seed))
            policy.model.eval()
            rows.append((name, operator_probs(policy.model, policy.codec, prompts)))
    cats = sorted(prompts)
    print(f"\nmean over {', '.join(f'{len(prompts[c])} {c}' for c in cats)} operator-step prompts (one per task)")
    print("\n| Stage 1 policy, prompt | " + " | ".join(f"{c}: P(+) | {c}: P(*)" for c in cats) + " |")
    print("|---|" + "---:|---:|" * len(cats))
    for name, probs in steering:
        print(f"| {name} | " + " | ".join(f"{probs[c][0]:.3f} | {probs[c][1]:.3f}" for c in cats) + " |")
    print("\n| after one update | " + " | ".join(f"{c}: P(+) | {c}: P(*)" for c in cats) + " |")
    print("|---|" + "---:|---:|" * len(cats))
    for name, probs in rows:
        print(f"| {name} | " + " | ".join(f"{probs[c][0]:.3f} | {probs[c][1]:.3f}" for c in cats) + " |")
    print(f"\n{time.perf_counter() - t0:.0f} s in all")


if __name__ == "__main__":
    main()
