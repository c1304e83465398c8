"""The WebShop oracle: search with the instruction, open the target, choose the goal options, buy.

It reads the goal (the target ASIN and goal options) and the session state, so it plans from wherever
the episode is. It pages forward to the target when the target is among the search's top 50 and,
when it is not, searches again with the target's title. On the generated catalog every goal option
is one of the target's option values, so the purchase scores 1.0; on real data a goal option is
matched to the target's closest option value (WebShop's fuzzy match), which is the best possible.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from seed_envs.core import Expert
from seed_envs.webshop.reward import normalize_color, token_set_ratio
from seed_envs.webshop.search import PRODUCT_WINDOW
from seed_envs.webshop.shop import BACK_TO_SEARCH, BUY_NOW, NEXT, PREV, normalize_query

if TYPE_CHECKING:
    from seed_envs.webshop.catalog import Goal, Product
    from seed_envs.webshop.env import WebShopEnv


def goal_choices(product: Product, goal: Goal) -> dict[str, str]:
    """The option value to click in each group of ``product`` for ``goal`` (best fuzzy match per goal option)."""
    choices: dict[str, str] = {}
    for i, wanted in enumerate(goal.options):
        group_hint = goal.option_names[i] if i < len(goal.option_names) else ""
        best, best_key = None, None
        for group, values in product.options:
            for v in values:
                key = (v == wanted, group == group_hint,
                       token_set_ratio(normalize_color(v), normalize_color(wanted)), -abs(len(v) - len(wanted)))
                if best_key is None or key > best_key:
                    best, best_key = (group, v), key
        if best is not None and (best_key[0] or best_key[2] > 85):
            choices.setdefault(best[0], best[1])
    return choices


def make_expert(env: WebShopEnv) -> Expert:
    """A callable ``(obs, info) -> action`` reading ``env``'s goal and shop session."""

    def act(obs: dict, info: dict) -> str:
        session = env.session
        if session is None:
            raise RuntimeError("expert: call reset() first")
        goal = session.goal
        target = goal.asin
        catalog = session.shop.catalog
        product = catalog.product(target)
        instruction_query, _ = normalize_query(goal.instruction, session.max_query_chars)
        found = target in {catalog.products[i].asin for i in session.results}
        if session.page == "search":
            if session.query == instruction_query and not found:
                return f"search[{product.name}]"  # not in the top 50: search the title
            return f"search[{goal.instruction}]"
        if session.page == "results":
            if not found:
                return f"click[{BACK_TO_SEARCH.lower()}]"
            rank = [catalog.products[i].asin for i in session.results].index(target)
            wanted_page = rank // PRODUCT_WINDOW + 1
            if wanted_page > session.page_no:
                return f"click[{NEXT.lower()}]"
            if wanted_page < session.page_no:
                return f"click[{PREV.lower()}]"
            return f"click[{target.lower()}]"
        if session.page == "item_sub" or (session.page == "item" and session.asin != target):
            return f"click[{PREV.lower()}]"
        if session.page == "item":
            for group, value in goal_choices(product, goal).items():
                if session.options.get(group) != value:
                    return f"click[{value}]"
            return f"click[{BUY_NOW.lower()}]"
        return f"click[{BUY_NOW.lower()}]"  # the episode is over; any action is refused

    return act
