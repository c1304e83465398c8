"""Verifiers adapter: any ``seed/`` env as a multi-turn environment of ``verifiers`` 0.4.

``verifiers`` 0.4 is the ``verifiers.v1`` API (``import verifiers.v1 as vf``). It has no
``MultiTurnEnv`` / ``env_response`` / ``Rubric`` any more; a multi-turn environment is three plugins
resolved by one id (``verifiers/v1/utils/loaders.py``: ``load_taskset``, ``environment_class``,
``default_harness_id``), all exported from this module:

- :class:`SeedTaskset` (a ``vf.Taskset``): the dataset, one :class:`SeedTask` per task of the split's
  fixed panel (``gym.make(env_id, split=split).unwrapped.task_ids()``, the first ``num_examples`` when
  > 0). A task's data carries the env's first prompt (``prompt``), the durable task id (``id``) and
  ``info = {"env_id", "split", "task_id", "seed"}``: what the rollout resets with.
- :class:`SeedGymEnv` (a ``vf.Env``): ``run(task, agents)`` plays one episode, the env acting as the
  run's user through ``agents.player.interaction(task)`` (the pattern of verifiers' own TextArena and
  OpenEnv tasksets). It builds the episode's own env with :func:`wrappers.make_agent_env` (the env's
  prompt, answer format and step budget, the stack the SEED trainer plays), resets it with
  ``seed`` and ``options={"task_id": ...}`` and checks the prompt equals the task's; then each model
  reply (the raw text of the assistant message) is ``env.step``'s action, the env's own
  :class:`wrappers.LLMActionParser` parses it (``info["format_error"]``), and the env's next
  ``obs["prompt"]`` is the next user turn, until ``terminated`` or ``truncated`` or verifiers' turn
  limit (``max_turns``, default the env's agent budget :func:`wrappers.stack.default_max_steps`; the
  env is made with the same ``max_steps``, so its own ``TimeLimit`` ends the episode first). The env
  runs on one worker thread of its own (make, reset, step and close), off the event loop, and is
  closed when the rollout ends, whatever ended it.
- :class:`SeedChatHarness` (a ``vf.Harness``): the program that plays the seat. verifiers' built-in
  chat harnesses (``null``, ``bash``) run a PEP 723 script whose dependencies ``uv`` installs from PyPI;
  this one runs in process, as ``vf.Harness.launch`` allows ("a harness may run its loop in-process
  ... as long as every model call goes through ``endpoint`` + ``secret``"): one chat completion per
  segment, sent with ``openai.AsyncOpenAI`` to the rollout's interception endpoint, which records it
  on the trace, applies the run's sampling and limits and forwards it to the model's server.

**The conversation.** Our prompt already holds the history the env wants (its own window of past
steps), so the model is sent *only the env's latest prompt* as the user message, each turn: exactly
the request the SEED trainer and ``seed-envs eval --agent openai`` send (``[{"role": "user",
"content": obs["prompt"]}]``). verifiers' default ``Harness.resume`` would instead replay the whole
conversation (every earlier prompt and reply, then the new prompt), repeating the history the prompt
already carries; :meth:`SeedChatHarness.resume` overrides it. verifiers records each turn as a new root
of the trace's message graph, so ``trace.branches`` has one branch per step (prompt, reply): the
per-step samples the trainer uses; ``trace.assistant_messages`` lists the replies in order.

**The reward** is the env's own, read from the final step's ``info`` (kept on
``trace.info["seed_env"]``): :meth:`SeedTask.success` (1.0 or 0.0, weight 1) is the reward;
:meth:`SeedTask.env_metrics` records ``score`` (the env's score), ``steps`` and ``format_errors`` as
metrics (recorded, never summed into the reward). A format error costs nothing beyond what the env does
with the empty action it receives (an invalid step).

**Loading.** :func:`load_environment` builds one with verifiers' own loader (``vf.load_environment``
over ``vf.resolve_env_config``). verifiers 0.4 finds plugins by importing a top-level module named
after the id (no entry-point group), so importing this module registers it as
``seed_gym_verifiers`` (id :data:`PLUGIN_ID`, ``"seed-gym-verifiers"``); :func:`evaluate` runs
episodes the way ``vf-eval``'s in-process runner does (``env.serving()``, ``env.run_slot``).

Text only: an image observation is not sent, and the ``"tools"`` answer format is not offered as tool
schemas (the envs' defaults are text formats).
"""
from __future__ import annotations

import asyncio
import functools
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.dialects.chat import message_to_wire
from verifiers.v1.types import content_text

import seed_envs  # noqa: F401  (registers the ids)
from wrappers import make_agent_env
from wrappers.stack import default_max_steps

#: The verifiers id of this module's taskset, env and harness (``--env.taskset.id`` in ``vf-eval``).
PLUGIN_ID = "seed-gym-verifiers"
#: The top-level module name verifiers imports for :data:`PLUGIN_ID` (its loader: ``-`` -> ``_``).
PLUGIN_MODULE = "seed_gym_verifiers"
#: Where the rollout keeps the episode's outcome on the trace (read by the task's reward and metrics).
OUTCOME_KEY = "seed_env"

__all__ = [
    "PLUGIN_ID",
    "SeedChatHarness",
    "SeedChatHarnessConfig",
    "SeedEnvConfig",
    "SeedGymEnv",
    "SeedTask",
    "SeedTaskData",
    "SeedTaskset",
    "SeedTasksetConfig",
    "evaluate",
    "load_environment",
    "model_context",
]


# ----------------------------------------------------------------------------------------- taskset
class SeedTasksetConfig(vf.TasksetConfig):
    """Which env, split and tasks (``--env.taskset.*``); the env is built by :func:`wrappers.make_agent_env`."""

    id: str = PLUGIN_ID
    env_id: str = "seed/EZPoints-v0"
    """A registered gymnasium id (``seed/...``)."""
    split: str = "test"
    num_examples: int = -1
    """The first ``num_examples`` tasks of the panel; <= 0: all of them."""
    base_seed: int = 0
    """Task ``i`` of the panel resets with seed ``base_seed + i`` (as the TRL adapter's rows)."""
    max_steps: int | None = None
    """The agent's step budget (``make_agent_env(max_steps=...)``); None: the env's own."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Further ``gym.make`` arguments."""


class SeedTaskData(vf.TaskData):
    info: dict[str, Any]
    """``{"env_id", "split", "task_id", "seed"}``: what the rollout resets the env with."""


class SeedTask(vf.Task[SeedTaskData, vf.State, vf.TaskConfig]):
    """One task of the panel, scored from the episode's final ``info`` (``trace.info["seed_env"]``)."""

    @vf.reward(weight=1.0)
    async def success(self, trace: vf.Trace) -> float:
        """The env's ``info["success"]`` at the end of the episode: 1.0 or 0.0."""
        return 1.0 if trace.info[OUTCOME_KEY]["success"] else 0.0

    @vf.metric
    async def env_metrics(self, trace: vf.Trace) -> dict[str, float]:
        """``score`` (the env's ``info["score"]``), ``steps`` and ``format_errors``: recorded, not rewarded."""
        outcome = trace.info[OUTCOME_KEY]
        return {"score": float(outcome["score"]), "steps": float(outcome["steps"]),
                "format_errors": float(outcome["format_errors"])}


def make_env(config: SeedTasksetConfig):
    """The agent env of ``config``: ``make_agent_env(env_id, split=..., max_steps=..., env_kwargs=...)``."""
    return make_agent_env(config.env_id, split=config.split, max_steps=config.max_steps,
                          env_kwargs=dict(config.env_kwargs))


class SeedTaskset(vf.Taskset[SeedTask, SeedTasksetConfig]):
    """One task per task id of the split's panel, each with the env's first prompt for it."""

    def load(self) -> Iterator[SeedTask]:
        config = self.config
        env = make_env(config)
        try:
            task_ids: Sequence[Any] = tuple(env.unwrapped.task_ids())
            if config.num_examples > 0:
                task_ids = task_ids[:config.num_examples]
            for i, task_id in enumerate(task_ids):
                seed = config.base_seed + i
                obs, _ = env.reset(seed=seed, options={"task_id": task_id})
                yield SeedTask(SeedTaskData(
                    id=str(task_id),
                    name=f"{config.env_id}:{config.split}:{task_id}",
                    prompt=obs["prompt"],
                    info={"env_id": config.env_id, "split": config.split, "task_id": task_id, "seed": seed},
                ), config.task)
        finally:
            env.close()


# ----------------------------------------------------------------------------------------- harness
class SeedChatHarnessConfig(vf.HarnessConfig):
    id: str = PLUGIN_ID
    request_timeout: float = Field(600.0, gt=0)
    """Seconds one chat completion may take (through the interception to the model's server)."""
    max_retries: int = Field(2, ge=0)
    """The openai client's retries of a 5xx/429 (the interception replays a retried call, never twice)."""


class SeedChatHarness(vf.Harness[SeedChatHarnessConfig]):
    """One chat completion per segment, in process: the task's prompt first, then only the latest user turn."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_MCP = False
    SUPPORTS_TOOL_INTERCEPTION = False
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data) -> vf.ProgramResult:
        system, prompt = self.resolve_prompt(data)
        if isinstance(prompt, str):
            messages = [{"role": "user", "content": prompt}]
        else:
            messages = [message_to_wire(m) for m in prompt or []]
        return await self._complete(ctx, endpoint, secret, system, messages)

    async def resume(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, messages,
                     tool_interception_url=None) -> vf.ProgramResult:
        # Only the new user turn: the env's prompt already carries the history it wants.
        return await self._complete(ctx, endpoint, secret, data.system_prompt,
                                    [message_to_wire(m) for m in messages])

    async def _complete(self, ctx, endpoint: str, secret: str, system: str | None,
                        messages: list[dict]) -> vf.ProgramResult:
        import openai

        if system:
            messages = [{"role": "system", "content": system}, *messages]
        client = openai.AsyncOpenAI(base_url=endpoint, api_key=secret, timeout=self.config.request_timeout,
                                    max_retries=self.config.max_retries)
        try:
            # The interception records the reply on the trace; the harness needs nothing from it.
            await client.chat.completions.create(model=ctx.model, messages=messages)
        except openai.APIError as error:
            # A refused turn (a limit, a @stop) is a clean end; any other failure is raised by the harness
            # base (vf.Harness._check_result) with the rollout's recorded model error in its place.
            return vf.ProgramResult(exit_code=1, stdout="", stderr=f"{type(error).__name__}: {error}")
        finally:
            await client.close()
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


# --------------------------------------------------------------------------------------------- env
class SeedEnvConfig(vf.EnvConfig):
    """The env's one seat, ``player`` (``--env.player.*``): in process, no network notice."""

    player: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig(), network_notice=False)


def _reply_text(segment: vf.Segment) -> str:
    """The raw text of the segment's last assistant message (unstripped: the env's parser reads it as is)."""
    for message in reversed(segment.messages):
        if isinstance(message, vf.AssistantMessage):
            return content_text(message.content)
    return ""


class SeedGymEnv(vf.Env[SeedEnvConfig]):
    """One episode of a ``seed/`` env per task: the env plays the user, the seat's replies are its actions."""

    async def run(self, task: SeedTask, agents: vf.Agents) -> None:
        config = self.taskset.config
        row = task.data.info
        loop = asyncio.get_running_loop()
        worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seed-env")

        def call(fn, *args, **kwargs):
            return loop.run_in_executor(worker, functools.partial(fn, *args, **kwargs))

        env = None
        try:
            env = await call(make_env, config)
            obs, info = await call(env.reset, seed=row["seed"], options={"task_id": row["task_id"]})
            if obs["prompt"] != task.data.prompt:
                raise RuntimeError(f"{config.env_id} task {row['task_id']!r}: the reset prompt differs from the "
                                   "taskset's (the env is not deterministic for a task id and seed)")
            outcome = {"env_id": config.env_id, "split": config.split, "task_id": row["task_id"],
                       "seed": row["seed"], "steps": 0, "format_errors": 0, "return": 0.0,
                       "success": bool(info.get("success", False)), "score": float(info.get("score", 0.0)),
                       "terminated": False, "truncated": False}
            async with agents.player.interaction(task) as interaction:
                interaction.trace.info[OUTCOME_KEY] = outcome
                segment = await interaction.turn()  # the task's prompt opens the exchange
                while not segment.terminated:  # terminated: verifiers refused the turn (max_turns, a @stop)
                    obs, reward, terminated, truncated, info = await call(env.step, _reply_text(segment))
                    outcome.update(steps=outcome["steps"] + 1,
                                   format_errors=outcome["format_errors"] + bool(info.get("format_error")),
                                   success=bool(info.get("success", False)),
                                   score=float(info.get("score", 0.0)), terminated=bool(terminated),
                                   truncated=bool(truncated))
                    outcome["return"] += float(reward)
                    if terminated or truncated:
                        interaction.trace.stop("env_terminated" if terminated else "env_truncated")
                        break
                    segment = await interaction.turn(obs["prompt"])
        finally:
            try:
                if env is not None:
                    await call(env.close)
            finally:
                worker.shutdown(wait=False)


# -------------------------------------------------------------------------------------- entry point
# verifiers imports a plugin by its id as a top-level module (no entry points): this one, under that name.
sys.modules.setdefault(PLUGIN_MODULE, sys.modules[__name__])


def load_environment(env_id: str = "seed/EZPoints-v0", split: str = "test", num_examples: int = -1,
                     max_turns: int | None = None, *, base_seed: int = 0, **env_kwargs: Any) -> SeedGymEnv:
    """A verifiers environment playing ``env_id``'s ``split`` panel (one task per task id).

    Args:
        env_id: a registered ``seed/`` id.
        split: the split whose panel is the dataset.
        num_examples: the first ``num_examples`` tasks; <= 0: all.
        max_turns: the episode's step budget (the env's ``max_steps`` and verifiers' turn limit);
            None: ``env_kwargs["max_steps"]``, else the env's agent budget
            (:func:`wrappers.stack.default_max_steps`), else the env's own episode length.
        base_seed: task ``i`` of the panel resets with seed ``base_seed + i``.
        **env_kwargs: further ``gym.make`` arguments.

    Built with verifiers' own loader (``vf.load_environment(vf.resolve_env_config(...))``).
    """
    if max_turns is not None and max_turns < 1:
        raise ValueError(f"max_turns: expected >= 1 or None, got {max_turns!r}")
    budget = max_turns if max_turns is not None else env_kwargs.get("max_steps") or default_max_steps(env_id)
    config = vf.resolve_env_config({
        "taskset": {"id": PLUGIN_ID, "env_id": env_id, "split": split, "num_examples": num_examples,
                    "base_seed": int(base_seed), "max_steps": budget, "env_kwargs": env_kwargs},
        "player": {"max_turns": budget},
    })
    env = vf.load_environment(config)
    assert isinstance(env, SeedGymEnv), type(env)
    return env


def model_context(base_url: str, model: str, *, max_tokens: int | None = None, temperature: float | None = 0.0,
                  api_key_var: str = "OPENAI_API_KEY", **sampling: Any) -> vf.ModelContext:
    """The model a run plays with: an OpenAI-compatible endpoint (``base_url`` ending in ``/v1``), its key read
    from ``$api_key_var`` (``"EMPTY"`` when unset), and the sampling verifiers imposes on every request."""
    return vf.ModelContext(model=model, client=vf.EvalClientConfig(base_url=base_url, api_key_var=api_key_var),
                           sampling=vf.SamplingConfig(max_tokens=max_tokens, temperature=temperature, **sampling))


async def evaluate(env: vf.Env, ctx: vf.ModelContext, *, rollouts_per_task: int = 1,
                   max_concurrent: int | None = None, tasks: Sequence[vf.Task] | None = None) -> list[vf.Episode]:
    """Play every task of ``env``'s taskset (or ``tasks``) ``rollouts_per_task`` times, as ``vf-eval``'s
    in-process runner does: ``env.serving()`` around ``env.run_slot`` for each of ``env.slots(task, n)``.
    Returns the episodes in task order (``episode.traces[0]`` is the seat's trace, its ``reward`` the env's)."""
    tasks = list(env.taskset) if tasks is None else list(tasks)
    semaphore = asyncio.Semaphore(max_concurrent) if max_concurrent else None
    async with env.serving():
        slots = [slot for task in tasks for slot in env.slots(task, rollouts_per_task)]
        return list(await asyncio.gather(*(env.run_slot(slot, ctx, semaphore) for slot in slots)))
