"""The Verifiers environment (seed_train.adapters.verifiers_env) on verifiers 0.4 (``verifiers.v1``).

- the dataset is the split's panel, each row with the env's own first prompt, task id and reset seed;
- a scripted OpenAI-compatible server answering with the expert's moves (looked up by the exact prompt it
  is sent) gets reward 1.0 on every task of EZPoints' test panel, through verifiers' rollout machinery;
- an env that raises mid-episode fails that episode cleanly, and every env a rollout builds is closed;
- end to end, vf-eval's own runner (``verifiers.v1.cli.eval.runner.run_eval``) against SmolLM2 behind the
  local llama.cpp server: each reward equals what our env gives for the recorded replies.

Skips where verifiers is not installed (``pip install -e ".[verifiers]"``); the llama.cpp test also where
llama-cpp-python is not.
"""
from __future__ import annotations

import asyncio
import time

import gymnasium as gym
import pytest

pytest.importorskip("verifiers.v1", reason="verifiers is not installed (pip install -e '.[verifiers]')")

import verifiers.v1 as vf  # noqa: E402
from verifiers.v1.types import content_text  # noqa: E402

import seed_envs  # noqa: E402
from seed_train.adapters import verifiers_env as ve  # noqa: E402
from wrappers import format_response, make_agent_env  # noqa: E402
from wrappers.stack import default_action_format, default_max_steps  # noqa: E402

ENV = "seed/EZPoints-v0"
MODEL = "smollm2"
KEY_VAR = "SEED_VERIFIERS_TEST_KEY"  # unset: verifiers sends "EMPTY"


def replay(task_id, seed: int, actions: list[str], max_steps: int | None = None):
    """Our env's own outcome for ``actions`` (raw model texts) on one task: prompts seen, final info, steps."""
    env = make_agent_env(ENV, split="test", max_steps=max_steps)
    try:
        obs, info = env.reset(seed=seed, options={"task_id": task_id})
        prompts, steps = [obs["prompt"]], 0
        for action in actions:
            obs, _, terminated, truncated, info = env.step(action)
            steps += 1
            if terminated or truncated:
                break
            prompts.append(obs["prompt"])
        return prompts, info, steps, terminated or truncated
    finally:
        env.close()


def user_prompts(trace: vf.Trace) -> list[str]:
    """The user message of each step, in order (each step is its own branch: the env's prompt, the reply)."""
    return [content_text(n.message.content) for n in trace.nodes if n.message.role == "user"]


# ------------------------------------------------------------------------------------------- dataset
def test_dataset_is_the_panel_with_the_envs_first_prompts():
    env = ve.load_environment(ENV, split="test")
    assert isinstance(env, ve.SeedGymEnv) and isinstance(env.taskset, ve.SeedTaskset)
    # verifiers' own loader resolves the three plugins from the one id
    assert vf.environment_class(ve.PLUGIN_ID) is ve.SeedGymEnv
    assert vf.default_harness_id(ve.PLUGIN_ID) == ve.PLUGIN_ID
    assert isinstance(env._harnesses["player"], ve.SeedChatHarness)
    assert env.config.player.max_turns == env.taskset.config.max_steps == default_max_steps(ENV) == 8

    tasks = list(env.taskset)
    panel = gym.make(ENV, split="test").unwrapped.task_ids()
    assert [t.data.info["task_id"] for t in tasks] == list(panel) and len(tasks) == len(panel) > 0
    assert [t.data.id for t in tasks] == [str(i) for i in panel]
    assert [t.data.info["seed"] for t in tasks] == list(range(len(panel)))
    assert len({t.key for t in tasks}) == len(tasks)
    agent_env = make_agent_env(ENV, split="test")
    for task in tasks:
        obs, _ = agent_env.reset(seed=task.data.info["seed"], options={"task_id": task.data.info["task_id"]})
        assert task.data.prompt == obs["prompt"]
    agent_env.close()

    short = ve.load_environment(ENV, split="test", num_examples=3, max_turns=5, base_seed=10)
    assert short.config.player.max_turns == short.taskset.config.max_steps == 5
    first = list(short.taskset)
    assert [t.data.info["task_id"] for t in first] == list(panel[:3])
    assert [t.data.info["seed"] for t in first] == [10, 11, 12]
    with pytest.raises(ValueError, match="max_turns"):
        ve.load_environment(ENV, max_turns=0)


# ------------------------------------------------------------------------------------ scripted model
class ScriptedServer:
    """An OpenAI-compatible chat server on loopback that answers each prompt from ``answers`` (prompt -> text)
    and records every request body; an unknown prompt is answered with text no env parses."""

    def __init__(self, answers: dict[str, str]):
        self.answers, self.requests, self.unknown = answers, [], 0

    async def chat(self, request):
        from aiohttp import web

        body = await request.json()
        self.requests.append(body)
        text = self.answers.get(body["messages"][-1]["content"])
        if text is None:
            self.unknown += 1
            text = "I do not know."
        return web.json_response({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
            "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

    async def __aenter__(self) -> str:
        from aiohttp import web

        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"

    async def __aexit__(self, *exc) -> None:
        await self.runner.cleanup()


def expert_answers(tasks) -> dict[str, str]:
    """Every prompt of the expert's episode on each task -> the expert's move in the env's answer format,
    played through our own stack (no verifiers); the expert must solve every task."""
    answers: dict[str, str] = {}
    fmt = default_action_format(ENV)
    for task in tasks:
        env = make_agent_env(ENV, split="test")
        obs, info = env.reset(seed=task.data.info["seed"], options={"task_id": task.data.info["task_id"]})
        expert = seed_envs.make_expert(env)
        while True:
            text = format_response(expert(obs, info), fmt)
            assert answers.setdefault(obs["prompt"], text) == text  # one answer per prompt
            obs, _, terminated, truncated, info = env.step(text)
            if terminated or truncated:
                break
        assert info["success"], task.data.id
        env.close()
    return answers


def test_scripted_expert_gets_reward_one_on_every_task(monkeypatch):
    env = ve.load_environment(ENV, split="test")
    tasks = list(env.taskset)
    server = ScriptedServer(expert_answers(tasks))
    made = []

    def tracking_make_agent_env(*args, **kwargs):
        agent_env = make_agent_env(*args, **kwargs)
        record = {"closed": False}
        close = agent_env.close

        def tracked_close():
            record["closed"] = True
            return close()

        agent_env.close = tracked_close
        made.append(record)
        return agent_env

    monkeypatch.setattr(ve, "make_agent_env", tracking_make_agent_env)

    async def main():
        async with server as base_url:
            return await ve.evaluate(env, ve.model_context(base_url, "scripted", max_tokens=16, api_key_var=KEY_VAR),
                                     tasks=tasks)

    episodes = asyncio.run(main())
    assert len(episodes) == len(tasks) == len(made) and all(m["closed"] for m in made)
    assert server.unknown == 0  # every request carried exactly one of the env's prompts ...
    for body in server.requests:  # ... alone, as the user message, with the run's sampling
        assert [m["role"] for m in body["messages"]] == ["user"] and body["max_tokens"] == 16
    for task, episode in zip(tasks, episodes):
        assert episode.ok and not episode.errors
        trace = episode.traces[0]
        assert trace.task.data.id == task.data.id and trace.ok and not trace.errors
        assert trace.reward == 1.0 and trace.rewards["success"].weight == 1.0
        assert trace.metrics["score"] == 1.0 and trace.metrics["format_errors"] == 0.0
        assert trace.stop_condition == "env_terminated"
        assert 1 <= trace.num_turns == trace.metrics["steps"] == trace.num_branches <= 8
    assert len(server.requests) == sum(e.traces[0].num_turns for e in episodes)


def test_a_failing_env_fails_its_episode_and_is_closed(monkeypatch):
    """An env that raises at its second step: the episode records the env's error (no reward, no crash of the
    run), the other episode plays on, and both envs are closed."""
    env = ve.load_environment(ENV, split="test", num_examples=2)
    tasks = list(env.taskset)
    closed = []

    class Boom(RuntimeError):
        pass

    def failing_make_agent_env(*args, **kwargs):
        agent_env = make_agent_env(*args, **kwargs)
        reset, step, close, calls = agent_env.reset, agent_env.step, agent_env.close, []

        def tracked_reset(**kw):
            calls.append(kw["options"]["task_id"])
            return reset(**kw)

        def failing_step(action):
            calls.append(action)
            if len(calls) == 3 and calls[0] == tasks[0].data.info["task_id"]:
                raise Boom("the env broke")
            return step(action)

        agent_env.reset, agent_env.step = tracked_reset, failing_step
        agent_env.close = lambda: (closed.append(True), close())[1]
        return agent_env

    monkeypatch.setattr(ve, "make_agent_env", failing_make_agent_env)
    server = ScriptedServer({})  # never parses: the episode that does not break runs out its 8 steps

    async def main():
        async with server as base_url:
            return await ve.evaluate(env, ve.model_context(base_url, "scripted", api_key_var=KEY_VAR), tasks=tasks)

    broken, fine = asyncio.run(main())
    assert not broken.ok and "the env broke" in broken.errors[-1].message
    assert fine.ok and fine.traces[0].reward == 0.0 and fine.traces[0].metrics["format_errors"] == 8.0
    assert fine.traces[0].stop_condition == "env_truncated"
    assert len(closed) == 2


# ------------------------------------------------------------------------------- the real model, served
@pytest.fixture(scope="module")
def base_url():
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed or could not be built "
                                            "(pip install 'llama-cpp-python[server]'): the real-server test skips")
    from seed_agents.llama_server import llama_server, smollm2_gguf

    with llama_server(smollm2_gguf(), model_alias=MODEL, n_threads=1, ready_deadline_s=120) as url:
        yield url


def test_vf_eval_runner_with_smollm2_rewards_what_our_env_gives(base_url, tmp_path):
    """vf-eval's in-process runner on 2 EZPoints tasks, greedy, 16 tokens a reply, a 3-step budget (as
    test_endpoint_llama's recording; 2 cores): every episode completes, and replaying its recorded replies through
    our own env (same budget) gives the same success, score and step count, and the same prompt at every step as
    the user message verifiers recorded."""
    from verifiers.v1.cli.eval.runner import run_eval
    from verifiers.v1.configs.cli.eval import EvalConfig

    env = ve.load_environment(ENV, split="test", num_examples=2, max_turns=3)
    budget = env.config.player.max_turns
    assert budget == env.taskset.config.max_steps == 3
    config = EvalConfig(env=env.config, model=MODEL,
                        client=vf.EvalClientConfig(base_url=base_url, api_key_var=KEY_VAR),
                        sampling=vf.SamplingConfig(max_tokens=16, temperature=0.0), push=False, rich=None,
                        output_dir=tmp_path, max_concurrent=1)
    episodes = asyncio.run(run_eval(config))
    assert len(episodes) == 2
    assert len(list(tmp_path.glob("*/traces.jsonl"))) == 1
    for episode in episodes:
        assert episode.ok and not episode.errors
        trace = episode.traces[0]
        row = trace.task.data.info
        replies = [m.content or "" for m in trace.assistant_messages]
        assert 1 <= len(replies) == trace.num_turns <= budget
        prompts, info, steps, done = replay(row["task_id"], row["seed"], replies, max_steps=budget)
        assert done and steps == len(replies)  # the episode ended with the env, not before
        assert trace.reward == (1.0 if info["success"] else 0.0)
        assert trace.metrics["score"] == float(info["score"]) and trace.metrics["steps"] == steps
        assert user_prompts(trace) == prompts
        for call in trace.calls:
            assert call.usage is None or call.usage.completion_tokens <= 16
