"""Word Reverse's hindsight rule: an out-of-tree env declares it on the env (``agent_defaults.hindsight``),
as the five do; ``seed_envs.hindsight_rule_for`` finds it and Stage 1 annotates with it. Rules state how
to reverse any word of the category (its length), never the episode's word."""
from __future__ import annotations

from seed_envs.hindsight import EpisodeRecord, HindsightRule, avoidance, invalid_indices, workflow

SUCCESS_RULES = {"reverse": "Read the word from its last letter to its first and write those letters as one word."}
SUCCESS_SUMMARIES = {"reverse": "Won: word reversed."}
FAILURE_RULES = {
    "invalid": "Write only letters, exactly as many as the word has, with no spaces or other words.",
    "wrong": "Start from the last letter and keep every letter once; compare the length before answering.",
}
FAILURE_SUMMARIES = {"invalid": "Lost: invalid try.", "wrong": "Lost: letters out of order."}


def hindsight_rule(record: EpisodeRecord) -> HindsightRule:
    if record.success:
        return workflow("reverse", SUCCESS_RULES, SUCCESS_SUMMARIES)
    kind = "invalid" if invalid_indices(record) else "wrong"
    return avoidance(kind, FAILURE_RULES, FAILURE_SUMMARIES)
