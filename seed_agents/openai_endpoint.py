"""An agent for any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, SGLang, llama.cpp, ...).

    agent = OpenAIChatAgent("http://127.0.0.1:8080/v1", "smollm2", temperature=0.0, seed=0)
    text = agent.act(obs["prompt"])          # or agent(obs, info): the runner's agent protocol

It sends the env's rendered prompt (``obs["prompt"]``, the same template training uses) as the user
message and returns the raw completion text, which the env's action parser reads as in training. The
text is a :class:`wrappers.ServedResponse`: a :class:`~wrappers.TrajectoryRecorder` stores its token
usage and latency in the step (``Step.usage``).

Retries with exponential backoff on 408/409/429/5xx, connection errors and timeouts are the official
``openai`` client's own (``max_retries``; it honours a server's ``Retry-After``); ``timeout`` bounds
each attempt. A call still failing after its retries raises :class:`EndpointError` (an
:class:`~seed_agents.agents.AgentError`): the runner ends that episode as a recorded failure.

The API key is read from the environment (``OPENAI_API_KEY``, or the variable named by ``api_key_env``)
and is only ever sent in the request's ``Authorization`` header: never printed, logged or put in a repr.
"""
from __future__ import annotations

import os
import time
from typing import Any

from seed_agents.agents import AgentError
from wrappers.recorder import ServedResponse

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
#: Sent when no key is set: local servers (llama.cpp, vLLM) accept any key, the client refuses none.
NO_KEY = "EMPTY"
INSTALL_HINT = "pip install 'seed-gym[openai]'"


class EndpointError(AgentError):
    """A chat-completions call that failed after its retries (status error, timeout, refused connection)."""


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


def describe_failure(error: Exception, base_url: str, max_retries: int) -> str:
    """One line saying which endpoint failed how (no headers, so never the key)."""
    status = getattr(error, "status_code", None)
    what = f"HTTP {status}" if status is not None else type(error).__name__
    detail = str(error).splitlines()[0][:200] if str(error) else ""
    return f"endpoint {base_url} failed after {max_retries} retries: {what}" + (f": {detail}" if detail else "")


class OpenAIChatAgent:
    """Answers prompts with a model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8080/v1`` or ``https://api.openai.com/v1``.
        model: the model name the server knows.
        api_key_env: the environment variable holding the key (default ``OPENAI_API_KEY``, optional).
        temperature: 0 is greedy decoding.
        seed: sampling seed sent to the server (servers that support it reproduce their draws).
        max_tokens: the most tokens a response may have.
        timeout: seconds one attempt may take.
        max_retries: attempts after the first on 408/409/429/5xx, connection errors and timeouts.
        system_prompt: an optional system message before the env's prompt.
        client: an ``openai.OpenAI`` to use instead of building one (then ``base_url`` is only a label).
    """

    def __init__(self, base_url: str, model: str, *, api_key_env: str | None = None, temperature: float = 0.0,
                 seed: int | None = None, max_tokens: int = 256, timeout: float = 60.0, max_retries: int = 2,
                 system_prompt: str | None = None, client: Any = None):
        if max_tokens < 1 or timeout <= 0 or max_retries < 0 or temperature < 0:
            raise ValueError(f"endpoint agent: need max_tokens >= 1, timeout > 0, max_retries >= 0, temperature >= 0 "
                             f"(got {max_tokens}, {timeout}, {max_retries}, {temperature})")
        self._openai = import_openai()
        self.base_url, self.model = base_url, model
        self.temperature, self.seed, self.max_tokens = float(temperature), seed, int(max_tokens)
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        self.system_prompt = system_prompt
        self._client = client if client is not None else self._openai.OpenAI(
            base_url=base_url, api_key=resolve_api_key(api_key_env), timeout=self.timeout, max_retries=self.max_retries)

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
        start = time.perf_counter()
        try:
            raw = self._client.chat.completions.with_raw_response.create(**request)
            completion = raw.parse()
        except self._openai.APIError as e:  # status errors, timeouts and connection errors alike
            raise EndpointError(describe_failure(e, self.base_url, self.max_retries)) from e
        latency = time.perf_counter() - start
        if not completion.choices:
            raise EndpointError(f"endpoint {self.base_url} returned no choices")
        choice = completion.choices[0]
        usage = completion.usage
        return ServedResponse(choice.message.content or "", {
            "prompt_tokens": getattr(usage, "prompt_tokens", None),
            "completion_tokens": getattr(usage, "completion_tokens", None),
            "latency_s": round(latency, 6),
            "retries": getattr(raw, "retries_taken", None),
            "finish_reason": choice.finish_reason,
            "model": completion.model,
        })

    def __call__(self, obs: dict, info: dict) -> ServedResponse:
        if "prompt" not in obs:
            raise ValueError("endpoint agent: the observation has no 'prompt'; build the env with "
                             "wrappers.stack.make_agent_env (a PromptRenderer renders it)")
        return self.act(obs["prompt"])
