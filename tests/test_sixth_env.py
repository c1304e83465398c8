"""The sixth env (tests/sixth_env, docs/adding-an-environment.md): an env added with its own package,
one registration line and this test plays through the whole project unchanged: the contract
(tests/test_contract.py checks it with the five), the one agent stack, one SEED iteration with the tiny
model, and the trajectory viewer."""
from __future__ import annotations

import argparse
import json

import gymnasium as gym
import pytest
import sixth_env  # noqa: F401  (registers test/WordReverse-v0: the one registration line)

import seed_envs
from seed_train.config import SeedConfig
from seed_train.tiny import cached_tiny_model
from seed_train.trainer import train
from wrappers import make_agent_env, read_trajectories

ENV_ID = sixth_env.ENV_ID


def test_registered_outside_seed_envs_and_played_by_its_expert():
    assert ENV_ID in gym.registry and ENV_ID not in seed_envs.ENV_IDS
    env = gym.make(ENV_ID, split="unseen")
    obs, info = env.reset(seed=0)
    assert obs["text"].startswith("Word: ") and len(obs["text"]) == len("Word: ") + 7  # unseen: longer words
    _, reward, terminated, truncated, info = env.step(seed_envs.make_expert(env)(obs, info))
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)


def test_wrong_and_invalid_tries_and_the_step_budget():
    env = gym.make(ENV_ID, split="test")
    _, info = env.reset(options={"task_id": "reverse/test/zebra"})
    _, reward, terminated, _, info = env.step("zebra")  # valid, wrong
    assert (reward, terminated, info["invalid_action"]) == (0.0, False, False)
    obs, reward, terminated, truncated, info = env.step("z3bra")  # not letters: invalid
    assert info["invalid_action"] and "Invalid try" in obs["text"]
    _, reward, terminated, _, info = env.step("arbez")
    assert terminated and info["success"] and reward == 1.0
    env.reset(options={"task_id": "reverse/test/zebra"})
    assert [env.step("aaaaa")[3] for _ in range(3)] == [False, False, True]  # default_max_steps 3


def test_agent_stack_uses_the_defaults_the_env_declares():
    env = make_agent_env(ENV_ID, split="test")
    obs, _ = env.reset(seed=1)
    assert obs["prompt"].startswith("You are playing Word Reverse.")
    assert env.get_wrapper_attr("history") == 1 and env.unwrapped.max_steps == 3
    assert SeedConfig(env_id=ENV_ID).env_default("max_steps") == 3
    assert env.get_wrapper_attr("format") == "plain"  # the env's declared answer format, not tags


def test_its_hindsight_rule_is_declared_on_the_env_and_used_by_stage1():
    from sixth_env.hindsight import SUCCESS_RULES, hindsight_rule

    from seed_train.skills import rule_based_skill
    from wrappers import TrajectoryRecorder

    assert seed_envs.hindsight_rule_for(ENV_ID) is hindsight_rule
    assert seed_envs.wrong_rule_for(ENV_ID) is None  # declares none: the wrong-rule controls refuse it
    env = make_agent_env(ENV_ID, split="train")
    got = []
    recorder = TrajectoryRecorder(env, sink=got.append, env_id=ENV_ID)
    obs, info = recorder.reset(seed=0)
    recorder.step(seed_envs.make_expert(recorder)(obs, info))
    skill = rule_based_skill(got[0])
    assert got[0].success and skill.text == SUCCESS_RULES["reverse"]


def test_trainer_and_seed_eval_play_the_declared_answer_format():
    """The answer format is the env's unless a run sets one: seed-train's env stack, its Stage 1 pairs and
    seed-eval's config all follow the env (issue 31: config.py is not a second home for it)."""
    from seed_train.cli import eval_config
    from seed_train.trainer import env_spec

    assert env_spec(SeedConfig(env_id=ENV_ID), "test").action_format == "plain"
    assert env_spec(SeedConfig(env_id=ENV_ID, action_format="tags"), "test").action_format == "tags"
    assert env_spec(SeedConfig(env_id="seed/EZPoints-v0"), "test").action_format == "tags"  # declares none
    args = argparse.Namespace(config=None, model="m", env=ENV_ID, split="test", limit=None, max_new_tokens=None,
                              action_format=None, history=None, env_kwargs=None, device=None, threads=None,
                              sample=False)
    assert env_spec(eval_config(args), "test").action_format == "plain"


def test_one_seed_iteration_with_the_tiny_model_and_the_viewer(tmp_path):
    try:
        from wrappers.viewer import write_viewer
    except ImportError:  # before the viewer moved to the wrappers package
        from seed_envs.viewer import write_viewer

    run = tmp_path / "run"
    cfg = SeedConfig(env_id=ENV_ID, model=str(cached_tiny_model(seed=0)), lora=False,
                     max_new_tokens=6, skill_max_new_tokens=8, analyzer_retries=0, stage1_demos=0, iterations=1,
                     tasks_per_iteration=2, group_size=2, minibatch_size=8, eval_before=False, eval_after=False,
                     output_dir=str(run), seed=0)
    train(cfg, say=lambda _: None)
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [0]
    trajectories = list(read_trajectories(run / "trajectories.jsonl"))
    assert len(trajectories) == 2 * 2 and {t.env_id for t in trajectories} == {ENV_ID}
    first = trajectories[0].steps[0]
    assert first.prompt.startswith("You are playing Word Reverse.") and first.response_token_ids
    html = write_viewer(run, tmp_path / "run.html").read_text(encoding="utf-8")
    assert ENV_ID in html and "Word: " in html


@pytest.mark.parametrize("split", ["train", "test", "unseen"])
def test_panels_are_disjoint_and_fixed(split):
    env = gym.make(ENV_ID, split=split)
    words = {tid.rsplit("/", 1)[1] for tid in env.unwrapped.task_ids()}
    others = {s for s in ("train", "test", "unseen") if s != split}
    for other in others:
        other_env = gym.make(ENV_ID, split=other)
        assert not words & {tid.rsplit("/", 1)[1] for tid in other_env.unwrapped.task_ids()}
