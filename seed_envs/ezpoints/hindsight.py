"""EZPoints hindsight rules: how to build the formula for a deal's category, or which mistake lost it.

Successes give the category's workflow (add the card values for a ``sum`` deal, multiply them for a
``product`` deal, search operator orders for ``mixed``). Failures are classified from the steps and
the env's verdict: a face card typed as a letter, several tokens in one step, a value no unused card
has, a token out of order, closing with ``=`` before every card is used, the wrong operation for the
category, a wrong value, or never closing the formula. Rules never contain digits or card names: the
deal's own numbers would not transfer to another deal.
"""
from __future__ import annotations

from seed_envs.ezpoints.env import FACE_HINTS
from seed_envs.ezpoints.formula import OPERATORS, FormulaError, is_number, tokenize
from seed_envs.hindsight import EpisodeRecord, HindsightRule, avoidance, invalid_indices, swap_phrases, workflow

_WHOLE_FORMULA_MODE = "whole formula in one step"  # EZPointsEnv._instruction's wording for action_mode="formula"
_FACE_RANKS = ("J", "Q", "K")

SUCCESS_RULES = {
    "sum": "If the values add up to the target, type one value, +, the other, then =.",
    "sum_face": "Face cards are ten; if the values sum to the target, type one, +, the other, =.",
    "product": "If the card values multiply to the target, type one value, *, the other, then =.",
    "mixed": "Try operators and brackets until the formula uses each card once and equals the target, then enter =.",
}
SUCCESS_SUMMARIES = {
    "sum": "Won: sum deal.",
    "sum_face": "Won: sum deal.",
    "product": "Won: product deal.",
    "mixed": "Won: mixed deal.",
}

FAILURE_RULES = {
    "letter": "Type a face card as the number ten, never as a letter; letters are invalid.",
    "multi_token": "Enter exactly one token per step: a card value, an operator, or = at the end.",
    "bad_number": "Type only values of unused cards, each card once, with an operator between them.",
    "order": "Type value, operator, value, then =; a token out of this order is invalid.",
    "junk": "Answer with one formula token and no words: a card value, an operator, or =.",
    "early_equals": "Use every card before closing; enter = only after the last card value.",
    "wrong_operation_sum": "If the card values add up to the target, join them with +; multiplying misses it.",
    "wrong_operation_product": "If the card values multiply to the target, join them with *; adding misses it.",
    "wrong_value": "Check the formula equals the target before entering =; otherwise change the operators.",
    "no_equals": "Enter = right after the last card value; a formula without = never counts.",
}
FAILURE_SUMMARIES = {
    "letter": "Lost: typed a letter.",
    "multi_token": "Lost: several tokens.",
    "bad_number": "Lost: wrong value typed.",
    "order": "Lost: token out of order.",
    "junk": "Lost: not a token.",
    "early_equals": "Lost: card left unused.",
    "wrong_operation_sum": "Lost: wrong operation.",
    "wrong_operation_product": "Lost: wrong operation.",
    "wrong_value": "Lost: wrong value.",
    "no_equals": "Lost: never closed.",
}


def invalid_kind(action: str, token_mode: bool = True) -> str:
    """Why an invalid EZPoints action was invalid, from the action alone (the env's grammar classes)."""
    text = action.strip()
    if text.upper() in FACE_HINTS or text.upper() in _FACE_RANKS:
        return "letter"
    try:
        tokens = tokenize(text)
    except FormulaError:
        return "junk"
    if not tokens:
        return "junk"
    if token_mode and len(tokens) > 1:
        return "multi_token"
    if not token_mode:
        return "bad_number" if any(is_number(t) for t in tokens) else "order"
    return "bad_number" if is_number(tokens[0]) else "order"


def operators_used(record: EpisodeRecord) -> set[str]:
    """Operators in the formula the agent typed (valid steps only: invalid ones change nothing)."""
    used: set[str] = set()
    for action in record.valid_actions():
        try:
            used.update(t for t in tokenize(action) if t in OPERATORS)
        except FormulaError:
            continue
    return used


def closed_formula(record: EpisodeRecord) -> bool:
    """Whether a formula was judged (the env's verdict opens the final observation)."""
    return record.final_observation.lstrip().startswith(("Wrong:", "Correct:"))


def failure_kind(record: EpisodeRecord) -> str:
    """The mistake that lost the episode: the verdict's reason when a formula was judged, else the
    first invalid action's kind, else never closing the formula."""
    token_mode = _WHOLE_FORMULA_MODE not in record.task
    final = record.final_observation
    if closed_formula(record):
        if "unused" in final:
            return "early_equals"
        used = operators_used(record)
        if record.category == "sum" and used and "+" not in used:
            return "wrong_operation_sum"
        if record.category == "product" and used and "*" not in used:
            return "wrong_operation_product"
        return "wrong_value"
    bad = invalid_indices(record)
    if bad:
        return invalid_kind(record.actions[bad[0]], token_mode)
    return "no_equals"


def _has_face_card(record: EpisodeRecord) -> bool:
    """Whether the deal shows a face card (text observations list the cards: "Cards: K and 2.")."""
    first = record.observations[0] if record.observations else ""
    line = next((ln for ln in first.splitlines() if ln.startswith("Cards:")), "")
    names = line[len("Cards:"):].split(".")[0].replace(" and ", ",").split(",")
    return any(n.strip() in _FACE_RANKS for n in names)


def hindsight_rule(record: EpisodeRecord) -> HindsightRule:
    if record.success:
        category = record.category if record.category in SUCCESS_RULES else "mixed"
        if category == "sum" and _has_face_card(record):
            category = "sum_face"  # the face card had to be typed as its number
        return workflow(category, SUCCESS_RULES, SUCCESS_SUMMARIES)
    return avoidance(failure_kind(record), FAILURE_RULES, FAILURE_SUMMARIES)


# ------------------------------------------------------------------ the wrong-rule content control
# Operator wording in both directions: the words a skill uses to say "add" and "multiply", each mapped to
# the other's word of the same role, so a rewritten skill keeps its format and about its length.
_TO_MULTIPLY = (("sum to", "multiply to"), ("add up", "multiply"), ("adds up", "multiplies"), ("adding", "multiplying"), ("added", "multiplied"),
                ("addition", "multiplication"), ("add", "multiply"), ("sums", "products"), ("sum", "product"),
                ("plus", "times"), ("+", "*"))
_TO_ADD = (("multiplying", "adding"), ("multiplied", "added"), ("multiplication", "addition"),
           ("multiplies", "adds up"), ("multiply", "add up"), ("products", "sums"), ("product", "sum"),
           ("times", "plus"), ("*", "+"), ("x", "+"))
WRONG_RULES = {"sum": SUCCESS_RULES["product"], "product": SUCCESS_RULES["sum"]}


def wrong_rule(text: str, category: str) -> str:
    """A skill of the same format whose rule is wrong for ``category``: every operator word of a ``sum``
    deal's skill turned into multiplication, of a ``product`` deal's into addition (so the policy's own
    skill, right or wrong, always ends up naming the wrong operator); a skill that names no operator (a
    format rule, say) is replaced by the other category's workflow rule. Other categories (``mixed``,
    where no single operator is right) keep their text."""
    if category not in WRONG_RULES:
        return text
    new, changed = swap_phrases(text, _TO_MULTIPLY if category == "sum" else _TO_ADD)
    return new if changed else WRONG_RULES[category]
