"""``seed/EZPoints-v0``: write a formula with the dealt cards' numbers that equals the target."""
from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np

from seed_envs.core import AgentDefaults, Expert, Outcome, SeedEnv, Task, ToolVerb, contract_arg, quote_action, time_limited
from seed_envs.ezpoints.cards import Deal, DealSpace, TableRenderer, deal_code, parse_deal
from seed_envs.ezpoints import gym_cards
from seed_envs.ezpoints.formula import EQUALS, FormulaError, Grammar, evaluate, is_number, numbers_in, tokenize
from seed_envs.ezpoints.solver import category

ACTION_MODES = ("token", "formula")
RULES = ("default", "gym_cards")  # see the class docstring's "Rules" and docs/ezpoints.md's differences table
SUCCESS_REWARD = 10.0  # gym_cards' reward for a correct formula
POINTS24_MAX_STEPS = 20  # gym_cards' Points24 truncates formulas longer than 20 tokens
MIN_CARDS, MAX_CARDS = 2, 4  # the solver enumerates every formula; 4 cards is gym_cards' Points24
FACE_HINTS = {"J": "10", "Q": "10", "K": "10", "T": "10", "A": "1"}  # a card letter typed instead of its number


class EZPointsEnv(SeedEnv):
    """Combine the numbers of the dealt cards into a formula equal to a target (RL4VLM's gym_cards).

    ## Description
    Two cards are dealt whose numbers reach the target 12 with ``+`` or ``*`` (J, Q and K count 10;
    EZPoints deals no Ace). The agent writes a formula using each card's number exactly once,
    one token at a time as in gym_cards, and closes it with ``=``. With ``target=24`` the game is
    gym_cards' Points24: four cards (Ace counts 1), operators ``+ - * /`` and parentheses. Every
    deal has a solution (deals are filtered by an exhaustive solver).

    ## Action Space
    A ``str``. ``action_mode="token"`` (default): exactly one token per step, from the benchmark's
    vocabulary ``1``-``10``, ``+``, ``*``, ``=`` (Points24 adds ``-``, ``/``, ``(``, ``)``). Card
    letters are not tokens (as in gym_cards): ``J`` is invalid with a hint to enter ``10``. A
    whole formula sent in token mode is invalid too (one token per step keeps the benchmark's step
    semantics; use formula mode for that). A token is valid when it keeps the formula well formed
    and completable: a number must be the value of a card not used yet (gym_cards' rule), an
    operator needs a number before it and a card left after it, ``=`` needs a complete formula.
    ``info["admissible_actions"]`` lists exactly the valid tokens (card numbers ascending and
    ``(``; or operators, ``)`` and ``=``). ``=`` is admissible as soon as the formula is complete,
    even with cards unused: as in gym_cards, correctness is judged at ``=``.
    ``action_mode="formula"``: a whole formula per step, tokens separated by spaces or not
    (``"5 + 7 ="``, ``"5*7="``; the final ``=`` may be left out). A formula that breaks the
    grammar (or uses a number no card has) is invalid; a well-formed one is judged at once.
    ``admissible_actions`` is None in formula mode (formulas cannot be listed).

    ## Observation Space
    A dict. ``"text"``: ``"Cards: 5 and 7. Formula: 5+"`` (with ``obs_mode="image"`` the cards are
    left out, ``"Formula: 5+"``: the image shows them), preceded by a feedback line after an
    invalid action or at the end. ``"image"`` (``image``/``text+image`` modes): 300x300x3 uint8,
    the cards on gym_cards' green table with the formula written below them; cards are drawn by
    the project (or read from ``card_images_dir``).

    ## Starting State
    A deal from the split's panel, drawn with the reset seed (or chosen by
    ``reset(options={"task_id": ...})``), and an empty formula. Task ids look like
    ``ezpoints/t12/test/5H-7C`` (target, split, cards as rank+suit, ``T`` for ten). Splits:
    ``train`` / ``test`` are disjoint deals (80/20 by a SHA-256 hash of the deal), ``unseen`` holds
    out whole rank pairs never dealt in train (for target 12: 3+4 and 4+8, one product and one
    sum pair). Two-card panels hold every ordered pair of distinct cards; Points24 panels one deal
    per solvable rank multiset. ``category`` is ``sum`` (adding all cards gives the target),
    ``product`` (multiplying does) or ``mixed``.

    ## Rewards
    ``reward_mode="env"`` (default), gym_cards' scale: +10 when ``=`` closes a formula that uses
    every card exactly once and equals the target; 0 for a wrong formula (gym_cards gives -1, as
    does ``rules="gym_cards"``);
    ``invalid_penalty`` for an invalid action (default -1 as in gym_cards; verl-agent uses 0, so
    pass ``invalid_penalty=0`` or use ``reward_mode="success"``: 10 on success, else 0); 0 otherwise.

    ## Episode End
    Terminated when ``=`` (or a formula in formula mode) is judged, right or wrong. Truncated by
    ``TimeLimit`` after ``max_steps`` (default 8, the paper's EZPoints setting: ``5 + 7 =`` takes
    4 steps; 20 for three or four cards). An invalid action leaves the formula unchanged.

    ## Rules
    ``rules="default"`` is the game described above: a grammar checked token by token, exact
    arithmetic, 0 for a wrong formula. ``rules="gym_cards"`` reproduces gym_cards' ``step`` (RL4VLM
    commit 202229a, ``gym_cards/envs/ezpoints.py`` and ``points.py``) step for step, token mode only:
    any token of the vocabulary is accepted in any order (only a number whose card is used up is
    invalid: a blank ``" "`` is appended to the formula and the step pays ``invalid_penalty``, -1 as
    in gym_cards; text that is no token of the game is treated the same way); ``=`` judges the
    concatenated entries as Python would evaluate them (``5`` ``7`` is 57, ``*`` ``*`` a power,
    unary ``+``/``-``, float division: see :mod:`seed_envs.ezpoints.gym_cards`; never ``eval``):
    +10 if it equals the target with every card used, else -1, and the episode terminates; a step
    taken once the formula holds more than 5 entries (20 with more than two cards) pays -1 and
    truncates the episode (``truncated=True``), whatever the action. ``admissible_actions`` lists
    the tokens gym_cards does not pad: unused card values, every operator and ``=``. The formula
    is shown as gym_cards draws it, entries joined by spaces. ``max_steps`` defaults to 8 (22 with
    more than two cards) so that gym_cards' own truncation is reached. Deals, splits and the
    observation's layout are the same in both modes.

    ## Information
    The contract keys (``task_id``, ``task``, ``category``, ``split``, ``admissible_actions``,
    ``invalid_action``, ``success``, ``score`` 1.0 on success, ``step``) plus ``cards`` (codes),
    ``formula`` (the text so far) and ``target``.

    ## Arguments
    ```python
    gym.make("seed/EZPoints-v0", split="train", obs_mode="text", max_steps=8, target=12,
             num_cards=None, action_mode="token", invalid_penalty=-1.0, card_images_dir=None,
             reward_mode="env", rules="default")
    ```
    ``split``: ``train``, ``test`` or ``unseen``. ``obs_mode``: ``text``, ``image``, ``text+image``.
    ``target``: positive int (12 EZPoints, 24 Points24). ``num_cards``: 2 to 4; None means 4 for
    target 24 and 2 otherwise (two cards play with ``+ *``, more with ``+ - * / ( )``).
    ``rules``: ``default`` or ``gym_cards`` (see Rules). ``card_images_dir``: a folder of gym_cards
    card images ``{suit}{rank}.png`` (``H5.png``, ``ST.png``); every file is checked at construction. ``data_dir`` is accepted and unused.

    ## Version History
    * v0: initial version (gym_cards EZPoints / Points24 rules, safe parser, project-drawn cards);
      ``rules="gym_cards"`` added (gym_cards' step semantics, issue 17).
    """

    image_shape = (300, 300)
    default_max_steps = 8
    summary = ("build a formula from two dealt cards that equals 12, one token a step; text and/or 300x300 "
               "card image")
    split_notes = {"test": "disjoint deals", "unseen": "rank pairs never dealt in train"}
    splits_extra = "`target=24` for Points24"
    agent_defaults = AgentDefaults(
        prompt={
            "intro": (
                "You are playing EZPoints. You are shown two cards and a target number. Build a formula "
                "that uses the number of each card exactly once, combined with + and *, whose value "
                "equals the target; J, Q and K count as 10. Write the formula one token per step (a "
                "number, + or *); when the formula is complete, finish with =."
            ),
            "task_header": "Task: {task}",
            "step_format": "[Step {step}] Observation:\n{observation}\nToken: {action}",
        },
        history=2,
        max_steps=8,
        hindsight="seed_envs.ezpoints.hindsight:hindsight_rule",
        wrong_rule="seed_envs.ezpoints.hindsight:wrong_rule",
        tool_verbs=(ToolVerb("enter", "Enter the next token of the formula.", "{token}",
                             {"token": "a card's number, +, * or = to finish"}),),
    )

    def __init__(
        self,
        *,
        target: int = 12,
        num_cards: int | None = None,
        action_mode: str = "token",
        invalid_penalty: float = -1.0,
        card_images_dir: str | os.PathLike | None = None,
        rules: str = "default",
        **contract: Any,
    ):
        if not isinstance(target, (int, np.integer)) or isinstance(target, bool) or target < 1:
            raise ValueError(f"target: expected a positive int, got {target!r}")
        if num_cards is None:
            num_cards = 4 if target == 24 else 2
        if not isinstance(num_cards, (int, np.integer)) or isinstance(num_cards, bool) or not MIN_CARDS <= num_cards <= MAX_CARDS:
            raise ValueError(f"num_cards: expected an int from {MIN_CARDS} to {MAX_CARDS}, got {num_cards!r}")
        if action_mode not in ACTION_MODES:
            raise ValueError(f"action_mode: expected one of {ACTION_MODES}, got {action_mode!r}")
        if rules not in RULES:
            raise ValueError(f"rules: expected one of {RULES}, got {rules!r}")
        if rules == "gym_cards" and action_mode != "token":
            raise ValueError("rules: 'gym_cards' is a one-token-per-step game; it needs action_mode='token'")
        if not isinstance(invalid_penalty, Real) or isinstance(invalid_penalty, bool) or not math.isfinite(invalid_penalty) or invalid_penalty > 0:
            raise ValueError(f"invalid_penalty: expected the reward of an invalid action, a finite number <= 0 (e.g. -1 or 0), got {invalid_penalty!r}")
        self.target = int(target)
        self.num_cards = int(num_cards)
        self.action_mode = action_mode
        self.invalid_penalty = float(invalid_penalty)
        self.rules = rules
        # gym_cards truncates once the formula holds more than this many entries (blanks included).
        self.formula_limit = gym_cards.formula_limit(self.num_cards)
        # Two cards: gym_cards' EZPoints vocabulary. More: Points24's, with brackets.
        self.operators = "+*" if self.num_cards == 2 else "+-*/"
        self.grammar = Grammar(tuple(self.operators), parentheses=self.num_cards > 2)
        self.deal_space = DealSpace(self.target, self.num_cards, self.operators)
        solvable = self.deal_space.solvable_rank_multisets()
        if len(solvable) < 2:  # one rank multiset would be all of unseen and leave train empty
            raise ValueError(f"target: {target} is reached by {len(solvable)} rank combinations of {num_cards} cards; need at least 2")
        if contract_arg(contract, "max_steps") is None:
            max_steps = POINTS24_MAX_STEPS if self.num_cards > 2 else self.default_max_steps
            if rules == "gym_cards":
                # Every gym_cards step adds an entry, so its own truncation comes at step limit + 2: let it.
                max_steps = max(max_steps, self.formula_limit + 2)
            contract["max_steps"] = max_steps
        super().__init__(**contract)
        self.renderer = TableRenderer(self.num_cards, self.deal_space.ranks, card_images_dir)
        self._deals: dict[str, Deal] = {}
        self.deal: Deal | None = None
        self.formula_tokens: list[str] = []
        self._closed = False  # "=" was judged (right or wrong)
        self._won = False
        self._truncate_now = False  # this step hit gym_cards' formula-length limit

    # ----------------------------------------------------------------- panel and tasks
    def _task_id(self, deal: Deal) -> str:
        return f"ezpoints/t{self.target}/{self.split}/{deal_code(deal)}"

    def _build_panel(self) -> Sequence[str]:
        self._deals = {self._task_id(deal): deal for deal in self.deal_space.panel(self.split)}
        return list(self._deals)

    def _start_task(self, task_id: str) -> Task:
        panel = self.task_ids()
        if task_id not in self._deals:
            raise ValueError(f"task_id: {task_id!r} is not in this env's {self.split!r} panel (e.g. {panel[0]!r})")
        self.deal = parse_deal(task_id.rsplit("/", 1)[1])
        self.formula_tokens = []
        self._closed = False
        self._won = False
        values = [card.value for card in self.deal]
        return Task(task_id, self._instruction(), category(values, self.target))

    def _instruction(self) -> str:
        n = self.num_cards
        ops = ", ".join(self.operators[:-1]) + (", " if self.grammar.parentheses else " and ") + self.operators[-1]
        if self.grammar.parentheses:
            ops += " and parentheses"
        faces = "J, Q and K count as 10" + ("" if n == 2 else ", A counts as 1")
        head = (f"Use the numbers of the {n} cards, each exactly once, with {ops}, "
                f"to write a formula that equals {self.target}. {faces}.")
        if self.rules == "gym_cards":
            return head + (f" Enter one token per step: a card's number (1-10), an operator ({ops}),"
                           " or = to finish the formula. Tokens are joined without spaces and read as"
                           f" Python; an invalid token adds a blank; at most {self.formula_limit} entries.")
        if self.action_mode == "token":
            return head + (f" Enter one token per step: a card's number (1-10), an operator ({ops}),"
                           " or = to finish the formula.")
        return head + " Enter the whole formula in one step, ending with =, e.g. '2 * 3 ='."

    # ----------------------------------------------------------------- state
    def remaining_values(self) -> list[int]:
        """Card values not used by the formula yet (a multiset, in deal order)."""
        assert self.deal is not None
        left = Counter(numbers_in(self.formula_tokens))
        out = []
        for card in self.deal:
            if left[card.value] > 0:
                left[card.value] -= 1
            else:
                out.append(card.value)
        return out

    def admissible_tokens(self) -> list[str]:
        if self.deal is None or self._closed:
            return []
        if self.rules == "gym_cards":
            # gym_cards never refuses an operator, bracket or "=": only a used-up number is padded.
            numbers = [str(v) for v in sorted(set(self.remaining_values()))]
            return numbers + [t for t in self.grammar.vocabulary() if not is_number(t)]
        return self.grammar.admissible(self.formula_tokens, self.remaining_values())

    def _formula_text(self, sep: str = "") -> str:
        if self.rules == "gym_cards":
            # gym_cards draws its formula as " ".join(entries) (blanks included; "=" is never an entry).
            return " ".join(self.formula_tokens + ([EQUALS] if self._closed else []))
        return sep.join(self.formula_tokens + ([EQUALS] if self._closed else []))

    def step(self, action: str):
        self._truncate_now = False
        obs, reward, terminated, truncated, info = super().step(action)
        # gym_cards' formula-length limit ends the episode as a truncation, not a termination.
        return obs, reward, terminated, truncated or self._truncate_now, info

    # ----------------------------------------------------------------- hooks
    def _apply(self, action: str) -> Outcome:
        if self.action_mode == "token":
            return self._apply_token(action)
        return self._apply_formula(action)

    def _invalid(self, action: str, reason: str) -> Outcome:
        admissible = self.admissible_tokens()
        hint = f" Admissible: {', '.join(admissible)}." if self.action_mode == "token" else ""
        return Outcome(self.invalid_penalty, False, True, f"Invalid action {quote_action(action)}: {reason}.{hint}")

    def _apply_token(self, action: str) -> Outcome:
        if self.rules == "gym_cards":
            return self._apply_gym_cards(action)
        if len(action) == 1 and action.upper() in FACE_HINTS:
            return self._invalid(action, f"enter the card's number ({FACE_HINTS[action.upper()]}), not its letter")
        try:
            tokens = tokenize(action)
        except FormulaError as e:
            return self._invalid(action, str(e))
        if len(tokens) != 1:
            return self._invalid(action, "empty action" if not tokens else f"one token per step, got {len(tokens)}")
        token = tokens[0]
        admissible = self.admissible_tokens()
        if token not in admissible:
            return self._invalid(action, self.grammar.why_not(token, self.formula_tokens, self.remaining_values()))
        if token == EQUALS:
            return self._judge()
        self.formula_tokens.append(token)
        return Outcome(0.0, False, False)

    def _apply_formula(self, action: str) -> Outcome:
        try:
            tokens = tokenize(action)
        except FormulaError as e:
            return self._invalid(action, str(e))
        if tokens and tokens[-1] == EQUALS:
            tokens = tokens[:-1]
        if not tokens:
            return self._invalid(action, "empty formula")
        # Type the formula token by token through the same grammar as token mode.
        self.formula_tokens = []
        for token in tokens:
            if token not in self.admissible_tokens() or token == EQUALS:
                reason = ("'=' may only end the formula" if token == EQUALS
                          else self.grammar.why_not(token, self.formula_tokens, self.remaining_values()))
                self.formula_tokens = []
                return self._invalid(action, f"{token!r} at this point: {reason}")
            self.formula_tokens.append(token)
        if EQUALS not in self.admissible_tokens():
            self.formula_tokens = []
            return self._invalid(action, "the formula is not complete")
        return self._judge()

    def _apply_gym_cards(self, action: str) -> Outcome:
        """One step of gym_cards' ``step`` (EZPointEnv / Point24Env), in its order of checks."""
        if len(self.formula_tokens) > self.formula_limit:  # checked first, whatever the action
            self._truncate_now = True
            return Outcome(gym_cards.WRONG_REWARD, False, False,
                           f"The formula has more than {self.formula_limit} entries: the episode is truncated.")
        if action not in self.grammar.vocabulary():
            # gym_cards cannot receive this (its actions are token indices); like its invalid number,
            # it pads the formula with a blank so every step still lengthens the formula.
            self.formula_tokens.append(gym_cards.BLANK)
            hint = (f"enter the card's number ({FACE_HINTS[action.upper()]}), not its letter"
                    if action.upper() in FACE_HINTS else "not a token of this game")
            return self._invalid(action, f"{hint}; a blank is added to the formula")
        if is_number(action) and int(action) not in self.remaining_values():
            self.formula_tokens.append(gym_cards.BLANK)
            return self._invalid(action, f"no unused card has the value {action}; a blank is added to the formula")
        if action == EQUALS:
            return self._judge_gym_cards()
        self.formula_tokens.append(action)
        return Outcome(0.0, False, False)

    def _judge_gym_cards(self) -> Outcome:
        """gym_cards' ``_evaluate_formula``: the entries joined and read as Python, +10 or -1, terminated."""
        self._closed = True
        text = "".join(self.formula_tokens)
        reward = gym_cards.judge(self.formula_tokens, self.num_cards, self.target)
        if reward > 0:
            self._won = True
            return Outcome(reward, True, False, f"Correct: {text} = {self.target}.")
        value = gym_cards.python_value(text)
        unused = self.remaining_values()
        if value is None:
            why = f"{text!r} is not a valid formula"
        elif unused:
            why = f"{text} = {value} leaves {', '.join(map(str, unused))} unused"
        else:
            why = f"{text} = {value}, not {self.target}"
        return Outcome(reward, True, False, f"Wrong: {why}.")

    def _judge(self) -> Outcome:
        """Close the formula with ``=``: right (+10) or wrong (0); either way the episode ends."""
        self._closed = True
        text = "".join(self.formula_tokens)
        unused = self.remaining_values()
        try:
            value = evaluate(self.formula_tokens)
        except FormulaError as e:  # e.g. division by zero: a wrong formula, not a crash
            return Outcome(0.0, True, False, f"Wrong: {text} has no value ({e}).")
        shown = str(value)
        if unused:
            return Outcome(0.0, True, False, f"Wrong: {text} = {shown} leaves {', '.join(map(str, unused))} unused.")
        if value != self.target:
            return Outcome(0.0, True, False, f"Wrong: {text} = {shown}, not {self.target}.")
        self._won = True
        return Outcome(SUCCESS_REWARD, True, False, f"Correct: {text} = {self.target}.")

    def _state_text(self, with_state: bool) -> str:
        formula = f"Formula: {self._formula_text()}"
        if not with_state or self.deal is None:
            return formula
        names = [card.name for card in self.deal]
        cards = " and ".join(names) if len(names) == 2 else ", ".join(names[:-1]) + " and " + names[-1]
        return f"Cards: {cards}. {formula}"

    def _image(self) -> np.ndarray:
        assert self.deal is not None
        return self.renderer.render(self.deal, self._formula_text(" "))

    def _admissible_actions(self) -> list[str] | None:
        return self.admissible_tokens() if self.action_mode == "token" else None

    def _success(self) -> bool:
        return self._won

    def _extra_info(self) -> dict:
        return {
            "cards": [card.code for card in self.deal] if self.deal else [],
            "formula": self._formula_text(),
            "target": self.target,
        }

    def make_expert(self) -> Expert:
        from seed_envs.ezpoints.expert import make_expert

        return make_expert(self)


#: Entry point of ``seed/EZPoints-v0``: :class:`EZPointsEnv` inside gymnasium's ``TimeLimit``.
make = time_limited(EZPointsEnv)
