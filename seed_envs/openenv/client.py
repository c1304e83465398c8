"""A served env as a gymnasium env: the client half of :mod:`seed_envs.openenv`."""
from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.request
from typing import Any

import gymnasium as gym

from seed_envs.core import AgentDefaults, ToolVerb, check_reset_options
from seed_envs.openenv.models import MAX_ACTION_CHARS, decode_image
from seed_envs.spaces import TextSpace, observation_space

#: A server's error as openenv-core's client raises it: ``Server error: <Class>: <message> (code: <CODE>)``.
_SERVER_ERROR = re.compile(r"^Server error: (?:(?P<cls>\w+): )?(?P<msg>.*) \(code: (?P<code>\w+)\)$", re.DOTALL)
#: The served env's errors raised again as their own class; any other is a :class:`RemoteEnvError`.
_RAISED_AS = {"ValueError": ValueError, "TypeError": TypeError, "ResetNeeded": gym.error.ResetNeeded}
#: ``gym.make`` arguments a client may state; each must equal the server's (else ValueError naming it).
EXPECTED_ARGS = ("env_id", "split", "obs_mode", "max_steps", "reward_mode")


class RemoteEnvError(RuntimeError):
    """The served env cannot go on: the server failed, timed out, is full, or the connection was lost."""


def fetch_spec(url: str, timeout_s: float) -> dict[str, Any]:
    """The server's ``GET /seed/spec``; a ValueError naming ``url`` when nothing (or no seed-gym server)
    answers there."""
    try:
        with urllib.request.urlopen(f"{url}/seed/spec", timeout=timeout_s) as response:
            return json.loads(response.read(16 << 20))
    except (urllib.error.URLError, OSError, ValueError) as e:  # a config error: nothing serves there
        raise ValueError(f"url: no seed-gym OpenEnv server at {url} ({e}); start one with `seed-envs serve "
                         "ENV_ID`") from None


def defaults_from_spec(data: dict[str, Any] | None) -> AgentDefaults:
    """The served env's :class:`~seed_envs.core.AgentDefaults`, rebuilt from its JSON."""
    if not data:
        return AgentDefaults()
    verbs = tuple(ToolVerb(**verb) for verb in data.get("tool_verbs") or ())
    return AgentDefaults(**{**data, "tool_verbs": verbs})


class RemoteEnv(gym.Env[dict, str]):
    """
    ## Description

    A seed env served elsewhere (``seed-envs serve ENV_ID``), played over the OpenEnv protocol with
    openenv-core's own client: one WebSocket session, so one env on the server, per ``RemoteEnv``. It
    stands in for the served env: the same observations (text, image), rewards, terminated/truncated
    flags and ``info``, token for token, for the same seeds and actions.

    ## Action Space

    A string (``TextSpace``), as the served env's. An action longer than the server takes
    (:data:`~seed_envs.openenv.models.MAX_ACTION_CHARS`) is sent as its first that many characters:
    no action of any env is that long, so the env flags it invalid either way.

    ## Observation Space

    The served env's: ``{"text"}`` plus ``{"image"}`` (uint8 H x W x 3) in image modes.

    ## Rewards, Starting State, Episode End

    The served env's; ``max_steps`` truncation happens on the server. A non-finite reward arrives as NaN.

    ## Information

    The served env's ``info``, whole. With ``expert=True`` every step's ``info["expert_action"]`` holds
    the server-side expert's move, and :meth:`make_expert` returns an expert that plays it.

    ## Arguments

    ```python
    env = gym.make("seed/Remote-v0", url="http://127.0.0.1:8000", env_id="seed/Sokoban-v0", split="test")
    ```

    * ``url``: the server's root URL.
    * ``env_id``, ``obs_mode``, ``max_steps``, ``reward_mode``: optional; each given must equal what the
      server serves (a ValueError names the first that differs), so a client never plays another env
      than it asked for. The server fixes them when it starts.
    * ``split``: one of the splits the server serves (``seed-envs serve ... --splits``); default: its first.
    * ``env_kwargs``: further ``gym.make`` arguments the client expects; each must equal the server's.
    * ``expert``: ask the server for the expert's move at every step (Stage 1 demonstrations).
    * ``connect_timeout_s``, ``message_timeout_s``: seconds to connect, and to wait for each answer.

    ## Errors

    A served env's ValueError (e.g. an unknown ``task_id``) and ResetNeeded are raised as themselves;
    a server error, a server at capacity, a timeout or a lost connection is a :class:`RemoteEnvError`,
    after which the next ``reset`` opens a new session.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, url: str, *, env_id: str | None = None, split: str | None = None, obs_mode: str | None = None,
                 max_steps: int | None = None, reward_mode: str | None = None, expert: bool = False,
                 env_kwargs: dict[str, Any] | None = None,
                 connect_timeout_s: float = 10.0, message_timeout_s: float = 300.0, render_mode: str | None = None):
        if not isinstance(url, str) or not re.match(r"^(https?|wss?)://", url):
            raise ValueError(f"url: expected http(s):// or ws(s)://..., got {url!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode: expected one of {self.metadata['render_modes']} or None, got {render_mode!r}")
        self.url = re.sub(r"^ws", "http", url.rstrip("/"))
        self.connect_timeout_s, self.message_timeout_s = float(connect_timeout_s), float(message_timeout_s)
        spec = fetch_spec(self.url, self.connect_timeout_s)
        served = {"env_id": spec["env_id"], **spec.get("make_kwargs", {})}
        env_kwargs = dict(env_kwargs or {})
        given = {"env_id": env_id, "split": split, "obs_mode": obs_mode, "max_steps": max_steps,
                 "reward_mode": reward_mode}
        for name in EXPECTED_ARGS:  # (one given in env_kwargs is checked as if given by name)
            if name in env_kwargs and given.get(name) is None:
                given[name] = env_kwargs.pop(name)
        split = given["split"]
        # The split is a session's choice among those the server serves; the other arguments are fixed.
        split_names = {**{name: name for name in spec.get("splits", [served.get("split")])},
                       **spec.get("split_names", {})}
        if split is not None:
            if split not in split_names:
                raise ValueError(f"split: the server at {self.url} serves the splits {sorted(set(split_names.values()))}, "
                                 f"not {split!r} (`seed-envs serve ... --splits` sets them)")
            served["split"] = given["split"] = split_names[split]
        for name in EXPECTED_ARGS:
            if given[name] is not None and given[name] != served.get(name):
                raise ValueError(f"{name}: the server at {self.url} serves {name}={served.get(name)!r}, not "
                                 f"{given[name]!r} (a server's env is fixed when it starts: `seed-envs serve`)")
        fixed = spec.get("served_kwargs", {})
        for name, value in env_kwargs.items():
            if fixed.get(name) != value:
                raise ValueError(f"env_kwargs: the server at {self.url} serves {name}={fixed.get(name)!r}, not "
                                 f"{value!r} (`seed-envs serve ... --kwargs` sets them)")
        if expert and not spec.get("has_expert"):
            raise ValueError(f"expert: {spec['env_id']} has no expert")
        self.served_env_id: str = spec["env_id"]
        self.split = served.get("split")
        self.obs_mode = served.get("obs_mode", "text")
        self.max_steps = served.get("max_steps")
        self.reward_mode = served.get("reward_mode")
        self.expert = bool(expert)
        self.render_mode = render_mode
        self.max_action_chars = int(spec.get("max_action_chars", MAX_ACTION_CHARS))
        image_shape = spec.get("image_shape")
        self.observation_space = observation_space(tuple(image_shape) if image_shape else None)
        self.action_space = TextSpace()
        #: The served env's agent defaults (instance data: wrappers read them from ``env.unwrapped``).
        self.agent_defaults = defaults_from_spec(spec.get("agent_defaults"))
        panels = spec.get("task_ids")
        panel = panels.get(self.split) if isinstance(panels, dict) else panels
        self._task_ids = tuple(panel) if panel is not None else None
        self._client: Any = None
        self._text = ""
        self._needs_reset = True

    # ----------------------------------------------------------------- the session
    def _session(self):
        if self._client is None:
            from openenv.core.generic_client import GenericEnvClient

            self._client = GenericEnvClient(base_url=self.url, connect_timeout_s=self.connect_timeout_s,
                                            message_timeout_s=self.message_timeout_s).sync()
        return self._client

    def _drop_session(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001  (a dead connection closes with an error of its own)
                pass

    def _send(self, what: str, call) -> Any:
        try:
            return call(self._session())
        except RuntimeError as e:
            match = _SERVER_ERROR.match(str(e))
            if match is None:
                self._drop_session()
                raise RemoteEnvError(f"remote env at {self.url}: {what} failed: {e}") from e
            cls, message, code = match["cls"], match["msg"], match["code"]
            if cls in _RAISED_AS and code == "EXECUTION_ERROR":
                raise _RAISED_AS[cls](message) from None
            self._drop_session()  # the server's env or session is gone: the next reset opens a new one
            raise RemoteEnvError(f"remote env at {self.url}: {what} failed: "
                                 f"{cls + ': ' if cls else ''}{message} ({code})") from None
        except Exception as e:  # noqa: BLE001  (connection lost, timeout: the session cannot go on)
            self._drop_session()
            raise RemoteEnvError(f"remote env at {self.url}: {what} failed: {type(e).__name__}: {e}"
                                 f"{self._capacity_note()}") from e

    def _capacity_note(self) -> str:
        """Why a session may have been refused: the server's capacity, when it is full."""
        try:
            with urllib.request.urlopen(f"{self.url}/seed/capacity", timeout=self.connect_timeout_s) as response:
                status = json.loads(response.read(4096))
        except (OSError, ValueError):
            return ""
        if status.get("active_sessions", 0) >= status.get("max_sessions", 1):
            return (f" (the server is at capacity: {status['active_sessions']} of {status['max_sessions']} sessions "
                    "open, CAPACITY_REACHED)")
        return ""

    def _unpack(self, result: Any) -> tuple[dict, float, bool, bool, dict]:
        data = result.observation
        obs: dict[str, Any] = {"text": data["text"]}
        if data.get("image") is not None:
            obs["image"] = decode_image(data["image"])
        self._text = obs["text"]
        reward = math.nan if result.reward is None else float(result.reward)
        return obs, reward, bool(data.get("terminated")), bool(data.get("truncated")), dict(data.get("info") or {})

    # ----------------------------------------------------------------- gymnasium
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = check_reset_options(options)
        message: dict[str, Any] = {"seed": seed, "expert": self.expert, "split": self.split}
        if options.get("task_id") is not None:
            message["task_id"] = options["task_id"]
        obs, _, _, _, info = self._unpack(self._send("reset", lambda c: c.reset(**message)))
        self._needs_reset = False
        return obs, info

    def step(self, action: str):
        if self._needs_reset:
            raise gym.error.ResetNeeded("call reset() before step()")
        if isinstance(action, str) and len(action) > self.max_action_chars:
            action = action[: self.max_action_chars]
        try:
            result = self._send("step", lambda c: c.step({"text": action}))
        except RemoteEnvError:
            self._needs_reset = True
            raise
        return self._unpack(result)

    def task_ids(self) -> tuple[str, ...]:
        """The served split's task panel (as the served env's ``task_ids()``)."""
        if self._task_ids is None:
            raise AttributeError(f"{self.served_env_id} has no task panel")
        return self._task_ids

    def make_expert(self):
        """An expert that plays the server's expert move (``info["expert_action"]``); needs ``expert=True``."""
        if not self.expert:
            raise TypeError("make_expert: make the RemoteEnv with expert=True (the expert runs on the server)")

        def expert(obs: dict, info: dict) -> str:
            if "expert_action" not in info:
                raise RuntimeError("the served env sent no expert_action: reset first, and not after the episode end")
            return info["expert_action"]

        return expert

    def render(self):
        return self._text if self.render_mode == "ansi" else None

    def close(self) -> None:
        self._drop_session()
        super().close()


def make_remote(**kwargs: Any) -> gym.Env:
    """The entry point of ``seed/Remote-v0``: a :class:`RemoteEnv` inside gymnasium's ``TimeLimit`` at the served
    env's ``max_steps``, so the step budget is visible on this side too (the server truncates at the same step)."""
    env = RemoteEnv(**kwargs)
    return gym.wrappers.TimeLimit(env, max_episode_steps=env.max_steps) if env.max_steps else env
