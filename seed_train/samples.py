"""From trajectories to training samples: one sample per env step (as in verl-agent).

A step's sample is its own recorded prompt ids and sampled response ids (never re-tokenized), the
log-probs recorded at sampling time (PPO's old log-probs), its advantage (:func:`step_advantages`:
its episode's group-normalised score, with the conventions of verl-agent as options, or GiGPO's),
and, when its episode has a valid skill, the ids of the skill-augmented prompt the teacher pass
scores the same response under.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from seed_train.advantages import gigpo_step_advantages, grpo_step_sample_advantages, step_scores
from seed_train.codec import prompt_codec
from seed_train.skills import Skill, skill_augmented_prompt
from seed_train.vision import vision_of
from wrappers import Trajectory


@dataclass
class StepSample:
    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float]
    advantage: float
    teacher_prompt_ids: list[int] | None  # None: no valid skill, no OPD term for these tokens
    episode: int  # index of the trajectory in its batch
    step: int = 0  # index of the step in its trajectory's steps
    group: int = 0  # index of the trajectory's GRPO group in its batch (with ``step``: the sample's context)


def episode_group_index(trajectories: Sequence[Trajectory]) -> torch.Tensor:
    ids = {g: i for i, g in enumerate(dict.fromkeys(t.group_id or t.episode_id for t in trajectories))}
    return torch.tensor([ids[t.group_id or t.episode_id] for t in trajectories])


ADVANTAGE_METHODS = ("grpo", "grpo_mean", "gigpo")
GROUP_STATS = ("steps", "episodes")
FORMAT_PENALTY_ON = ("step", "episode")


def step_advantages(trajectories: Sequence[Trajectory], *, method: str = "grpo", gamma: float = 0.95,
                    omega: float = 1.0, group_stats: str = "episodes", format_penalty_on: str = "episode",
                    format_penalty: float | None = None) -> list[list[float]]:
    """Per-step advantages of each trajectory.

    ``grpo``: group-normalised score (mean/std) on every step; ``grpo_mean``: mean only; ``gigpo``: that
    plus ``omega`` times GiGPO's step-level advantage over identical observations (whose step rewards
    are the recorded ones: the format penalty on the invalid step, as verl-agent's ``step_rewards``).

    The conventions of the paper's released code (verl-agent), the trainer's defaults for SEED runs:

    - ``format_penalty_on="step"``: a step's score is its episode's return without format penalties,
      minus ``format_penalty`` if that step had a format error; ``"episode"``: the recorded return, in
      which the wrapper's penalties land on every step of the episode
      (:func:`seed_train.advantages.step_scores`). ``"step"`` needs ``format_penalty``: the penalty the
      env's ``LLMActionParser`` charged per format error (the config's ``format_penalty``).
    - ``group_stats="steps"``: the group mean/std over the step samples of the group (episodes weighted
      by their length); ``"episodes"``: over one return per episode (as charged by
      ``format_penalty_on``) (:func:`seed_train.advantages.grpo_step_sample_advantages`).

    The defaults here (``episodes`` / ``episode``) are plain GRPO on episode returns broadcast to the steps.
    """
    if method not in ADVANTAGE_METHODS:
        raise ValueError(f"method: expected one of {ADVANTAGE_METHODS}, got {method!r}")
    if group_stats not in GROUP_STATS:
        raise ValueError(f"group_stats: expected one of {GROUP_STATS}, got {group_stats!r}")
    if format_penalty_on not in FORMAT_PENALTY_ON:
        raise ValueError(f"format_penalty_on: expected one of {FORMAT_PENALTY_ON}, got {format_penalty_on!r}")
    if format_penalty_on == "step" and format_penalty is None:
        raise ValueError("format_penalty_on='step' needs format_penalty (the penalty the wrapper charged)")
    groups = episode_group_index(trajectories)
    returns = torch.tensor([t.return_ for t in trajectories], dtype=torch.float64)
    episode_index = torch.tensor([e for e, t in enumerate(trajectories) for _ in t.steps], dtype=torch.long)
    errors = torch.tensor([s.format_error for t in trajectories for s in t.steps], dtype=torch.bool)
    scores, episode_values = step_scores(returns, episode_index, errors, format_penalty or 0.0,
                                         penalty_on=format_penalty_on)
    adv = grpo_step_sample_advantages(scores, groups[episode_index], stats_over=group_stats,
                                      episode_values=episode_values, episode_group_ids=groups,
                                      normalize_std=method != "grpo_mean")
    if method == "gigpo":
        step_index = torch.tensor([s.index for t in trajectories for s in t.steps])
        rewards = torch.tensor([s.reward for t in trajectories for s in t.steps], dtype=torch.float64)
        adv = gigpo_step_advantages(adv, rewards, episode_index, step_index, groups[episode_index],
                                    [_state_key(s) for t in trajectories for s in t.steps], gamma=gamma, omega=omega)
    out, k = [], 0
    for t in trajectories:
        out.append([float(a) for a in adv[k:k + len(t.steps)]])
        k += len(t.steps)
    return out


def image_key(image) -> str:
    """A short digest that tells images apart (for grouping identical states)."""
    if isinstance(image, np.ndarray):
        return hashlib.blake2b(np.ascontiguousarray(image).tobytes() + str(image.shape).encode(), digest_size=8).hexdigest()
    return str(image)


def _state_key(step) -> str:
    """What makes two steps the same state for GiGPO: the observation text, and the image when there is one
    (in ``image`` mode the text alone says little: "The board is shown in the image")."""
    return step.observation if step.image is None else f"{step.observation}\x00{image_key(step.image)}"


def build_samples(trajectories: Sequence[Trajectory], advantages: Sequence[Sequence[float]],
                  skills: Sequence[Skill | None], codec) -> list[StepSample]:
    """Every step that carries sampled tokens becomes a sample (``codec``: the policy's prompt codec).

    With a vision-language policy a step's prompt ids and its
    skill-augmented prompt both carry the pixel inputs of the step's image (the skill is inserted in the
    text; the image stays), so every scoring pass sees the pixels the rollout saw.
    """
    codec = prompt_codec(codec)
    samples = []
    groups = episode_group_index(trajectories).tolist() if trajectories else []
    for e, (t, advs, skill) in enumerate(zip(trajectories, advantages, skills)):
        for k, (step, adv) in enumerate(zip(t.steps, advs)):
            if not step.response_token_ids:
                continue
            images = codec.step_images(step)
            teacher = None
            if skill is not None and step.prompt_parts:
                teacher = codec.encode(skill_augmented_prompt(step.prompt_parts, skill.text), images=images)
            prompt = codec.attach(step.prompt_token_ids, images, vision_of(teacher))
            samples.append(StepSample(prompt, list(step.response_token_ids),
                                      list(step.response_logprobs), float(adv), teacher, e, k, groups[e]))
    return samples


def record_teacher_logprobs(trajectories: Sequence[Trajectory], samples: Sequence[StepSample],
                            teacher_logprobs: torch.Tensor | None, codec) -> None:
    """Store each teacher-scored step's teacher log-probs and token pieces in its trajectory step.

    So the trajectory viewer can colour response tokens by Δ and gate without a model or tokenizer.
    """
    if teacher_logprobs is None:
        return
    rows = teacher_logprobs.detach().float().cpu()
    for i, sample in enumerate(samples):
        if sample.teacher_prompt_ids is None:
            continue
        step = trajectories[sample.episode].steps[sample.step]
        step.teacher_logprobs = [float(x) for x in rows[i, : len(sample.response_ids)]]
        step.response_tokens = token_pieces(prompt_codec(codec).tokenizer, sample.response_ids)


def token_pieces(tokenizer, ids: Sequence[int]) -> list[str]:
    """The text each token adds to the decoded response; the pieces concatenate to the decoded text.

    Decoding prefixes, not single ids: a byte-level token can hold part of a UTF-8 character, which
    decodes to U+FFFD alone. Such a token gets an empty piece and the token that completes the
    character gets the character.
    """
    pieces, emitted = [], ""
    for n in range(1, len(ids) + 1):
        text = tokenizer.decode(list(ids[:n]), skip_special_tokens=False)
        pending = n < len(ids) and text.endswith("\ufffd")  # a character still incomplete
        if not pending and text.startswith(emitted):
            pieces.append(text[len(emitted):])
            emitted = text
        else:
            pieces.append("")
    return pieces


def pad_right(rows: Sequence[Sequence[float]], width: int, value: float = 0.0, dtype=torch.float32) -> torch.Tensor:
    out = torch.full((len(rows), width), value, dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(list(r), dtype=dtype)
    return out


def response_tensors(samples: Sequence[StepSample]) -> dict[str, torch.Tensor]:
    """Right-padded [B, T] tensors of the response side (pads hold finite zeros; mask marks real tokens)."""
    width = max(len(s.response_ids) for s in samples)
    mask = pad_right([[1.0] * len(s.response_ids) for s in samples], width)
    return {
        "response_mask": mask,
        "old_logprobs": pad_right([s.old_logprobs for s in samples], width),
        "advantages": pad_right([[s.advantage] * len(s.response_ids) for s in samples], width),
        "skill_valid": torch.tensor([s.teacher_prompt_ids is not None for s in samples], dtype=torch.float32),
    }
