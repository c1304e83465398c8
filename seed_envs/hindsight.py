"""Hindsight rules: what an env's agent should learn from one finished episode, in the env's own words.

SEED's Stage 1 teaches the policy to turn a trajectory into a *skill*: a short, policy-facing rule
for the task's category (a workflow after a success, the mistake to avoid after a failure). What
makes a good rule is knowledge of the env (its categories, its action grammar, its typical
mistakes), so each env package has a ``hindsight`` module with a pure function
``hindsight_rule(EpisodeRecord) -> HindsightRule``, found through :func:`seed_envs.hindsight_rule_for`.

Rules must transfer to other tasks of the category: they never list the episode's own actions and
never quote its task-specific values (cards, entity names, queries). They are short: the analyzer
writes them as JSON ``{"episode_summary", "episode_skill"}`` within a small token budget (the
quickstart gives it 48 tokens), so a rule is about 8 to 22 words and a summary 2 to 5.

The input is plain data, so this module (and every env's rule function) depends on nothing but the
standard library: ``seed_envs`` never imports the trainer or the wrappers.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

WORKFLOW = "workflow"  # the kind of every success rule starts with this ("workflow/sum")
AVOID = "avoid"  # the kind of every failure rule starts with this ("avoid/invalid")


@dataclass(frozen=True)
class EpisodeRecord:
    """One finished episode as plain data (what a trainer's trajectory holds, without its types).

    ``observations[i]`` is the observation action ``i`` answered; ``final_observation`` the one after
    the last action (it carries the env's verdict, e.g. "Wrong: ..."). ``expert_actions[i]`` is what
    the env's expert would have done at step ``i`` (None where unknown, e.g. on-policy rollouts).
    ``truncated``: the episode ended by the step limit rather than by the env.
    """

    task: str
    category: str
    success: bool
    actions: Sequence[str]
    observations: Sequence[str]
    invalid: Sequence[bool]
    expert_actions: Sequence[str | None] = ()
    final_observation: str = ""
    truncated: bool = False
    task_id: str = ""
    score: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.actions)
        if len(self.observations) != n or len(self.invalid) != n:
            raise ValueError(f"EpisodeRecord: actions ({n}), observations ({len(self.observations)}) and "
                             f"invalid ({len(self.invalid)}) must have one entry per step")
        if self.expert_actions and len(self.expert_actions) != n:
            raise ValueError(f"EpisodeRecord: expert_actions has {len(self.expert_actions)} entries for {n} steps")

    def expert_at(self, i: int) -> str | None:
        return self.expert_actions[i] if self.expert_actions else None

    def valid_actions(self) -> list[str]:
        return [a for a, bad in zip(self.actions, self.invalid) if not bad]


@dataclass(frozen=True)
class HindsightRule:
    """A reusable rule and a short summary of the episode. ``kind`` names the rule's reason
    (``workflow/<...>`` after a success, ``avoid/<mistake>`` after a failure): tests and diagnostics
    read it, the policy never sees it."""

    summary: str
    rule: str
    kind: str


HindsightFunction = Callable[[EpisodeRecord], HindsightRule]


def workflow(kind: str, rules: dict[str, str], summaries: dict[str, str]) -> HindsightRule:
    """The success rule ``kind`` of an env's tables."""
    return HindsightRule(summaries[kind], rules[kind], f"{WORKFLOW}/{kind}")


def avoidance(kind: str, rules: dict[str, str], summaries: dict[str, str]) -> HindsightRule:
    """The failure rule ``kind`` of an env's tables."""
    return HindsightRule(summaries[kind], rules[kind], f"{AVOID}/{kind}")


# ------------------------------------------------------------------ detectors shared by every env
def invalid_indices(record: EpisodeRecord) -> list[int]:
    """Steps whose action the env could not execute (or that broke the answer format)."""
    return [i for i, bad in enumerate(record.invalid) if bad]


def max_repeat(actions: Sequence[str]) -> tuple[str | None, int]:
    """The most repeated action and how often it was played (ties: the one played first)."""
    if not actions:
        return None, 0
    counts = Counter(actions)
    best = max(counts.values())
    return next(a for a in actions if counts[a] == best), best


def first_expert_deviation(record: EpisodeRecord) -> int | None:
    """The first step where the agent did not take the expert's action (None: it never left the plan
    or the record has no expert actions)."""
    for i, action in enumerate(record.actions):
        expert = record.expert_at(i)
        if expert is not None and expert.strip().lower() != action.strip().lower():
            return i
    return None


def unchanged_steps(record: EpisodeRecord, state_of: Callable[[str], str] | None = None) -> list[int]:
    """Valid steps after which the state (``state_of`` applied to the observation, default the text)
    did not change: bumps into walls, no-op commands."""
    state_of = state_of or (lambda text: text)
    after = list(record.observations[1:]) + [record.final_observation]
    return [i for i in range(len(record.actions))
            if not record.invalid[i] and after[i] and state_of(after[i]) == state_of(record.observations[i])]


# ------------------------------------------------------------------ checks on a rule
def replays_actions(text: str, actions: Sequence[str], run: int = 2) -> bool:
    """Whether ``text`` writes out ``run`` or more of the episode's consecutive actions, joined by at
    most commas, spaces, arrows, a repeat count ("up x2, left") or "then": the sign of a replayed plan
    rather than a rule. Case-insensitive; an action made of word characters must stand as a word."""
    low = text.lower()
    glue = r"(?:\s*x\d+)?[\s,;:>\-]*(?:then\s+)?"
    for start in range(len(actions) - run + 1):
        parts = [a.strip().lower() for a in actions[start:start + run]]
        if any(not p for p in parts):
            continue
        pattern = glue.join(_as_word(p) for p in parts)
        if re.search(pattern, low):
            return True
    return False


def _as_word(action: str) -> str:
    left = r"(?<!\w)" if action[0].isalnum() or action[0] == "_" else ""
    right = r"(?!\w)" if action[-1].isalnum() or action[-1] == "_" else ""
    return left + re.escape(action) + right


# ------------------------------------------------------------------ wrong-rule content controls
def swap_phrases(text: str, table: Sequence[tuple[str, str]]) -> tuple[str, bool]:
    """``text`` with every phrase of ``table`` replaced by its partner (whole words, case-insensitive, one
    pass so a replacement is never rewritten again; a capital first letter stays capital); and whether
    anything was replaced. The envs' ``wrong_rule`` functions build on it."""
    pattern = "|".join(rf"(?<![\w]){re.escape(a)}(?![\w])" if a[0].isalnum() else re.escape(a) for a, _ in table)
    lookup = {a: b for a, b in table}

    def swap(match: re.Match) -> str:
        word = lookup[match.group(0).lower()]
        return word[:1].upper() + word[1:] if match.group(0)[:1].isupper() else word

    new, count = re.subn(pattern, swap, text, flags=re.IGNORECASE)
    return new, count > 0


# ------------------------------------------------------------------ the generic fallback
# Named as each env's rule module names its tables, so that every rule function's module declares what it can
# write the same way (seed_envs.hindsight_rules_for).
SUCCESS_RULES = {
    "direct": "Read the task and the observation, then pick the admissible action that leads straight to the goal.",
}
FAILURE_RULES = {
    "invalid": "Answer with exactly one admissible action in the required format; other text wastes the step.",
    "repeat": "Do not repeat an action that did not help; when nothing changes, try another action.",
    "wrong_choice": "Compare the admissible actions with what the task asks, and pick the one that matches it.",
    "timeout": "Plan the shortest way to the goal before acting, and avoid detours that do not bring it closer.",
}
SUCCESS_SUMMARIES = {"direct": "Solved the task."}
FAILURE_SUMMARIES = {
    "invalid": "Failed: invalid actions.",
    "repeat": "Failed: repeated an action.",
    "wrong_choice": "Failed: wrong action chosen.",
    "timeout": "Failed: ran out of steps.",
}


def generic_rule(record: EpisodeRecord) -> HindsightRule:
    """For any env without its own rules: the outcome and the mistakes any text env shows."""
    if record.success:
        return workflow("direct", SUCCESS_RULES, SUCCESS_SUMMARIES)
    if invalid_indices(record):
        kind = "invalid"
    elif max_repeat(record.actions)[1] >= 3:
        kind = "repeat"
    elif first_expert_deviation(record) is not None or len(record.actions) <= 1:
        kind = "wrong_choice"
    else:
        kind = "timeout"
    return avoidance(kind, FAILURE_RULES, FAILURE_SUMMARIES)
