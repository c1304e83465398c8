"""The SEED trainer, top to bottom.

    train(cfg):
        load the policy (LoRA or full), build train/eval env specs
        evaluate the eval split                                   (before)
        Stage 1: SFT on expert demonstrations + their skills      (skippable)
        Stage 2, for each iteration k with the current weights θ_k:
            1. sample tasks, play G rollouts per task               -> trajectories (token-exact)
            2. θ_k analyses each trajectory into a skill            -> skills (or a control)
            3. advantages: group-normalised returns (or GiGPO)
            4. score: teacher log-probs under skill-augmented prompts, reference log-probs (no grad)
            5. update: L = L_PPO + kl_coef·KL + opd_coef·OPD       (seed_train.losses.seed_loss)
            6. log diagnostics, plot, checkpoint
        evaluate the eval split                                   (after)

Where each step lives (the paper's algorithm is in the first eight modules; the rest is infrastructure):

    Stage 1      seed_train/stage1.py        collect_demonstrations, sft_pairs, sft_train
                 seed_envs/<env>/hindsight.py  hindsight_rule (the skill of a demo; seed_envs.hindsight_rule_for)
    1 rollouts   seed_train/rollout.py       run_episodes (EnvSpec.make: the wrappers' agent stack)
                 seed_train/generation.py    HFGenerateBackend.generate (vllm_backend.py: VLLMBackend)
    2 skills     seed_train/skill_sources.py make_skill_source, OnPolicyAnalyzer, generate_skills (and the controls)
                 seed_train/skills.py        analyzer_prompt, parse_skill, skill_augmented_prompt
    3 advantages seed_train/samples.py       step_advantages, build_samples
                 seed_train/advantages.py    step_scores, grpo_step_sample_advantages, gigpo_step_advantages
    4 scoring    seed_train/scoring.py       response_logprobs (teacher, reference, old policy; shared heads)
    5 update     seed_train/trainer.py       update_policy -> seed_train/losses.py seed_loss
                                             (ppo_clip_loss, kl_low_var, opd_gate, opd_loss)
    6 logging    seed_train/logs.py          MetricsLogger; seed_train/checkpoint.py save_checkpoint
    this file    run = launch, up_to_stage2 (eval, Stage 1, θ_0), stage2 (seed_iteration per iteration), finish

The trainer touches environments only through gymnasium, the wrappers and the trajectory format.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm
from safetensors.torch import load_file, save_file

from seed_train.distributed import (barrier, dist_info, gather_lists, init_from_env, local_device, max_over_ranks,
                                  mean_over_ranks, shard_groups, sum_over_ranks)
from seed_train.checkpoint import (check_checkpoint, load_checkpoint, load_trainable_state, load_weights_file,
                                   read_checkpoint_meta, save_checkpoint, trainable_state)
from seed_train.codec import PromptCodec, model_context_tokens, prompt_codec
from seed_train.config import SeedConfig, SetupError
from seed_train.evaluate import evaluate_policy, markdown_table, panel_of, with_prompt_budget, write_report
from seed_train.reports import evaluation_label, write_run_report
from seed_train.generation import GenerationBackend, HFGenerateBackend
from seed_train.logs import MetricsLogger
from seed_train.progress import bars_disabled, clock, progress_bar, say as say_line, turn_reporter
from seed_train.losses import gate_advantage_covariance, opd_gate, seed_loss
from seed_train.parallel import ReplicatedWeights, weight_layout_from_env
from seed_train.policy import (LoraSettings, frozen_copy, load_policy, merge_and_restart_lora,
                               reference_logprobs_context, resolve_model)
from seed_train.rollout import (EnvPool, EnvSpec, RolloutStats, group_jobs, panel_categories, run_episodes, sample_tasks,
                                sample_tasks_by_category)
from seed_train.samples import (StepSample, build_samples, record_teacher_logprobs, response_tensors,
                                step_advantages)
from seed_train.scoring import auto_prefix_groups, heads_together, micro_batches, response_logprobs
from seed_train.skill_sources import AnalyzerAnswer, SkillSource, generate_skills, make_skill_source
from seed_train.skills import Skill, rule_based_skill
from seed_train.stage1 import collect_demonstrations, repeat_skill_pairs, sft_pairs, sft_train
from seed_train.threads import refresh_threads, torch_threads
from wrappers import Trajectory, TrajectoryWriter, read_trajectories

SCORE_BATCH = 16  # micro-batch of the no-grad scoring passes


def env_spec(cfg: SeedConfig, split: str) -> EnvSpec:
    """How the run builds its envs for a split or a named panel (``cfg.panels``); ``cfg.reward_mode`` (SEED:
    10/0 success reward) unless env_kwargs sets one."""
    split, env_kwargs = cfg.panel(split)
    return EnvSpec(env_id=cfg.env_id, split=split, template=cfg.env_default("template"),
                   history=cfg.env_default("history"), action_format=cfg.env_default("action_format"),
                   format_penalty=cfg.format_penalty, max_steps=cfg.env_default("max_steps"),
                   env_kwargs={"reward_mode": cfg.reward_mode, **env_kwargs},
                   step_timeout_s=cfg.env_step_timeout_s, episode_timeout_s=cfg.env_episode_timeout_s,
                   remote_urls=tuple(cfg.env_urls))


# ------------------------------------------------------------------------------------ update
def logprob_temperature(cfg: SeedConfig) -> float:
    """The temperature Stage 2's log-probs are computed at (rollout records, reference, teacher, update):
    the sampling temperature with ``cfg.logprob_temperature`` (verl's convention), else 1."""
    return float(cfg.temperature) if cfg.logprob_temperature else 1.0


def score_samples(model, samples: Sequence[StepSample], *, teacher: bool, reference: bool,
                  reference_model=None, temperature: float = 1.0) -> dict[str, torch.Tensor | None]:
    """No-grad scoring passes over the batch: teacher (skill-augmented prompt) and reference log-probs,
    at ``temperature`` (:func:`logprob_temperature`: the convention the rollout's log-probs were recorded with).

    Only samples with a valid skill are teacher-scored; the others keep zeros (masked out by skill_valid).
    Shared prompt heads are computed once (:func:`seed_train.scoring.auto_prefix_groups` picks the groups
    that save the most: e.g. an episode's steps, whose teacher head ends with the episode's skill block,
    or a GRPO group's steps, which share the system prompt and task).
    """
    out: dict[str, torch.Tensor | None] = {"teacher_logprobs": None, "ref_logprobs": None}
    if not samples:  # (an iteration whose every episode failed)
        return out
    responses = [s.response_ids for s in samples]
    width = max(len(r) for r in responses)
    if teacher:
        idx = [i for i, s in enumerate(samples) if s.teacher_prompt_ids is not None]
        prompts = [samples[i].teacher_prompt_ids for i in idx]
        lp, _ = response_logprobs(model, prompts, [responses[i] for i in idx], batch_size=SCORE_BATCH,
                                  prefix_groups=auto_prefix_groups(prompts), temperature=temperature)
        full = torch.zeros((len(samples), width), dtype=lp.dtype, device=lp.device)
        full[torch.tensor(idx, device=lp.device), : lp.shape[1]] = lp
        out["teacher_logprobs"] = full
    if reference:
        with reference_logprobs_context(model, reference_model) as ref_model:
            prompts = [s.prompt_ids for s in samples]
            out["ref_logprobs"], _ = response_logprobs(ref_model, prompts, responses, batch_size=SCORE_BATCH,
                                                       temperature=temperature,
                                                       prefix_groups=auto_prefix_groups(prompts))
    return out


def _rows(idx, width: int, device):
    """Selects a minibatch's rows of a [N, T] batch tensor, cut to the minibatch's response width."""
    return lambda t: None if t is None else t[idx, :width].to(device)


def update_policy(model, optimizer, samples: Sequence[StepSample], scored: dict, cfg: SeedConfig,
                  rng: np.random.Generator, layout: ReplicatedWeights = ReplicatedWeights()) -> dict[str, float]:
    """PPO epochs over the samples in minibatches; returns the mean of each loss statistic.

    Each epoch splits a permutation of the samples into ``ceil(N / minibatch_size)`` near-equal
    minibatches; one optimizer step per minibatch. With ``micro_batch_size`` a minibatch runs as several
    forward/backward passes whose gradients accumulate: every pass's token means take the whole
    minibatch's token counts as denominators, so the step is the one pass's step (to rounding) in the
    memory of a micro-batch. Under data parallelism N is the global sample count, every rank takes that
    many optimizer steps over its own samples, the token means use the global minibatch's token counts
    and gradients are averaged over ranks, so one minibatch covering all samples gives exactly the
    single-process update. ``layout`` (:mod:`seed_train.parallel`) runs backward and the step (gradient
    averaging, clipping), and keeps a rank with no share of a minibatch, or fewer micro-batches than
    another rank, in step with the others.
    """
    tensors = response_tensors(samples) if samples else None
    device = next(model.parameters()).device
    params = [p for p in model.parameters() if p.requires_grad]
    world = dist_info().world_size
    n_minibatches = max(1, -(-int(sum_over_ranks(len(samples))) // cfg.minibatch_size))
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    steps = 0
    model.train()
    for _ in range(cfg.ppo_epochs):
        for idx in np.array_split(rng.permutation(len(samples)), n_minibatches):
            batch = [samples[i] for i in idx]
            # Denominators of the token means: the global minibatch's counts over the world size.
            response_tokens = sum(len(s.response_ids) for s in batch)
            opd_tokens = sum(len(s.response_ids) for s in batch if s.teacher_prompt_ids is not None)
            token_count = sum_over_ranks(response_tokens) / world
            opd_token_count = sum_over_ranks(opd_tokens) / world
            optimizer.zero_grad(set_to_none=True)
            zero_signal = bool(batch) and no_gradient_signal(tensors["advantages"][idx], opd_tokens, cfg)
            parts = (micro_batches(idx, cfg.micro_batch_size, order=lambda rows: heads_together(rows, samples))
                     if batch and not zero_signal else [])
            # Lockstep layouts: every pass is a collective, so every rank runs as many as the busiest one.
            passes = max_over_ranks(max(len(parts), 1)) if layout.lockstep else max(len(parts), 1)
            if zero_signal:
                # Every sample's advantage is 0 and no KL or OPD term applies (e.g. a group whose episodes all
                # failed): the loss is 0 whatever the weights, so its gradient is exactly zero. Skip the
                # forward and backward; AdamW still steps on zero gradients (weight decay, moment decay), so
                # weights and optimizer state are what the full pass gives.
                stats = {"loss": 0.0, "pg_loss": 0.0, "zero_signal_minibatches": 1.0}  # ratio stats: not measured
            else:
                stats = {}  # (a rank with no share of this minibatch only joins the gradient average)
            for n, part in enumerate(parts):
                # Samples share prompt heads (system prompt, task, ...): each shared head runs once, gradients
                # included (the same gradients as one forward per sample; tests/test_policy.py).
                # Not under FSDP/ZeRO: there every forward is a collective, and the number of forwards of a
                # grouped batch depends on its rows, so ranks would wait for each other forever.
                prompts = [samples[i].prompt_ids for i in part]
                logprobs, mask = response_logprobs(model, prompts, [samples[i].response_ids for i in part],
                                                   batch_size=len(part), grad=True,
                                                   temperature=logprob_temperature(cfg),
                                                   prefix_groups=None if layout.lockstep else auto_prefix_groups(prompts))
                rows = _rows(part, mask.shape[1], device)
                loss, part_stats = seed_loss(
                    logprobs, rows(tensors["old_logprobs"]), rows(tensors["advantages"]), mask,
                    ref_logprobs=rows(scored["ref_logprobs"]), teacher_logprobs=rows(scored["teacher_logprobs"]),
                    skill_valid=tensors["skill_valid"][part].to(device), clip_eps=cfg.clip_eps, kl_coef=cfg.kl_coef,
                    dual_clip_c=cfg.dual_clip_c or None, opd_coef=cfg.opd_coef, opd_beta=cfg.opd_beta,
                    opd_gate=cfg.opd_gate, token_count=token_count,
                    opd_token_count=opd_token_count if opd_tokens else None,
                )
                layout.backward(loss, last=n == passes - 1)
                del logprobs, loss  # (free this micro-batch's graph before the next one's forward)
                for k, v in part_stats.items():  # token means over the minibatch's counts: they add up
                    stats[k] = stats.get(k, 0.0) + float(v)
            for n in range(len(parts), passes):
                layout.backward_no_samples(model, last=n == passes - 1)
            if zero_signal and not layout.lockstep:
                zero_missing_gradients(params)
            stats["grad_norm"] = layout.step(optimizer, params, cfg.grad_clip)
            if not math.isfinite(stats["grad_norm"]):
                # A NaN/inf loss or gradient (a non-finite advantage, an overflow): the layout skipped the
                # step (on every rank), so the weights stay finite; the minibatch is counted, not averaged in.
                sums["nonfinite_minibatches_skipped"] += 1
                continue
            for k, v in stats.items():
                sums[k] += float(v)
                counts[k] += 1
            steps += 1
    model.eval()
    # Each statistic is the mean over the minibatches that measured it (a skipped zero-signal minibatch
    # has no ratio statistics); zero_signal_minibatches is their count, not a mean.
    counted = ("zero_signal_minibatches", "nonfinite_minibatches_skipped")
    out = mean_over_ranks({k: v if k in counted else v / counts[k] for k, v in sums.items()})
    # Token counts add up over ranks (each rank saw its share of the minibatch); every rank calls this.
    opd_tokens = sum_over_ranks(sums.get("opd_tokens", 0.0)) / max(steps, 1)
    if "opd_tokens" in out:
        out["opd_tokens"] = opd_tokens
    return out


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MiB (``ru_maxrss``: KiB on Linux, bytes on macOS); nan
    where the ``resource`` module is missing (Windows)."""
    try:
        import resource
    except ImportError:
        return math.nan
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024 if sys.platform == "darwin" else 1024)


def no_gradient_signal(advantages: torch.Tensor, opd_tokens: int, cfg: SeedConfig) -> bool:
    """True when a minibatch's loss is identically 0: all advantages 0, no KL term, no OPD tokens."""
    return not bool(advantages.any()) and cfg.kl_coef == 0 and (cfg.opd_coef == 0 or opd_tokens == 0)


def zero_missing_gradients(params: Sequence[torch.Tensor]) -> None:
    """Zeros where a parameter has no gradient, so the optimizer steps it as it would a zero gradient."""
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)


def rollout_metrics(trajectories: Sequence[Trajectory], skills: Sequence[Skill | None]) -> dict[str, float]:
    steps = [s for t in trajectories for s in t.steps]
    nan = float("nan")  # (an iteration whose every episode failed trains on none)
    metrics = {
        "success": float(np.mean([t.success for t in trajectories])) if trajectories else nan,
        "score": float(np.mean([t.score for t in trajectories])) if trajectories else nan,
        "return": float(np.mean([t.return_ for t in trajectories])) if trajectories else nan,
        "length": float(np.mean([t.length for t in trajectories])) if trajectories else nan,
        "format_error_rate": float(np.mean([s.format_error for s in steps])) if steps else 0.0,
        "invalid_action_rate": float(np.mean([s.invalid_action for s in steps])) if steps else 0.0,
    }
    by_cat: dict[str, list[bool]] = defaultdict(list)
    for t in trajectories:
        by_cat[t.category].append(t.success)
    metrics.update({f"success/{c}": float(np.mean(v)) for c, v in sorted(by_cat.items())})
    if skills:  # only when skills were asked for (SEED and its controls)
        valid = [s for s in skills if s is not None]
        metrics["skill_valid_rate"] = len(valid) / len(skills)
        metrics["skills_valid"], metrics["skills_written"] = len(valid), len(skills)
        metrics["skill_words"] = float(np.mean([len(s.text.split()) for s in valid])) if valid else 0.0
    return metrics


def gate_diagnostics(samples: Sequence[StepSample], scored: dict, cfg: SeedConfig) -> dict[str, float]:
    """Cov(gate, advantage) over the tokens with a valid skill, with the gate of ``cfg.opd_gate`` at the
    sampling-time log-probs (:func:`seed_train.losses.gate_advantage_covariance`, one definition for both):

    - ``gate_adv_cov_context``: the paper's Eq. 8 condition, within a context: a step sample's context
      is its GRPO group and step index (same task and reset seed, same turn); the gate and advantage are
      centred within each context with >= 2 samples, token-weighted over contexts;
    - ``gate_adv_cov_pooled``: the same over all tokens as one context, a proxy only (it mixes the
      gate's variation between contexts into the covariance).
    """
    teacher = scored["teacher_logprobs"]
    if teacher is None:
        return {}
    t = response_tensors(samples)
    device = teacher.device
    old = t["old_logprobs"].to(device)
    mask = t["response_mask"].to(device) * t["skill_valid"].to(device)[:, None]
    gate = opd_gate(old, teacher[:, : old.shape[1]], beta=cfg.opd_beta, kind=cfg.opd_gate)
    advantages = t["advantages"].to(device)
    labels = {key: i for i, key in enumerate(dict.fromkeys((s.group, s.step) for s in samples))}
    contexts = torch.tensor([labels[(s.group, s.step)] for s in samples], device=device)
    return {"gate_adv_cov_pooled": gate_advantage_covariance(gate, advantages, mask),
            "gate_adv_cov_context": gate_advantage_covariance(gate, advantages, mask, contexts)}


# ------------------------------------------------------------------------------------ the run
@dataclass
class Policy:
    model: Any
    codec: PromptCodec  # turns prompt text (and images) into the ids this model is fed
    backend: HFGenerateBackend
    lora: LoraSettings | None = None
    reference: Any = None  # full fine-tuning: frozen copy of θ_0 for the KL term (LoRA: adapters off)
    layout: ReplicatedWeights = dataclasses.field(default_factory=ReplicatedWeights)  # Stage 2's weight layout


def load(cfg: SeedConfig) -> Policy:
    """The policy of ``cfg.model`` with its prompt codec (a vision-language model's: its processor's)."""
    lora = LoraSettings(r=cfg.lora_r, alpha=cfg.lora_alpha, target_modules=tuple(cfg.lora_targets)) if cfg.lora else None
    torch.manual_seed(cfg.seed)  # LoRA's A matrices are drawn at wrapping time
    model, tokenizer = load_policy(cfg.model, lora=lora, dtype=cfg.dtype, device=cfg.device,
                                   freeze_vision=cfg.freeze_vision, activation_checkpointing=cfg.gradient_checkpointing)
    codec = prompt_codec(tokenizer)
    if codec.sees_images and cfg.generation_backend != "hf":
        raise SetupError("config field 'generation_backend': vision-language policies generate with 'hf' "
                         f"(got {cfg.generation_backend!r})")
    model.eval()
    return Policy(model, codec, generation_backend(cfg, model, codec.tokenizer), lora)


def generation_backend(cfg: SeedConfig, model, tokenizer) -> GenerationBackend:
    """``hf``: transformers generate on the policy itself; ``vllm``: an engine on the same weights, re-synced
    after every update (imported only here, so the hf path never needs vllm)."""
    if cfg.generation_backend == "vllm":
        from seed_train.vllm_backend import VLLMBackend

        backend = VLLMBackend(str(resolve_model(cfg.model)), tokenizer, dtype=cfg.dtype)
        backend.sync_weights(model)
        return backend
    return HFGenerateBackend(model, tokenizer, prefix_sharing=cfg.prefix_sharing,
                             logprob_temperature=cfg.logprob_temperature)


def fix_stage2_start(policy: Policy, cfg: SeedConfig) -> None:
    """Make the current weights θ_0, the policy the KL term anchors to.

    LoRA: fold the Stage 1 adapters into the base and start fresh ones (reference = adapters off).
    Full fine-tuning: keep a frozen copy (only when the KL term needs one).
    """
    if policy.lora is not None:
        torch.manual_seed(cfg.seed + 1)
        policy.model = merge_and_restart_lora(policy.model, policy.lora)
        policy.model.eval()  # the generation backend picks it up at the next iteration's sync
    elif cfg.kl_coef > 0:
        policy.reference = frozen_copy(policy.model)


def prompt_budget(cfg: SeedConfig, policy: Policy) -> int:
    """Prompt tokens a turn may take: ``cfg.max_prompt_tokens``, else the model's context less the tokens a
    turn generates (0, no limit, when the model's config does not give its context)."""
    if cfg.max_prompt_tokens:
        return cfg.max_prompt_tokens
    context = model_context_tokens(policy.model)
    return max(1, context - cfg.max_new_tokens) if context else 0


def eval_decoding(cfg: SeedConfig, policy: Policy) -> dict[str, Any]:
    """evaluate_policy's decoding arguments from the config: greedy, or sampled several times per task (with the
    rollouts' ``top_p``: the policy evaluated as it is trained to sample), and the prompt budget."""
    sampled = cfg.eval_temperature > 0
    return {"greedy": not sampled, "temperature": cfg.eval_temperature if sampled else 1.0,
            "top_p": cfg.top_p if sampled else 1.0,
            "samples_per_task": cfg.eval_samples, "max_prompt_tokens": prompt_budget(cfg, policy)}


def run_eval(policy: Policy, cfg: SeedConfig, name: str, out: Path) -> dict[str, Any]:
    refresh_threads()  # each phase re-reads how many cores other processes leave us
    summary = evaluate_policy(policy.backend, policy.codec, env_spec(cfg, cfg.eval_split),
                              max_new_tokens=cfg.max_new_tokens, limit=cfg.panel_limit(cfg.eval_split), seed=cfg.seed,
                              trajectories_path=out / f"{name}.trajectories.jsonl", env_backend=cfg.env_backend,
                              progress=evaluation_label(name), **eval_decoding(cfg, policy))
    if dist_info().is_main:
        write_report(summary, out, name)
    return summary


def stage1_annotator(demos: Sequence[Trajectory], cfg: SeedConfig) -> Callable[[Trajectory], Skill | None]:
    """Skills for Stage 1: a given annotator model's (rule-based where its answer is invalid), else rule-based."""
    if not cfg.annotator_model:
        return rule_based_skill
    model, tokenizer = load_policy(cfg.annotator_model, dtype=cfg.dtype, device=cfg.device)
    model.eval()
    codec = prompt_codec(tokenizer)
    skills = generate_skills(HFGenerateBackend(model, codec.tokenizer), codec, demos, cfg, seed=cfg.seed)
    by_episode = {t.episode_id: s for t, s in zip(demos, skills)}
    return lambda t: by_episode.get(t.episode_id) or rule_based_skill(t)


def draw_tasks(panel: Sequence[str], categories: Sequence[str] | None, n: int, rng: np.random.Generator) -> list[str]:
    """``n`` tasks of the panel: the categories equally often when the panel's ``categories`` are given (the
    ``*_balance_categories`` options), else as the panel holds them."""
    if categories is None:
        return sample_tasks(panel, n, rng)
    return sample_tasks_by_category(panel, categories, n, rng)


#: Reset seeds of Stage 1's random-move episodes start here (plus the run's seed): apart from the demos' own.
FAILURE_DEMO_SEED_OFFSET = 500_000


def stage1_panel(cfg: SeedConfig) -> tuple[EnvSpec, tuple[str, ...], list[str] | None]:
    """Stage 1's env spec, its split's task panel, and the panel's categories where Stage 1 balances them."""
    spec = env_spec(cfg, cfg.stage1_split or cfg.train_split)
    panel = panel_of(spec)
    return spec, panel, (panel_categories(spec, panel) if cfg.stage1_balance_categories else None)


def failure_demos(spec: EnvSpec, panel: Sequence[str], categories: Sequence[str] | None,
                  cfg: SeedConfig) -> list[Trajectory]:
    """Stage 1's ``stage1_failure_demos`` episodes (none at 0): random moves with probability
    ``stage1_failure_noise``, the expert's otherwise, on tasks of the demos' draw rule from their own generator
    and reset seeds (so the expert demos are the same with or without them)."""
    if not cfg.stage1_failure_demos:
        return []
    tasks = draw_tasks(panel, categories, cfg.stage1_failure_demos, np.random.default_rng([cfg.seed, 1_000_002]))
    return collect_demonstrations(spec, tasks, seed=cfg.seed + FAILURE_DEMO_SEED_OFFSET,
                                  noise=cfg.stage1_failure_noise, perturbed_share=1.0)


def taught_failure_rules(played: Sequence[Trajectory], annotate: Callable[[Trajectory], Skill | None]) -> Counter:
    """How many of the lost episodes of ``played`` get each skill text from ``annotate``."""
    return Counter(skill.text for skill in map(annotate, (t for t in played if not t.success)) if skill)


def run_stage1(policy: Policy, cfg: SeedConfig, say: Callable[[str], None],
               layout: ReplicatedWeights | None = None) -> dict[str, float]:
    """Demonstrations (collected identically on every rank), SFT pairs, then SFT with ``layout``'s weights
    (each rank trains on its share of every batch; one process: all of it)."""
    refresh_threads()
    split = cfg.stage1_split or cfg.train_split
    spec, panel, categories = stage1_panel(cfg)
    rng = np.random.default_rng([cfg.seed, 1_000_001])
    tasks = draw_tasks(panel, categories, cfg.stage1_demos, rng)
    say(f"Stage 1: playing {len(tasks)} expert demonstrations on {cfg.env_id} {split} ...")
    demos = collect_demonstrations(spec, tasks, seed=cfg.seed)
    by_category = Counter(t.category for t in demos)
    say(f"Stage 1: demos by category{' (balanced)' if cfg.stage1_balance_categories else ''}: "
        + ", ".join(f"{name} {n}" for name, n in sorted(by_category.items())))
    played = failure_demos(spec, panel, categories, cfg)
    demos = demos + played
    annotate = stage1_annotator(demos, cfg)
    if played:
        # Which failure rules the random episodes teach: a rule they never show is one the analyzer never learns
        # (Sokoban's random play shows mostly back-and-forth; docs/results.md).
        moves = ("random moves" if cfg.stage1_failure_noise == 1
                 else f"random moves ({cfg.stage1_failure_noise:.0%} of moves; the expert's otherwise)")
        say(f"Stage 1: {len(played)} episodes of {moves} for failure rules: "
            f"{sum(not t.success for t in played)} failed; their skills: "
            + "; ".join(f'{n} x "{text[:60]}"' for text, n in taught_failure_rules(played, annotate).most_common()))
    pairs = sft_pairs(demos, policy.codec, spec.action_format, annotate=annotate,
                      analyzer_images=cfg.analyzer_images, skill_acting=cfg.stage1_skill_acting)
    pairs = repeat_skill_pairs(pairs, cfg.stage1_skill_repeats)
    kinds = Counter(p.kind for p in pairs)
    repeats = f", skill pairs x{cfg.stage1_skill_repeats}" if cfg.stage1_skill_repeats > 1 else ""
    say(f"Stage 1: {len(pairs)} SFT pairs ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))}{repeats}), "
        f"{cfg.stage1_epochs} epoch(s) of batch {cfg.stage1_batch_size} ...")
    t0 = time.perf_counter()
    losses = sft_train(policy.model, pairs, lr=cfg.stage1_lr, epochs=cfg.stage1_epochs,
                       batch_size=cfg.stage1_batch_size, seed=cfg.seed, grad_clip=cfg.grad_clip, layout=layout,
                       micro_batch_size=cfg.micro_batch_size)
    say(f"Stage 1 done: {len(pairs)} SFT pairs from {len(demos)} demos, loss {losses[0]:.3f} -> {losses[-1]:.3f} "
        f"({time.perf_counter() - t0:.0f}s)")
    return {"stage1_pairs": len(pairs), "stage1_loss_first": losses[0], "stage1_loss_last": losses[-1]}


@dataclass
class IterationBatch:
    """What steps 1-4 of an iteration produce on this rank, for the update and the diagnostics."""

    trajectories: list[Trajectory]  # played episodes, without those whose env crashed
    env_failures: int  # episodes whose env crashed (Ray backend)
    skills: list[Skill | None]  # one per trajectory (all None when the run uses no skills)
    samples: list[StepSample]
    scored: dict[str, torch.Tensor | None]  # teacher_logprobs / ref_logprobs (see score_samples)
    times: dict[str, float]  # rollout_s, analyze_s, score_s
    nonfinite_episodes: int = 0  # episodes left out for a NaN/inf reward
    left_out: list[Trajectory] = dataclasses.field(default_factory=list)  # logged, not trained on
    groups_dropped: int = 0  # groups left out whole for a failed member (failed_group=drop)
    analyzer_answers: int = 0  # analyzer generations (first attempts and retries; 0 for a fixed library)
    analyzer_answers_cut: int = 0  # of them, stopped at skill_max_new_tokens rather than at a stop token


def seed_iteration(it: int, policy: Policy, optimizer, cfg: SeedConfig, pool: EnvPool, panel: Sequence[str],
                   writer: TrajectoryWriter, skill_source: SkillSource,
                   categories: Sequence[str] | None = None) -> dict[str, float]:
    """One Stage 2 iteration (steps 1-5 of the module docstring); returns its diagnostics. ``categories``
    (the panel's, with ``stage2_balance_categories``) draws the tasks with the categories equally often."""
    rng = np.random.default_rng([cfg.seed, it])
    tasks = draw_tasks(panel, categories, cfg.tasks_per_iteration, rng)
    jobs = group_jobs(tasks, cfg.group_size, base_seed=int(rng.integers(2**31)), prefix=f"it{it}",
                      meta={"iteration": it})
    # Data parallelism: this rank plays whole groups (advantages need the whole group); one process: all.
    jobs = shard_groups(jobs, [j.group_id for j in jobs], dist_info())
    stats = RolloutStats()
    with policy.layout.full_weights(policy.model):  # sharded weights: whole on every rank until the update
        policy.backend.sync_weights(policy.model)  # generate from θ_k (vLLM copies the weights in here)
        batch = _play_and_score(policy, cfg, pool, jobs, rng, stats, skill_source)
    # Every rank's episodes, in group order (one process: its own), for the log and the metrics.
    all_trajectories = gather_lists(batch.trajectories)
    left_out = gather_lists(batch.left_out)  # (a collective: every rank calls it)
    if writer is not None:
        for t in all_trajectories + left_out:  # left-out episodes are logged too, marked in their meta
            writer.write(t)
    t0 = time.perf_counter()
    loss_stats = update_policy(policy.model, optimizer, batch.samples, batch.scored, cfg, rng, policy.layout)
    times = {**batch.times, "update_s": time.perf_counter() - t0}
    all_skills = gather_lists(batch.skills) if skill_source.produces_skills else []
    metrics = rollout_metrics(all_trajectories, all_skills)
    if skill_source.produces_skills:
        # Answers cut at the analyzer's token budget: a share near the invalid skills' says raise
        # skill_max_new_tokens (an answer cut before its closing brace never parses).
        metrics.update({"skill_answers": sum_over_ranks(batch.analyzer_answers),
                        "skill_answers_cut": sum_over_ranks(batch.analyzer_answers_cut)})
    metrics.update(loss_stats)
    metrics.update(mean_over_ranks(gate_diagnostics(batch.samples, batch.scored, cfg)))
    metrics.update(mean_over_ranks({**times, "generate_s": stats.generate_s, "env_s": stats.env_s,
                                    "tokens_per_s": stats.generated_tokens / max(stats.generate_s, 1e-9)}))
    metrics.update({"samples": sum_over_ranks(len(batch.samples)),
                    "env_failures": sum_over_ranks(batch.env_failures),
                    "prompt_overflows": sum_over_ranks(stats.prompt_overflows),
                    "nonfinite_episodes": sum_over_ranks(batch.nonfinite_episodes),
                    "groups_dropped": sum_over_ranks(batch.groups_dropped),
                    "episodes_trained": sum_over_ranks(len(batch.trajectories)),
                    # prompt positions the rollout ran through the model (prefix sharing: fewer) vs prompt tokens
                    "prefill_tokens": sum_over_ranks(stats.prefill_tokens),
                    "prompt_tokens": sum_over_ranks(stats.prompt_tokens)})
    return metrics


def _play_and_score(policy: Policy, cfg: SeedConfig, pool: EnvPool, jobs, rng: np.random.Generator,
                    stats: RolloutStats, skill_source: SkillSource) -> IterationBatch:
    """Steps 1-4: rollouts, skills (from the run's ``skill_source``), advantages, samples and their no-grad
    scores."""
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    with progress_bar(total=len(jobs), desc="rollouts", unit="episode") as bar:
        played = run_episodes(policy.backend, policy.codec, pool, jobs, max_new_tokens=cfg.max_new_tokens,
                              temperature=cfg.temperature, top_p=cfg.top_p, seed=int(rng.integers(2**31)), stats=stats,
                              on_finished=bar.update, on_turn=turn_reporter(bar, pool.spec.step_limit()),
                              max_prompt_tokens=prompt_budget(cfg, policy))
    times["rollout_s"] = time.perf_counter() - t0
    trajectories, left_out, nonfinite, groups_dropped = usable_episodes(played, cfg.failed_group)
    t0 = time.perf_counter()
    answers: list[AnalyzerAnswer] = []
    skills = skill_source.skills(trajectories, policy, seed=int(rng.integers(2**31)), answers=answers)
    times["analyze_s"] = time.perf_counter() - t0
    for t, s in zip(trajectories, skills):
        t.meta["skill"] = None if s is None else s.text
    advantages = step_advantages(trajectories, method=cfg.advantage, gamma=cfg.gigpo_gamma, omega=cfg.gigpo_omega,
                                 group_stats=cfg.group_stats, format_penalty_on=cfg.format_penalty_on,
                                 format_penalty=cfg.format_penalty)
    samples = build_samples(trajectories, advantages, skills, policy.codec)
    t0 = time.perf_counter()
    use_teacher = any(s.teacher_prompt_ids is not None for s in samples)
    scored = score_samples(policy.model, samples, teacher=use_teacher, reference=cfg.kl_coef > 0,
                           reference_model=policy.reference, temperature=logprob_temperature(cfg))
    times["score_s"] = time.perf_counter() - t0
    # Written after scoring so each step carries its teacher log-probs (the viewer colours tokens by gate).
    record_teacher_logprobs(trajectories, samples, scored["teacher_logprobs"], policy.codec)
    for t in trajectories:
        t.meta["opd_beta"] = cfg.opd_beta
        t.meta["opd_gate"] = cfg.opd_gate
    env_failures = sum(bool(t.meta.get("env_failed")) for t in played)
    return IterationBatch(trajectories, env_failures, skills, samples, scored, times, nonfinite, left_out,
                          groups_dropped, len(answers), sum(a.cut for a in answers))


def usable_episodes(played: Sequence[Trajectory], failed_group: str = "drop"):
    """The episodes an iteration trains on, and what it leaves out (logged, marked in their meta):
    ``(kept, left_out, non-finite count, groups dropped)``.

    An episode whose env failed (any backend) is out, with the steps it played (logged with its error); one
    whose first prompt was
    over the budget has no steps: nothing to learn from (counted in metrics). A NaN/inf reward would make
    its whole group's advantages non-finite: that episode is out too, named on the console. With
    ``failed_group="drop"`` (the default) the rest of such a group goes as well: a group of survivors
    would compare them with each other only (a single survivor's advantage is 0).
    """
    failed = [t for t in played if t.meta.get("env_failed")]
    nonfinite = [t for t in played if not t.meta.get("env_failed") and t.steps
                 and not all(math.isfinite(s.reward) for s in t.steps)]
    for t in nonfinite:
        t.meta["nonfinite_reward"] = True
        say_line(f"warning: episode {t.episode_id} ({t.task_id}) has a non-finite reward: left out of the update")
    kept = [t for t in played if not t.meta.get("env_failed") and t.steps and not t.meta.get("nonfinite_reward")]
    left_out = failed + nonfinite
    bad_groups = {t.group_id for t in failed + nonfinite}
    dropped_groups = 0
    if failed_group == "drop" and bad_groups:
        survivors = [t for t in kept if t.group_id in bad_groups]
        for t in survivors:
            t.meta["left_out"] = "a member of its group failed (failed_group=drop)"
        kept = [t for t in kept if t.group_id not in bad_groups]
        left_out += survivors
        dropped_groups = len(bad_groups)
        if survivors:
                say_line(f"warning: {dropped_groups} group(s) left out of the update: a member's env failed or its "
                     "reward was not finite (--failed-group keep trains on the survivors)")
    return kept, left_out, len(nonfinite), dropped_groups


def train(cfg: SeedConfig, say: Callable[[str], None] = say_line) -> dict[str, Any]:
    """The whole run (:func:`run`) with torch's CPU threads set by ``cfg.threads`` (restored after).

    The setup is checked first (:func:`seed_train.preflight.check_run_setup`: env id, splits, env_kwargs,
    model folder, output folder), so a bad one fails with a SetupError before any model loads and before
    the run folder exists."""
    from seed_train.preflight import check_run_setup

    check_run_setup(cfg)
    with torch_threads(cfg.threads):
        return run(cfg, say)


def run(cfg: SeedConfig, say: Callable[[str], None] = say_line) -> dict[str, Any]:
    """The whole run; under ``accelerate launch`` / ``torchrun`` every process calls this (see
    :mod:`seed_train.distributed`): rollouts and evaluation are sharded, only the main process writes.

    Four named phases: the launch (processes, weight layout, the policy, the run folder), evaluation and
    Stage 1 up to θ_0 (or a resumed Stage 2's start), the Stage 2 iterations, and the final evaluation
    and saved policy."""
    started = time.perf_counter()
    cfg, layout, main = launch(cfg)
    if not main:
        say = _silent
    out = Path(cfg.output_dir)
    policy = load(cfg)  # first: a model that fails to load leaves no run folder behind
    if main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=1))
    results: dict[str, Any] = {}
    start = resume_stage2_start(policy, cfg) if cfg.resume else up_to_stage2(policy, cfg, layout, results, say)
    stage2(policy, cfg, layout, start, results, say)
    finish(policy, cfg, results, say, started)
    return results


def launch(cfg: SeedConfig) -> tuple[SeedConfig, Any, bool]:
    """This process's config (its device under a multi-process launch), the weight layout the launch asks
    for (refused before any work if it cannot be honoured), and whether this is the main process."""
    info = init_from_env(cfg.device)
    if info.world_size > 1:
        cfg = dataclasses.replace(cfg, device=local_device(cfg.device))
    layout = weight_layout_from_env(info.world_size, cfg.device)
    if cfg.resume:  # a missing or damaged checkpoint file is named before the model loads or anything is written
        check_checkpoint(cfg.resume)
    return cfg, layout, info.is_main


def up_to_stage2(policy: Policy, cfg: SeedConfig, layout: Any, results: dict[str, Any],
                 say: Callable[[str], None]) -> int:
    """Evaluation before training, Stage 1 (or a finished one's weights) and its evaluation, then θ_0: the
    Stage 2 start (LoRA merged, fresh adapters, the reference). Returns the first Stage 2 iteration, 0."""
    out, main = Path(cfg.output_dir), dist_info().is_main
    if cfg.eval_before:
        results["before"] = run_eval(policy, cfg, "eval_before", out)
        say(markdown_table(results["before"], f"before training: {cfg.env_id} {cfg.eval_split}"))
    if cfg.stage1_from:  # a finished Stage 1 (an experiment's arms share one per seed): load, do not rerun
        load_trainable_state(policy.model, load_file(cfg.stage1_from))
        results["stage1_from"] = cfg.stage1_from
    elif cfg.stage1_demos:
        # Stage 1 trains with the launch's weight layout too; after it the weights are gathered into a
        # plain model, so θ_0 (LoRA merge, frozen reference copy) is built as on one process.
        policy.model = layout.prepare(policy.model)
        results["stage1"] = run_stage1(policy, cfg, say, layout)
        if layout.wraps_model:
            gather_whole_policy(policy, cfg)
    if cfg.eval_after_stage1 and cfg.eval_after and cfg.iterations and (cfg.stage1_from or cfg.stage1_demos):
        # (with no Stage 2 iterations the final evaluation is this one)
        policy.backend.sync_weights(policy.model)
        results["after_stage1"] = run_eval(policy, cfg, "eval_after_stage1", out)
        say(markdown_table(results["after_stage1"], f"after Stage 1: {cfg.env_id} {cfg.eval_split}"))
    if main:  # what a resume needs to rebuild θ_0 without redoing Stage 1: its trainable weights
        (out / "checkpoints").mkdir(parents=True, exist_ok=True)
        save_file(trainable_state(policy.model), str(out / "checkpoints" / "stage1.safetensors"))
    fix_stage2_start(policy, cfg)
    return 0


def stage2(policy: Policy, cfg: SeedConfig, layout: Any, start: int, results: dict[str, Any],
           say: Callable[[str], None]) -> None:
    """Stage 2 iterations ``start`` .. ``cfg.iterations - 1`` (:func:`seed_iteration` each): the skill
    source chosen at θ_0, the launch's weight layout, metrics, plots and checkpoints."""
    out, main = Path(cfg.output_dir), dist_info().is_main
    ckpts = out / "checkpoints"
    # Chosen once, at θ_0: the frozen-analyzer control keeps a copy of θ_0's weights to analyse with.
    skill_source = make_skill_source(cfg, policy.model)
    # Stage 2 trains with the launch's weight layout (FSDP: sharded from here on).
    policy.model, policy.layout = layout.prepare(policy.model), layout
    results["weight_layout"] = layout.name
    say(f"stage 2 weights: {layout.name} over {dist_info().world_size} process(es)")
    if start < cfg.iterations:
        say(f"Stage 2: iterations {start + 1}-{cfg.iterations}, each {cfg.tasks_per_iteration} tasks x "
            f"{cfg.group_size} rollouts, then skills, scoring and the update ...")
    optimizer = layout.make_optimizer(policy.model, cfg.lr, cfg.grad_clip)
    if cfg.resume:
        load_checkpoint(cfg.resume, policy.model, optimizer, load_optimizer=layout.load_optimizer_state)
        say(f"resumed from {cfg.resume} at iteration {start}")
    spec = with_prompt_budget(env_spec(cfg, cfg.train_split), policy.codec, prompt_budget(cfg, policy))
    pool, panel = EnvPool(spec, cfg.env_backend), panel_of(spec)
    # (one reset per train task: skipped when no iteration is left to draw tasks for)
    categories = panel_categories(spec, panel) if cfg.stage2_balance_categories and start < cfg.iterations else None
    if categories is not None:
        say(f"Stage 2: tasks drawn with the categories equally often ({', '.join(sorted(set(categories)))})")
    logger = MetricsLogger(out, resume_from_iteration=start if cfg.resume else None) if main else None
    if cfg.resume and main:
        drop_trajectories_from(out / "trajectories.jsonl", start)
    stage2_t0 = time.perf_counter()
    failed_in_a_row = 0
    with (TrajectoryWriter(out / "trajectories.jsonl") if main else contextlib.nullcontext()) as writer:
        for it in tqdm(range(start, cfg.iterations), desc="SEED iterations", disable=bars_disabled(),
                       initial=start, total=cfg.iterations):
            t0 = time.perf_counter()
            threads = refresh_threads()
            metrics = seed_iteration(it, policy, optimizer, cfg, pool, panel, writer, skill_source, categories)
            failed_in_a_row = failed_in_a_row + 1 if all_failed(metrics) else 0
            if failed_in_a_row:
                say(f"warning: iteration {it + 1}: every episode failed ({metrics['env_failures']:.0f} env failures, "
                    f"{metrics['nonfinite_episodes']:.0f} non-finite rewards): no update")
            metrics["torch_threads"] = threads
            metrics["iteration_s"] = time.perf_counter() - t0
            metrics["peak_rss_mb"] = peak_rss_mb()  # (the process's high-water mark so far: what an OOM kill sees)
            if logger is not None:
                logger.log(it, metrics)
                logger.plot()
            if cfg.max_failed_iterations and failed_in_a_row >= cfg.max_failed_iterations:
                raise RunStopped(f"stopped: {failed_in_a_row} consecutive iterations in which every episode failed "
                                 f"(see env_error in {out / 'trajectories.jsonl'}); --max-failed-iterations sets how many")
            eta = iterations_eta(time.perf_counter() - stage2_t0, it + 1 - start, cfg.iterations - it - 1)
            say(f"iteration {it + 1}/{cfg.iterations}: success {metrics['success']:.2f} return {metrics['return']:.2f} "
                f"loss {metrics.get('loss', 0):.4f} opd {metrics.get('opd_term', 0):.4f}"
                + (f" skills valid {metrics['skills_valid']}/{metrics['skills_written']}" if "skills_written" in metrics
                   else "") + f" ({metrics['iteration_s']:.0f}s"
                f"{'; Stage 2 ETA ' + eta if eta else ''})")
            if (cfg.checkpoint_every and (it + 1) % cfg.checkpoint_every == 0) or it + 1 == cfg.iterations:
                # Gathered on every rank (collectives under FSDP), written by the main process.
                trainable, opt_state = trainable_state(policy.model), layout.optimizer_state(policy.model, optimizer)
                if main:
                    save_checkpoint(ckpts / f"iter{it:04d}", trainable, opt_state, it)
                barrier()
    pool.close()
    if logger is not None:
        logger.close()


class RunStopped(RuntimeError):
    """The run cannot go on (e.g. every episode failed for several iterations): one line says why."""


def all_failed(metrics: dict[str, float]) -> bool:
    """An iteration that trained on nothing because its episodes failed."""
    return metrics["episodes_trained"] == 0 and metrics["env_failures"] + metrics["nonfinite_episodes"] > 0


def iterations_eta(elapsed_s: float, done: int, left: int) -> str:
    """The time the ``left`` iterations will take at the mean pace of the ``done`` ones (:func:`clock`); ""
    when none is left (a log without a terminal has no bar: the phase lines carry the ETA)."""
    return clock(elapsed_s / done * left) if left > 0 and done > 0 else ""


def finish(policy: Policy, cfg: SeedConfig, results: dict[str, Any], say: Callable[[str], None],
           started: float) -> None:
    """The trained weights gathered and synced, the final evaluation, the saved policy, results and report.
    ``started``: the run's ``time.perf_counter()`` at its start; results.json's ``seconds`` is this process's
    wall time (a resumed run's earlier processes not included), which lets ``seed-train experiment`` time a
    unit whose training finished in a process that did not live to evaluate it."""
    out, main = Path(cfg.output_dir), dist_info().is_main
    if policy.layout.wraps_model:
        gather_whole_policy(policy, cfg)  # (syncs the generation backend)
    else:
        policy.backend.sync_weights(policy.model)  # the last update's weights, for the final evaluation
    if cfg.eval_after:
        results["after"] = run_eval(policy, cfg, "eval_after", out)
        say(markdown_table(results["after"], f"after training: {cfg.env_id} {cfg.eval_split}"))
    if main:
        if cfg.save_final:
            save_final_policy(policy, out / "final")
        # Written whole or not at all (a temporary file renamed): its existence means "training finished"
        # to seed-train experiment, so a process killed mid-write must not leave half a file.
        # To the millisecond: a resumed run with nothing left to train takes well under 0.1 s on a tiny model.
        results["seconds"] = round(time.perf_counter() - started, 3)
        tmp = out / f"results.json.tmp{os.getpid()}"
        tmp.write_text(json.dumps(results, indent=1))
        tmp.replace(out / "results.json")
        say(f"report: {write_run_report(out)}")
    barrier()


def gather_whole_policy(policy: Policy, cfg: SeedConfig) -> None:
    """After training under FSDP/DeepSpeed: every rank rebuilds the plain model and loads the full trained
    weights, so what follows (θ_0 after Stage 1; the final evaluation and saved folder after Stage 2) runs
    exactly as on one process."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    state = get_model_state_dict(policy.model, options=StateDictOptions(full_state_dict=True))
    with torch.random.fork_rng(devices=[]):  # fresh LoRA matrices are drawn, then overwritten by the state
        model, _ = load_policy(cfg.model, lora=policy.lora, dtype=cfg.dtype, device=cfg.device,
                               freeze_vision=cfg.freeze_vision, activation_checkpointing=cfg.gradient_checkpointing)
    model.load_state_dict(state)
    model.eval()
    policy.model, policy.layout = model, ReplicatedWeights()
    policy.backend.sync_weights(model)


def _silent(_: str) -> None:
    """``say`` on every process but the main one."""


def save_final_policy(policy: Policy, folder: Path) -> None:
    """A plain Hugging Face folder (LoRA merged into the weights) that seed-eval and others load."""
    model = policy.model.merge_and_unload() if policy.lora is not None else policy.model
    model.save_pretrained(folder)
    policy.codec.save_pretrained(folder)


def run_dir(cfg: SeedConfig) -> Path:
    """The run folder whose checkpoints/ holds Stage 1's weights (the resumed run's, when resuming)."""
    return Path(cfg.resume).parent.parent if cfg.resume else Path(cfg.output_dir)


def resume_stage2_start(policy: Policy, cfg: SeedConfig) -> int:
    """Rebuild θ_0 from the run's saved Stage 1 weights; returns the iteration to continue at."""
    stage1 = run_dir(cfg) / "checkpoints" / "stage1.safetensors"
    if not stage1.is_file():
        raise SetupError(f"resume: {stage1} is missing; resume from a checkpoint inside a run folder")
    load_trainable_state(policy.model, load_weights_file(stage1), source=str(stage1))
    fix_stage2_start(policy, cfg)
    return int(read_checkpoint_meta(cfg.resume)["iteration"]) + 1


def drop_trajectories_from(path: Path, iteration: int) -> None:
    """On resume, remove trajectories of iterations that will be redone (kept: those before)."""
    if not path.exists():
        return
    kept = [t for t in read_trajectories(path) if t.meta.get("iteration", -1) < iteration]
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with TrajectoryWriter(tmp) as writer:
        for t in kept:
            writer.write(t)
    tmp.replace(path)
