"""ALFWorld's rule for a prompt over the model's budget: the admissible list first, then past steps.

A real game lists every ``examine``/``go to`` target and the bookkeeping actions, and the first
observation names every receptacle in the room. ``wrappers.PromptRenderer`` calls :func:`shorten` with
growing ``level`` while the prompt is over budget (``agent_defaults.shorten``):

1. the admissible list leaves out ``examine ...``, ``look``, ``inventory`` and ``help`` (they change
   nothing in the world; the agent may still type them, and they stay admissible);
2. past observations are cut to their first sentence;
3. none left: the renderer then drops past steps, oldest first, and an episode still over ends truncated.
"""
from __future__ import annotations

import re
from typing import Any

_BOOKKEEPING = ("look", "inventory", "help")
_SENTENCE = re.compile(r"^(.+?[.!?])(\s|$)")


def acting_actions(admissible: list[str]) -> list[str]:
    return [a for a in admissible if a not in _BOOKKEEPING and not a.startswith("examine ")]


def first_sentence(text: str) -> str:
    match = _SENTENCE.match(" ".join(text.split()))
    return text if match is None else match.group(1) + (" ..." if len(match.group(1)) < len(text.strip()) else "")


def shorten(parts: dict[str, Any], level: int) -> dict[str, Any] | None:
    """``parts`` (``observation``, ``history``, ``admissible``) shortened up to ``level``; None past the last."""
    if level > 2:
        return None
    admissible = parts["admissible"]
    shortened = {**parts, "admissible": None if admissible is None else acting_actions(admissible)}
    if level >= 2:
        shortened["history"] = [dict(h, observation=first_sentence(h["observation"])) for h in parts["history"]]
    return shortened
