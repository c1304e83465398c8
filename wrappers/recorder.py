"""TrajectoryRecorder: record every step of any text env into the trajectory format."""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from wrappers.trajectory import Step, Trajectory, TrajectoryWriter, json_safe, new_episode_id

Sink = Callable[[Trajectory], Any]

#: info entries never copied into Step.info: stored elsewhere in the step or too large.
_INFO_SKIP = frozenset({"prompt_parts"})
#: reset options consumed by the recorder (not passed to the env).
RECORDER_OPTIONS = ("group_id", "episode_id", "trajectory_meta")


class TokenizedResponse(str):
    """A model's response text that also carries the token ids behind it.

    It *is* the text (a ``str``), so every wrapper and env below the recorder treats it as the action
    string; :class:`TrajectoryRecorder` reads the tokens from it. Unlike :meth:`TrajectoryRecorder.
    attach_tokens` it travels with the action, so it works through vector envs whose sub-envs live in
    other processes (``AsyncVectorEnv``, Ray actors): it pickles with its tokens.
    """

    prompt_token_ids: list[int] | None
    response_token_ids: list[int] | None
    response_logprobs: list[float] | None

    def __new__(cls, text: str, prompt_token_ids: Sequence[int] | None = None,
                response_token_ids: Sequence[int] | None = None, response_logprobs: Sequence[float] | None = None):
        obj = super().__new__(cls, text)
        obj.prompt_token_ids = None if prompt_token_ids is None else [int(t) for t in prompt_token_ids]
        obj.response_token_ids = None if response_token_ids is None else [int(t) for t in response_token_ids]
        obj.response_logprobs = None if response_logprobs is None else [float(x) for x in response_logprobs]
        return obj

    def __reduce__(self):
        return (TokenizedResponse, (str(self), self.prompt_token_ids, self.response_token_ids, self.response_logprobs))

    def token_fields(self) -> dict[str, Any]:
        return {"prompt_token_ids": self.prompt_token_ids, "response_token_ids": self.response_token_ids,
                "response_logprobs": self.response_logprobs}


class ServedResponse(str):
    """A response text from a served model (an API endpoint) that also carries what serving it cost.

    Like :class:`TokenizedResponse` it *is* the text, so the env stack treats it as the action string;
    :class:`TrajectoryRecorder` stores its ``usage`` (token counts, latency; see ``Step.usage``) in the step.
    """

    usage: dict[str, Any] | None

    def __new__(cls, text: str, usage: Mapping[str, Any] | None = None):
        obj = super().__new__(cls, text)
        obj.usage = None if usage is None else dict(usage)
        return obj

    def __reduce__(self):
        return (ServedResponse, (str(self), self.usage))


class PromptOverflow(str):
    """The action that ends an episode whose next prompt is over the model's prompt budget.

    An agent whose prompt no longer fits its context sends this instead of generating (a cut of the
    prompt's head would change the task silently; generating past the context fails). The recorder does
    not step the env with it: it ends the episode truncated, records no step for it, and marks the
    trajectory ``meta["ended_by"] = "prompt_overflow"`` with the prompt's length and the budget.
    """

    def __new__(cls, prompt_tokens: int, budget: int):
        obj = super().__new__(cls, "")
        obj.prompt_tokens, obj.budget = int(prompt_tokens), int(budget)
        return obj

    def __reduce__(self):  # vector envs in other processes get it pickled
        return (PromptOverflow, (self.prompt_tokens, self.budget))

    def __repr__(self) -> str:
        return f"PromptOverflow(prompt_tokens={self.prompt_tokens}, budget={self.budget})"


class TrajectoryRecorder(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Records each episode as a :class:`~wrappers.trajectory.Trajectory` and hands it to ``sink``.

    Put it outermost, so it sees what the agent sent (the raw response) and what it was shown::

        env = TrajectoryRecorder(LLMActionParser(PromptRenderer(gym.make(...))), sink=writer)

    A step records the observation text, image and prompt the action answered (``obs["prompt"]``
    and ``info["prompt_parts"]`` when a PromptRenderer is inside), the action as given (``response``)
    and as executed (``info["action"]`` from an action parser, else the same string), reward and flags.

    Args:
        env: any env with dict observations holding ``"text"`` (and optionally ``"image"``).
        sink: a JSONL path (the recorder opens a ``TrajectoryWriter`` there and closes it on ``close``),
            or a callable taking each finished Trajectory (a ``TrajectoryWriter`` works directly), or
            None with ``trajectory_in_info``. Only a path sink is kept in the wrapper's spec, so only
            then can ``gym.make(env.spec)`` rebuild the stack (a callable is a live object: it is
            recorded as None).
        env_id: stored in the trajectory; defaults to ``env.spec.id`` when the env has a spec.
        record_images: keep ``obs["image"]`` per step (saved as PNG by the writer).
        keep_incomplete: hand over an episode cut short by ``reset``/``close`` (``meta["ended_by"]``).
        trajectory_in_info: also return the finished Trajectory in the last step's
            ``info["trajectory"]``; this is how a vector env with sub-envs in other processes hands
            episodes back to the process that trains (an episode cut short by ``reset`` is then
            only given to the sink).

    Reset options ``group_id``, ``episode_id`` and ``trajectory_meta`` (a dict) are taken by the
    recorder and not passed on. Token-level fields come with the action (a :class:`TokenizedResponse`)
    or from :meth:`attach_tokens`, called before the step they belong to; a served model's usage comes
    with the action (a :class:`ServedResponse`). An agent that cannot act (an endpoint that kept failing)
    ends the episode with :meth:`abort_episode`, which still hands it to the sink; one whose prompt
    outgrew its context sends a :class:`PromptOverflow`, which ends the episode truncated.
    """

    def __init__(
        self,
        env: gym.Env,
        sink: Sink | str | os.PathLike,
        *,
        env_id: str | None = None,
        record_images: bool = True,
        keep_incomplete: bool = True,
        trajectory_in_info: bool = False,
    ):
        is_path = isinstance(sink, (str, os.PathLike))
        gym.utils.RecordConstructorArgs.__init__(
            self, sink=os.fspath(sink) if is_path else None, env_id=env_id, record_images=record_images,
            keep_incomplete=keep_incomplete, trajectory_in_info=trajectory_in_info,
        )
        gym.Wrapper.__init__(self, env)
        if not is_path and not callable(sink) and not (sink is None and trajectory_in_info):
            raise ValueError("sink: expected a JSONL path or a callable taking a Trajectory (e.g. a TrajectoryWriter), "
                             "or None with trajectory_in_info=True")
        self._owned_writer = TrajectoryWriter(sink) if is_path else None
        self.sink = self._owned_writer if is_path else sink
        self.trajectory_in_info = trajectory_in_info
        self.env_id = env_id if env_id is not None else getattr(env.spec, "id", None)
        self.record_images = record_images
        self.keep_incomplete = keep_incomplete
        self._trajectory: Trajectory | None = None
        self._last_obs: dict | None = None
        self._last_info: dict | None = None
        self._pending_tokens: dict[str, Any] = {}

    def attach_tokens(
        self,
        prompt_token_ids: Sequence[int] | None = None,
        response_token_ids: Sequence[int] | None = None,
        response_logprobs: Sequence[float] | None = None,
    ) -> None:
        """Token ids the model saw and sampled for the *next* step, and their log-probs."""
        self._pending_tokens = {
            "prompt_token_ids": None if prompt_token_ids is None else [int(t) for t in prompt_token_ids],
            "response_token_ids": None if response_token_ids is None else [int(t) for t in response_token_ids],
            "response_logprobs": None if response_logprobs is None else [float(x) for x in response_logprobs],
        }

    def abort_episode(self, error: str) -> Trajectory | None:
        """End the current episode as a failure because the agent could not act; returns it (None if none).

        The sink gets it, even with no step taken, as unsuccessful with score 0, ``meta["ended_by"] =
        "error"`` and ``meta["error"] = error``, so an evaluation keeps a record of every task it tried.
        The env below is left mid-episode: reset it before the next one.
        """
        if self._trajectory is None:
            return None
        self._trajectory.meta["error"] = str(error)
        return self._finish({}, self._last_obs or {}, ended_by="error")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        self._end_incomplete("reset")
        if options is not None and not isinstance(options, Mapping):  # (dict() of a str or list names nothing)
            raise ValueError(f"reset options: expected a dict or None, got {type(options).__name__}")
        options = dict(options or {})
        group_id = options.pop("group_id", None)
        episode_id = options.pop("episode_id", None) or new_episode_id()
        meta = options.pop("trajectory_meta", None)
        if meta is not None and not isinstance(meta, Mapping):
            raise ValueError(f"reset options: trajectory_meta must be a dict, got {type(meta).__name__}")
        meta = dict(meta or {})
        obs, info = self.env.reset(seed=seed, options=options or None)
        self._trajectory = Trajectory(
            episode_id=str(episode_id),
            env_id=self.env_id,
            task_id=str(info.get("task_id", "")),
            task=str(info.get("task", "")),
            category=str(info.get("category", "")),
            split=str(info.get("split", "")),
            seed=seed,
            group_id=None if group_id is None else str(group_id),
            meta=json_safe(meta),
        )
        self._last_obs, self._last_info = obs, info
        self._pending_tokens = {}
        return obs, info

    def step(self, action: Any):
        if isinstance(action, PromptOverflow):
            return self._end_on_overflow(action)
        obs, reward, terminated, truncated, info = self.env.step(action)
        if self._trajectory is not None:
            self._trajectory.steps.append(self._make_step(action, reward, terminated, truncated, info))
            self._last_obs, self._last_info = obs, info
            if terminated or truncated:
                trajectory = self._finish(info, obs, ended_by="terminated" if terminated else "truncated")
                if self.trajectory_in_info:
                    info = {**info, "trajectory": trajectory}
        return obs, reward, terminated, truncated, info

    def close(self):
        self._end_incomplete("close")
        if self._owned_writer is not None:
            self._owned_writer.close()
        return super().close()

    def _end_on_overflow(self, overflow: PromptOverflow):
        """Truncate the episode without stepping the env below (it is reset before the next episode)."""
        obs, info = self._last_obs or {}, dict(self._last_info or {})
        info.update(prompt_overflow=True, prompt_tokens=overflow.prompt_tokens, prompt_budget=overflow.budget)
        if self._trajectory is not None:
            self._trajectory.meta.update(prompt_tokens=overflow.prompt_tokens, prompt_budget=overflow.budget)
            trajectory = self._finish(info, obs, ended_by="prompt_overflow")
            if self.trajectory_in_info:
                info["trajectory"] = trajectory
        return obs, 0.0, False, True, info

    # ------------------------------------------------------------------ internals
    def _make_step(self, action: Any, reward, terminated, truncated, info: dict) -> Step:
        seen, seen_info = self._last_obs or {}, self._last_info or {}
        response = str(action) if isinstance(action, str) else repr(action)
        executed = info.get("action", response)
        image = seen.get("image") if self.record_images else None
        step = Step(
            index=len(self._trajectory.steps),
            observation=str(seen.get("text", "")),
            action=str(executed),
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            invalid_action=bool(info.get("invalid_action", False)),
            format_error=bool(info.get("format_error", False)),
            response=response,
            prompt=seen.get("prompt"),
            prompt_parts=json_safe(seen_info.get("prompt_parts")),
            image=np.array(image, dtype=np.uint8, copy=True) if image is not None else None,
            info=json_safe({k: v for k, v in info.items() if k not in _INFO_SKIP}),
            usage=json_safe(action.usage) if isinstance(action, ServedResponse) else None,
            **(action.token_fields() if isinstance(action, TokenizedResponse) else self._pending_tokens),
        )
        self._pending_tokens = {}
        return step

    def _finish(self, info: dict, obs: dict, ended_by: str) -> Trajectory:
        traj, self._trajectory = self._trajectory, None
        traj.meta["ended_by"] = ended_by
        traj.meta["final_observation"] = str(obs.get("text", ""))
        traj.finish(success=bool(info.get("success", False)), score=float(info.get("score", 0.0)))
        if self.sink is not None:
            self.sink(traj)
        return traj

    def _end_incomplete(self, ended_by: str) -> None:
        if self._trajectory is None:
            return
        if self.keep_incomplete and self._trajectory.steps:
            self._finish(self._last_info or {}, self._last_obs or {}, ended_by)
        self._trajectory = None
