"""Does OPD's teacher read the skill on CodeLock? P(the code's letter) with and without a skill in the prompt.

    OMP_NUM_THREADS=2 python benchmarks/codelock_steering.py RUN_DIR [--split test] [--tasks 32] [--seed 0]

``RUN_DIR``: a trainer run folder on ``seed/CodeLock-v0`` (e.g. an experiment's ``seed0/stage1/run``): its
``config.json`` gives the model and prompt settings, ``final/`` (or ``checkpoints/stage1.safetensors``)
the policy. One rollout per task (T = 1) gives the step prompts the policy actually sees; at each
letter step the script prints the probability of the family's right letter for that position as the next
token, under the student prompt and under the teacher prompt with each skill OPD could be given
(``skill_augmented_prompt``, exactly as the trainer builds it): the family's correct rule (the static
library, ``seed_envs.codelock.hindsight.static_library``), the wrong rule (the code moved one letter in
every position: ``wrong_rule``) and the empty skill block. With the student's log-prob l_θ and the
teacher's l_skill on a sampled letter, Δ = l_skill − l_θ and the gate σ(β·Δ): where Δ on the right letter
is clearly > 0 with the correct rule (and on the wrong-rule letter with the wrong rule), the teacher reads
the skill, and a content effect has a channel into the update.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from seed_envs.codelock.env import ALPHABET, family_code
from seed_envs.codelock.hindsight import static_library, wrong_code, wrong_rule
from seed_train.codec import prompt_codec
from seed_train.config import SeedConfig
from seed_train.evaluate import panel_of, subsample_panel
from seed_train.rollout import EnvPool, group_jobs, run_episodes
from seed_train.skills import skill_augmented_prompt
from seed_train.threads import torch_threads
from seed_train.trainer import env_spec, load


def letter_probs(model, codec, prompts: list[list[int]]) -> np.ndarray:
    """[prompts, 6]: P(each letter A-F) as the next token."""
    tokenizer = getattr(codec, "tokenizer", codec)
    ids = [tokenizer.encode(letter, add_special_tokens=False)[0] for letter in ALPHABET]
    rows = []
    with torch.no_grad():
        for p in prompts:
            probs = torch.softmax(model(torch.tensor([p])).logits[0, -1].float(), -1)
            rows.append([float(probs[i]) for i in ids])
    return np.array(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="a seed-train run folder on seed/CodeLock-v0")
    parser.add_argument("--split", default="test")
    parser.add_argument("--tasks", type=int, default=32, help="tasks of the panel (one rollout each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--beta", type=float, default=None, help="gate beta (default: the run's opd_beta)")
    args = parser.parse_args()
    run = Path(args.run_dir)
    data = json.loads((run / "config.json").read_text())
    final = run / "final"
    data.update(model=str(final) if final.is_dir() else data["model"], lora=data["lora"] and not final.is_dir(),
                resume=None, output_dir=str(run.parent / "steering-probe"), generation_backend="hf")
    if not final.is_dir():
        data["stage1_from"] = str(run / "checkpoints" / "stage1.safetensors")
    cfg = SeedConfig.from_dict(data)
    beta = cfg.opd_beta if args.beta is None else args.beta
    t0 = time.perf_counter()
    with torch_threads(cfg.threads), torch.random.fork_rng(devices=[]):
        policy = load(cfg)
        if cfg.stage1_from:
            from safetensors.torch import load_file

            from seed_train.checkpoint import load_trainable_state

            load_trainable_state(policy.model, load_file(cfg.stage1_from))
        tasks = subsample_panel(panel_of(env_spec(cfg, args.split)), args.tasks)
        jobs = group_jobs(list(tasks), 1, base_seed=args.seed, prefix="probe")
        pool = EnvPool(env_spec(cfg, args.split), "sync")
        trajectories = run_episodes(policy.backend, policy.codec, pool, jobs, max_new_tokens=cfg.max_new_tokens,
                                    temperature=1.0, seed=args.seed)
        pool.close()
        codec = prompt_codec(policy.codec)
        library = static_library(sorted({t.category for t in trajectories}))
        skills = {"correct rule": lambda fam: library[fam], "wrong rule": lambda fam: wrong_rule(library[fam], fam),
                  "empty skill": lambda fam: ""}
        rows: dict[str, list[tuple[float, float]]] = {name: [] for name in ["no skill (the student)", *skills]}
        for t in trajectories:
            right, wrong = family_code(t.category), wrong_code(t.category)
            for k, step in enumerate(t.steps[:len(right)]):
                if step.invalid_action:
                    break
                prompts = {"no skill (the student)": list(step.prompt_token_ids)}  # what the policy sampled from
                prompts.update({name: codec.encode(skill_augmented_prompt(step.prompt_parts, make(t.category)))
                                for name, make in skills.items()})
                for name, ids in prompts.items():
                    p = letter_probs(policy.model, policy.codec, [ids])[0]
                    rows[name].append((p[ALPHABET.index(right[k])], p[ALPHABET.index(wrong[k])]))
    student = np.array(rows["no skill (the student)"])
    print(f"{run}: {len(trajectories)} {args.split} tasks, {len(student)} letter steps ({time.perf_counter() - t0:.0f} s)")
    print("\n| prompt | P(right letter) | P(wrong-rule letter) | mean Δ on the right letter | σ(β·mean Δ) | "
          "mean Δ on the wrong-rule letter | σ(β·mean Δ) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, values in rows.items():
        v = np.array(values)
        d_right = np.mean(np.log(v[:, 0]) - np.log(student[:, 0]))
        d_wrong = np.mean(np.log(v[:, 1]) - np.log(student[:, 1]))
        gate = lambda d: 1 / (1 + math.exp(-beta * d))  # noqa: E731
        print(f"| {name} | {v[:, 0].mean():.3f} | {v[:, 1].mean():.3f} | {d_right:+.2f} | {gate(d_right):.2f} "
              f"| {d_wrong:+.2f} | {gate(d_wrong):.2f} |")


if __name__ == "__main__":
    main()
