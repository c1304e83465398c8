"""Serve one registered env over the OpenEnv protocol, with openenv-core's own server.

::

    seed-envs serve seed/ALFWorld-v0 --split unseen --port 8000     # binds 127.0.0.1

The env and its ``gym.make`` arguments are fixed when the server starts (a client cannot choose a data
folder or another env); a bad argument fails there, naming it. The split is the one argument a session
chooses, among those the server was started with (``--splits train test unseen``; default: ``--split``
alone), so one server serves a trainer's training and evaluation panels. Each WebSocket session
(``/ws``) gets an env of its own, made on its first ``reset``; messages follow OpenEnv's protocol:

- ``reset``: ``seed`` (int), ``task_id`` (a task of the split), ``split`` (one of the served splits;
  default: the first), ``expert`` (true: every observation's ``info["expert_action"]`` holds the env's
  expert move, for Stage 1 demonstrations); ``episode_id`` is kept in the state. Unknown keys are
  refused, naming them.
- ``step``: ``{"text": action}``; an action the env cannot parse is an ordinary step with
  ``info["invalid_action"] = true``, as in process.
- ``state``: env id, task id, episode id, step count.

Each observation is a :class:`~seed_envs.openenv.models.SeedObservation`: text, image (base64 PNG),
reward, done, terminated, truncated, and the whole ``info``. ``GET /seed/spec`` says what a client needs
to stand in for the env (its id, effective make arguments, image shape, agent defaults, task panel).

Limits (flags of ``seed-envs serve``; :class:`ServeLimits`): at most ``max_sessions`` sessions at once
(more are refused with OpenEnv's CAPACITY_REACHED error); a session idle for ``idle_timeout_s`` is
closed; an env call (make, reset, step) past ``request_timeout_s`` is answered with an error and its env
abandoned (the session's later calls are refused: open a new session); a WebSocket message over
``max_message_bytes`` closes the connection (1009); actions over
:data:`~seed_envs.openenv.models.MAX_ACTION_CHARS` characters are refused. OpenEnv's stateless HTTP
``/reset`` and ``/step`` routes (one env made per request) are not served: episodes need sessions.

Errors reach the client as OpenEnv error messages whose text starts with the exception's class
(``ValueError: reset options: ...``), which :class:`~seed_envs.openenv.client.RemoteEnv` raises again
as that class.
"""
from __future__ import annotations

import asyncio
import json
import math
import threading
from typing import Any, Callable, Optional

import gymnasium as gym
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from seed_envs.core import SeedEnv
from seed_agents.serve_limits import ServeLimits
from seed_envs.openenv import MAX_ACTION_CHARS
from seed_envs.openenv.models import SeedAction, SeedObservation, SeedState, encode_image
from wrappers.deadline import EnvDeadline, call_with_deadline
from wrappers.trajectory import json_safe

#: What a ``reset`` message may carry besides openenv's own ``seed`` and ``episode_id``.
RESET_KEYS = ("task_id", "split", "expert")


class ServedEnvError(RuntimeError):
    """An env call that failed on the server; the message starts with the original exception's class."""


def _tagged(error: BaseException) -> ServedEnvError:
    return ServedEnvError(f"{type(error).__name__}: {' '.join(str(error).split())[:2000]}")


class SeedEnvironment(Environment):
    """One session's env: ``gym.make(env_id, **make_kwargs)`` made on the first reset.

    The env runs inside :class:`wrappers.EnvDeadline`: each reset and step on the env's own thread with a
    deadline; a call past it raises there, and the env is not used again (the session's later calls are
    refused). The event loop waits on a worker of its default executor, freed at the deadline.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True  # an env per session; envs share only read-only data (or lock it)

    def __init__(self, env_id: str, make_kwargs: dict[str, Any], request_timeout_s: float,
                 splits: dict[str, str] | None = None):
        super().__init__()
        self.env_id, self.make_kwargs, self.request_timeout_s = env_id, dict(make_kwargs), request_timeout_s
        #: Each split name a session may ask for (the env's own names and the names given at start) ->
        #: the env's own name; the first is the default.
        default = self.make_kwargs.get("split", "train")
        self.splits = dict(splits or {default: default})
        self._env: EnvDeadline | None = None
        self._split: str | None = None
        self._expert: Callable[[dict, dict], str] | None = None
        self._state = SeedState(env_id=env_id)

    async def _call(self, fn: Callable[[], SeedObservation]) -> SeedObservation:
        try:
            return await asyncio.to_thread(fn)
        except Exception as e:  # the env's own error (or EnvTimeout), named for the client
            raise _tagged(e) from e

    def _observe(self, obs: dict, reward: float, terminated: bool, truncated: bool, info: dict) -> SeedObservation:
        info = dict(info)
        if self._expert is not None and not (terminated or truncated):
            info["expert_action"] = self._expert(obs, info)
        image = obs.get("image")
        reward = float(reward)
        return SeedObservation(text=obs["text"], image=None if image is None else encode_image(image),
                               reward=reward if math.isfinite(reward) else None, done=bool(terminated or truncated),
                               terminated=bool(terminated), truncated=bool(truncated), info=json_safe(info))

    def _reset_sync(self, seed: Optional[int], task_id: Optional[str], split: str, expert: bool) -> SeedObservation:
        if self._env is not None and split != self._split:  # the session moves to another served split
            self.close()
        if self._env is None:
            kwargs = {**self.make_kwargs, "split": split}
            made = call_with_deadline(lambda: gym.make(self.env_id, **kwargs), self.request_timeout_s,
                                      name="seed-served-env-make")
            self._env, self._split = EnvDeadline(made, step_timeout_s=self.request_timeout_s), split
        obs, info = self._env.reset(seed=seed, options=None if task_id is None else {"task_id": task_id})
        self._expert = None
        if expert:
            from seed_envs import make_expert

            self._expert = make_expert(self._env)
        return self._observe(obs, 0.0, False, False, info)

    def _step_sync(self, text: str) -> SeedObservation:
        if self._env is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        return self._observe(*self._env.step(text))

    # ----------------------------------------------------------------- OpenEnv's interface
    async def reset_async(self, seed: Optional[int] = None, episode_id: Optional[str] = None,
                          **options: Any) -> SeedObservation:
        unknown = sorted(k for k in options if k not in RESET_KEYS)
        if unknown:
            raise ServedEnvError(f"ValueError: reset options: unknown keys {unknown}; supported: "
                                 f"seed, episode_id, {', '.join(RESET_KEYS)}")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ServedEnvError(f"ValueError: reset: seed must be an int or null, got {type(seed).__name__}")
        asked = options.get("split")
        if asked is not None and asked not in self.splits:
            raise ServedEnvError(f"ValueError: split: this server serves {sorted(set(self.splits.values()))}, "
                                 f"not {asked!r}")
        split = self.splits[asked] if asked is not None else next(iter(self.splits.values()))
        task_id, expert = options.get("task_id"), bool(options.get("expert", False))
        observation = await self._call(lambda: self._reset_sync(seed, task_id, split, expert))
        self._state = SeedState(env_id=self.env_id, episode_id=episode_id, step_count=0,
                                task_id=observation.info.get("task_id"))
        return observation

    async def step_async(self, action: SeedAction, timeout_s: Optional[float] = None, **_: Any) -> SeedObservation:
        if isinstance(action.text, str) and len(action.text) > MAX_ACTION_CHARS:
            # (here, not a pydantic validator: openenv-core cannot send a validator's error and ends the session)
            raise ServedEnvError(f"ValueError: an action has at most {MAX_ACTION_CHARS} characters, got "
                                 f"{len(action.text)}")
        observation = await self._call(lambda: self._step_sync(action.text))
        self._state = self._state.model_copy(update={"step_count": self._state.step_count + 1})
        return observation

    def reset(self, seed: Optional[int] = None, episode_id: Optional[str] = None, **options: Any) -> SeedObservation:
        raise NotImplementedError("served envs run through reset_async")

    def step(self, action: SeedAction, timeout_s: Optional[float] = None, **kwargs: Any) -> SeedObservation:
        raise NotImplementedError("served envs run through step_async")

    @property
    def state(self) -> SeedState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        from seed_envs import __version__

        return EnvironmentMetadata(name=self.env_id, description=f"seed-gym's {self.env_id}, served over OpenEnv",
                                   version=__version__)

    def close(self) -> None:
        env, self._env = self._env, None
        if env is not None:
            env.close()  # (an abandoned env is left alone: EnvDeadline.close)


def env_spec(env_id: str, make_kwargs: dict[str, Any], splits: tuple[str, ...] = ()) -> dict[str, Any]:
    """``GET /seed/spec``: what a client needs to stand in for the env. Makes one env per served split (the
    check that the arguments are good, at start) and reads its effective arguments (``split``: the default
    one), image shape, agent defaults and each split's task panel."""
    splits = tuple(dict.fromkeys(splits)) or (make_kwargs.get("split", "train"),)
    specs = [_split_spec(env_id, {**make_kwargs, "split": split}) for split in splits]
    # Names as the env resolves them (an alias such as ALFWorld's valid_unseen is its split's own name).
    resolved = {given: spec["make_kwargs"].get("split", given) for given, spec in zip(splits, specs)}
    panels = {resolved[given]: spec.pop("task_ids") for given, spec in zip(splits, specs)}
    return {**specs[0], "splits": list(dict.fromkeys(resolved.values())), "split_names": resolved,
            "task_ids": panels, "served_kwargs": json_safe({k: v for k, v in make_kwargs.items() if k != "split"})}


def _split_spec(env_id: str, make_kwargs: dict[str, Any]) -> dict[str, Any]:
    import dataclasses

    env = gym.make(env_id, **make_kwargs)
    try:
        base = env.unwrapped
        space = env.observation_space
        if not (isinstance(space, gym.spaces.Dict) and "text" in space.spaces
                and set(space.spaces) <= {"text", "image"}):
            raise ValueError(f"serve: {env_id}'s observations are not seed-gym's {{'text', 'image'}} dict")
        image = space.spaces.get("image")
        defaults = getattr(base, "agent_defaults", None)
        return {
            "env_id": env_id,
            "make_kwargs": {name: getattr(base, name) for name in ("split", "obs_mode", "max_steps", "reward_mode")
                            if hasattr(base, name)},
            "image_shape": None if image is None else list(image.shape[:2]),
            "agent_defaults": dataclasses.asdict(defaults) if dataclasses.is_dataclass(defaults) else None,
            "task_ids": list(base.task_ids()) if isinstance(base, SeedEnv) else None,
            "has_expert": isinstance(base, SeedEnv),
            "max_action_chars": MAX_ACTION_CHARS,
        }
    finally:
        env.close()


class _ClosedByClient:
    """ASGI middleware: a WebSocket session the client closed ends quietly.

    openenv-core's session handler closes the socket once more after the client's own close, which raises
    ``WebSocketDisconnect`` out of the app (uvicorn logs it as an error with a traceback, per session).
    """

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope.get("type") != "websocket":
                raise


def make_app(env_id: str, make_kwargs: dict[str, Any] | None = None, limits: ServeLimits = ServeLimits(),
             splits: tuple[str, ...] = ()):
    """The FastAPI app serving ``env_id`` (OpenEnv's WebSocket session routes, ``/health``, ``/schema``,
    ``/metadata``, and ``/seed/spec``) on ``splits`` (default: ``make_kwargs["split"]`` alone). Raises
    ValueError for a bad env argument before serving anything."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse
    from openenv.core.env_server.http_server import HTTPEnvServer
    from openenv.core.env_server.types import ConcurrencyConfig

    import seed_envs  # noqa: F401  (registers the ids)

    make_kwargs = dict(make_kwargs or {})
    spec = env_spec(env_id, make_kwargs, tuple(splits))
    served_splits = {**{name: name for name in spec["splits"]}, **spec["split_names"]}
    spec_body = json.dumps(spec)
    app = FastAPI(title=f"seed-gym {env_id} (OpenEnv)")
    app.add_middleware(_ClosedByClient)
    server = HTTPEnvServer(lambda: SeedEnvironment(env_id, make_kwargs, limits.request_timeout_s, served_splits),
                           SeedAction, SeedObservation,
                           concurrency_config=ConcurrencyConfig(max_concurrent_envs=limits.max_sessions,
                                                                session_timeout=limits.idle_timeout_s))
    # "production": OpenEnv's stateless HTTP /reset and /step (an env made per request) stay off.
    server.register_routes(app, mode="production")

    @app.get("/seed/spec")
    def seed_spec() -> JSONResponse:
        return JSONResponse(json.loads(spec_body))

    @app.get("/seed/capacity")
    def seed_capacity() -> JSONResponse:
        """Sessions open and allowed: a refused session's client learns why (openenv-core's refusal is sent
        before the client's first message and is lost when the socket closes first)."""
        status = server.get_capacity_status()
        return JSONResponse({"active_sessions": status.active_sessions, "max_sessions": status.max_sessions})

    app.state.seed_spec = spec
    app.state.openenv_server = server
    return app


def serve(env_id: str, make_kwargs: dict[str, Any] | None = None, *, host: str = "127.0.0.1", port: int = 8000,
          limits: ServeLimits = ServeLimits(), splits: tuple[str, ...] = ()) -> None:
    """Serve until interrupted (``seed-envs serve``)."""
    import uvicorn

    app = make_app(env_id, make_kwargs, limits, splits)
    uvicorn.run(app, host=host, port=port, ws_max_size=limits.max_message_bytes, log_level="warning")


def start_server_process(env_id: str, *args: str, ready_timeout_s: float = 120.0,
                         **popen: Any) -> tuple[Any, str]:
    """``seed-envs serve ENV_ID ARGS`` in a new process on a free loopback port: ``(process, url)`` once its
    ``/health`` answers (benchmarks, and tests that kill a server). RuntimeError when it exits or does not
    answer within ``ready_timeout_s`` (with its stderr when ``popen`` pipes it)."""
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "seed_agents", "serve", env_id, *args, "--port", str(port)],
                               **popen)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_timeout_s
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            return process, url
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                err = process.stderr.read() if process.stderr else ""
                raise RuntimeError(f"the server for {env_id} did not start {err}".strip()) from None
            time.sleep(0.2)


class BackgroundServe:
    """The server in a thread of this process (tests, notebooks): ``with BackgroundServe(env_id) as url: ...``."""

    def __init__(self, env_id: str, make_kwargs: dict[str, Any] | None = None, *, host: str = "127.0.0.1",
                 port: int = 0, limits: ServeLimits = ServeLimits(), splits: tuple[str, ...] = ()):
        import uvicorn

        self.app = make_app(env_id, make_kwargs, limits, splits)
        self._server = uvicorn.Server(uvicorn.Config(self.app, host=host, port=port, log_level="warning",
                                                     ws_max_size=limits.max_message_bytes))
        self._thread = threading.Thread(target=self._server.run, name="seed-envs-openenv", daemon=True)

    @property
    def url(self) -> str:
        sockets = [s for server in self._server.servers for s in server.sockets]
        host, port = sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def start(self) -> str:
        import time

        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the OpenEnv server did not start")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
