"""The real ALFWorld text engine: textworld's ``PddlEnv`` with alfworld's wrappers, plus caching.

The engine stack is what alfworld's ``AlfredTWEnv`` plays: ``AlfredInfos(AlfredDemangler(PddlEnv))``
(the demangler turns ``Apple_bar__plus_00_dot_10...`` into ``apple 1``). Two classes replace
textworld's ``PddlEnv`` / ``PddlState`` by subclasses that take the PDDL -> SAS translation and the
parsed grammar from :mod:`seed_envs.alfworld.cache` instead of recomputing them on every ``load``
and ``reset``; everything else (C planner state, applicable actions, grammar derivation, feedback
text) is textworld's own code, so observations and admissible commands are identical.

alfworld and textworld are imported inside functions: ``import seed_envs`` must stay light, and
importing ``alfworld`` has side effects (it creates ``~/.cache/alfworld`` and sets ``ALFWORLD_DATA``).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from seed_envs.alfworld import cache
from seed_envs.alfworld.games import GameFileError, game_format, read_game_file

BANNER = "-= Welcome to TextWorld, ALFRED! =-"
TASK_PREFIX = "Your task is to: "
NOTHING_HAPPENS = "Nothing happens."
HIDDEN_COMMANDS = frozenset({"help"})  # verl-agent drops 'help' from the admissible actions


def import_alfworld_module(name: str) -> Any:
    """Import an alfworld module without its import-time side effect on ``ALFWORLD_DATA``.

    ``import alfworld`` sets ``os.environ["ALFWORLD_DATA"]`` to ``~/.cache/alfworld`` when it is
    unset; left in place, every later env in the process would think real data was configured.
    """
    import importlib

    before = os.environ.get("ALFWORLD_DATA")
    try:
        return importlib.import_module(name)
    finally:
        if before is None:
            os.environ.pop("ALFWORLD_DATA", None)
        else:
            os.environ["ALFWORLD_DATA"] = before


@lru_cache(maxsize=1)
def engine_classes() -> tuple[type, type]:
    """(CachedPddlEnv, CachedPddlState), built on first use so textworld is imported lazily."""
    import fast_downward
    import textworld
    from textworld.core import GameState
    from textworld.envs.pddl import PddlEnv
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.logic import Proposition, Variable

    cache.thread_local_parsers()  # envs in threads must not share textworld's parsers

    class CachedPddlState(pddl_logic.PddlState):
        """textworld 1.7's ``PddlState.__init__`` with the two translations taken from the cache."""

        def __init__(self, downward_lib: Any, pddl_problem: str, logic: Any):
            from collections import Counter, defaultdict

            self._facts = defaultdict(set)
            self._vars_by_name = {}
            self._vars_by_type = defaultdict(set)
            self._var_counts = Counter()
            self._logic = logic
            self.downward_lib = downward_lib
            self.pddl_problem = pddl_problem
            self.task, self.sas = cache.translate(logic.domain, pddl_problem, optimize=False)
            _, self.sas_replan = cache.translate(logic.domain, pddl_problem, optimize=True)
            self._actions = {a.name: a for a in self.task.actions}
            with cache.ENGINE_LOCK:  # the logic object is shared by every game of the domain, in any thread
                for type_ in self.task.types:
                    try:
                        logic.types.add(textworld.logic.Type(type_.name, type_.supertype_names))
                    except ValueError:
                        pass  # already known: the logic object is shared between resets
            self.downward_lib.load_sas(self.sas.encode("utf-8"))
            self.downward_lib.load_sas_replan(self.sas_replan.encode("utf-8"))
            self.name2type = {o.name: o.type_name for o in self.task.objects}
            self.add_facts(self._initial_facts())
            atoms = (pddl_logic.Atom * self.downward_lib.get_state_size())()
            self.downward_lib.get_state(atoms)
            facts = [atom.get_fact(self.name2type) for atom in atoms]
            self.add_facts([fact for fact in facts if not fact.is_negation])

        def _initial_facts(self) -> list:
            # The static part of the initial state (textworld's _atom2proposition over task.init).
            facts = []
            for atom in self.task.init:
                if isinstance(atom, fast_downward.translate.pddl.conditions.Atom):
                    if atom.predicate != "=":
                        facts.append(Proposition(atom.predicate, [Variable(a, self.name2type[a]) for a in atom.args]))
                elif isinstance(atom, fast_downward.translate.pddl.f_expression.Assign):
                    name = f"{atom.expression.value}"
                    if atom.fluent.symbol != "total-cost" and not name.isdigit():
                        facts.append(Proposition(name, [Variable(a, self.name2type[a]) for a in atom.fluent.args]))
            return facts

    class CachedPddlEnv(PddlEnv):
        """textworld's ``PddlEnv`` reading game files with clear errors and building cached states."""

        def load(self, filename_or_data: Any) -> None:
            if isinstance(filename_or_data, (str, os.PathLike)):
                data = read_game_file(filename_or_data)
                self._game_file = str(filename_or_data)
            else:
                data, self._game_file = filename_or_data, None
            self._game_data = data
            self.walkthrough = data.get("walkthrough", None)
            self._logic = cache.game_logic(data["pddl_domain"], data["grammar"])
            self._pddl_state = CachedPddlState(self.downward_lib, data["pddl_problem"], self._logic)
            self._entity_infos = self._get_entity_infos()

        def reset(self) -> Any:
            # textworld 1.7's PddlEnv.reset, building the cached state. The "walkthrough" extra is
            # not requested: for a game without one, textworld would run the planner on every reset.
            self._pddl_state = CachedPddlState(self.downward_lib, self._game_data["pddl_problem"], self._logic)
            self.prev_state = None
            self.state = GameState()
            self._last_action = None
            self._moves = 0
            context = {
                "state": self._pddl_state,
                "facts": list(self._pddl_state.facts),
                "variables": {},
                "mapping": {},
                "entity_infos": self._entity_infos,
            }
            self.state.feedback = self._logic.grammar.derive("#intro#", context)
            self.state.raw = self.state.feedback
            self._gather_infos()
            return self.state

    return CachedPddlEnv, CachedPddlState


def request_infos() -> Any:
    import textworld

    # What alfworld's AlfredTWEnv requests in its eval modes. The goal-condition score reads the raw
    # "_facts" every state carries, so the costlier human-readable "facts" are not requested.
    return textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])


def make_engine(*, cached: bool = True) -> Any:
    """The wrapped engine alfworld plays: ``AlfredInfos(AlfredDemangler(PddlEnv))``.

    ``cached=False`` gives textworld's plain ``PddlEnv`` (used to check that caching changes nothing).
    """
    from textworld.envs.pddl import PddlEnv

    wrappers = import_alfworld_module("alfworld.agents.environment.alfred_tw_env")
    AlfredDemangler, AlfredInfos = wrappers.AlfredDemangler, wrappers.AlfredInfos

    base_cls = engine_classes()[0] if cached else PddlEnv
    env = base_cls(request_infos())
    return AlfredInfos(AlfredDemangler(shuffle=False)(env))


def strip_banner(feedback: str) -> str:
    """The intro text without textworld's welcome banner (as verl-agent and alfworld's agents show it)."""
    text = feedback.strip()
    if text.startswith(BANNER):
        text = text[len(BANNER):].lstrip("\n")
    return text


def task_line(intro: str) -> str:
    """The "Your task is to: ..." line of the intro text."""
    for line in intro.splitlines():
        if line.startswith(TASK_PREFIX):
            return line.strip()
    return ""


def admissible(commands: list[str]) -> list[str]:
    return [c for c in commands if c not in HIDDEN_COMMANDS]


# ------------------------------------------------------------------------------ goal conditions
@dataclass(frozen=True)
class GoalTargets:
    """The types a goal talks about, read from the goal PDDL (``XType`` names without ``Type``)."""

    category: str
    object_type: str | None
    receptacle_type: str | None
    toggle_type: str | None


_OBJ_TYPE = re.compile(r"\(objectType \?(o1?|o2) (\w+)Type\)")
_RECEP_TYPE = re.compile(r"\(receptacleType \?r (\w+)Type\)")
_TOGGLE_TYPE = re.compile(r"\(objectType \?ot (\w+)Type\)")
_STATE_PREDICATE = {
    "pick_clean_then_place_in_recep": "isclean",
    "pick_heat_then_place_in_recep": "ishot",
    "pick_cool_then_place_in_recep": "iscool",
}


def goal_targets(category: str, pddl_problem: str) -> GoalTargets:
    goal = pddl_problem[pddl_problem.find("(:goal"):]
    obj = _OBJ_TYPE.search(goal)
    recep = _RECEP_TYPE.search(goal)
    toggle = _TOGGLE_TYPE.search(goal)
    return GoalTargets(
        category,
        obj.group(2) if obj else None,
        recep.group(1) if recep else None,
        toggle.group(1) if toggle else None,
    )


def goal_conditions(targets: GoalTargets, facts: list) -> tuple[int, int] | None:
    """(conditions met, conditions) as ALFRED's ``goal_conditions_met`` counts them, from PDDL facts.

    None when the goal could not be read (the score then falls back to success). Everything is
    compared lower-case: fast-downward lower-cases predicate and object names.
    """
    if targets.object_type is None:
        return None
    by_name: dict[str, list[tuple[str, ...]]] = {}
    for fact in facts:
        by_name.setdefault(fact.name.lower(), []).append(tuple(v.name.lower() for v in fact.arguments))
    type_of = {args[0]: args[1] for args in by_name.get("objecttype", []) + by_name.get("receptacletype", [])}
    wanted = f"{targets.object_type}type".lower()
    objects = {o for o, t in type_of.items() if t == wanted}
    category = targets.category
    if category == "look_at_obj_in_light":
        held = any(args[1] in objects for args in by_name.get("holds", []))
        agent_at = {args[1] for args in by_name.get("atlocation", [])}
        receps_here = {r for r, loc in by_name.get("receptacleatlocation", []) if loc in agent_at}
        lamps = {o for o, t in type_of.items() if t == f"{targets.toggle_type}type".lower()}
        toggled = {args[0] for args in by_name.get("istoggled", [])}
        lamp_on_here = any(o in lamps and o in toggled and r in receps_here for o, r in by_name.get("inreceptacle", []))
        return int(held) + int(lamp_on_here), 2
    receps = {r for r, t in type_of.items() if t == f"{targets.receptacle_type}type".lower()}
    placed = [(o, r) for o, r in by_name.get("inreceptacle", []) if o in objects and r in receps]
    if category == "pick_two_obj_and_place":
        per_recep: dict[str, int] = {}
        for _, r in placed:
            per_recep[r] = per_recep.get(r, 0) + 1
        return min(max(per_recep.values(), default=0), 2), 2
    if category in _STATE_PREDICATE:
        changed = {args[0] for args in by_name.get(_STATE_PREDICATE[category], [])} & objects
        in_place = {o for o, _ in placed}
        return int(bool(in_place)) + int(bool(changed)) + int(bool(in_place & changed)), 3
    return int(bool(placed)), 1


# ------------------------------------------------------------------------------ one loaded game
class AlfWorldGame:
    """One engine instance that loads games and plays them; thin over textworld's state dicts."""

    def __init__(self, *, cached: bool = True):
        self.engine = make_engine(cached=cached)
        self.path: str | None = None
        self.data: dict[str, Any] | None = None
        self.state: Any = None
        self.targets: GoalTargets | None = None
        self.format = "current"

    def load(self, path: str, category: str) -> None:
        """Load a game file (a reload of the same file is skipped: reset rebuilds the state)."""
        if path != self.path:
            self._load(path, category)
            self.path = path

    def load_data(self, data: dict[str, Any], category: str) -> None:
        """Load a game from its parsed content (the generator checks games before writing them)."""
        self._load(data, category)

    def _load(self, source: Any, category: str) -> None:
        self.path = None  # a failed load must not leave a half-loaded game looking current
        self.state = None
        try:
            self.engine.load(source)
        except GameFileError:
            raise
        except (Exception, SystemExit) as e:
            # fast-downward's translator reports some PDDL errors with sys.exit; a bad game file
            # must not end the host process.
            name = source if isinstance(source, (str, os.PathLike)) else "<game data>"
            raise GameFileError(f"ALFWorld game file {name}: the textworld engine failed to load it "
                                f"({type(e).__name__}: {e})") from e
        self.data = self.engine.unwrapped._game_data
        self.format = game_format(self.data)
        self.targets = goal_targets(category, self.data["pddl_problem"])

    def reset(self) -> str:
        self.state = self.engine.reset()
        return strip_banner(self.state["feedback"])

    def step(self, command: str) -> tuple[str, bool]:
        """Play a command; returns (feedback, whether the command was one the game knows)."""
        known = command in self.state["_valid_commands"]
        self.state, _, _ = self.engine.step(command)
        return self.state["feedback"].strip(), known

    @property
    def won(self) -> bool:
        return bool(self.state is not None and self.state["won"])

    def admissible_commands(self) -> list[str]:
        return admissible(self.state["admissible_commands"])

    def walkthrough(self) -> list[str] | None:
        assert self.data is not None
        walkthrough = self.data.get("walkthrough")
        return list(walkthrough) if walkthrough else None

    def plan(self) -> list[str]:
        """The planner's command sequence from the current state (empty when it finds none)."""
        base = self.engine.unwrapped
        return list(base._pddl_state.replan(base._entity_infos))

    def goal_condition_rate(self) -> float:
        if self.won:
            return 1.0
        counts = goal_conditions(self.targets, self.state["_facts"]) if self.targets else None
        if counts is None:
            return 0.0
        met, total = counts
        # Never report a full score for an unwon game (a condition this count cannot see is missing).
        return min(met / total, (total - 1) / total) if total else 0.0
