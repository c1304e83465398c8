"""SearchQA hindsight rules: how to search for a question's kind, or why the answer missed.

A success gives the search plan of its category: one search for a single-hop question, the named
entity first and then the entity its passage links to for a bridge question, each of the two
entities for a comparison (multi-hop datasets of real data count as bridge questions). A failure is
classified from the actions and what the searches returned: invalid actions, no answer before the
steps ran out, answering without searching, repeating a query, too few hops for a multi-hop
question, an answer found in no passage, or the wrong fact. Rules never name the question's
entities or the answer.
"""
from __future__ import annotations

import re

from seed_envs.hindsight import EpisodeRecord, HindsightRule, avoidance, invalid_indices, swap_phrases, workflow
from seed_envs.searchqa.metrics import normalize_answer

_ACTION = re.compile(r"\s*(search|answer)\s*\[(.*)\]\s*", re.DOTALL | re.IGNORECASE)
#: Real datasets whose questions need two or more retrieval hops (the others are single-hop).
MULTI_HOP_DATASETS = ("hotpotqa", "2wiki", "musique", "bamboogle")

SUCCESS_RULES = {
    "single_hop": "Search the entity the question names, then answer with the exact words its passage gives.",
    "bridge": "Search the named entity, find the linked entity in its passage, search that too, then answer.",
    "comparison": "Search each of the two entities separately, compare the asked facts, then answer with one name.",
}
SUCCESS_SUMMARIES = {
    "single_hop": "Solved: one search.",
    "bridge": "Solved: two hops.",
    "comparison": "Solved: compared both.",
}
FAILURE_RULES = {
    "invalid": "Write every step as one search or one answer in the required format; anything else is wasted.",
    "no_answer": "Keep the last step for the answer; once a passage gives it, answer right away.",
    "no_search": "Never answer from memory: search the entity the question names, then answer from its passage.",
    "repeat_query": "Do not repeat a query; search a new entity taken from the passages you have.",
    "bridge": "For a linked fact, search the named entity, then search the entity it links to, then answer.",
    "comparison": "For a comparison, search both entities before answering; one passage cannot settle it.",
    "not_in_passages": "Answer with words copied from a retrieved passage, not a guess; search again if none has them.",
    "wrong_fact": "Answer exactly the fact the question asks for, such as a name, year or city.",
}
FAILURE_SUMMARIES = {
    "invalid": "Failed: invalid actions.",
    "no_answer": "Failed: never answered.",
    "no_search": "Failed: never searched.",
    "repeat_query": "Failed: repeated a query.",
    "bridge": "Failed: skipped a hop.",
    "comparison": "Failed: one side only.",
    "not_in_passages": "Failed: answer not found.",
    "wrong_fact": "Failed: wrong fact.",
}


def parse(action: str) -> tuple[str, str] | None:
    """``("search", query)`` / ``("answer", text)``, or None for anything else."""
    m = _ACTION.fullmatch(action)
    return (m.group(1).lower(), " ".join(m.group(2).split())) if m else None


def question_kind(category: str) -> str:
    """``single_hop`` / ``bridge`` / ``comparison`` for generated data; real datasets map to
    ``bridge`` (multi-hop) or ``single_hop``."""
    if category in SUCCESS_RULES:
        return category
    return "bridge" if category.lower() in MULTI_HOP_DATASETS else "single_hop"


def failure_kind(record: EpisodeRecord) -> str:
    steps = [parse(a) if not bad else None for a, bad in zip(record.actions, record.invalid)]
    queries = [arg for p in steps if p and p[0] == "search" for arg in [p[1]]]
    answers = [arg for p in steps if p and p[0] == "answer" for arg in [p[1]]]
    bad = invalid_indices(record)
    if not answers:
        return "invalid" if bad else "no_answer"
    if not queries:
        return "no_search"
    if len({normalize_answer(q) for q in queries}) < len(queries):
        return "repeat_query"
    kind = question_kind(record.category)
    if kind in ("bridge", "comparison") and len(queries) < 2:
        return kind
    # Everything the agent was shown, less the env's echo of the submitted answer.
    final = [ln for ln in record.final_observation.splitlines() if not ln.startswith("Answer submitted:")]
    seen = f" {normalize_answer(' '.join([*record.observations, *final]))} "
    answer = normalize_answer(answers[-1])
    if answer and f" {answer} " not in seen:
        return "not_in_passages"
    return "wrong_fact"


def hindsight_rule(record: EpisodeRecord) -> HindsightRule:
    if record.success:
        return workflow(question_kind(record.category), SUCCESS_RULES, SUCCESS_SUMMARIES)
    return avoidance(failure_kind(record), FAILURE_RULES, FAILURE_SUMMARIES)


# ------------------------------------------------------------------ the wrong-rule content control
# The phrases the rules turn on, mapped to advice that loses: answer from memory, search one entity where two
# are needed, stop before the second hop, guess instead of copying (longer phrases first).
_WRONG_PHRASES = (
    ("search each of the two entities separately", "search only the first entity"),
    ("search both entities before answering", "answer after searching one entity"),
    ("then search the entity it links to", "then answer with that entity"),
    ("find the linked entity in its passage, search that too", "take its name from the question, search nothing more"),
    ("with the exact words its passage gives", "with a guess of your own"),
    ("copied from a retrieved passage, not a guess", "of your own guess, not from a passage"),
    ("never answer from memory", "always answer from memory"), ("one passage cannot settle it", "one passage settles it"),
    ("do not repeat a query", "repeat the same query"), ("answer right away", "keep searching"),
    ("search again", "answer anyway"), ("compare", "ignore"),
)
#: Per category, the losing rule for a skill that names none of those phrases.
WRONG_RULES = {
    "single_hop": "Answer at once from memory, without searching; the passages only waste steps.",
    "bridge": "Search the named entity, then answer with its own name; do not search a second entity.",
    "comparison": "Search only the first entity, then answer with its name without checking the other one.",
}


def wrong_rule(text: str, category: str) -> str:
    """A skill of the same format whose advice loses ``category``'s question: search one entity where two
    are needed, stop before the second hop, answer from memory or with a guess (:data:`_WRONG_PHRASES`); a
    skill that names none of them becomes the category's :data:`WRONG_RULES` entry (single-hop's for an
    unknown category)."""
    new, changed = swap_phrases(text, _WRONG_PHRASES)
    return new if changed else WRONG_RULES.get(category, WRONG_RULES["single_hop"])
