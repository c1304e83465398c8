"""An agent for any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang, llama.cpp, ...).

    agent = OpenAIChatAgent("http://127.0.0.1:8080/v1", "smollm2", temperature=0.0, seed=0)
    text = agent.act(obs["prompt"])          # or agent(obs, info): the runner's agent protocol

It sends the env's rendered prompt (``obs["prompt"]``, the same template training uses) as the user
message and returns the raw completion text, which the env's action parser reads as in training. The
text is a :class:`wrappers.ServedResponse`: a :class:`~wrappers.TrajectoryRecorder` stores its token
usage and latency in the step (``Step.usage``).

**Fault policy** (docs/fault-policy.md). A call makes at most ``1 + max_retries`` attempts. Each attempt
has a *total* deadline, ``timeout`` seconds for connecting, the headers and the whole body together (a
server that drips its reply one byte a second cannot hold a call), and a size cap, ``max_reply_bytes``.
Retried after a backoff (0.5 s * 2**n, less up to 25% jitter, at most 8 s; or the server's
``Retry-After`` up to :data:`MAX_RETRY_AFTER_S`): HTTP 408/409/429/5xx, refused or dropped connections,
attempts past their deadline, and every unusable reply (not JSON, not the chat-completion shape, no text,
tool calls where text was asked, over the size cap). Not retried: other HTTP 4xx, and a ``Retry-After``
longer than :data:`MAX_RETRY_AFTER_S`. A call that still has no usable reply raises
:class:`EndpointError` saying how many attempts ran and why it stopped: the runner ends that episode as a
recorded failure and plays on. Usage fields that are not counts are recorded as None.

The retry loop is ours, not the ``openai`` client's (it runs with ``max_retries=0``): the client retries
only HTTP and connection errors, while a reply it cannot parse, or one that never ends, must share the
same budget. Each attempt runs in a daemon thread the caller waits on with the deadline (``wrappers.deadline.call_with_deadline``), so an attempt
that overruns is abandoned (its thread ends when the server closes or its read times out) and Ctrl-C
reaches the caller at once.

The API key is read from the environment (``OPENAI_API_KEY``, or the variable named by ``api_key_env``)
and is only ever sent in the request's ``Authorization`` header: never printed, logged or put in a repr.
"""
from __future__ import annotations

import email.utils
import json
import math
import os
import random
import time
from typing import Any

from seed_agents.agents import AgentError
from wrappers.deadline import EnvTimeout, call_with_deadline
from wrappers.recorder import ServedResponse
from wrappers.tools import tool_call_text

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
#: Sent when no key is set: local servers (llama.cpp, vLLM) accept any key, the client refuses none.
NO_KEY = "EMPTY"
INSTALL_HINT = "pip install 'seed-gym[openai]'"
#: Statuses retried besides 5xx (as the openai client does).
RETRY_STATUSES = (408, 409, 429)
#: The longest server-asked wait this agent honours; a longer ``Retry-After`` ends the call at once.
MAX_RETRY_AFTER_S = 60.0
#: Default size cap of one reply: a chat completion of a few hundred tokens is a few KB.
MAX_REPLY_BYTES = 1 << 20
INITIAL_BACKOFF_S, MAX_BACKOFF_S = 0.5, 8.0


class EndpointError(AgentError):
    """A chat-completions call with no usable reply after its attempts (status errors, timeouts, refused
    connections, unusable replies)."""


class UnusableReply(Exception):
    """A reply that is not a chat completion with text (retried like a 5xx)."""


class AttemptTimeout(Exception):
    """An attempt that had no complete reply within its deadline."""


class _NotRetried(Exception):
    """Why a failed attempt is the last one (a client error, an over-long Retry-After)."""


def import_openai():
    """The ``openai`` package, or an ImportError that says how to install it."""
    try:
        import openai
    except ImportError as e:
        raise ImportError(f"the OpenAI-compatible endpoint agent needs the openai package: {INSTALL_HINT}") from e
    return openai


def resolve_api_key(api_key_env: str | None = None) -> str:
    """The key from ``$api_key_env`` (default ``OPENAI_API_KEY``); a named variable that is unset is an error,
    an unset default gives :data:`NO_KEY` (a local server needs none)."""
    name = api_key_env or DEFAULT_API_KEY_ENV
    key = os.environ.get(name, "")
    if key:
        return key
    if api_key_env:
        raise ValueError(f"--api-key-env: the environment variable {name} is not set (or empty)")
    return NO_KEY


def describe_error(error: BaseException) -> str:
    """One line for a failed attempt: ``HTTP 500: ...``, ``Timeout: ...``, ``unusable reply: ...``
    (no headers, so never the key)."""
    status = getattr(error, "status_code", None)
    if status is not None:
        what = f"HTTP {status}"
    elif isinstance(error, AttemptTimeout) or "Timeout" in type(error).__name__:
        what = "Timeout"
    elif isinstance(error, UnusableReply):
        what = "unusable reply"
    else:
        what = type(error).__name__
    detail = " ".join(str(error).split())[:200]
    return f"{what}: {detail}" if detail else what


def retry_after(headers: Any) -> float | None:
    """The server's asked wait in seconds (``retry-after-ms``, ``retry-after`` as seconds or an HTTP date),
    or None."""
    if headers is None:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return float(ms) / 1000.0
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return float(value)
        except ValueError:
            when = email.utils.parsedate_to_datetime(value)
            return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


def _count(value: Any) -> int | None:
    """A usage count as an int; anything else (a string, a negative, NaN, a bool) is None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return None
    return int(value)


def parse_completion(body: bytes, tool_calls: bool = False) -> tuple[str, dict[str, Any]]:
    """The text and usage of a chat-completion reply body; :class:`UnusableReply` names what is wrong.

    ``tool_calls`` (the request offered tools): the reply's first tool call is the answer, as the
    ``"tools"`` format's text (:func:`wrappers.tools.tool_call_text`); a reply with text and no call
    answers with that text (the parser then reports the missing call to the model)."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        start = body[:60].decode("utf-8", "replace")
        raise UnusableReply(f"not JSON ({len(body)} bytes starting {start!r})") from None
    if not isinstance(data, dict):
        raise UnusableReply(f"a JSON {type(data).__name__}, not a chat completion object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise UnusableReply(f"'choices' is {_shape(choices)}, not a non-empty list")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise UnusableReply(f"choices[0] is {_shape(choice)}, not an object")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise UnusableReply(f"choices[0].message is {_shape(message)}, not an object")
    content = message.get("content")
    calls = message.get("tool_calls")
    if tool_calls and isinstance(calls, list) and calls:
        function = calls[0].get("function") if isinstance(calls[0], dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise UnusableReply("tool_calls[0] has no function name")
        content = tool_call_text(function["name"], function.get("arguments", {}))
    if not isinstance(content, str):
        if calls:
            raise UnusableReply("tool calls where text was asked (choices[0].message.content is null)")
        raise UnusableReply(f"choices[0].message.content is {_shape(content)}, not text")
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    finish, model = choice.get("finish_reason"), data.get("model")
    return content, {"prompt_tokens": _count(usage.get("prompt_tokens")),
                     "completion_tokens": _count(usage.get("completion_tokens")),
                     "finish_reason": finish if isinstance(finish, str) else None,
                     "model": model if isinstance(model, str) else None}


def _shape(value: Any) -> str:
    return "missing or null" if value is None else f"a {type(value).__name__}"


class OpenAIChatAgent:
    """Answers prompts with a model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8080/v1`` or ``https://api.openai.com/v1``.
        model: the model name the server knows.
        api_key_env: the environment variable holding the key (default ``OPENAI_API_KEY``, optional).
        temperature: 0 is greedy decoding.
        seed: sampling seed sent to the server (servers that support it reproduce their draws).
        max_tokens: the most tokens a response may have.
        timeout: seconds one attempt may take in all (connect, headers and body).
        max_retries: attempts after the first (see the module's fault policy).
        max_reply_bytes: the largest reply body accepted; a larger one is an unusable reply.
        system_prompt: an optional system message before the env's prompt.
        tools: OpenAI ``tools=`` entries to offer (``wrappers.tools.tool_schemas`` of the env's verbs, for the
            ``"tools"`` answer format): the reply's first tool call is the answer. None: text answers.
        client: an ``openai.OpenAI`` to use instead of building one (then ``base_url`` is only a label).
    """

    def __init__(self, base_url: str, model: str, *, api_key_env: str | None = None, temperature: float = 0.0,
                 seed: int | None = None, max_tokens: int = 256, timeout: float = 60.0, max_retries: int = 2,
                 max_reply_bytes: int = MAX_REPLY_BYTES, system_prompt: str | None = None,
                 tools: list[dict[str, Any]] | None = None, client: Any = None):
        if max_tokens < 1 or not timeout > 0 or max_retries < 0 or temperature < 0 or max_reply_bytes < 1:
            raise ValueError(f"endpoint agent: need max_tokens >= 1, timeout > 0, max_retries >= 0, temperature >= 0, "
                             f"max_reply_bytes >= 1 (got {max_tokens}, {timeout}, {max_retries}, {temperature}, "
                             f"{max_reply_bytes})")
        self._openai = import_openai()
        self.base_url, self.model = base_url, model
        self.temperature, self.seed, self.max_tokens = float(temperature), seed, int(max_tokens)
        self.timeout, self.max_retries, self.max_reply_bytes = float(timeout), int(max_retries), int(max_reply_bytes)
        self.system_prompt = system_prompt
        self.tools = list(tools) if tools else None
        if client is None:
            client = self._openai.OpenAI(base_url=base_url, api_key=resolve_api_key(api_key_env), timeout=self.timeout,
                                         max_retries=0)
        self._client = client.with_options(max_retries=0)  # one retry loop: ours (see the module)
        self._jitter = random.Random()  # backoff jitter only: never the draws of a policy or an env

    def __repr__(self) -> str:  # never the key
        return (f"OpenAIChatAgent(base_url={self.base_url!r}, model={self.model!r}, temperature={self.temperature}, "
                f"seed={self.seed}, max_tokens={self.max_tokens}, timeout={self.timeout}, max_retries={self.max_retries})")

    def messages(self, prompt: str) -> list[dict[str, str]]:
        """The chat messages sent for ``prompt``: the env's prompt as the user turn."""
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return [*system, {"role": "user", "content": str(prompt)}]

    def act(self, prompt: str) -> ServedResponse:
        """The model's reply to ``prompt`` (its raw text) with its usage; raises :class:`EndpointError`."""
        request: dict[str, Any] = {"model": self.model, "messages": self.messages(prompt),
                                   "temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.seed is not None:
            request["seed"] = int(self.seed)
        if self.tools:
            request["tools"] = self.tools
        start = time.perf_counter()
        attempts = 0
        while True:
            attempts += 1
            try:
                text, usage = self._attempt(request)
                break
            except Exception as error:  # noqa: BLE001  (every failure is classified below)
                if isinstance(error, EndpointError):
                    raise
                delay, stop = self._retry_delay(error, attempts - 1)
                if stop is None and attempts > self.max_retries:
                    stop = f"{self.max_retries} retr{'y' if self.max_retries == 1 else 'ies'} spent"
                if stop is not None:
                    raise EndpointError(f"endpoint {self.base_url} failed after {attempts} attempt"
                                        f"{'s' if attempts > 1 else ''} ({stop}): {describe_error(error)}") from error
                time.sleep(delay)
        return ServedResponse(text, {"prompt_tokens": usage["prompt_tokens"],
                                     "completion_tokens": usage["completion_tokens"],
                                     "latency_s": round(time.perf_counter() - start, 6), "retries": attempts - 1,
                                     "finish_reason": usage["finish_reason"], "model": usage["model"]})

    def _retry_delay(self, error: BaseException, retry: int) -> tuple[float, str | None]:
        """(seconds to wait before the next attempt, None) or (0, why no further attempt is made)."""
        status = getattr(error, "status_code", None)
        if status is not None and status not in RETRY_STATUSES and status < 500:
            return 0.0, f"not retried: HTTP {status} is a client error"
        asked = retry_after(getattr(getattr(error, "response", None), "headers", None))
        if asked is not None and asked > 0:
            if asked > MAX_RETRY_AFTER_S:
                return 0.0, f"not retried: the server asked to wait {asked:g} s, over the {MAX_RETRY_AFTER_S:g} s limit"
            return asked, None
        backoff = min(INITIAL_BACKOFF_S * 2.0 ** retry, MAX_BACKOFF_S)
        return backoff * (1 - 0.25 * self._jitter.random()), None

    def _attempt(self, request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """One request within the deadline: the reply's text and usage, or the attempt's error."""
        try:
            return call_with_deadline(lambda: self._request_once(request), self.timeout, "endpoint-attempt")
        except EnvTimeout:
            raise AttemptTimeout(f"no complete reply within {self.timeout:g} s") from None

    def _request_once(self, request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        with self._client.chat.completions.with_streaming_response.create(**request) as response:
            body = bytearray()
            for chunk in response.iter_bytes():
                body += chunk
                if len(body) > self.max_reply_bytes:
                    raise UnusableReply(f"reply larger than {self.max_reply_bytes} bytes")
        return parse_completion(bytes(body), tool_calls=bool(self.tools))

    def __call__(self, obs: dict, info: dict) -> ServedResponse:
        if "prompt" not in obs:
            raise ValueError("endpoint agent: the observation has no 'prompt'; build the env with "
                             "wrappers.stack.make_agent_env (a PromptRenderer renders it)")
        return self.act(obs["prompt"])
