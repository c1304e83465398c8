"""TRL adapter: train TRL's ``GRPOTrainer`` (trl >= 1.16) on any ``seed/`` env.

Two of TRL's multi-turn hooks are supported:

1. **Free-text actions** (:class:`SeedRolloutFunc`, passed as ``rollout_func``): each dataset row is
   one task (its first rendered prompt, ``task_id`` and reset ``seed``). For each prompt TRL hands
   over, the rollout plays a whole episode as one conversation: the model's responses are sampled
   token by token (mask 1, their log-probs recorded) and each next observation is appended as a user
   turn (env tokens, mask 0 in ``env_mask``). The episode return goes to the reward function
   :func:`episode_return_reward` through the extra field ``episode_return``.
2. **Tool calls** (:func:`make_tool_environment`, passed as ``environment_factory``): a class whose
   ``reset(**row)`` starts the task and returns its text, with one typed method per action verb
   (TRL exposes them as tools) and ``get_reward`` returning the episode return.

TRL repeats every row ``num_generations`` times in a batch; repeats of a row are the same task with
the same reset seed, so a GRPO group is G rollouts of one identical start state.

The env stack is :func:`wrappers.make_agent_env`, the one the SEED trainer builds, with the env's own
prompt wording, step budget and answer format. One difference, on purpose: unlike
:mod:`seed_train.rollout` (one sample per step, prompts re-rendered with a history window), TRL trains
on the concatenated conversation, so the rollout samples from that same conversation (the model sees
the whole episode so far) and the renderer's own history is off (``history=0``).
"""
from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

import seed_envs  # noqa: F401  (registers the ids)
from seed_envs.core import ToolVerb
from seed_train.generation import HFGenerateBackend
from seed_train.codec import encode_prompt
from wrappers import PromptParts, make_agent_env, render_prompt
from wrappers.stack import default_tools
from wrappers.tools import GENERIC_TOOL

_SENTINEL = "\u2063SEED-RESPONSE\u2063"  # stands in for a response when rendering the turn template


@dataclass(frozen=True)
class TaskEnv:
    """Which env the adapter builds for each episode: the arguments of :func:`wrappers.make_agent_env`
    (as :class:`seed_train.rollout.EnvSpec`), where None is the env's own agent default."""

    env_id: str
    split: str = "train"
    template: str | None = None
    action_format: str | None = None
    format_penalty: float = 0.1
    max_steps: int | None = None
    env_kwargs: dict = field(default_factory=dict)

    def make(self) -> gym.Env:
        # history=0: TRL's conversation already carries every earlier turn.
        return make_agent_env(self.env_id, split=self.split, template=self.template, history=0,
                              max_steps=self.max_steps, action_format=self.action_format,
                              format_penalty=self.format_penalty, env_kwargs=self.env_kwargs)


def task_rows(task: TaskEnv, task_ids: Sequence[str], *, base_seed: int = 0) -> list[dict[str, Any]]:
    """One dataset row per task: ``{"prompt": first prompt, "task_id", "seed"}`` (seed = base_seed + i)."""
    env = task.make()
    try:
        rows = []
        for i, task_id in enumerate(task_ids):
            obs, _ = env.reset(seed=base_seed + i, options={"task_id": task_id})
            rows.append({"prompt": obs["prompt"], "task_id": task_id, "seed": base_seed + i})
        return rows
    finally:
        env.close()


def follow_up_text(parts: Mapping[str, Any]) -> str:
    """A later turn's user message: the observation (with admissible actions and format), no intro or task."""
    return render_prompt(PromptParts.from_dict({**dict(parts), "intro": "", "task": None}))


def turn_suffix_ids(tokenizer: Any, user_text: str, *, response_finished: bool) -> list[int]:
    """Token ids that close the assistant turn and open the next one with ``user_text`` (env tokens).

    Derived from the chat template itself (rendered around a sentinel response), so it works for any
    ChatML-like template. When the response already ended with the eos token (sampled, so not an env
    token) that token is not repeated.
    """
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": _SENTINEL},
                {"role": "user", "content": user_text}]
    full = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    rest = full[full.index(_SENTINEL) + len(_SENTINEL):]
    eos = tokenizer.eos_token or ""
    if response_finished and eos and rest.startswith(eos):
        rest = rest[len(eos):]
    return list(tokenizer(rest, add_special_tokens=False)["input_ids"])


@dataclass
class Episode:
    """One conversation-mode episode being played."""

    env: gym.Env
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    episode_return: float = 0.0
    success: bool = False
    done: bool = False
    turns: int = 0


class SeedRolloutFunc:
    """TRL ``rollout_func`` playing multi-turn ``seed/`` episodes with free-text actions.

    Args:
        task: the env to play.
        rows: the dataset rows (from :func:`task_rows`); prompts are looked up here to find each
            prompt's task id and reset seed.
        max_new_tokens: tokens per turn; the whole completion is also capped by the trainer's
            ``args.max_completion_length`` (an episode that hits it ends there, return so far).
        temperature: sampling temperature (default: the trainer's ``args.temperature``).

    Returns (per prompt, in order): ``prompt_ids``, ``completion_ids``, ``logprobs``, ``env_mask``
    (1: sampled token, 0: env token; log-probs of env tokens are 0) and the extra fields
    ``episode_return``, ``episode_success`` and ``task_id`` for reward functions.
    """

    def __init__(self, task: TaskEnv, rows: Sequence[Mapping[str, Any]], *, max_new_tokens: int = 48,
                 temperature: float | None = None) -> None:
        self.task = task
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self._starts: dict[str, tuple[str, int]] = {}
        for row in rows:
            self._starts[str(row["prompt"])] = (str(row["task_id"]), int(row["seed"]))
        self._pool: list[gym.Env] = []
        self.calls = 0

    def _envs(self, n: int) -> list[gym.Env]:
        while len(self._pool) < n:
            self._pool.append(self.task.make())
        return self._pool[:n]

    def _start(self, prompt: Any) -> tuple[str, int]:
        text = prompt if isinstance(prompt, str) else prompt[-1]["content"]  # conversational rows
        if text not in self._starts:
            raise KeyError("rollout_func: a prompt is not one of the task rows this adapter was built with")
        return self._starts[text]

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list]:
        tokenizer = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        backend = HFGenerateBackend(model, tokenizer)
        args = trainer.args
        budget = int(getattr(args, "max_completion_length", None) or 256)
        temperature = self.temperature if self.temperature is not None else float(getattr(args, "temperature", 1.0))
        # Distinct sampling seeds per call and per process; the reset seed comes from the row, so the
        # members of a group start identically but sample independently.
        seed = int(args.seed) * 1_000_003 + 7919 * trainer.accelerator.process_index + 104_729 * self.calls
        self.calls += 1
        episodes = []
        for env, prompt in zip(self._envs(len(prompts)), prompts):
            task_id, reset_seed = self._start(prompt)
            obs, _ = env.reset(seed=reset_seed, options={"task_id": task_id})
            episodes.append(Episode(env, encode_prompt(tokenizer, obs["prompt"])))
        turn = 0
        while True:
            active = [e for e in episodes if not e.done]
            if not active:
                break
            contexts = [e.prompt_ids + e.completion_ids for e in active]
            room = [budget - len(e.completion_ids) for e in active]
            gens = backend.generate(contexts, max_new_tokens=max(1, min(self.max_new_tokens, min(room))),
                                    temperature=temperature, seed=seed + turn)
            for e, gen in zip(active, gens):
                self._play_turn(e, gen, tokenizer, budget)
            turn += 1
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": [e.logprobs for e in episodes],
            "env_mask": [e.env_mask for e in episodes],
            "episode_return": [e.episode_return for e in episodes],
            "episode_success": [e.success for e in episodes],
            "task_id": [self._start(p)[0] for p in prompts],
        }

    @staticmethod
    def _play_turn(e: Episode, gen: Any, tokenizer: Any, budget: int) -> None:
        e.completion_ids += gen.response_token_ids
        e.logprobs += gen.response_logprobs
        e.env_mask += [1] * len(gen.response_token_ids)
        obs, reward, terminated, truncated, info = e.env.step(gen.text)
        e.episode_return += float(reward)
        e.success = bool(info.get("success", False))
        e.turns += 1
        if terminated or truncated:
            e.done = True
            return
        suffix = turn_suffix_ids(tokenizer, follow_up_text(info["prompt_parts"]), response_finished=gen.finished)
        # Leave room for at least a few sampled tokens; otherwise the episode ends here (cut, return so far).
        if len(e.completion_ids) + len(suffix) + 4 > budget:
            e.done = True
            return
        e.completion_ids += suffix
        e.logprobs += [0.0] * len(suffix)
        e.env_mask += [0] * len(suffix)

    def close(self) -> None:
        for env in self._pool:
            env.close()
        self._pool = []


def episode_return_reward(completions: Sequence[Any], episode_return: Sequence[float], **kwargs: Any) -> list[float]:
    """TRL reward function: the episode return :class:`SeedRolloutFunc` computed."""
    return [float(r) for r in episode_return]


def make_dataset(rows: Sequence[Mapping[str, Any]]):
    """A ``datasets.Dataset`` of the rows (imports datasets, a TRL dependency)."""
    from datasets import Dataset

    return Dataset.from_list([dict(r) for r in rows])


# ------------------------------------------------------------------------------ tool calling
# ToolVerb (seed_envs.core) is the data an env declares its verbs with (agent_defaults.tool_verbs); the
# generic verb and the lookup are the agent stack's (wrappers.tools), shared with the "tools" answer format.
GENERIC_VERB = GENERIC_TOOL


def env_tool_verbs(env_id: str) -> tuple[ToolVerb, ...]:
    """The tool verbs ``env_id`` declares (``agent_defaults.tool_verbs``), else one generic ``act(action)``."""
    return default_tools(env_id)


def _tool_method(verb: ToolVerb) -> Callable[..., str]:
    """A method ``verb.name(self, **args) -> str`` with a signature, type hints and a Google docstring,
    which is what TRL / transformers read to build the tool's JSON schema."""

    def method(self, **kwargs: str) -> str:
        return self._act(verb.action.format(**kwargs))

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(a, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=str) for a in verb.args]
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**{a: str for a in verb.args}, "return": str}
    arg_doc = "".join(f"\n    {a}: {d}" for a, d in verb.args.items())
    method.__doc__ = (f"{verb.description}\n\n" + (f"Args:{arg_doc}\n\n" if verb.args else "")
                      + "Returns:\n    The observation after the action.")
    method.__name__ = method.__qualname__ = verb.name
    return method


class _ToolEnvironment:
    """Base of the classes :func:`make_tool_environment` builds (TRL calls the class with no arguments)."""

    task: TaskEnv

    def __init__(self) -> None:
        self._env = self.task.make()
        self._return = 0.0
        self._done = False
        self.success = False

    def reset(self, **row: Any) -> str:
        """Start the row's task (``task_id``, ``seed``; both optional) and return its first observation."""
        options = {"task_id": row["task_id"]} if row.get("task_id") is not None else None
        seed = row.get("seed")
        _, info = self._env.reset(seed=None if seed is None else int(seed), options=options)
        self._return, self._done, self.success = 0.0, False, False
        # The intro and answer format are left out: the tools' schema tells the model how to act.
        return render_prompt(PromptParts.from_dict({**info["prompt_parts"], "intro": "", "format": ""}))

    def _act(self, action: str) -> str:
        if self._done:
            return "The episode has ended."
        # The parser is bypassed: a tool call is already a clean action.
        _, reward, terminated, truncated, info = self._env.env.step(action)
        self._return += float(reward)
        self.success = bool(info.get("success", False))
        self._done = bool(terminated or truncated)
        text = follow_up_text({**info["prompt_parts"], "format": ""})
        return text + ("\nThe episode has ended." if self._done else "")

    def get_reward(self) -> float:
        """The episode return so far."""
        return self._return


def make_tool_environment(task: TaskEnv, verbs: Sequence[ToolVerb] | None = None) -> type:
    """A class for TRL's ``environment_factory``: ``reset(**row) -> str``, one tool per verb, ``get_reward``.

    ``verbs`` default to the verbs the env declares (:func:`env_tool_verbs`; else one generic ``act(action)``).
    """
    verbs = tuple(verbs) if verbs is not None else env_tool_verbs(task.env_id)
    names = [v.name for v in verbs]
    if len(set(names)) != len(names) or {"reset", "get_reward"} & set(names):
        raise ValueError(f"verbs: names must be unique and not reset/get_reward, got {names}")
    namespace: dict[str, Any] = {"task": task, "__doc__": f"Tool-calling environment for {task.env_id}."}
    namespace.update({v.name: _tool_method(v) for v in verbs})
    name = task.env_id.split("/")[-1].split("-")[0] + "ToolEnvironment"
    return type(name, (_ToolEnvironment,), namespace)
