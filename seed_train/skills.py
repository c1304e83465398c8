"""Hindsight skills: the analyzer prompt, parsing, validity, annotators and the skill-augmented prompt.

SEED turns each finished trajectory into a short, policy-facing rule: a *workflow* rule after a
success, an *avoidance* rule after a failure. The analyzer (the frozen snapshot θ_k, or a rule-based
annotator in Stage 1) answers with JSON ``{"episode_summary": ..., "episode_skill": ...}``. A skill
that does not parse or has fewer than ``min_words`` words is invalid: it is dropped, and the tokens
of its trajectory get no OPD term.

The skill-augmented prompt of a step is the step's own prompt re-rendered from its recorded parts
with an "Episode-Level Skill" block right after the task line, so nothing is re-parsed from strings.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from seed_envs import hindsight_rule_for
from seed_envs.hindsight import EpisodeRecord
from wrappers import Trajectory, parse_action, render_prompt

SKILL_HEADER = "Episode-Level Skill:"
_OBS_CHARS = 240  # observation characters shown per step in the analyzer prompt
_RESPONSE_CHARS = 120
_STEPS_SHOWN = 8  # the last steps of a long episode (the ones that decided the outcome)


@dataclass(frozen=True)
class Skill:
    summary: str
    text: str  # the rule itself (``episode_skill``)

    def to_json(self) -> str:
        return json.dumps({"episode_summary": self.summary, "episode_skill": self.text}, ensure_ascii=False)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def analyzer_prompt(trajectory: Trajectory, image_placeholder: str | None = None) -> str:
    """The prompt asking the policy to turn one finished trajectory into a skill.

    ``image_placeholder`` (vision policies, see :meth:`seed_train.codec.VisionPromptCodec.encode_analyzer`) is put
    before the observation text of every shown step that had an image.
    """
    outcome = "SUCCESS" if trajectory.success else "FAILURE"
    # Rules for the task's category, not a replay: Stage 1 teaches this same prompt (seed_train.stage1),
    # with targets that never list the episode's actions or values.
    kind = ("a workflow rule: how to solve this kind of task, to repeat next time" if trajectory.success
            else "an avoidance rule: the mistake that made it fail and what to do instead")
    shown = trajectory.steps[-_STEPS_SHOWN:]
    lines = [
        "Analyze this episode of an agent and write one reusable skill for the agent.",
        f"Task: {trajectory.task}",
        f"Outcome: {outcome} (score {trajectory.score:.2f}, {trajectory.length} steps)",
    ]
    if len(shown) < len(trajectory.steps):
        lines.append(f"(last {len(shown)} steps shown)")
    for s in shown:
        flag = " [invalid]" if s.invalid_action or s.format_error else ""
        image = f"{image_placeholder} " if image_placeholder is not None and s.image is not None else ""
        lines.append(f"Step {s.index + 1}: saw: {image}{_clip(s.observation, _OBS_CHARS)} | did: {_clip(s.action, _RESPONSE_CHARS)}{flag}")
    lines += [
        f"Write {kind}. Keep it short, general and addressed to the agent; do not list this episode's actions.",
        'Answer with JSON only: {"episode_summary": "...", "episode_skill": "..."}',
    ]
    return "\n".join(lines)


def parse_skill(text: str, min_words: int = 5) -> Skill | None:
    """The skill in an analyzer output, or None when it does not parse or is too short."""
    skill = parse_action(text, "json", json_key="episode_skill")
    if skill.format_error or skill.action is None:
        return None
    rule = " ".join(skill.action.split())
    if len(rule.split()) < min_words:
        return None
    summary = parse_action(text, "json", json_key="episode_summary")
    return Skill(summary="" if summary.format_error else " ".join((summary.action or "").split()), text=rule)


def skill_block(skill: str) -> str:
    """The block inserted after the task line; an empty skill (the ``empty`` control) is the header alone."""
    return f"{SKILL_HEADER}\n{skill}" if skill else SKILL_HEADER


def skill_augmented_prompt(prompt_parts: dict, skill: str) -> str:
    """The step's prompt with the skill block inserted right after the task line."""
    return render_prompt(prompt_parts, insert_after_task=skill_block(skill))


def episode_record(trajectory: Trajectory) -> EpisodeRecord:
    """The trajectory as the plain data an env's hindsight rules read (``seed_envs.hindsight``)."""
    steps = trajectory.steps
    return EpisodeRecord(
        task=trajectory.task, category=trajectory.category, success=trajectory.success,
        actions=[s.action for s in steps], observations=[s.observation for s in steps],
        invalid=[bool(s.invalid_action or s.format_error) for s in steps],
        expert_actions=[s.info.get("expert_action") if isinstance(s.info, dict) else None for s in steps],
        final_observation=str(trajectory.meta.get("final_observation", "")),
        truncated=bool(steps and steps[-1].truncated), task_id=trajectory.task_id, score=trajectory.score)


def rule_based_skill(trajectory: Trajectory) -> Skill:
    """A skill written from the trajectory and its env's knowledge, for Stage 1 when no annotator model
    is given.

    The env of ``trajectory.env_id`` supplies the rule (:func:`seed_envs.hindsight_rule_for`; the
    generic rules for any other env): after a success the workflow that works for the task's
    category, after a failure the mistake that lost it and what to do instead. Rules are reusable:
    never the episode's own action list or task-specific values, and short enough that the JSON fits
    the analyzer's token budget.
    """
    found = hindsight_rule_for(trajectory.env_id)(episode_record(trajectory))
    return Skill(summary=found.summary, text=found.rule)


def shuffle_within_groups(skills: list[Skill | None], group_ids: list[str], rng: np.random.Generator) -> list[Skill | None]:
    """The shuffled-skill control: each trajectory gets another trajectory's skill from its own group."""
    out = list(skills)
    by_group: dict[str, list[int]] = {}
    for i, g in enumerate(group_ids):
        by_group.setdefault(g, []).append(i)
    for members in by_group.values():
        if len(members) < 2:
            continue
        # A derangement by rotation of a random order: nobody keeps their own skill.
        order = [members[i] for i in rng.permutation(len(members))]
        for src, dst in zip(order, order[1:] + order[:1]):
            out[dst] = skills[src]
    return out
