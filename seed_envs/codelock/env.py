"""``seed/CodeLock-v0``: open a lock by entering its family's hidden code, one letter a step.

Why it exists: SEED's skills can only help where they say something the policy does not already know
and could not read off its observation, about the task's category, in a way the policy can act on. On
EZPoints the skill's content (add or multiply) depends on card arithmetic the 135M policy does not
learn, so correct and wrong skills push the same card-blind policy the same way (docs/results.md).
CodeLock makes the category visible (the lock family is named in the observation) and its rule hidden
(the family's code is never shown before the end; a failed try reveals it, which is what a hindsight
skill can state). A whole code is rarely right by chance (1 in 6^3) while its letters often are, so
under the 10/0 success reward most GRPO groups tie at 0 and carry no policy-gradient signal, while the
OPD teacher, given a skill that states the code, can still favour the right letters the policy sampled:
the setting of the paper's Proposition 2, built on purpose.
"""
from __future__ import annotations

import hashlib
from typing import Any

from seed_envs.core import ACT_BY_ADMISSIBLE, AgentDefaults, Outcome, SeedEnv, Task, ToolVerb, quote_action, time_limited

ALPHABET = ("A", "B", "C", "D", "E", "F")
CODE_LENGTH = 3
#: Lock families: the first 32 are trained on (``train`` and ``test`` panels), the last 16 only in ``unseen``.
FAMILIES = (
    "amber", "basalt", "bronze", "cedar", "chalk", "cobalt", "copper", "coral", "crimson", "ebony", "flint",
    "garnet", "granite", "hazel", "indigo", "ivory", "jade", "juniper", "lilac", "linen", "maple", "marble",
    "ochre", "onyx", "opal", "pewter", "quartz", "russet", "saffron", "slate", "topaz", "umber",
    "velvet", "walnut", "willow", "zinc", "birch", "cinder", "dune", "fern", "frost", "heather", "iron", "laurel",
    "moss", "pearl", "rowan", "sable",
    "acorn", "bramble", "clover", "dahlia", "ember", "fennel", "ginger", "harbor", "iris", "kelp", "lotus", "meadow",
    "nutmeg", "orchid", "pepper", "reed",
)
TRAINED_FAMILIES = FAMILIES[:32]
UNSEEN_FAMILIES = FAMILIES[32:48]
WARMUP_FAMILIES = FAMILIES[48:]
#: Where a lock is: train instances use the first six places, test the last two (disjoint tasks of the
#: same families), unseen the first four of families never trained on, warmup (Stage 1's) all eight.
PLACES = ("cellar door", "garden gate", "tower chest", "library cabinet", "stable latch", "harbour crate",
          "chapel box", "mill hatch")
PANELS = {"train": (TRAINED_FAMILIES, PLACES[:6]), "test": (TRAINED_FAMILIES, PLACES[6:]),
          "unseen": (UNSEEN_FAMILIES, PLACES[:4]), "warmup": (WARMUP_FAMILIES, PLACES)}


def family_code(family: str, length: int = CODE_LENGTH) -> tuple[str, ...]:
    """The family's fixed code: letters from a hash of its name (the same in every process and machine)."""
    digest = hashlib.sha256(f"codelock/{family}".encode()).digest()
    return tuple(ALPHABET[b % len(ALPHABET)] for b in digest[:length])


def lock_code(family: str, place: str, split: str) -> tuple[str, ...]:
    """The code of one lock: its family's, except on ``warmup``, where every lock has its own (a hash of family
    and place), so that Stage 1's demonstrations there can teach reading a code from a skill but cannot be
    memorised per family."""
    return family_code(f"{family}@{place}") if split == "warmup" else family_code(family)


def spaced(code: tuple[str, ...] | list[str]) -> str:
    return " ".join(code)


class CodeLockEnv(SeedEnv):
    """Enter the hidden code of a named lock family, one letter a step. Text only.

    ## Description
    64 lock families, each with a fixed 3-letter code over ``A``-``F`` (:func:`family_code`) that no
    observation shows until the end. A task is one lock: a family and a place ("the cedar lock on the
    garden gate"). The agent enters letters one per step; after three the lock judges the code: it opens
    (success) or it does not, and then the final observation reveals the family's code.

    ## Observation
    ``{"text": "The cedar lock on the garden gate. Code so far: B _ _ (2 letters to go)."}`` with a
    feedback line above it after an invalid action; the final observation after a wrong code reads
    ``"Wrong code B A F. The cedar lock opens with B E C."``.

    ## Actions
    One letter of ``A B C D E F`` (case-insensitive, surrounding spaces ignored). Anything else is an
    invalid action: feedback, no letter entered, the episode goes on (``max_steps`` bounds it).

    ## Rewards
    ``reward_mode="env"``: 1 when the lock opens, else 0; ``"success"``: 10 / 0. ``score`` is the share of
    code positions entered right (1.0 on success).

    ## Splits
    ``train``: 32 families x 6 places (192 tasks); ``test``: the same 32 families at 2 other places (64
    tasks); ``unseen``: 16 other families x 4 places (64 tasks), whose codes no training episode reveals;
    ``warmup``: 16 more families x 8 places (128 tasks) for Stage 1's demonstrations
    (``--stage1-split warmup``), where every lock has its own code (:func:`lock_code`), so Stage 1 teaches the
    answer format and reading a code from a skill (``--stage1-skill-acting``), and no code that could be
    memorised, nor any code of the families Stage 2 trains and ``test`` evaluates on.

    ## Arguments
    ```python
    gym.make("seed/CodeLock-v0", split="train", obs_mode="text", max_steps=5, reward_mode="env",
             num_families=None)
    ```
    ``num_families``: train and test on the first N of the 32 trained families (None: all), so that a
    small Stage 2 sees each family often. ``data_dir`` is accepted and unused.

    ## Version History
    * v0: initial version (issue 29's positive control).
    """

    split_names = ("train", "test", "unseen", "warmup")
    default_max_steps = CODE_LENGTH + 2
    summary = (
        "the trainer's positive control, not a paper benchmark: enter a lock family's hidden 3-letter code, "
        "one letter a step; a wrong try reveals the code (what a hindsight skill can state)"
    )
    split_notes = {
        "train": "32 families x 6 places",
        "test": "same families, other places",
        "unseen": "16 other families",
        "warmup": "Stage 1 locks, each with its own code",
    }
    agent_defaults = AgentDefaults(
        prompt={
            "intro": (
                "You are opening coded locks. Every lock of a family opens with the same secret code of three "
                "letters from A to F, which is never shown before the lock is tried. Enter the code one "
                "letter per step. " + ACT_BY_ADMISSIBLE
            ),
            "task_header": "Task: {task}",
        },
        history=0,  # the observation shows the letters entered so far
        max_steps=CODE_LENGTH + 2,
        hindsight="seed_envs.codelock.hindsight:hindsight_rule",
        wrong_rule="seed_envs.codelock.hindsight:wrong_rule",
        tool_verbs=(ToolVerb("enter", "Enter the next letter of the code.", "{letter}", {"letter": "one letter, A to F"}),),
    )

    def __init__(self, *, num_families: int | None = None, **contract: Any):
        if num_families is not None and (isinstance(num_families, bool) or not isinstance(num_families, int)
                                         or not 1 <= num_families <= len(TRAINED_FAMILIES)):
            raise ValueError(f"num_families: expected an int from 1 to {len(TRAINED_FAMILIES)} or None, "
                             f"got {num_families!r}")
        self.num_families = num_families
        super().__init__(**contract)
        self._family = ""
        self._place = ""
        self._entered: list[str] = []
        self._judged = False

    def _build_panel(self):
        families, places = PANELS[self.split]
        if self.num_families is not None and self.split in ("train", "test"):
            families = families[:self.num_families]
        return [f"codelock/{self.split}/{family}/{place.replace(' ', '-')}" for family in families for place in places]

    def _start_task(self, task_id: str) -> Task:
        if task_id not in self.task_ids():
            raise ValueError(f"unknown task_id {task_id!r} for split {self.split!r}")
        _, _, self._family, place = task_id.split("/")
        self._place = place.replace("-", " ")
        self._entered = []
        self._judged = False
        instruction = f"Open the {self._family} lock on the {self._place}."
        return Task(task_id, instruction, self._family)

    @property
    def code(self) -> tuple[str, ...]:
        return lock_code(self._family, self._place, self.split)

    def _apply(self, action: str) -> Outcome:
        letter = action.strip().upper()
        if letter not in ALPHABET:
            return Outcome(0.0, False, True, f"Invalid action {quote_action(action)}: enter one letter from "
                                             f"{spaced(ALPHABET)}.")
        self._entered.append(letter)
        if len(self._entered) < CODE_LENGTH:
            return Outcome(0.0, False, False)
        self._judged = True
        if self._success():
            return Outcome(1.0, True, False, f"The {self._family} lock opens.")
        return Outcome(0.0, True, False, f"Wrong code {spaced(self._entered)}. The {self._family} lock opens with "
                                         f"{spaced(self.code)}.")

    def _state_text(self, with_state: bool) -> str:
        if self._judged:
            return f"The {self._family} lock on the {self._place} has been tried."
        shown = " ".join(self._entered + ["_"] * (CODE_LENGTH - len(self._entered)))
        left = CODE_LENGTH - len(self._entered)
        return (f"The {self._family} lock on the {self._place}. Code so far: {shown} "
                f"({left} letter{'s' if left != 1 else ''} to go).")

    def _admissible_actions(self) -> list[str]:
        return list(ALPHABET)

    def _success(self) -> bool:
        return tuple(self._entered) == self.code

    def _score(self) -> float:
        return sum(a == b for a, b in zip(self._entered, self.code)) / CODE_LENGTH

    def make_expert(self):
        return lambda obs, info: self.code[min(len(self._entered), CODE_LENGTH - 1)]


#: Entry point of ``seed/CodeLock-v0``: :class:`CodeLockEnv` inside gymnasium's ``TimeLimit``.
make = time_limited(CodeLockEnv)
