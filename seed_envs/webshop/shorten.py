"""WebShop's rule for a prompt over the model's budget: shorter pages, least information lost first.

A page repeats the whole instruction (already the prompt's task line), lists ten results with long
titles, and the prompt shows the last pages too. ``wrappers.PromptRenderer`` calls :func:`shorten` with
growing ``level`` while the prompt is over budget (``agent_defaults.shorten``):

1. the instruction repeated on every page is left out (the task line keeps it);
2. past pages are cut to their first 40 words;
3. result titles on the current page are cut to their first 6 words (ids, prices and the buttons stay);
4. none left: the renderer then drops past pages, oldest first, and an episode still over ends truncated.

The admissible actions are never cut: every listed click stays a click the agent may choose.
"""
from __future__ import annotations

import re
from typing import Any

SEP = " [SEP] "
_INSTRUCTION = re.compile(r"(?:WebShop \[SEP\] )?Instruction: \[SEP\] .*? \[SEP\] ")
_PAST_WORDS = 40
_TITLE_WORDS = 6
_PRODUCT_ID = re.compile(r"^[A-Z0-9]{10}$")


def without_instruction(page: str) -> str:
    return _INSTRUCTION.sub("", page, count=1)


def _cut_words(text: str, words: int) -> str:
    parts = text.split()
    return text if len(parts) <= words else " ".join(parts[:words]) + " ..."


def short_titles(page: str, words: int = _TITLE_WORDS) -> str:
    """Each result title (the field after a product id) cut to ``words`` words."""
    fields = page.split(SEP)
    for k in range(1, len(fields)):
        if _PRODUCT_ID.match(fields[k - 1].strip()):
            fields[k] = _cut_words(fields[k], words)
    return SEP.join(fields)


def shorten(parts: dict[str, Any], level: int) -> dict[str, Any] | None:
    """``parts`` (``observation``, ``history``, ``admissible``) shortened up to ``level``; None past the last."""
    if level > 3:
        return None
    observation = without_instruction(parts["observation"])
    history = [dict(h, observation=without_instruction(h["observation"])) for h in parts["history"]]
    if level >= 2:
        history = [dict(h, observation=_cut_words(h["observation"], _PAST_WORDS)) for h in history]
    if level >= 3:
        observation = short_titles(observation)
    return {**parts, "observation": observation, "history": history}
