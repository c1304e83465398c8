"""WebShop hindsight rules: the shopping workflow, or why the purchase missed.

A success gives the workflow (search with the product type and key attributes, open a matching
result, click the options the instruction names, buy), without the episode's query, product or
option values. A failure is classified from the pages the agent saw (WebShop's text form, strings
joined by ``[SEP]``), the purchase page and, in expert demonstrations, the expert's choice at the
moment of buying: never bought, mostly invalid clicks, over the price limit, options not chosen, or
the wrong product.
"""
from __future__ import annotations

import re

from seed_envs.hindsight import EpisodeRecord, HindsightRule, avoidance, invalid_indices, swap_phrases, workflow

_SEP = "[SEP]"
_BUY = "click[buy now]"
_NAVIGATION = ("buy now", "< prev", "back to search", "next >", "description", "features", "reviews")
_PRICE_LIMIT = re.compile(r"price lower than\s*\$?\s*([0-9][0-9,]*(?:\.[0-9]+)?)", re.IGNORECASE)
_PRICE = re.compile(r"Price:\s*\$\s*([0-9][0-9,]*(?:\.[0-9]+)?)")

SUCCESS_RULES = {
    "options": "Search the product type and key attributes, open a match, click each named option, then buy now.",
    "no_options": "Search the product type and key attributes, open a matching title, check the price, then buy now.",
}
SUCCESS_SUMMARIES = {
    "options": "Bought the right item.",
    "no_options": "Bought the right item.",
}
FAILURE_RULES = {
    "no_purchase": "Do not browse until time runs out: open the best match, choose its options, buy now.",
    "invalid": "Click only buttons on the current page, and search only from the search page.",
    "price": "Check the price against the instruction's limit before buying; go back if it costs more.",
    "options": "On the product page, click every option the instruction names, like color or size, before buying.",
    "wrong_product": "Before buying, check the title matches the instruction's type and attributes; otherwise go back.",
}
FAILURE_SUMMARIES = {
    "no_purchase": "Failed: never bought.",
    "invalid": "Failed: invalid clicks.",
    "price": "Failed: over the price limit.",
    "options": "Failed: options not chosen.",
    "wrong_product": "Failed: wrong product.",
}


def _segments(page: str) -> list[str]:
    return [s.strip() for s in page.split(_SEP)]


def _clicked(action: str) -> str | None:
    m = re.fullmatch(r"\s*click\[(.*)\]\s*", action, re.IGNORECASE | re.DOTALL)
    return m.group(1).strip().lower() if m else None


def is_option(clicked: str) -> bool:
    """Whether a clicked string is a product option (not a button, not a product's ASIN: ten letters
    and digits, at least one a digit, as WebShop's ``B0...`` ids)."""
    asin = re.fullmatch(r"[0-9a-z]{10}", clicked) is not None and any(ch.isdigit() for ch in clicked)
    return clicked not in _NAVIGATION and not asin


def page_options(page: str) -> list[str]:
    """The option strings (group names and values) of a product page, lower-cased: what lies between
    the ``< Prev`` button and the product title (the string right before ``Price: $...``)."""
    segs = _segments(page)
    low = [s.lower() for s in segs]
    if "< prev" not in low:
        return []
    start = low.index("< prev") + 1
    price = next((i for i in range(start, len(segs)) if segs[i].startswith("Price:")), None)
    return [] if price is None else low[start:price - 1]


def bought(record: EpisodeRecord) -> int | None:
    """The step that bought (None: the agent never bought)."""
    for i, (action, bad) in enumerate(zip(record.actions, record.invalid)):
        if not bad and action.strip().lower() == _BUY:
            return i
    return None


def over_price(record: EpisodeRecord) -> bool:
    """Whether the purchased product costs more than the instruction's limit."""
    limit = _PRICE_LIMIT.search(record.task)
    price = _PRICE.search(record.final_observation)
    if not limit or not price:
        return False
    return float(price.group(1).replace(",", "")) >= float(limit.group(1).replace(",", ""))


def missed_options(record: EpisodeRecord, buy_step: int) -> bool:
    """Whether the agent bought before choosing an option it should have: the expert would have
    clicked an option instead of buying, or the page offered options the instruction names and the
    purchase has none."""
    expert = record.expert_at(buy_step)
    wanted = _clicked(expert) if expert else None
    if wanted is not None and is_option(wanted):
        return True
    named = [o for o in page_options(record.observations[buy_step])
             if re.search(rf"\b{re.escape(o)}\b", record.task.lower())]
    return bool(named) and "options: none" in record.final_observation.lower()


def failure_kind(record: EpisodeRecord) -> str:
    buy_step = bought(record)
    if buy_step is None:
        bad = invalid_indices(record)
        return "invalid" if bad and len(bad) * 2 >= len(record.actions) else "no_purchase"
    if over_price(record):
        return "price"
    if missed_options(record, buy_step):
        return "options"
    return "wrong_product"


def hindsight_rule(record: EpisodeRecord) -> HindsightRule:
    if record.success:
        buy_step = bought(record)
        chose = any(o is not None and is_option(o) for o in map(_clicked, record.valid_actions()))
        offered = buy_step is not None and bool(page_options(record.observations[buy_step]))
        return workflow("options" if chose or offered else "no_options", SUCCESS_RULES, SUCCESS_SUMMARIES)
    return avoidance(failure_kind(record), FAILURE_RULES, FAILURE_SUMMARIES)


# ------------------------------------------------------------------ the wrong-rule content control
# The phrases the rules turn on, mapped to advice that buys the wrong thing: skip the options, ignore the
# price and the title, buy the first result unopened (longer phrases first).
_WRONG_PHRASES = (
    ("click every option the instruction names", "click no option, whatever the instruction names"),
    ("click each named option", "skip every option"), ("check the price against", "ignore the price and"),
    ("check the title matches", "never check the title against"), ("check the price", "ignore the price"),
    ("open a matching title", "take the first title"), ("open the best match", "open the first result"),
    ("open a match", "take the first result"), ("go back if it costs more", "buy even if it costs more"),
    ("otherwise go back", "and buy it anyway"), ("before buying", "after buying"),
)
#: A skill that names none of those phrases becomes this losing rule (WebShop's categories share it).
WRONG_RULE = "Buy the first search result at once, without opening it, choosing options or checking the price."


def wrong_rule(text: str, category: str) -> str:
    """A skill of the same format whose advice buys the wrong item: options skipped, price and title
    unchecked, the first result taken (:data:`_WRONG_PHRASES`); a skill that names none of them becomes
    :data:`WRONG_RULE`. The product category does not change it."""
    new, changed = swap_phrases(text, _WRONG_PHRASES)
    return new if changed else WRONG_RULE
