"""WebShop's reward (Yao et al., 2022, section 3.2; ``web_agent_site/engine/goal.py``), as pure functions.

    total = r_type * (matched attributes + matched options + price ok) / (#attributes + #options + 1)

- ``r_type`` (:func:`type_reward`): 1.0 when the bought product is the goal's kind of product: its
  search query equals the goal's, or at least two parts of the category paths agree, or more than
  0.2 of the goal title's nouns are in the bought title. Else 0.5; 0.1 when under 0.1 of the nouns
  match; 0.0 when none does.
- attributes (:func:`attribute_reward`): a goal attribute matches when an attribute of the product
  matches it fuzzily (``token_set_ratio > 85``) or it occurs in the title, bullet points or
  description.
- options (:func:`option_reward`): a goal option matches when a chosen option matches it fuzzily,
  after :func:`normalize_color` (both reduced to the first known colour word they contain).
- price (:func:`price_reward`): the price paid is at most ``price_upper``.

Fuzzy matching is ``thefuzz.fuzz.token_set_ratio`` (what WebShop calls), reimplemented here on
rapidfuzz's definition (Indel similarity of the sorted token intersection and differences) so no
extra package is needed. WebShop keeps only nouns and proper nouns of the titles (spaCy tags);
without spaCy, :func:`type_words` keeps every word that is not a stopword, a number or a common
adjective, which agrees with spaCy on product titles closely enough for the thresholds above.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

FUZZY_THRESHOLD = 85  # WebShop: a fuzzy match needs token_set_ratio > 85

# web_agent_site/engine/normalize.py
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush",
    "bordeaux", "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah",
    "chestnut", "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal",
    "dark", "denim", "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass",
    "gray", "green", "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light",
    "lilac", "lime", "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom",
    "mustard", "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow",
    "red", "rose", "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone",
    "stonewash", "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white",
    "wine", "yellow",
)

# Words a part-of-speech tagger would not call nouns in a product title.
_NOT_NOUNS = frozenset("""
a an and or the of for with without in on at to by from as is are be it its this that these those your our my
you we i me us he she they them their his her not no nor but so if then than too very more most less least all
any each every both some such only own same other into onto over under up down out off about above below after
before again further once here there when where why how what which who whom can will just should now also per
new best great good perfect premium classic modern vintage casual everyday essential signature professional daily
gentle luxe pure pro max lite plus ultra smart original homestyle gourmet artisan select farmhouse industrial
scandinavian contemporary rustic soft hard light dark heavy high low long short large small big little mini extra
free natural organic fresh easy quick fast slow slim thin thick wide narrow warm cool cold hot dry wet clean safe
strong durable comfortable adjustable portable compact lightweight waterproof resistant sensitive healthy
delicious sweet spicy salty sour bitter mild rich full half double single multi ready non anti top
""".split())
_WORD = re.compile(r"[a-z]+")


_LATIN1 = dict.fromkeys(range(128, 256))


def full_process(text: str) -> str:
    """thefuzz's ``full_process(force_ascii=True)``: drop code points 128-255, every character that is
    not a letter or digit becomes a space, lowercase, strip (rapidfuzz's ``default_process``)."""
    return re.sub(r"[\W_]", " ", text.translate(_LATIN1)).lower().strip()


def lcs_length(a: str, b: str) -> int:
    """Length of the longest common subsequence (bit-parallel, Allison-Dix / Hyyrö)."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return 0
    masks: dict[str, int] = {}
    for i, ch in enumerate(a):
        masks[ch] = masks.get(ch, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for ch in b:
        u = v & masks.get(ch, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - bin(v).count("1")


def indel_distance(a: str, b: str) -> int:
    return len(a) + len(b) - 2 * lcs_length(a, b)


def ratio(a: str, b: str) -> float:
    """rapidfuzz's ``fuzz.ratio``: normalised Indel similarity, 0-100 (two empty strings: 100)."""
    total = len(a) + len(b)
    return 100.0 if total == 0 else 100.0 * (1 - indel_distance(a, b) / total)


def token_set_ratio(a: str, b: str) -> int:
    """``thefuzz.fuzz.token_set_ratio(a, b)``: 100 when one token set contains the other, else the best
    ratio of the sorted intersection against intersection + each side's remaining tokens; rounded."""
    tokens_a, tokens_b = set(full_process(a).split()), set(full_process(b).split())
    if not tokens_a or not tokens_b:
        return 0
    intersect = tokens_a & tokens_b
    diff_ab, diff_ba = tokens_a - tokens_b, tokens_b - tokens_a
    if intersect and (not diff_ab or not diff_ba):
        return 100
    ab, ba = " ".join(sorted(diff_ab)), " ".join(sorted(diff_ba))
    sect_len = len(" ".join(sorted(intersect)))
    sep = 1 if sect_len else 0
    sect_ab_len, sect_ba_len = sect_len + sep + len(ab), sect_len + sep + len(ba)
    result = 100.0 * (1 - indel_distance(ab, ba) / (sect_ab_len + sect_ba_len))
    if sect_len:
        result = max(result,
                     100.0 * (1 - (sep + len(ab)) / (sect_len + sect_ab_len)),
                     100.0 * (1 - (sep + len(ba)) / (sect_len + sect_ba_len)))
    return int(round(result))


def fuzzy_match(a: str, b: str) -> bool:
    return token_set_ratio(a, b) > FUZZY_THRESHOLD


def normalize_color(text: str) -> str:
    """WebShop's ``normalize_color``: the first colour of :data:`COLOR_SET` found in the text, else the text."""
    for color in COLOR_SET:
        if color in text:
            return color
    return text


def type_words(name: str) -> list[str]:
    """The nouns of a title, approximately (see the module docstring); repeats kept, as WebShop counts them."""
    return [w for w in _WORD.findall(name.lower()) if len(w) > 1 and w not in _NOT_NOUNS]


@dataclass(frozen=True)
class TypeReward:
    r_type: float
    query_match: bool
    category_match: bool
    title_score: float


def _get(obj: Any, *names: str) -> Any:
    """A field of a Product/Goal object or of a WebShop-style dict (``Title``/``name`` ...)."""
    for name in names:
        if isinstance(obj, Mapping):
            if name in obj:
                return obj[name]
        elif hasattr(obj, name):
            return getattr(obj, name)
    raise KeyError(f"none of {names} in {type(obj).__name__}")


def type_reward(purchased: Any, goal: Any) -> TypeReward:
    """Is the bought product the goal's kind of product? (WebShop's ``get_type_reward``.)"""
    query_match = _get(purchased, "query") == _get(goal, "query")
    bought_path = {x.strip() for x in _get(purchased, "product_category").split("›")}
    goal_path = {x.strip() for x in _get(goal, "product_category").split("›")}
    category_match = len(bought_path & goal_path) >= 2
    bought_words = type_words(_get(purchased, "name", "Title"))
    goal_words = type_words(_get(goal, "name"))
    title_score = 0.2 if not goal_words else len(set(bought_words) & set(goal_words)) / len(goal_words)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return TypeReward(r_type, query_match, category_match, title_score)


def attribute_reward(purchased: Any, goal_attributes: Sequence[str]) -> tuple[float, int]:
    """(fraction, count) of goal attributes the product has (WebShop's ``get_attribute_reward``)."""
    attrs = list(_get(purchased, "attributes", "Attributes"))
    title = _get(purchased, "name", "Title").lower()
    bullets = " ".join(_get(purchased, "bullet_points", "BulletPoints")).lower()
    description = _get(purchased, "description", "Description").lower()
    matches = 0
    for g in goal_attributes:
        if any(fuzzy_match(p, g) for p in attrs) or g in title or g in bullets or g in description:
            matches += 1
    return (matches / len(goal_attributes) if goal_attributes else 0.0), matches


def option_reward(purchased_options: Iterable[str], goal_options: Iterable[str]) -> tuple[float | None, int]:
    """(fraction or None without goal options, count) of goal options chosen (``get_option_reward``)."""
    bought = [normalize_color(o) for o in purchased_options]
    wanted = [normalize_color(o) for o in goal_options]
    matches = sum(1 for g in wanted if any(fuzzy_match(p, g) for p in bought))
    return (matches / len(wanted) if wanted else None), matches


def price_reward(price: float, price_upper: float | None) -> bool | None:
    """Whether the price is within the goal's bound; None when the goal has no bound."""
    if price_upper is None or price_upper <= 0:
        return None
    return price <= price_upper


@dataclass(frozen=True)
class Reward:
    """Every factor of one purchase's reward; ``total`` is the score."""

    total: float
    r_type: float
    r_att: float
    r_option: float | None
    r_price: bool | None
    attribute_matches: int
    option_matches: int
    title_score: float
    query_match: bool
    category_match: bool

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def get_reward(purchased: Any, goal: Any, price: float, options: Mapping[str, str] | Iterable[str]) -> Reward:
    """WebShop's ``get_reward``: ``options`` are the chosen values ({group: value} or a list of values)."""
    chosen = list(options.values()) if isinstance(options, Mapping) else list(options)
    t = type_reward(purchased, goal)
    goal_attrs = list(_get(goal, "attributes"))
    goal_options = list(_get(goal, "options", "goal_options"))
    r_price = price_reward(price, _get(goal, "price_upper"))
    r_att, n_att = attribute_reward(purchased, goal_attrs)
    r_option, n_opt = option_reward(chosen, goal_options)
    denominator = len(goal_attrs) + len(goal_options) + (r_price is not None)
    total = (n_att + n_opt + (1 if r_price else 0)) / denominator if denominator else 0.0
    return Reward(total * t.r_type, t.r_type, r_att, r_option, r_price, n_att, n_opt, t.title_score,
                  t.query_match, t.category_match)
