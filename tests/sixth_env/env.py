"""``test/WordReverse-v0``: write the word you are shown backwards, a letter string per try.

The sixth env of docs/adding-an-environment.md: everything an env needs, in one module beside its
registration line (``__init__.py``) and its test (``tests/test_sixth_env.py``). Nothing else in the
project names it.
"""
from __future__ import annotations

from typing import Any

from seed_envs.core import AgentDefaults, Outcome, SeedEnv, Task, quote_action, time_limited

#: The word panels: train and test share word lengths; unseen (out of distribution) has longer words.
WORDS = {
    "train": ("apple", "bread", "chair", "dance", "eagle", "flame", "grape", "house", "input", "jelly", "knife",
              "lemon", "mango", "night", "ocean", "piano"),
    "test": ("queen", "river", "stone", "table", "umbra", "vocal", "whale", "xenon", "yield", "zebra"),
    "unseen": ("blanket", "cabinet", "diamond", "eyebrow", "fortune", "gallery", "harvest", "iceberg"),
}
INSTRUCTION = "Write the word you are shown backwards (letters only)."


class WordReverseEnv(SeedEnv):
    """Reverse the word shown. Text only.

    ## Observation
    ``{"text": "Word: apple"}`` (with feedback on the line above after a wrong or invalid try).

    ## Actions
    A try: the reversed word, ASCII letters only and exactly as long as the word. Anything else is an
    invalid action (no reward, the episode goes on).

    ## Rewards
    1 for the right word (the episode ends, success), 0 otherwise; ``reward_mode="success"`` pays 10.

    ## Splits
    ``train`` (16 words), ``test`` (10 words of the same lengths), ``unseen`` (8 longer words).

    ## Arguments
    The contract's own (``split``, ``obs_mode``, ``max_steps``, ``data_dir``, ``reward_mode``,
    ``render_mode``), passed through to :class:`seed_envs.core.SeedEnv`.
    """

    default_max_steps = 3
    agent_defaults = AgentDefaults(
        prompt={
            "intro": "You are playing Word Reverse. Write the word you are shown backwards, as one string of letters.",
            "task_header": "Task: {task}",
        },
        history=1,
        max_steps=3,
        action_format="plain",  # a try is one bare word: no tags to learn (every player honours this)
        hindsight="sixth_env.hindsight:hindsight_rule",  # what Stage 1 annotates episodes with
    )

    def __init__(self, **contract: Any):
        super().__init__(**contract)
        self._word = ""
        self._solved = False

    def _build_panel(self):
        return [f"reverse/{self.split}/{word}" for word in WORDS[self.split]]

    def _start_task(self, task_id: str) -> Task:
        if task_id not in self.task_ids():
            raise ValueError(f"unknown task_id {task_id!r} for split {self.split!r}")
        self._word = task_id.rsplit("/", 1)[1]
        self._solved = False
        return Task(task_id, INSTRUCTION, f"{len(self._word)}-letter")

    def _apply(self, action: str) -> Outcome:
        if not (action.isascii() and action.isalpha() and len(action) == len(self._word)):
            return Outcome(0.0, False, True, f"Invalid try {quote_action(action)}: write {len(self._word)} letters.")
        self._solved = action.lower() == self._word[::-1]
        if self._solved:
            return Outcome(1.0, True, False)
        return Outcome(0.0, False, False, f"{action!r} is not the word backwards.")

    def _state_text(self, with_state: bool) -> str:
        return f"Word: {self._word}"

    def _success(self) -> bool:
        return self._solved

    def make_expert(self):
        return lambda obs, info: self._word[::-1]


#: Entry point of ``test/WordReverse-v0``: :class:`WordReverseEnv` inside gymnasium's ``TimeLimit``.
make = time_limited(WordReverseEnv)
