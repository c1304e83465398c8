"""CodeLock hindsight rules, the static skill library of the positive control, and its wrong rule.

A finished episode teaches one reusable fact about its category: the lock family's code (entered
right on a success, revealed by the final observation on a failure). Unlike the other envs' rules,
this one states letters the agent types: on CodeLock the category's rule *is* its code, which holds
for every lock of the family (other places, later episodes), while the observation never shows it.
That is the point of this env (see its module docstring): a skill whose content the policy cannot
get elsewhere. Invalid letters and a code never completed get format rules.
"""
from __future__ import annotations

import re

from seed_envs.codelock.env import ALPHABET, CODE_LENGTH, TRAINED_FAMILIES, family_code, spaced
from seed_envs.hindsight import EpisodeRecord, HindsightRule, avoidance, invalid_indices, workflow

SUCCESS_RULES = {
    "code": "Every {family} lock opens with {code}; enter those letters in order, one per step.",
}
SUCCESS_SUMMARIES = {"code": "Won: {family} lock."}
FAILURE_RULES = {
    "wrong_code": "Every {family} lock opens with {code}; enter exactly those letters, one per step.",
    "invalid": "Enter exactly one capital letter from A to F per step, with no other words.",
    "unfinished": "Enter all three letters of the code without stopping; the lock judges only whole codes.",
}
FAILURE_SUMMARIES = {"wrong_code": "Lost: wrong code.", "invalid": "Lost: invalid entry.",
                     "unfinished": "Lost: code left unfinished."}
_REVEALED = re.compile(r"opens with ((?:[A-F] ){%d}[A-F])" % (CODE_LENGTH - 1))
_CODE_IN_TEXT = re.compile(r"(?<![A-Za-z])[A-F](?: [A-F]){%d}(?![A-Za-z])" % (CODE_LENGTH - 1))


def _filled(kind: str, rules: dict[str, str], summaries: dict[str, str], family: str, code: str,
            success: bool) -> HindsightRule:
    make = workflow if success else avoidance
    rule = make(kind, rules, summaries)
    return HindsightRule(rule.summary.format(family=family), rule.rule.format(family=family, code=code), rule.kind)


def hindsight_rule(record: EpisodeRecord) -> HindsightRule:
    family = record.category
    if record.success:
        return _filled("code", SUCCESS_RULES, SUCCESS_SUMMARIES, family, spaced(record.valid_actions()), True)
    revealed = _REVEALED.search(record.final_observation)
    if revealed:
        return _filled("wrong_code", FAILURE_RULES, FAILURE_SUMMARIES, family, revealed.group(1), False)
    kind = "invalid" if invalid_indices(record) else "unfinished"
    return avoidance(kind, FAILURE_RULES, FAILURE_SUMMARIES)


def static_library(families=TRAINED_FAMILIES) -> dict[str, str]:
    """The correct rule for each family: ``--skill-source static --static-skills FILE`` of the positive
    control (``json.dump(static_library(), f)``)."""
    return {f: SUCCESS_RULES["code"].format(family=f, code=spaced(family_code(f))) for f in families}


def wrong_code(family: str) -> tuple[str, ...]:
    """A code wrong in every position for ``family``: each letter of its code moved one along the alphabet."""
    return tuple(ALPHABET[(ALPHABET.index(c) + 1) % len(ALPHABET)] for c in family_code(family))


def wrong_rule(text: str, category: str) -> str:
    """The skill with every code it states replaced by one wrong in every position for the family; a skill
    that states no code becomes the family's rule with that wrong code (same form as a right one)."""
    wrong = spaced(wrong_code(category))
    new, count = _CODE_IN_TEXT.subn(wrong, text)
    return new if count else SUCCESS_RULES["code"].format(family=category, code=wrong)
