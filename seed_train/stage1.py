"""Stage 1: skill SFT on expert demonstrations.

The env's expert plays train tasks through the same wrapper stack the policy uses, so the prompts
are exactly the ones the policy will see. Some demo episodes are *perturbed* (the expert's move is
replaced by a random move with probability ``noise``, :func:`random_move`): they give failures for avoidance
skills, and, since the expert replans from whatever state it is in, their expert steps are
recovery demonstrations. Two kinds of SFT pairs come out:

- act: (step prompt) -> the expert's action written in the policy's answer format;
- skill: (analyzer prompt of the trajectory) -> the annotator's JSON skill (the rule-based annotator
  of :mod:`seed_train.skills`, which writes the env's own hindsight rule for the task's category,
  see :mod:`seed_envs.hindsight`; or a given annotator model's answer). The prompt is exactly the one
  Stage 2's analyzer pass gives the policy (its codec's ``encode_analyzer``), and the
  target JSON is short enough to fit its ``skill_max_new_tokens`` (48 in the quickstart).
- skill_act (``skill_acting``, off by default): (step prompt with the trajectory's skill block inserted
  after the task line, exactly OPD's teacher prompt) -> the expert's action. It teaches the policy to
  *read* a skill. OPD can only move the student where the teacher (the same model with the skill in its
  prompt) answers differently; a small model that never saw a skill block in training reacts to the
  block's presence, not to its content (measured on EZPoints in docs/trainer.md). This goes beyond
  DESIGN.md's Stage 1, which trains skill writing only.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import seed_envs
from seed_train.losses import masked_token_mean
from seed_train.parallel import ReplicatedWeights
from seed_train.progress import progress_bar
from seed_train.codec import prompt_codec
from seed_train.rollout import EnvSpec
from seed_train.scoring import auto_prefix_groups, heads_together, micro_batches, response_logprobs
from seed_train.skills import Skill, rule_based_skill, skill_augmented_prompt
from wrappers import Trajectory, format_response
from wrappers.stack import default_tools


@dataclass
class SFTPair:
    prompt_ids: list[int]
    response_ids: list[int]
    kind: str  # "act", "skill" or "skill_act"


def collect_demonstrations(spec: EnvSpec, task_ids: Sequence[str], *, seed: int, noise: float = 0.3,
                           perturbed_share: float = 0.25) -> list[Trajectory]:
    """Expert episodes on ``task_ids``; every step's ``info["expert_action"]`` holds the expert's choice."""
    finished: list[Trajectory] = []
    env = spec.make(finished.append)
    expert = seed_envs.make_expert(env)
    tools = default_tools(spec.env_id)  # (the "tools" answer format: the env's verbs)
    rng = np.random.default_rng(seed)
    bar = progress_bar(total=len(task_ids), desc="Stage 1 demos", unit="episode")
    for k, task_id in enumerate(task_ids):
        perturbed = rng.random() < perturbed_share
        obs, info = env.reset(seed=seed + k, options={"task_id": task_id, "trajectory_meta": {"perturbed": perturbed}})
        suggestions = []
        while True:
            best = expert(obs, info)
            action = best
            if perturbed and rng.random() < noise:
                action = random_move(obs, info, tools, rng)
            suggestions.append(best)
            obs, _, terminated, truncated, info = env.step(format_response(action, spec.action_format, tools=tools))
            if terminated or truncated:
                break
        for step, best in zip(finished[-1].steps, suggestions):
            step.info["expert_action"] = best
        bar.update(1)
    bar.close()
    env.close()
    return finished


def random_move(obs: Any, info: dict, tools: Sequence[Any], rng: np.random.Generator) -> str:
    """A random move: one of the step's admissible actions; where the env lists none, one of its verbs
    (``agent_defaults.tool_verbs``; else the generic ``act``) with 1-3 consecutive words of the observation
    as every argument (SearchQA: a search or an answer of words the page shows, which mostly loses)."""
    choices = info.get("admissible_actions")
    if choices:
        return choices[int(rng.integers(len(choices)))]
    text = obs.get("text", "") if isinstance(obs, dict) else str(obs)
    words = re.findall(r"[A-Za-z0-9']+", text) or ["nothing"]
    start = int(rng.integers(len(words)))
    argument = " ".join(words[start:start + 1 + int(rng.integers(3))])
    verb = tools[int(rng.integers(len(tools)))]
    return verb.action.format(**{name: argument for name in verb.args})


def sft_pairs(trajectories: Sequence[Trajectory], codec, action_format: str,
              annotate: Callable[[Trajectory], Skill | None] = rule_based_skill, *,
              analyzer_images: int = 0, skill_acting: bool = False) -> list[SFTPair]:
    """Act pairs from steps where the expert's action was taken; one skill pair per trajectory; with
    ``skill_acting``, each act pair again with the trajectory's skill in its prompt (kind ``skill_act``).

    ``codec`` is the policy's prompt codec: with a vision-language policy act prompts carry the step's
    image, and skill prompts are the analyzer prompts the policy will get (``analyzer_images``, see
    :meth:`seed_train.codec.VisionPromptCodec.encode_analyzer`).
    """
    codec = prompt_codec(codec)
    ids = codec.encode_response
    pairs = []
    for t in trajectories:
        skill = annotate(t)
        tools = default_tools(t.env_id) if action_format == "tools" else None
        expert_steps = [s for s in t.steps if s.prompt and s.action == s.info.get("expert_action")]
        for step in expert_steps:
            pairs.append(SFTPair(codec.encode(step.prompt, images=codec.step_images(step)),
                                 ids(format_response(step.action, action_format, tools=tools)), "act"))
        if skill is not None:
            pairs.append(SFTPair(codec.encode_analyzer(t, analyzer_images), ids(skill.to_json()), "skill"))
        if skill is not None and skill_acting:
            for step in expert_steps:
                if step.prompt_parts:  # the teacher prompt is rebuilt from the parts, as Stage 2 does
                    teacher_prompt = skill_augmented_prompt(step.prompt_parts, skill.text)
                    pairs.append(SFTPair(codec.encode(teacher_prompt, images=codec.step_images(step)),
                                         ids(format_response(step.action, action_format, tools=tools)),
                                         "skill_act"))
    return pairs


def repeat_skill_pairs(pairs: Sequence[SFTPair], repeats: int) -> list[SFTPair]:
    """``pairs`` with every skill pair ``repeats`` times (act pairs once), order kept.

    A Stage 1 light enough to leave Stage 2 something to learn (one pass at a low learning rate) does
    not yet teach the analyzer its skill format; repeating the few skill pairs (one per demo, against
    ~5 act pairs each) trains skill writing longer without training acting longer.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    return [copy for p in pairs for copy in ([p] * (repeats if p.kind == "skill" else 1))]


def length_bucketed_batches(lengths: Sequence[int], batch_size: int, rng: np.random.Generator,
                            window: int = 8) -> list[list[int]]:
    """Shuffled batches of similar lengths: padding is compute, and act/skill prompts differ a lot.

    Shuffle, cut into windows of ``window`` batches, sort each window by length, batch it, then
    shuffle the batch order.
    """
    order = rng.permutation(len(lengths)).tolist()
    batches = []
    for w in range(0, len(order), batch_size * window):
        chunk = sorted(order[w:w + batch_size * window], key=lambda i: lengths[i])
        batches += [chunk[b:b + batch_size] for b in range(0, len(chunk), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def merged_copies(batch: Sequence[SFTPair]) -> tuple[list[SFTPair], list[int]]:
    """The batch's distinct pairs (first-seen order) and how often each occurs in it.

    :func:`repeat_skill_pairs` puts copies of one object in the list, and length bucketing tends to put
    them in the same batch; their loss terms are identical when the model has no active dropout, so one
    forward pass weighted by the count gives the same gradient at a fraction of the cost.
    """
    distinct: dict[int, int] = {}
    unique: list[SFTPair] = []
    counts: list[int] = []
    for pair in batch:
        if id(pair) in distinct:
            counts[distinct[id(pair)]] += 1
        else:
            distinct[id(pair)] = len(unique)
            unique.append(pair)
            counts.append(1)
    return unique, counts


def has_active_dropout(model) -> bool:
    """Whether a training-mode forward of ``model`` is random (a dropout module or attention dropout > 0)."""
    import torch

    if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()):
        return True
    config = getattr(model, "config", None)
    return any(float(getattr(config, name, 0.0) or 0.0) > 0
               for name in ("attention_dropout", "hidden_dropout", "dropout", "attn_pdrop", "resid_pdrop"))


def sft_train(model, pairs: Sequence[SFTPair], *, lr: float, epochs: int, batch_size: int, seed: int,
              grad_clip: float = 1.0, progress: Callable[[str], None] | None = None,
              layout: ReplicatedWeights | None = None, micro_batch_size: int = 0) -> list[float]:
    """Token-mean negative log-likelihood of the responses; returns the loss of every optimizer step.

    ``micro_batch_size`` (the config's, as in Stage 2): a batch runs as forward/backward passes of at most
    that many rows whose gradients accumulate; every pass's token mean takes the whole batch's token count,
    so the step is the one pass's (to rounding) in the memory of a micro-batch (0: one pass).

    Data parallel (several processes): every rank draws the same batches and takes its strided share
    of each; the token mean uses the whole batch's token count and ``layout``
    (:mod:`seed_train.parallel`) averages the gradients, so the update is the single-process one.
    """
    import torch

    from seed_train.distributed import dist_info, max_over_ranks, sum_over_ranks

    layout = layout or ReplicatedWeights()
    info = dist_info()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = layout.make_optimizer(model, lr, grad_clip)
    rng = np.random.default_rng(seed)
    losses = []
    lengths = [len(p.prompt_ids) + len(p.response_ids) for p in pairs]
    per_epoch = len(length_bucketed_batches(lengths, batch_size, np.random.default_rng(0)))  # (a count only)
    bar = progress_bar(total=epochs * per_epoch, desc="Stage 1 SFT", unit="step")
    merge = not has_active_dropout(model)  # copies of a pair in one batch: one forward, weighted
    model.train()
    for epoch in range(epochs):
        for batch_index in length_bucketed_batches(lengths, batch_size, rng):
            batch = [pairs[i] for i in batch_index][info.rank::info.world_size]
            # The whole batch's token count over the world size (one process: this batch's count).
            count = sum_over_ranks(sum(len(p.response_ids) for p in batch)) / info.world_size
            optimizer.zero_grad(set_to_none=True)
            unique, copies = merged_copies(batch) if merge else (batch, [1] * len(batch))
            rows = np.arange(len(unique))
            parts = micro_batches(rows, micro_batch_size, order=lambda r: heads_together(r, unique)) if batch else []
            # Lockstep layouts: every pass is a collective, so every rank runs as many as the busiest one.
            passes = max_over_ranks(max(len(parts), 1)) if layout.lockstep else max(len(parts), 1)
            value = 0.0
            for n, part in enumerate(parts):
                # Shared heads (system prompt, task) run once per pass; not under FSDP/ZeRO, whose forwards
                # are collectives that every rank must run the same number of times.
                prompts = [unique[i].prompt_ids for i in part]
                logprobs, mask = response_logprobs(model, prompts, [unique[i].response_ids for i in part],
                                                   batch_size=len(part), grad=True,
                                                   prefix_groups=None if layout.lockstep else auto_prefix_groups(prompts))
                weights = torch.tensor([copies[i] for i in part], dtype=logprobs.dtype, device=logprobs.device)
                loss = -masked_token_mean(logprobs * weights[:, None], mask, count)
                layout.backward(loss, last=n == passes - 1)
                value += float(loss.detach())  # token means over the batch's count: they add up
                del logprobs, loss  # (free this pass's graph before the next one's forward)
            for n in range(len(parts), passes):
                layout.backward_no_samples(model, last=n == passes - 1)
            layout.step(optimizer, params, grad_clip)
            losses.append(sum_over_ranks(value) / info.world_size)
            bar.update(1)
            bar.set_postfix(epoch=f"{epoch + 1}/{epochs}", loss=f"{losses[-1]:.3f}", refresh=False)
            if progress:
                progress(f"stage1 epoch {epoch + 1}/{epochs} step {len(losses)} loss {losses[-1]:.3f}")
    bar.close()
    model.eval()
    return losses
