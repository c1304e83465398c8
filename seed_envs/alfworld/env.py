"""``seed/ALFWorld-v0``: ALFWorld's household text games on the real alfworld + textworld engine."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar


from seed_envs.alfworld.engine import NOTHING_HAPPENS, AlfWorldGame, task_line
from seed_envs.alfworld.expert import AlfWorldExpert
from seed_envs.alfworld.games import (
    DATA_ENV_VAR,
    GameRecord,
    find_games,
    resolve_json_root,
)
from seed_envs.core import ACT_BY_ADMISSIBLE, AgentDefaults, Outcome, SeedEnv, Task, ToolVerb, time_limited

WON_REWARD = 1.0  # textworld's score: 1 on the winning step
#: Generated default panel sizes (games per split; multiples of 6 keep the task types balanced).
DEFAULT_PANEL_SIZES = {"train": 60, "valid_seen": 30, "valid_unseen": 30, "valid_train": 30}
DEFAULT_GENERATION_SEED = 0
_ALFWORLD_DEFAULT_DATA = Path("~/.cache/alfworld").expanduser()


def default_cache_root() -> Path:
    """``$SEEDGYM_CACHE`` or ``~/.cache/seed-gym``."""
    return Path(os.environ.get("SEEDGYM_CACHE") or Path("~", ".cache", "seed-gym")).expanduser()


def configured_data_dir(data_dir: str | os.PathLike | None) -> Path | None:
    """``data_dir``, else ``$ALFWORLD_DATA``, else None (the generated default).

    ``import alfworld`` sets ``ALFWORLD_DATA`` to its empty ``~/.cache/alfworld`` when unset; that
    value, without games in it, counts as "not configured" rather than as a broken data folder.
    """
    if data_dir is not None:
        return Path(data_dir).expanduser()
    value = os.environ.get(DATA_ENV_VAR)
    if not value:
        return None
    path = Path(value).expanduser()
    if path == _ALFWORLD_DEFAULT_DATA and not (path / "json_2.1.1").is_dir():
        return None
    return path


class AlfWorldEnv(SeedEnv):
    """ALFWorld (Shridhar et al., 2021): household tasks as text games.

    ## Description
    The agent is in a room with numbered receptacles (cabinet 1, fridge 1, countertop 2, ...) and
    objects in them, and must reach a goal of one of six task types: ``pick_and_place_simple``,
    ``look_at_obj_in_light``, ``pick_clean_then_place_in_recep``, ``pick_heat_then_place_in_recep``,
    ``pick_cool_then_place_in_recep``, ``pick_two_obj_and_place``. Games run on the real engine:
    textworld's ``PddlEnv`` (fast-downward) with alfworld's ``AlfredDemangler`` / ``AlfredInfos``
    wrappers, as alfworld's ``AlfredTWEnv`` plays them, with the PDDL translation and the parsed
    grammar cached per game file (a reset of a seen game is several times faster; observations
    and admissible actions are identical). Needs ``pip install 'seed-gym[alfworld]'``.

    ## Action Space
    A ``str``: a command such as ``go to fridge 1``, ``take apple 1 from countertop 2``, ``heat
    apple 1 with microwave 1``, ``move apple 1 to diningtable 1`` (older game files: ``put apple 1
    in/on diningtable 1``), ``use desklamp 1``, ``open``/``close``/``examine``, ``look``,
    ``inventory``. A command the game does not accept in the current state is invalid
    (``info["invalid_action"]``; the observation is the engine's ``Nothing happens.``).

    ## Observation Space
    A dict with ``"text"``: after ``reset`` the room description and the ``Your task is to: ...``
    line (textworld's welcome banner removed), after a step the engine's feedback
    (``You arrive at fridge 1. The fridge 1 is closed.``). Text only.

    ## Starting State
    ``reset(seed=s)`` draws a game from the split's panel; ``reset(options={"task_id": ...})``
    picks one. Task ids are ``<split>/<task-folder>/<trial>`` (for example
    ``valid_seen/pick_heat_then_place_in_recep-Apple-None-DiningTable-26/trial_T20190907_060234_011675``),
    sorted. With ``data_dir`` (or ``$ALFWORLD_DATA``) the panel is every playable game of the split
    in alfworld-download's layout (task types 1-6, no movable/sliced variants, solvable, trial
    folders without a game file skipped): the full download gives 3,553 train, 140 valid_seen
    (``test``) and 134 valid_unseen (``unseen``) games. Without data, games generated from the
    alfworld wheel's scene layouts are written once to ``$SEEDGYM_CACHE/alfworld`` (default
    ``~/.cache/seed-gym``): ``num_games`` per split (default 60 train, 30 otherwise), balanced over
    the task types; valid_unseen uses floor plans never used by the other splits.

    ## Rewards
    alfworld's: 1 on the step that wins the game, else 0. ``reward_mode="success"``: 10 on success.

    ## Episode End
    Terminated when the game is won. Truncated after ``max_steps`` steps (default 50; the agent's budget, ``agent_defaults.max_steps``, is SEED's 30).

    ## Information
    The contract's keys: ``task_id``, ``task`` (the ``Your task is to: ...`` line), ``category``
    (the task type), ``split`` (``valid_seen`` for ``test``), ``admissible_actions`` (the engine's,
    without ``help``), ``invalid_action``, ``success`` (won), ``score`` (ALFRED's goal-condition
    success rate computed from the PDDL state: 1.0 when won), ``step``; plus ``game_file`` and
    ``game_format`` (``current`` or ``legacy``).

    ## Arguments
    ```python
    gym.make("seed/ALFWorld-v0", split="train", obs_mode="text", max_steps=50, data_dir=None,
             reward_mode="env", num_games=None, generation_seed=0)
    ```
    - ``split``: ``train``, ``valid_seen`` (alias ``test``), ``valid_unseen`` (alias ``unseen``),
      ``valid_train``.
    - ``data_dir``: an ``$ALFWORLD_DATA`` folder (with ``json_2.1.1/``) or its ``json_2.1.1``.
    - ``num_games`` / ``generation_seed``: size and seed of the generated default panel (no data).

    ## Version History
    - v0: initial version.
    """

    split_names: ClassVar[tuple[str, ...]] = ("train", "valid_seen", "valid_unseen", "valid_train")
    split_aliases: ClassVar[dict[str, str]] = {"test": "valid_seen", "unseen": "valid_unseen"}
    # Two step budgets, on purpose: 50 is the env's own episode length (what ``gym.make`` gives, e.g. for
    # expert demos and evaluation by hand); 30 is the *agent's* budget in agent_defaults, SEED's /
    # verl-agent's setting, which the trainer and the adapters pass as ``max_steps``.
    default_max_steps: ClassVar[int] = 50
    summary = ("household tasks on the real alfworld/textworld engine; real games via `data_dir` / "
               "`$ALFWORLD_DATA`, else generated, planner-checked games")
    agent_defaults = AgentDefaults(
        prompt={
            "intro": (
                "You are an expert agent in ALFRED, a text-based household environment. You move between "
                "receptacles, open and close them, take and put objects, and heat, cool, clean or use "
                "them to complete the task. " + ACT_BY_ADMISSIBLE
            ),
            "task_header": "Your task is to: {task}",
        },
        history=5,
        max_steps=30,
        tool_verbs=(
            ToolVerb("go_to", "Go to a receptacle.", "go to {receptacle}", {"receptacle": "e.g. 'cabinet 1'"}),
            ToolVerb("open", "Open a receptacle.", "open {receptacle}", {"receptacle": "e.g. 'fridge 1'"}),
            ToolVerb("close", "Close a receptacle.", "close {receptacle}", {"receptacle": "e.g. 'fridge 1'"}),
            ToolVerb("take", "Take an object from a receptacle.", "take {object} from {receptacle}",
                     {"object": "e.g. 'apple 1'", "receptacle": "e.g. 'countertop 1'"}),
            ToolVerb("put", "Put an object in or on a receptacle.", "put {object} in/on {receptacle}",
                     {"object": "e.g. 'apple 1'", "receptacle": "e.g. 'fridge 1'"}),
            ToolVerb("act", "Any other action, e.g. 'heat egg 1 with microwave 1', 'look'.", "{action}",
                     {"action": "the action text"}),
        ),
        hindsight="seed_envs.alfworld.hindsight:hindsight_rule",
        wrong_rule="seed_envs.alfworld.hindsight:wrong_rule",
        shorten="seed_envs.alfworld.shorten:shorten",
    )

    def __init__(
        self,
        *,
        num_games: int | None = None,
        generation_seed: int = DEFAULT_GENERATION_SEED,
        **contract: Any,
    ):
        super().__init__(**contract)
        self.games_dir = configured_data_dir(self.data_dir)
        if self.games_dir is not None:
            if num_games is not None:
                raise ValueError("num_games: only for the generated default (not used with data_dir)")
            resolve_json_root(self.games_dir)  # fail now, with how to get the data, not at reset
        else:
            if num_games is None:
                num_games = DEFAULT_PANEL_SIZES[self.split]
            if not isinstance(num_games, int) or isinstance(num_games, bool) or num_games < 1:
                raise ValueError(f"num_games: expected a positive int, got {num_games!r}")
        if not isinstance(generation_seed, int) or isinstance(generation_seed, bool) or generation_seed < 0:
            raise ValueError(f"generation_seed: expected a non-negative int, got {generation_seed!r}")
        self.num_games = num_games
        self.generation_seed = generation_seed
        self._games: dict[str, GameRecord] | None = None
        self.game: AlfWorldGame | None = None
        self._text = ""
        self._history: list[str] = []
        self._episode_token = object()

    # ----------------------------------------------------------------- panels
    def _index(self) -> dict[str, GameRecord]:
        if self._games is None:
            root = self.games_dir
            if root is None:
                from seed_envs.alfworld.generator import ensure_default_panel

                assert self.num_games is not None
                root = ensure_default_panel(default_cache_root(), self.split, self.num_games, self.generation_seed)
            self._games = {g.task_id: g for g in find_games(root, self.split)}
        return self._games

    def _build_panel(self) -> list[str]:
        return list(self._index())

    def game_record(self, task_id: str) -> GameRecord:
        games = self._index()
        if task_id not in games:
            raise ValueError(f"task_id: {task_id!r} is not a game of split {self.split!r} (see task_ids())")
        return games[task_id]

    # ----------------------------------------------------------------- hooks
    def _start_task(self, task_id: str) -> Task:
        record = self.game_record(task_id)
        if self.game is None:
            self.game = AlfWorldGame()
        self.game.load(str(record.path), record.category)
        self._text = self.game.reset()
        self._history = []
        self._episode_token = object()
        return Task(record.task_id, task_line(self._text), record.category)

    def _apply(self, action: str) -> Outcome:
        game = self.game
        assert game is not None and game.state is not None
        if action not in game.state["_valid_commands"]:
            # What the engine answers to an unknown command, without its cost (it would recompute
            # every applicable action for an unchanged state).
            self._text = NOTHING_HAPPENS
            return Outcome(0.0, False, True)
        self._text, _ = game.step(action)
        self._history.append(action)
        won = game.won
        return Outcome(WON_REWARD if won else 0.0, won, False)

    def _state_text(self, with_state: bool) -> str:
        return self._text

    def _admissible_actions(self) -> list[str] | None:
        return self.game.admissible_commands() if self.game is not None and self.game.state is not None else None

    def _success(self) -> bool:
        return self.game is not None and self.game.won

    def _score(self) -> float:
        return self.game.goal_condition_rate() if self.game is not None and self.game.state is not None else 0.0

    def _extra_info(self) -> dict[str, Any]:
        game = self.game
        return {"game_file": game.path if game else None, "game_format": game.format if game else None}

    # ----------------------------------------------------------------- for the expert
    def command_history(self) -> list[str]:
        """Valid commands played this episode (invalid ones change nothing and are left out)."""
        return list(self._history)

    def episode_token(self) -> object:
        """A fresh object per reset, so the expert notices a new episode of the same game."""
        return self._episode_token

    def make_expert(self) -> AlfWorldExpert:
        return AlfWorldExpert(self)


#: Entry point of ``seed/ALFWorld-v0``: :class:`AlfWorldEnv` inside gymnasium's ``TimeLimit``.
make = time_limited(AlfWorldEnv)
