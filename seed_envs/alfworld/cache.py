"""Per-game caches that make a reset of a seen game cheap.

Profiling alfworld's own reset (textworld 1.7's ``PddlEnv``) shows ~85% of the time in
``fast_downward.pddl2sas``: the PDDL -> SAS translation runs four times per reset (a plain and an
"optimized" translation in ``load``, the same two again in ``reset``), and most of the rest is the
tatsu parse of the grammar. Both are pure functions of the game file's text, so they are computed
once per process and reused:

- :func:`translate` memoizes ``pddl2sas(domain, problem, optimize)`` -> ``(task, sas)``. The task
  object is only read by textworld (actions, types, objects, init facts), never mutated, so one
  copy is shared safely; the C library still loads the SAS text into a fresh state on every reset.
- :func:`game_logic` memoizes textworld's ``GameLogic(domain, grammar)``. ``PddlState`` adds the
  task's types to ``logic.types`` on every reset; that is idempotent (duplicates are ignored).
- Its grammar becomes a :func:`cached_grammar_class` instance: textworld re-parses (tatsu) every
  template string and rule condition at every derivation, i.e. for every applicable action at
  every step and reset; the subclass parses each string once and hands out deep copies, which is
  what textworld's own code does with the rules it stores. Derivations are unchanged.

Both caches are LRU-bounded (a translated task of a big kitchen is a few MB) and keyed by a
blake2b digest of the text, so two game files with the same content share an entry.
"""
from __future__ import annotations

import hashlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from functools import lru_cache
from typing import Any

#: Games whose translations are kept per process (an eval panel of 134-140 games fits).
MAX_CACHED_GAMES = 256

#: Serialises what the engine shares across a process's threads (envs played in threads by
#: ``seed-envs eval --concurrency N``): fast-downward's PDDL translator (module-level options, and it
#: rewrites ``sys.argv``), these caches, and the type set of a GameLogic that games of one domain share.
#: Only loads and first resets of a game take it; steps run in parallel. (textworld's tatsu parsers, used
#: at every step, are made per-thread instead: :func:`thread_local_parsers`.)
ENGINE_LOCK = threading.RLock()


class LRUCache:
    """A small least-recently-used map; ``get_or_compute`` is all the callers need."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._data: OrderedDict[Hashable, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        if key in self._data:
            self._data.move_to_end(key)
            self.hits += 1
            return self._data[key]
        self.misses += 1
        value = compute()
        self._data[key] = value
        if len(self._data) > self.maxsize:
            self._data.popitem(last=False)
        return value

    def clear(self) -> None:
        self._data.clear()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._data)


_TRANSLATIONS = LRUCache(2 * MAX_CACHED_GAMES)  # two translations (plain, optimized) per game
_LOGICS = LRUCache(MAX_CACHED_GAMES)


def digest(*texts: str) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for text in texts:
        data = text.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))  # length-prefixed: ("ab", "c") != ("a", "bc")
        h.update(data)
    return h.digest()


def _pddl2sas_keeping_argv(domain: str, problem: str, optimize: bool) -> tuple[Any, str]:
    import fast_downward

    # fast_downward's translator overwrites sys.argv (to feed its option parser); put it back so
    # the host program (pytest, argparse-based CLIs) does not see a changed command line.
    saved = list(sys.argv)
    try:
        return fast_downward.pddl2sas(domain, problem, verbose=False, optimize=optimize)
    finally:
        sys.argv[:] = saved


def translate(domain: str, problem: str, optimize: bool) -> tuple[Any, str]:
    """``fast_downward.pddl2sas(domain, problem, optimize=optimize)``, computed once per text."""
    key = (digest(domain, problem), optimize)
    with ENGINE_LOCK:
        return _TRANSLATIONS.get_or_compute(key, lambda: _pddl2sas_keeping_argv(domain, problem, optimize))


def game_logic(domain: str, grammar: str) -> Any:
    """textworld's ``GameLogic(domain, grammar)`` (the tatsu-parsed grammar), computed once per text."""

    def build() -> Any:
        from textworld.envs.pddl import logic as pddl_logic

        logic = pddl_logic.GameLogic(domain=domain, grammar=grammar)
        logic.grammar.__class__ = cached_grammar_class()  # same data, cached parsing
        return logic

    with ENGINE_LOCK:
        return _LOGICS.get_or_compute(digest(domain, grammar), build)


class ThreadLocalParser:
    """Stands in for one of textworld's module-level tatsu parsers: each thread parses with its own.

    A tatsu parser keeps its rule stack and memo tables on the instance, so two threads parsing with
    textworld's single ``_PARSER`` corrupt each other's state ("pop from empty list", ``KeyError: (7, 0)``
    in tatsu's ``contexts.py``). textworld parses at every step (rule conditions, templates), so a lock
    would serialise whole episodes; a parser per thread costs one construction per thread.
    """

    def __init__(self, factory: Callable[[], Any]):
        self._factory = factory
        self._local = threading.local()

    def parse(self, *args: Any, **kwargs: Any) -> Any:
        parser = getattr(self._local, "parser", None)
        if parser is None:
            parser = self._local.parser = self._factory()
        return parser.parse(*args, **kwargs)


@lru_cache(maxsize=1)
def thread_local_parsers() -> None:
    """Put a :class:`ThreadLocalParser` in place of textworld's two module-level parsers (the grammar's and
    the logic's), once per process, before any engine parses."""
    from textworld import logic
    from textworld.envs.pddl import textgen

    textgen._PARSER = ThreadLocalParser(
        lambda: textgen.CSGParser(semantics=textgen.CSGModelBuilderSemantics(), parseinfo=True))
    logic._PARSER = ThreadLocalParser(
        lambda: logic.GameLogicParser(semantics=logic.GameLogicModelBuilderSemantics(), parseinfo=True))


@lru_cache(maxsize=1)
def cached_grammar_class() -> type:
    """textworld's ``ContextSensitiveGrammar`` with memoized parsing (built lazily: textworld import)."""
    from copy import deepcopy

    from textworld.envs.pddl import textgen
    from textworld.logic import Rule

    @lru_cache(maxsize=4096)
    def parse_symbols(text: str) -> list:
        return textgen._parse_and_convert(text, rule_name="symbols")

    @lru_cache(maxsize=4096)
    def parse_query(text: str) -> Any:
        return Rule.parse_conjunctive_query(text)

    class CachedContextSensitiveGrammar(textgen.ContextSensitiveGrammar):
        # Both methods are textworld 1.7's, with the parses memoized.
        def replace(self, start: Any) -> list:
            rules = self._rules.get(str(start))
            if not rules:
                raise textgen.CSGUnknownSymbolError(start)

            def applicable(rule: Any) -> bool:
                if not rule.condition:
                    return True
                query = parse_query(rule.condition)
                return any(True for _ in start.context["state"].all_assignments(query, start.context["mapping"]))

            rule = next(filter(applicable, rules))
            symbols = deepcopy(rule.rhs)
            for symbol in symbols:
                symbol.context = textgen.copy_context(start.context)
            return symbols

        def derive(self, start: str, context: dict | None = None) -> str:
            context = {} if context is None else context
            derivation = deepcopy(parse_symbols(start))[::-1]  # a derivation stack
            for symbol in derivation:
                symbol.context = textgen.copy_context(context)
            derived = []
            while derivation:
                symbol = derivation.pop()
                if isinstance(symbol, textgen.TerminalSymbol):
                    derived.append(symbol)
                elif isinstance(symbol, textgen.NonterminalSymbol):
                    derivation += self.replace(symbol)[::-1]
                elif isinstance(symbol, (textgen.ConditionalSymbol, textgen.EvalSymbol, textgen.ListSymbol)):
                    derivation += symbol.derive()[::-1]
                else:
                    raise NotImplementedError(f"Unknown symbol: {type(symbol)}")
            return "".join(map(str, derived))

    return CachedContextSensitiveGrammar


def cache_stats() -> dict[str, int]:
    """Hits, misses and sizes of both caches (for benchmarks and tests)."""
    return {
        "translation_hits": _TRANSLATIONS.hits,
        "translation_misses": _TRANSLATIONS.misses,
        "translations": len(_TRANSLATIONS),
        "logic_hits": _LOGICS.hits,
        "logic_misses": _LOGICS.misses,
        "logics": len(_LOGICS),
    }


def clear_caches() -> None:
    _TRANSLATIONS.clear()
    _LOGICS.clear()
