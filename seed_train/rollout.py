"""Multi-turn rollouts: groups of episodes, one batched generate call per turn, token-exact records.

Every env in a rollout is the same wrapper stack a user would build::

    TrajectoryRecorder(LLMActionParser(PromptRenderer(gym.make(env_id, ...))))

(:func:`wrappers.make_agent_env` builds the inner two layers, with the env's own agent defaults)

held in a gymnasium vector env on the chosen backend (``sync`` / ``async`` / ``ray``, see
:mod:`seed_train.env_backends`). Each turn the prompts of all active envs are tokenized once (chat
template) and generated together, and the vector env steps every env with its raw generated text,
carrying the prompt ids, sampled response ids and their log-probs (:class:`wrappers.TokenizedResponse`);
the recorder stores them with the step, so training never re-tokenizes text.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

import seed_envs  # noqa: F401  (registers the ids)
from seed_train.env_backends import SLOT_JOBS, make_vector_env
from seed_train.generation import GenerationBackend, forget_turns, takes_row_keys
from seed_train.codec import prompt_codec
from wrappers import PromptOverflow, TokenizedResponse, Trajectory, TrajectoryRecorder, make_agent_env
from wrappers.stack import default_max_steps


@dataclass(frozen=True)
class EnvSpec:
    """How to build one rollout env (everything the trainer knows about an env): the arguments of
    :func:`wrappers.make_agent_env`, where None is the env's own agent default."""

    env_id: str
    split: str
    template: str | None
    history: int | None
    action_format: str
    format_penalty: float
    max_steps: int | None = None
    env_kwargs: dict = field(default_factory=dict)
    prompt_fits: Callable[[str], bool] | None = None  # the model's prompt budget (codec.PromptTokenBudget)
    step_timeout_s: float = 0.0  # wall-clock limits on the env's own calls (wrappers.deadline; 0: none)
    episode_timeout_s: float = 0.0
    # OpenEnv servers serving env_id (seed-envs serve): envs are then seed/Remote-v0 sessions on them.
    remote_urls: tuple[str, ...] = ()

    def step_limit(self) -> int | None:
        """The episodes' step budget as :func:`wrappers.make_agent_env` resolves it (None: the env's own
        episode length, not declared)."""
        return self.max_steps or self.env_kwargs.get("max_steps") or default_max_steps(self.env_id)

    def gym_args(self, index: int = 0) -> tuple[str, dict]:
        """The id and ``gym.make`` arguments (split and max_steps aside) of env ``index``: ``env_id`` itself,
        or a session on server ``index`` mod the number of servers, which must serve the same env with
        the same arguments (the remote env checks; its expert plays the server's, for Stage 1)."""
        if not self.remote_urls:
            return self.env_id, dict(self.env_kwargs)
        url = self.remote_urls[index % len(self.remote_urls)]
        return seed_envs.REMOTE_ENV_ID, {"url": url, "env_id": self.env_id, "expert": True,
                                         "env_kwargs": dict(self.env_kwargs)}

    def make(self, sink, *, trajectory_in_info: bool = False, index: int = 0) -> gym.Env:
        env_id, env_kwargs = self.gym_args(index)
        env = make_agent_env(env_id, split=self.split, template=self.template, history=self.history,
                             max_steps=self.max_steps, action_format=self.action_format,
                             format_penalty=self.format_penalty, env_kwargs=env_kwargs,
                             prompt_fits=self.prompt_fits, step_timeout_s=self.step_timeout_s,
                             episode_timeout_s=self.episode_timeout_s)
        return TrajectoryRecorder(env, sink=sink, env_id=self.env_id, trajectory_in_info=trajectory_in_info)


@dataclass(frozen=True)
class EpisodeJob:
    """One episode to play: which task, with which reset seed, in which GRPO group."""

    task_id: str
    seed: int
    group_id: str
    meta: dict = field(default_factory=dict)
    member: int = 0  # index within its group: the group's rollouts sample differently

    def sampling_seed(self, seed: int, turn: int) -> int:
        """This episode's sampling seed at ``turn``: a function of the job alone, never of its batch."""
        key = f"{seed}/{turn}/{self.group_id}/{self.member}/{self.task_id}".encode()
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


@dataclass
class RolloutStats:
    generate_s: float = 0.0
    env_s: float = 0.0
    generated_tokens: int = 0
    turns: int = 0
    # Prompt tokens of the generate calls, and the prompt positions the backend actually ran through the
    # model (padding included; fewer than the prompt tokens with prefix sharing). 0 for a backend that
    # does not count them (``HFGenerateBackend.prefill_tokens``).
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    generate_calls: int = 0
    prompt_overflows: int = 0  # episodes ended because their next prompt was over the budget


def group_jobs(task_ids: Sequence[str], group_size: int, *, base_seed: int, prefix: str, meta: dict | None = None) -> list[EpisodeJob]:
    """``group_size`` jobs per task, all with the same task and reset seed (a GRPO group)."""
    jobs = []
    for g, task_id in enumerate(task_ids):
        for member in range(group_size):
            jobs.append(EpisodeJob(task_id=task_id, seed=base_seed + g, group_id=f"{prefix}-g{g}", meta=dict(meta or {}),
                                   member=member))
    return jobs


class EnvPool:
    """The rollout vector env of one EnvSpec on one backend, rebuilt larger when a batch needs more envs.

    A batch smaller than the vector env leaves the extra slots idle (they cost one no-op step each).
    """

    def __init__(self, spec: EnvSpec, backend: str = "sync", *, ray_cpus_per_env: float = 0.0):
        self.spec = spec
        self.backend = backend
        self.ray_cpus_per_env = ray_cpus_per_env
        self.vector_env: gym.vector.VectorEnv | None = None
        self._obs_mode: str | None = None

    def get(self, n: int) -> gym.vector.VectorEnv:
        if self.vector_env is None or self.vector_env.num_envs < n:
            self.close()
            self.vector_env = make_vector_env(self.spec, n, self.backend, ray_cpus_per_env=self.ray_cpus_per_env)
        return self.vector_env

    def obs_mode(self) -> str:
        """What the env shows: its own ``obs_mode`` (``text``, ``image`` or ``text+image``), asked of the built
        env; an env without one is text-only. (The observation space cannot tell ``image`` from
        ``text+image``: both are a text and an image, the text in ``image`` mode without the state.)"""
        if self._obs_mode is None:
            try:
                self._obs_mode = str(self.get(1).call("obs_mode")[0])
            except AttributeError:
                self._obs_mode = "text"
        return self._obs_mode

    def close(self) -> None:
        if self.vector_env is not None:
            self.vector_env.close()
            self.vector_env = None

    def discard(self) -> None:
        """Drop a vector env whose worker process died (``async``): its processes are ended, the next
        :meth:`get` builds a fresh one."""
        if self.vector_env is not None:
            try:
                self.vector_env.close(terminate=True) if self.backend == "async" else self.vector_env.close()
            except Exception:  # noqa: BLE001  (a broken pipe may fail to close too)
                pass
            self.vector_env = None


#: What a gymnasium AsyncVectorEnv raises when one of its worker processes died (killed, out of memory).
WORKER_DIED = (EOFError, BrokenPipeError, ConnectionResetError)


def _failed_trajectory(job: EpisodeJob, spec: EnvSpec, error: str) -> Trajectory:
    """What is left of an episode whose env crashed (Ray backend): no steps, marked failed."""
    return Trajectory(episode_id=f"{job.group_id}-failed", env_id=spec.env_id, task_id=job.task_id, task="",
                      category="", split=spec.split, seed=job.seed, group_id=job.group_id,
                      meta={**job.meta, "ended_by": "env_failed", "env_failed": True, "env_error": error}).finish(
                          success=False, score=0.0)


def _at(infos: dict, key: str, i: int) -> Any:
    """Env ``i``'s entry of a gymnasium vector info dict, or None where it has none."""
    mask = infos.get("_" + key)
    return infos[key][i] if mask is not None and mask[i] else None


def run_episodes(
    backend: GenerationBackend,
    codec: Any,
    pool: EnvPool,
    jobs: Sequence[EpisodeJob],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    seed: int = 0,
    stats: RolloutStats | None = None,
    on_finished: Callable[[int], None] | None = None,
    max_prompt_tokens: int = 0,
    on_trajectory: Callable[[Trajectory], None] | None = None,
    on_turn: Callable[[int, int], None] | None = None,
) -> list[Trajectory]:
    """Play every job to its end; trajectories come back in job order. ``on_finished(k)`` is told each
    turn how many episodes ended in it (a progress bar's ``update``); ``on_turn(turns, playing)`` after each
    turn how many turns were played and how many episodes go on (progress between endings:
    :func:`seed_train.progress.turn_reporter`); ``on_trajectory(t)`` gets each episode's trajectory as it
    ends (e.g. to write it at once, so a crash later loses nothing played).

    ``max_prompt_tokens`` > 0: an episode whose encoded prompt is longer is not generated for; it ends
    truncated (:class:`wrappers.PromptOverflow`, ``meta["ended_by"] = "prompt_overflow"``) rather than
    crash the model or lose the prompt's head. (The spec's ``prompt_fits`` has already left out what
    history it could.)

    Each episode samples with its own seed per turn (:meth:`EpisodeJob.sampling_seed`), so a job plays
    the same episode whatever else is in the batch: on every env backend, with any batch size or job
    order, and on any data-parallel rank (up to float rounding of batched forward passes). An episode whose env crashed (Ray) comes back with no steps and
    ``meta["env_failed"]``; the trainer leaves it out of its group.

    Each episode's job index is its ``row_keys`` entry, so a backend that reuses a previous turn's KV
    (:class:`seed_train.generation.HFGenerateBackend`) finds it; the backend forgets it all before and
    after the rollout.
    """
    stats = stats if stats is not None else RolloutStats()
    codec = prompt_codec(codec)  # the policy's codec (a tokenizer or processor is taken too)
    envs = pool.get(len(jobs))
    codec.check_sees(pool.spec.env_id, pool.obs_mode())
    size = envs.num_envs
    slot_jobs: list[dict | None] = [
        {"options": {"task_id": job.task_id, "group_id": job.group_id, "trajectory_meta": dict(job.meta)}}
        for job in jobs
    ] + [None] * (size - len(jobs))
    seeds = [job.seed for job in jobs] + [None] * (size - len(jobs))
    t0 = time.perf_counter()
    try:
        obs, _ = envs.reset(seed=seeds, options={SLOT_JOBS: slot_jobs})
    except WORKER_DIED:  # a worker died between batches: a fresh vector env plays this one
        pool.discard()
        envs = pool.get(len(jobs))
        obs, _ = envs.reset(seed=seeds, options={SLOT_JOBS: slot_jobs})
    stats.env_s += time.perf_counter() - t0
    prompts_text = list(obs["prompt"])
    # A vision-language policy sees each env's current image (obs_mode image / text+image) with its prompt.
    with_images = codec.sees_images and "image" in obs
    finished: dict[int, Trajectory] = {}
    active = list(range(len(jobs)))
    turn = 0
    takes_keys = takes_row_keys(backend)
    forget_turns(backend)
    while active:
        encoded = {i: codec.encode(prompts_text[i], images=[obs["image"][i]] if with_images else None)
                   for i in active}
        actions: list[str] = [""] * size  # idle slots ignore theirs
        for i in active:
            if max_prompt_tokens and len(encoded[i]) > max_prompt_tokens:
                actions[i] = PromptOverflow(len(encoded[i]), max_prompt_tokens)
                stats.prompt_overflows += 1
        rows = [i for i in active if not isinstance(actions[i], PromptOverflow)]
        prompts = [encoded[i] for i in rows]
        t0 = time.perf_counter()
        prefilled = getattr(backend, "prefill_tokens", 0)
        generations = backend.generate(prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                                       top_p=top_p, greedy=greedy,
                                       row_seeds=[jobs[i].sampling_seed(seed, turn) for i in rows],
                                       **({"row_keys": list(rows)} if takes_keys else {})) if rows else []
        stats.generate_s += time.perf_counter() - t0
        stats.prefill_tokens += getattr(backend, "prefill_tokens", 0) - prefilled
        stats.prompt_tokens += sum(len(p) for p in prompts)
        stats.generate_calls += bool(rows)
        stats.generated_tokens += sum(len(g.response_token_ids) for g in generations)
        for i, gen in zip(rows, generations):
            actions[i] = TokenizedResponse(gen.text, gen.prompt_token_ids, gen.response_token_ids,
                                           gen.response_logprobs)
        t0 = time.perf_counter()
        try:
            obs, _, terminated, truncated, infos = envs.step(tuple(actions))
        except WORKER_DIED as e:  # an env worker process died mid-batch: every episode still playing ends
            pool.discard()        # as an env failure (the other workers' states went with the vector env)
            for i in active:
                finished[i] = _failed_trajectory(jobs[i], pool.spec, f"env worker process died ({type(e).__name__}); "
                                                 "the vector env was rebuilt")
            if on_finished is not None:
                on_finished(len(active))
            if on_trajectory is not None:
                for i in active:
                    on_trajectory(finished[i])
            active = []
            break
        stats.env_s += time.perf_counter() - t0
        prompts_text = list(obs["prompt"])
        still_active = []
        for i in active:
            if not (terminated[i] or truncated[i]):
                still_active.append(i)
            elif _at(infos, "env_failed", i):  # the steps played so far where the slot kept them
                trajectory = _at(infos, "trajectory", i)
                finished[i] = trajectory if trajectory is not None else _failed_trajectory(
                    jobs[i], pool.spec, str(_at(infos, "env_error", i)))
            elif (trajectory := _at(infos, "trajectory", i)) is not None:
                finished[i] = trajectory
        if on_trajectory is not None:
            for i in active:
                if i not in still_active and i in finished:
                    on_trajectory(finished[i])
        if on_finished is not None and len(still_active) < len(active):
            on_finished(len(active) - len(still_active))
        active = still_active
        turn += 1
        if on_turn is not None:
            on_turn(turn, len(active))
    forget_turns(backend)  # frees the kept KV before the update needs the memory
    if pool.vector_env is None:  # (discarded: a worker died; nothing to drain)
        stats.turns += turn
        return [finished[i] for i in range(len(jobs))]
    # One idle step drains the vector env's pending autoresets: gymnasium 1.4's AsyncVectorEnv (without
    # shared memory, our case) does not clear a worker's autoreset flag on reset, so a slot whose episode
    # ended at this batch's last turn would answer the next batch's first step with a reset (idle
    # forever: the rollout would never end). Every slot is idle now, so no env moves.
    t0 = time.perf_counter()
    envs.step(tuple([""] * size))
    stats.env_s += time.perf_counter() - t0
    stats.turns += turn
    missing = [i for i in range(len(jobs)) if i not in finished]
    if missing:
        raise RuntimeError(f"episodes {missing} ended without a trajectory")
    return [finished[i] for i in range(len(jobs))]


def sample_tasks(panel: Sequence[str], n: int, rng: np.random.Generator) -> list[str]:
    """``n`` distinct tasks of a panel (with repeats only when the panel is smaller than n)."""
    replace = n > len(panel)
    picks = rng.choice(len(panel), size=n, replace=replace)
    return [panel[int(i)] for i in picks]


def sample_tasks_by_category(panel: Sequence[str], categories: Sequence[str], n: int,
                             rng: np.random.Generator) -> list[str]:
    """``n`` tasks with the categories as equal as ``n`` allows (the first ``n % k`` categories in sorted
    order get one more), distinct within a category while it has tasks left."""
    by: dict[str, list[str]] = {}
    for task, category in zip(panel, categories, strict=True):
        by.setdefault(category, []).append(task)
    names = sorted(by)
    counts = [n // len(names) + (i < n % len(names)) for i in range(len(names))]
    return [task for name, count in zip(names, counts) for task in sample_tasks(by[name], count, rng)]


def panel_categories(spec: EnvSpec, panel: Sequence[str]) -> list[str]:
    """Each panel task's ``info["category"]``, from one reset of each (cheap for generated tasks; an env
    with slow resets, like ALFWorld's, pays one reset per task)."""
    env = gym.make(spec.env_id, split=spec.split, **spec.env_kwargs)
    try:
        return [str(env.reset(options={"task_id": task})[1]["category"]) for task in panel]
    finally:
        env.close()
