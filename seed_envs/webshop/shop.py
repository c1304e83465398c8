"""One shopping session: WebShop's pages, what can be clicked on them, and their two renderings.

A :class:`ShopSession` is the whole state of one episode (the page shown, the last search and its
results, the product open, the options chosen, the purchase). :meth:`ShopSession.search` and
:meth:`ShopSession.click` are the only ways to change it: the text env calls them directly, the
web server calls them for the browser's requests, so both modes share one state machine.

Every page is a list of :class:`Element` (text, buttons, product links, options). From that list come
both renderings, built to agree:

- text, WebShop's ``observation_mode="text"``: the visible strings joined by ``" [SEP] "``, e.g.
  ``Instruction: [SEP] i need ... [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP]
  B0K48AHKBR [SEP] Kovara Everyday Maxi Dress - ... [SEP] $28.95 [SEP] ...``;
- HTML for the browser, every string escaped (:func:`html.escape`), no script at all;
  :func:`html_to_text` turns a page the browser shows back into the text form.

Click targets are the lowercased button, product-link (ASIN) and option texts, as WebShop's
``text_to_clickable``; ``search[...]`` works where the page has the search bar.
"""
from __future__ import annotations

import html
import os
import re
import threading
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import TYPE_CHECKING

from seed_envs.core import quote_action
from seed_envs.webshop.reward import Reward, get_reward
from seed_envs.webshop.search import PRODUCT_WINDOW, SEARCH_RETURN_N

if TYPE_CHECKING:
    from seed_envs.webshop.catalog import Catalog, Goal, Product
    from seed_envs.webshop.search import ProductSearch

SEP = " [SEP] "
BACK_TO_SEARCH, NEXT, PREV, BUY_NOW = "Back to Search", "Next >", "< Prev", "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")
PAGES = ("search", "results", "item", "item_sub", "done")
CLICKABLE = frozenset({"button", "product", "option"})
SEARCH_PLACEHOLDER = "search[<your query>]"  # how admissible_actions lists the search bar (verl-agent)
MAX_QUERY_CHARS = 512
_ACTION = re.compile(r"(search|click)\s*\[(.*)\]", re.DOTALL | re.IGNORECASE)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Control characters made spaces, lone surrogates made U+FFFD (what a browser's form sends),
    whitespace runs made one space: what both renderings show and what a search receives."""
    text = _SURROGATE.sub("\ufffd", _CONTROL.sub(" ", text))
    return " ".join(text.split())


NO_SEARCH_BAR = "Invalid action: there is no search bar on this page; click[back to search] first."
EMPTY_QUERY = "Invalid action: empty query; use search[your query]."
ENDED = "The purchase is done; the episode has ended."


def bad_action_message(action: str) -> str:
    return (f"Invalid action {quote_action(action)}: use search[query] where the page has a search bar, "
            "or click[...] with a button, product or option shown on the page.")


def not_clickable_message(target: str) -> str:
    return f"Invalid action: {quote_action(target)} is not clickable on this page."


def parse_action(action: str) -> tuple[str, str] | None:
    """``("search", raw query)`` or ``("click", raw target)``; None for anything else."""
    m = _ACTION.fullmatch(action.strip())
    return None if m is None else (m.group(1).lower(), m.group(2))


def normalize_query(raw: str, max_chars: int = MAX_QUERY_CHARS) -> tuple[str, str]:
    """(query as searched, note) — lowercased as WebShop does, cut to ``max_chars`` with a note."""
    query = clean_text(raw[: max_chars * 4]).lower()
    if len(query) > max_chars:
        return query[:max_chars].rstrip(), f"Note: the query was cut to its first {max_chars} characters."
    return query, ""


def normalize_target(raw: str) -> str:
    return clean_text(raw[:1000]).lower()


@dataclass(frozen=True)
class Element:
    """One visible string of a page; ``kind`` says how it renders and whether it can be clicked."""

    kind: str  # heading | text | search | button | product | option_group | option
    text: str
    selected: bool = False
    css: str = ""

    @property
    def target(self) -> str | None:
        return self.text.lower() if self.kind in CLICKABLE else None


@dataclass(frozen=True)
class Result:
    """What one search or click did: ``valid`` false leaves the state unchanged."""

    valid: bool
    message: str = ""
    reward: float = 0.0
    done: bool = False


class Shop:
    """A catalog and its search engine: what every session of one shop shares (read-only).

    The engine is built (or loaded from the disk cache) on first use unless one is given.
    """

    def __init__(self, catalog: Catalog, engine: ProductSearch | None = None,
                 cache_dir: str | os.PathLike | None = None):
        self.catalog = catalog
        self.cache_dir = cache_dir
        self._engine = engine
        self._lock = threading.Lock()

    @property
    def engine(self) -> ProductSearch:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    from seed_envs.webshop.search import catalog_search

                    self._engine = catalog_search(self.catalog, self.cache_dir)
        return self._engine

    def new_session(self, goal: Goal, session_id: str = "", max_query_chars: int = MAX_QUERY_CHARS) -> ShopSession:
        return ShopSession(self, goal, session_id, max_query_chars)


@dataclass
class Purchase:
    asin: str
    options: dict[str, str]
    price: float
    reward: Reward


@dataclass(eq=False)
class ShopSession:
    """The state of one episode's shop; see the module docstring."""

    shop: Shop
    goal: Goal
    session_id: str = ""
    max_query_chars: int = MAX_QUERY_CHARS
    page: str = "search"
    query: str = ""  # the last search
    results: list[int] = field(default_factory=list)  # product indices of the last search
    page_no: int = 1
    asin: str | None = None  # the product open
    options: dict[str, str] = field(default_factory=dict)  # chosen option per group
    sub_page: str | None = None
    purchase: Purchase | None = None
    version: int = 0  # bumped by every change; pages carry it so a browser can tell they are fresh
    last_result: Result | None = None  # of the last search or click (how the env learns what a browser click did)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _cache: tuple[int, list[Element]] | None = field(default=None, repr=False)

    # ------------------------------------------------------------------ reading the state
    @property
    def product(self) -> Product | None:
        return None if self.asin is None else self.shop.catalog.product(self.asin)

    @property
    def done(self) -> bool:
        return self.purchase is not None

    @property
    def score(self) -> float:
        return 0.0 if self.purchase is None else self.purchase.reward.total

    @property
    def has_search_bar(self) -> bool:
        return self.page == "search"

    @property
    def page_count(self) -> int:
        return max(1, -(-len(self.results) // PRODUCT_WINDOW))

    def page_results(self) -> list[Product]:
        start = (self.page_no - 1) * PRODUCT_WINDOW
        products = self.shop.catalog.products
        return [products[i] for i in self.results[start:start + PRODUCT_WINDOW]]

    def elements(self) -> list[Element]:
        if self._cache is None or self._cache[0] != self.version:
            self._cache = (self.version, self._build_elements())
        return self._cache[1]

    def text(self) -> str:
        return SEP.join(e.text for e in self.elements())

    def clickables(self) -> dict[str, Element]:
        """Click target -> element, in page order (a repeated text keeps its last element, as WebShop)."""
        out: dict[str, Element] = {}
        for e in self.elements():
            if e.target is not None:
                out[e.target] = e
        return out

    def admissible_actions(self) -> list[str]:
        actions = [SEARCH_PLACEHOLDER] if self.has_search_bar else []
        return actions + [f"click[{t}]" for t in self.clickables()]

    def html(self) -> str:
        return render_html(self)

    # ------------------------------------------------------------------ changing it
    def apply(self, action: str) -> Result:
        parsed = parse_action(action)
        if parsed is None:
            return Result(False, bad_action_message(action))
        kind, argument = parsed
        if kind == "search":
            query, note = normalize_query(argument, self.max_query_chars)
            result = self.search(query)
            return Result(True, note, result.reward, result.done) if result.valid and note else result
        return self.click(argument)

    def search(self, raw_query: str) -> Result:
        self.last_result = self._search(raw_query)
        return self.last_result

    def click(self, raw_target: str) -> Result:
        self.last_result = self._click(raw_target)
        return self.last_result

    def _search(self, raw_query: str) -> Result:
        if self.done:
            return Result(False, ENDED)
        if not self.has_search_bar:
            return Result(False, NO_SEARCH_BAR)
        query, _ = normalize_query(raw_query, self.max_query_chars)
        if not query:
            return Result(False, EMPTY_QUERY)
        self.query = query
        self.results = self.shop.engine.search(query, SEARCH_RETURN_N)
        self.page, self.page_no = "results", 1
        return self._changed()

    def _click(self, raw_target: str) -> Result:
        if self.done:
            return Result(False, ENDED)
        target = normalize_target(raw_target)
        element = self.clickables().get(target)
        if element is None:
            return Result(False, not_clickable_message(target))
        if element.kind == "product":
            self.asin, self.options, self.page = element.text, {}, "item"
        elif element.kind == "option":
            product = self.product
            assert product is not None
            group = product.option_group_of(element.text)
            assert group is not None
            self.options[group] = element.text
            return self._changed(f"You have clicked {element.text}.")
        elif target == BACK_TO_SEARCH.lower():
            self.page, self.asin, self.options, self.sub_page = "search", None, {}, None
        elif target == NEXT.lower():
            self.page_no += 1
        elif target == PREV.lower():
            if self.page == "results":
                self.page_no -= 1
            elif self.page == "item":
                self.page, self.asin, self.options = "results", None, {}
            else:
                self.page, self.sub_page = "item", None
        elif target in (s.lower() for s in SUB_PAGES):
            self.page, self.sub_page = "item_sub", element.text
        elif target == BUY_NOW.lower():
            return self._buy()
        return self._changed()

    def _buy(self) -> Result:
        product = self.product
        assert product is not None
        reward = get_reward(product, self.goal, product.price, self.options)
        self.purchase = Purchase(product.asin, dict(self.options), product.price, reward)
        self.page = "done"
        self.version += 1
        return Result(True, "", reward.total, True)

    def _changed(self, message: str = "") -> Result:
        self.version += 1
        return Result(True, message)

    # ------------------------------------------------------------------ pages
    def _build_elements(self) -> list[Element]:
        out: list[Element] = []

        def add(kind: str, text: str, selected: bool = False, css: str = "") -> None:
            text = clean_text(text)
            if text:
                out.append(Element(kind, text, selected, css))

        def instruction() -> None:
            add("text", "Instruction:", css="label")
            add("text", self.goal.instruction, css="instruction")

        if self.page == "search":
            add("heading", "WebShop")
            instruction()
            add("search", "Search")
        elif self.page == "results":
            instruction()
            add("button", BACK_TO_SEARCH)
            add("text", f"Page {self.page_no} (Total results: {len(self.results)})", css="label")
            if self.page_no > 1:
                add("button", PREV)
            if self.page_no < self.page_count:
                add("button", NEXT)
            for p in self.page_results():
                add("product", p.asin)
                add("text", p.name, css="title")
                add("text", p.price_tag, css="price")
        elif self.page in ("item", "item_sub"):
            product = self.product
            assert product is not None
            instruction()
            add("button", BACK_TO_SEARCH)
            add("button", PREV)
            if self.page == "item":
                for group, values in product.options:
                    add("option_group", group)
                    for v in values:
                        add("option", v, selected=self.options.get(group) == v)
                add("text", product.name, css="title")
                add("text", f"Price: {product.price_tag}", css="price")
                add("text", f"Rating: {product.rating}")
                for name in SUB_PAGES:
                    add("button", name)
                add("button", BUY_NOW, css="buy")
            elif self.sub_page == "Description":
                add("text", product.description or "N.A.")
            elif self.sub_page == "Features":
                for bullet in product.bullet_points or ("N.A.",):
                    add("text", bullet)
            else:
                for review in product.reviews:
                    add("text", review.title, css="title")
                    add("text", f"{review.score} out of 5 stars")
                    add("text", review.body)
                if not product.reviews:
                    add("text", "N.A.")
        else:  # done
            assert self.purchase is not None
            product = self.shop.catalog.product(self.purchase.asin)
            add("heading", "Thank you for shopping with us!")
            add("text", "Purchased", css="label")
            add("text", product.asin)
            add("text", product.name, css="title")
            add("text", f"Price: {product.price_tag}", css="price")
            chosen = ", ".join(f"{g}: {v}" for g, v in self.purchase.options.items())
            add("text", f"Options: {chosen or 'none'}")
            add("text", "Your score (min 0.0, max 1.0)", css="label")
            add("text", f"{self.purchase.reward.total:.4f}")
        return out


# ---------------------------------------------------------------------------- HTML
_CSS = """
body{font-family:Arial,Helvetica,sans-serif;margin:0;background:#f3f3f3;color:#111;font-size:15px}
main{max-width:900px;margin:0 auto;padding:14px 22px;background:#fff;min-height:100vh}
h1{margin:6px 0 12px;font-size:26px;color:#232f3e}
p{margin:4px 0}
p.label{font-weight:bold;color:#555}
p.instruction{background:#fff8e1;border-left:4px solid #f0a500;padding:6px 10px}
p.title{font-weight:bold;color:#0f4c81}
p.price{color:#b12704}
p.option-name{font-weight:bold;margin-top:10px;text-transform:none}
form{display:inline-block;margin:3px 4px 3px 0}
form.search{display:block;margin:12px 0}
#search_input{width:70%;padding:7px;font-size:15px}
button{font-size:14px;cursor:pointer}
#search_button,.btn{background:#febd69;border:1px solid #a88734;border-radius:3px;padding:5px 12px}
.btn.buy{background:#ffa41c;font-weight:bold}
.product-link{background:none;border:none;color:#007185;text-decoration:underline;padding:0;margin-top:12px}
.option{background:#fff;border:1px solid #888;border-radius:14px;padding:4px 11px}
.option.selected{border:2px solid #e77600;background:#fef3e2}
"""


def _e(text: str) -> str:
    return html.escape(text, quote=True)


def render_html(session: ShopSession) -> str:
    """The page as HTML: every string escaped, forms that POST to the session's own URLs, no script."""
    base = f"/s/{session.session_id}"
    parts = []
    for el in session.elements():
        text = _e(el.text)
        if el.kind == "heading":
            parts.append(f"<h1>{text}</h1>")
        elif el.kind == "text":
            parts.append(f'<p class="{el.css}">{text}</p>' if el.css else f"<p>{text}</p>")
        elif el.kind == "option_group":
            parts.append(f'<p class="option-name">{text}</p>')
        elif el.kind == "search":
            parts.append(f'<form class="search" method="post" action="{_e(base)}/search">'
                         f'<input id="search_input" name="query" type="text" value="{_e(session.query)}" '
                         f'maxlength="{session.max_query_chars}" autocomplete="off" aria-label="search query">'
                         f'<button id="search_button" type="submit">{text}</button></form>')
        else:
            css = {"button": "btn", "product": "product-link", "option": "option"}[el.kind]
            if el.css:
                css += f" {el.css}"
            if el.selected:
                css += " selected"
            pressed = f' aria-pressed="{"true" if el.selected else "false"}"' if el.kind == "option" else ""
            block = "<br>" if el.kind == "product" else ""
            parts.append(f'{block}<form method="post" action="{_e(base)}/click"><button class="{css}" type="submit" '
                         f'name="target" value="{_e(el.target or "")}"{pressed}>{text}</button></form>')
    title = "WebShop" if not session.query else f"WebShop: {session.query}"
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{_CSS}</style></head>\n"
            f'<body data-page="{session.page}" data-version="{session.version}"><main>\n{body}\n</main></body></html>\n')


class _VisibleText(HTMLParser):
    SKIP = frozenset({"head", "script", "style", "title", "template", "noscript"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.skip = 0
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.SKIP:
            self.skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.skip:
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        if not self.skip:
            text = clean_text(data)
            if text:
                self.texts.append(text)


def html_to_text(page: str) -> str:
    """A page's visible strings joined by ``" [SEP] "`` (WebShop's ``convert_html_to_text(simple=True)``)."""
    parser = _VisibleText()
    parser.feed(page)
    parser.close()
    return SEP.join(parser.texts)
