"""Where a run's skills come from: one skill-source object, chosen once at the start of a run.

``make_skill_source(cfg, model)`` reads ``cfg.skill_source`` (and ``cfg.opd_coef``) and returns an
object whose ``skills(trajectories, policy, seed)`` gives one :class:`~seed_train.skills.Skill` (or
None: no valid skill, no OPD term for that episode's tokens) per trajectory, every iteration:

==================  =====================================================================================
``on_policy``       SEED: θ_k, the weights that played the episodes, analyses each trajectory
``shuffled``        the analyzer's skills, permuted within each GRPO group (nobody keeps its own)
``shuffled_tasks``  the analyzer's skills, each episode getting one written for a trajectory of a
                    *different task* (a derangement of the batch's task ids)
``shuffled_categories``  the analyzer's skills, each episode getting one written for a trajectory of a
                    *different task category* (needs ``stage2_balance_categories``: every batch holds every
                    category), so a category-specific rule never reaches a task of its own category
``wrong_rule``      the analyzer's skills rewritten by the env's ``wrong_rule`` (``seed_envs.wrong_rule_for``):
                    same format and about the same length, but the rule is wrong for the episode's category
                    (EZPoints: a product deal's skill told to add, a sum deal's to multiply)
``frozen``          θ_0 (the Stage 2 start) analyses, on every generation backend: a backend that holds its
                    own copy of the weights (vLLM) is synced to θ_0 for the analysis and back to θ_k after
``static``          a fixed library: ``{category: skill}`` (``"default"`` for the rest)
``static_wrong``    that library's entry for the category, rewritten by the env's ``wrong_rule``
``empty``           an empty skill: the teacher prompt holds the skill block's header
                    (``Episode-Level Skill:``) as its own paragraph after the task line and no rule, so
                    it differs from the student prompt by that header only (the OPD term then measures
                    what the header alone does to the policy)
``none``            no skills and no teacher pass (also whenever ``opd_coef == 0``: GRPO, SFT+GRPO)
==================  =====================================================================================

``policy`` is anything with the trainer's ``model``, ``codec`` and ``backend`` (a
:class:`~seed_train.generation.GenerationBackend`).
"""
from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from seed_train.checkpoint import load_trainable_state, trainable_state
from seed_train.config import SeedConfig, SetupError
from seed_train.distributed import dist_info
from seed_train.generation import GenerationBackend, forget_turns, takes_row_keys
from seed_train.progress import progress_bar
from seed_train.skills import Skill, parse_skill, shuffle_within_groups
from wrappers import Trajectory


@dataclass(frozen=True)
class AnalyzerAnswer:
    """One analyzer generation, as :func:`generate_skills` reports it to a caller that asks (``answers=``).

    ``cut``: the generation stopped at ``skill_max_new_tokens`` rather than at a stop token, so an
    invalid answer that was cut may only have needed a larger budget (e.g. JSON without its closing brace).
    """

    episode: int  # index into the trajectories
    attempt: int  # 0: the first sample; k: the k-th retry
    text: str
    cut: bool
    valid: bool


def generate_skills(backend: GenerationBackend, codec, trajectories: Sequence[Trajectory], cfg: SeedConfig,
                    seed: int, answers: list[AnalyzerAnswer] | None = None) -> list[Skill | None]:
    """The analyzer pass: one skill per trajectory, retrying unparseable answers up to cfg.analyzer_retries.

    ``answers``: a list to which every generation is appended as an :class:`AnalyzerAnswer` (attempt
    order), for a caller that reports how the answers failed (benchmarks/skill_validity.py).
    """
    from seed_train.codec import prompt_codec

    codec = prompt_codec(codec)
    prompts = [codec.encode_analyzer(t, cfg.analyzer_images) for t in trajectories]
    skills: list[Skill | None] = [None] * len(trajectories)
    todo = list(range(len(trajectories)))
    # A retry sends the same prompt again: keyed by episode, a backend that keeps each row's KV (the HF
    # backend's previous-turn reuse) prefills it once, not once per attempt.
    keyed = takes_row_keys(backend)
    temperature = cfg.temperature if cfg.analyzer_temperature is None else cfg.analyzer_temperature
    try:
        with progress_bar(total=len(trajectories), desc="skills", unit="episode") as bar:
            for attempt in range(cfg.analyzer_retries + 1):
                if not todo:
                    break
                extra = {"row_keys": [("analyzer", i) for i in todo]} if keyed else {}
                gens = backend.generate([prompts[i] for i in todo], max_new_tokens=cfg.skill_max_new_tokens,
                                        temperature=temperature, top_p=cfg.top_p, seed=seed + attempt, **extra)
                for i, g in zip(todo, gens):
                    skills[i] = parse_skill(g.text, cfg.skill_min_words)
                    if answers is not None:
                        answers.append(AnalyzerAnswer(i, attempt, g.text, not g.finished, skills[i] is not None))
                todo = [i for i in todo if skills[i] is None]
                # an episode is done once it has a valid skill or its last attempt ran
                bar.update(len(gens) - len(todo) if attempt < cfg.analyzer_retries else len(gens))
    finally:
        if keyed:
            forget_turns(backend)  # the kept KV is the analyzer's: free it, and keep it from the next rollout
    return skills


@contextlib.contextmanager
def weights(model: torch.nn.Module, state: dict[str, torch.Tensor] | None):
    """Temporarily run ``model`` with the trainable weights ``state`` (None: unchanged)."""
    if state is None:
        yield
        return
    current = trainable_state(model)
    load_trainable_state(model, state)
    try:
        yield
    finally:
        load_trainable_state(model, current)


class SkillSource(Protocol):
    """What the trainer asks of a skill source each iteration."""

    kind: str  # the config's skill_source ("none" when no skills are used)
    produces_skills: bool  # False: every entry is None, no teacher pass, no skill metrics

    # ``answers``: where a source that runs the analyzer appends each generation (generate_skills'
    # ``answers=``); the trainer counts them for its ``skill_answers`` / ``skill_answers_cut`` metrics.

    def skills(self, trajectories: Sequence[Trajectory], policy: Any, seed: int,
               answers: list[AnalyzerAnswer] | None = None) -> list[Skill | None]:
        ...


@dataclass
class NoSkills:
    """``none`` (and every run with ``opd_coef == 0``): no skill, so no teacher pass."""

    kind: str = "none"
    produces_skills: bool = False

    def skills(self, trajectories: Sequence[Trajectory], policy: Any, seed: int,
               answers: list[AnalyzerAnswer] | None = None) -> list[Skill | None]:
        return [None] * len(trajectories)


@dataclass
class OnPolicyAnalyzer:
    """``on_policy``: the current weights θ_k analyse each trajectory (the backend already serves θ_k)."""

    cfg: SeedConfig
    kind: str = "on_policy"
    produces_skills: bool = True

    def skills(self, trajectories: Sequence[Trajectory], policy: Any, seed: int,
               answers: list[AnalyzerAnswer] | None = None) -> list[Skill | None]:
        return generate_skills(policy.backend, policy.codec, trajectories, self.cfg, seed, answers)


@dataclass
class FrozenAnalyzer:
    """``frozen``: θ_0's trainable weights (captured at the Stage 2 start) analyse, whatever θ_k is.

    The model runs with θ_0 for the analysis, and the generation backend is synced to it, so a backend
    that holds its own copy of the weights (vLLM: a full copy each way, twice an iteration) generates
    with θ_0 too; after the analysis the model has θ_k again and the backend is synced back.
    """

    cfg: SeedConfig
    theta0: dict[str, torch.Tensor]
    kind: str = "frozen"
    produces_skills: bool = True

    def skills(self, trajectories: Sequence[Trajectory], policy: Any, seed: int,
               answers: list[AnalyzerAnswer] | None = None) -> list[Skill | None]:
        try:
            with weights(policy.model, self.theta0):
                policy.backend.sync_weights(policy.model)
                return generate_skills(policy.backend, policy.codec, trajectories, self.cfg, seed, answers)
        finally:  # the model holds θ_k again here: the backend follows
            policy.backend.sync_weights(policy.model)


@dataclass
class ShuffledSkills:
    """``shuffled`` (``across="group"``), ``shuffled_tasks`` (``"task"``) and ``shuffled_categories``
    (``"category"``): another episode's skill."""

    analyzer: OnPolicyAnalyzer
    across: str = "group"
    produces_skills: bool = True

    @property
    def kind(self) -> str:
        return {"group": "shuffled", "task": "shuffled_tasks", "category": "shuffled_categories"}[self.across]

    def skills(self, trajectories: Sequence[Trajectory], policy: Any, seed: int,
               answers: list[AnalyzerAnswer] | None = None) -> list[Skill | None]:
        own = self.analyzer.skills(trajectories, policy, seed, answers)
        rng = np.random.default_rng(seed)
        if self.across == "group":
            return shuffle_within_groups(own, [t.group_id or t.episode_id for t in trajectories], rng)
        if self.across == "category":
            return derange_across_tasks(own, [t.category for t in trajectories], rng, what="task categories")
        return derange_across_tasks(own, [t.task_id for t in trajectories], rng)


@dataclass
class StaticLibrary:
    """``static``: the library's skill for the trajectory's category (``"default"`` otherwise; None if neither)."""

    library: dict[str, str]
    kind: str = "static"
    produces_skills: bool = True

    def skills(self, trajectories: Sequence[Trajectory], policy: Any, seed: int,
               answers: list[AnalyzerAnswer] | None = None) -> list[Skill | None]:
        texts = [self.library.get(t.category, self.library.get("default")) for t in trajectories]
        return [Skill("", text) if text else None for text in texts]


@dataclass
class WrongRule:
    """``wrong_rule`` / ``static_wrong``: the inner source's skills rewritten by the env's ``wrong_rule(text,
    category)``, so each episode's skill keeps its form but states a rule wrong for its category. An
    invalid skill (None) stays None: the control changes the content of the skills SEED would use, not
    how many there are."""

    inner: SkillSource
    rewrite: Any  # (skill text, category) -> skill text
    kind: str = "wrong_rule"
    produces_skills: bool = True

    def skills(self, trajectories: Sequence[Trajectory], policy: Any, seed: int,
               answers: list[AnalyzerAnswer] | None = None) -> list[Skill | None]:
        own = self.inner.skills(trajectories, policy, seed, answers)
        return [None if s is None else Skill(s.summary, self.rewrite(s.text, t.category))
                for s, t in zip(own, trajectories)]


@dataclass
class EmptySkills:
    """``empty``: a valid skill with no text; its block is the skill header alone (see the module docstring)."""

    kind: str = "empty"
    produces_skills: bool = True

    def skills(self, trajectories: Sequence[Trajectory], policy: Any, seed: int,
               answers: list[AnalyzerAnswer] | None = None) -> list[Skill | None]:
        return [Skill("", "") for _ in trajectories]


def derange_across_tasks(skills: Sequence[Skill | None], task_ids: Sequence[str],
                         rng: np.random.Generator, what: str = "tasks") -> list[Skill | None]:
    """Each entry gets a skill of an entry of a different task (or of whatever key ``task_ids`` holds:
    ``shuffled_categories`` passes the categories).

    The distinct task ids, in a random order, are mapped each to the next (a cyclic derangement: no task
    keeps its own); the k-th episode of a task gets the skill of the k-th (mod size) episode of its
    source task, in a random order of the source's episodes. Needs at least 2 distinct tasks.
    """
    if len(skills) != len(task_ids):
        raise ValueError(f"derange_across_tasks: {len(skills)} skills for {len(task_ids)} task ids")
    tasks = list(dict.fromkeys(task_ids))
    if len(tasks) < 2:
        raise SetupError(f"config field 'skill_source': a shuffle across {what} needs episodes of at least 2 distinct "
                         f"{what} in a batch (each process's share under data parallelism); got {len(tasks)}: raise "
                         "tasks_per_iteration" + (" and set --stage2-balance-categories" if what != "tasks" else ""))
    members: dict[str, list[int]] = {t: [] for t in tasks}
    for i, t in enumerate(task_ids):
        members[t].append(i)
    order = [tasks[i] for i in rng.permutation(len(tasks))]
    source_of = dict(zip(order, order[1:] + order[:1]))
    donors = {t: [members[t][i] for i in rng.permutation(len(members[t]))] for t in tasks}
    out: list[Skill | None] = [None] * len(skills)
    for task in tasks:
        src = donors[source_of[task]]
        for k, i in enumerate(members[task]):
            out[i] = skills[src[k % len(src)]]
    return out


def load_library(path: str | Path) -> dict[str, str]:
    """A static skill library: a JSON object ``{category: skill text}``."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise SetupError(f"config field 'static_skills': {path} must hold a JSON object of category: skill text")
    return data


def make_skill_source(cfg: SeedConfig, model: torch.nn.Module | None = None) -> SkillSource:
    """The run's skill source, chosen once at the start of Stage 2.

    ``model``: the policy at the Stage 2 start (θ_0); the ``frozen`` source keeps a copy of its trainable
    weights (LoRA: the fresh adapters over the merged base; full fine-tuning: every weight).
    """
    if cfg.opd_coef == 0 or cfg.skill_source == "none":
        return NoSkills()
    kind = cfg.skill_source
    if kind in ("wrong_rule", "static_wrong"):
        from seed_envs import wrong_rule_for
        from seed_train.preflight import check_skill_source

        check_skill_source(cfg)  # the env declares a wrong_rule
        rewrite = wrong_rule_for(cfg.env_id)
        inner = StaticLibrary(load_library(cfg.static_skills)) if kind == "static_wrong" else OnPolicyAnalyzer(cfg)
        return WrongRule(inner, rewrite, kind)
    if kind == "static":
        return StaticLibrary(load_library(cfg.static_skills))
    if kind == "empty":
        return EmptySkills()
    if kind == "frozen":
        if model is None:
            raise ValueError("make_skill_source: the frozen source needs the Stage 2 start model")
        return FrozenAnalyzer(cfg, trainable_state(model))
    analyzer = OnPolicyAnalyzer(cfg)
    world = dist_info().world_size
    if kind == "shuffled_tasks" and cfg.tasks_per_iteration // world < 2:
        # each process shuffles among its own groups (seed_train.distributed.shard_groups deals them out)
        raise SetupError(f"config field 'skill_source': shuffled_tasks needs at least 2 tasks per process; "
                         f"tasks_per_iteration {cfg.tasks_per_iteration} over {world} processes leaves fewer")
    if kind == "shuffled":
        return ShuffledSkills(analyzer, "group")
    if kind == "shuffled_tasks":
        return ShuffledSkills(analyzer, "task")
    if kind == "shuffled_categories":
        return ShuffledSkills(analyzer, "category")
    if kind == "on_policy":
        return analyzer
    raise ValueError(f"make_skill_source: unknown skill_source {kind!r}")
