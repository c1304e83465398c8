"""TRL and verl-agent adapters: contracts, and one real GRPOTrainer step on CPU (no network)."""
from __future__ import annotations

import inspect

import pytest

from seed_train.adapters.trl import (SeedRolloutFunc, TaskEnv, episode_return_reward, make_tool_environment,
                                     task_rows, turn_suffix_ids)

SOKOBAN = TaskEnv("seed/Sokoban-v0", max_steps=3)  # the env's own prompt (template None)


def _tokenizer():
    from transformers import AutoTokenizer

    from seed_train.tiny import cached_tiny_model

    return AutoTokenizer.from_pretrained(cached_tiny_model())


def test_task_rows_are_deterministic_and_distinct():
    a = task_rows(SOKOBAN, _panel(2), base_seed=5)
    b = task_rows(SOKOBAN, _panel(2), base_seed=5)
    assert a == b
    assert [r["seed"] for r in a] == [5, 6]
    assert a[0]["prompt"] != a[1]["prompt"]


def _panel(n: int) -> list[str]:
    import gymnasium as gym

    env = gym.make("seed/Sokoban-v0", split="train")
    try:
        return list(env.unwrapped.task_ids()[:n])
    finally:
        env.close()


def test_turn_suffix_closes_and_opens_turns():
    tok = _tokenizer()
    finished = tok.decode(turn_suffix_ids(tok, "next obs", response_finished=True))
    cut = tok.decode(turn_suffix_ids(tok, "next obs", response_finished=False))
    assert finished == "\n<|im_start|>user\nnext obs<|im_end|>\n<|im_start|>assistant\n"
    assert cut == "<|im_end|>" + finished


def test_tool_environment_contract():
    cls = make_tool_environment(SOKOBAN)
    env = cls()
    tools = [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
             if n not in ("reset", "get_reward") and not n.startswith("_")]
    assert sorted(tools) == ["down", "left", "right", "up"]
    from transformers.utils import get_json_schema

    schema = get_json_schema(env.up)
    assert schema["function"]["name"] == "up" and schema["function"]["parameters"]["properties"] == {}
    row = task_rows(SOKOBAN, _panel(1))[0]
    first = env.reset(**row)
    assert isinstance(first, str) and "Push every box" in first
    again = cls()
    assert again.reset(**row) == first  # same row, same start (a GRPO group)
    for _ in range(3):
        out = env.left()
    assert "episode has ended" in out
    assert env.left() == "The episode has ended."  # stepping after the end is harmless
    assert isinstance(env.get_reward(), float)


def test_tool_verbs_are_the_ones_the_env_declares():
    from seed_envs.alfworld.env import AlfWorldEnv
    from seed_train.adapters.trl import GENERIC_VERB, env_tool_verbs

    alfworld = env_tool_verbs("seed/ALFWorld-v0")
    assert [v.name for v in alfworld] == ["go_to", "open", "close", "take", "put", "act"]
    assert alfworld == AlfWorldEnv.agent_defaults.tool_verbs
    assert alfworld[3].action.format(object="apple 1", receptacle="countertop 1") == "take apple 1 from countertop 1"
    assert [v.name for v in env_tool_verbs("seed/EZPoints-v0")] == ["enter"]
    import toy_env  # noqa: F401  (test/Echo-v0 declares no verbs)

    assert env_tool_verbs("test/Echo-v0") == (GENERIC_VERB,)  # declares none: one generic act(action)
    cls = make_tool_environment(TaskEnv("test/Echo-v0", max_steps=2))
    assert [n for n in vars(cls) if not n.startswith("_") and n not in ("task",)] == ["act"]


def test_task_env_prompt_is_the_envs_own_without_history():
    env = SOKOBAN.make()
    try:
        obs, info = env.reset(seed=0)
        assert obs["prompt"].startswith("You are playing Sokoban.")  # the env's wording, not "default"
        assert env.get_wrapper_attr("history") == 0  # TRL's conversation carries the earlier turns
        obs, *_ = env.step("<action>up</action>")
        assert "step(s) so far" not in obs["prompt"]
    finally:
        env.close()


def test_tool_environment_with_arguments_has_a_schema():
    from transformers.utils import get_json_schema

    from seed_train.adapters.trl import ToolVerb

    cls = make_tool_environment(SOKOBAN, [ToolVerb("move", "Move one step.", "{direction}",
                                                   {"direction": "up, down, left or right"})])
    env = cls()
    schema = get_json_schema(env.move)
    assert schema["function"]["parameters"]["required"] == ["direction"]
    env.reset(**task_rows(SOKOBAN, _panel(1))[0])
    assert "Invalid" not in env.move(direction="up")


def test_grpo_trainer_step_on_sokoban(tmp_path, monkeypatch):
    pytest.importorskip("trl")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from seed_train.adapters.trl import make_dataset
    from seed_train.tiny import cached_tiny_model

    folder = cached_tiny_model()
    tok = _tokenizer()
    model = AutoModelForCausalLM.from_pretrained(folder)
    rows = task_rows(SOKOBAN, _panel(2), base_seed=0)
    rollout = SeedRolloutFunc(SOKOBAN, rows, max_new_tokens=12)
    seen = {}

    def reward(completions, episode_return, task_id, **kwargs):
        seen.setdefault("task_id", list(task_id))
        return episode_return_reward(completions, episode_return)

    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_steps=1,
                      max_completion_length=64, report_to="none", use_cpu=True, logging_steps=1,
                      save_strategy="no", learning_rate=1e-4, seed=0, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=make_dataset(rows),
                          processing_class=tok, rollout_func=rollout)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = trainer.train()
    assert result.global_step == 1
    # Group members (consecutive repeats of a row) are the same task.
    ids = seen["task_id"]
    assert len(ids) == 4 and ids[0] == ids[1] and ids[2] == ids[3]
    changed = any(not (p.detach() == before[n]).all() for n, p in model.named_parameters())
    assert changed or all(r == 0 for r in trainer.state.log_history[0].get("rewards", [0]))
    rollout.close()


def test_rollout_masks_env_tokens():
    """The rollout's own output: env tokens masked with 0 log-probs, lengths consistent, same seed -> same output."""
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM

    from seed_train.tiny import cached_tiny_model

    tok = _tokenizer()
    model = AutoModelForCausalLM.from_pretrained(cached_tiny_model())
    trainer = SimpleNamespace(processing_class=tok, model=model,
                              args=SimpleNamespace(max_completion_length=200, temperature=1.0, seed=0),
                              accelerator=SimpleNamespace(unwrap_model=lambda m: m, process_index=0))
    rows = task_rows(SOKOBAN, _panel(1))
    out = SeedRolloutFunc(SOKOBAN, rows, max_new_tokens=8)([rows[0]["prompt"]] * 2, trainer)
    for ids, lps, mask in zip(out["completion_ids"], out["logprobs"], out["env_mask"]):
        assert len(ids) == len(lps) == len(mask) <= 200
        assert all(lp == 0.0 for lp, m in zip(lps, mask) if m == 0)
        assert any(m == 0 for m in mask) or len(ids) <= 8  # a multi-turn episode has env tokens
    assert out["prompt_ids"][0] == out["prompt_ids"][1]
    assert len(out["episode_return"]) == 2


# ------------------------------------------------------------------------------ verl-agent
def _verl_config(**env):
    from types import SimpleNamespace as NS

    return NS(env=NS(env_name="seed/Sokoban-v0", seed=3, rollout=NS(n=3), max_steps=4, **env),
              data=NS(train_batch_size=2, val_batch_size=2))


def test_verl_agent_manager_contract():
    import numpy as np

    from seed_train.adapters.verl_agent import make_envs

    envs, val_envs = make_envs(_verl_config())
    assert envs.num_envs == 6 and val_envs.num_envs == 2
    obs, infos = envs.reset({})
    assert set(obs) == {"text", "image", "anchor"} and obs["image"] is None
    assert len(obs["text"]) == len(obs["anchor"]) == len(infos) == 6
    # Consecutive blocks of rollout.n share task and seed; different groups differ.
    assert obs["text"][0] == obs["text"][1] == obs["text"][2] != obs["text"][3]
    assert infos[0]["task_id"] == infos[2]["task_id"] and infos[0]["won"] is False
    assert "Push every box" in obs["text"][0] and obs["anchor"][0] in obs["text"][0]
    actions = ["<action>up</action>", "garbage", "<action>left</action>"] * 2
    total = np.zeros(6)
    for t in range(6):  # max_steps=4: stepping past the end must be harmless
        obs, rewards, dones, infos = envs.step(actions)
        assert rewards.shape == dones.shape == (6,) and dones.dtype == bool
        total += rewards
        assert all("won" in i and "is_action_valid" in i for i in infos)
        if t == 0:
            assert [bool(i["is_action_valid"]) for i in infos[:3]] == [True, False, True]
            assert "Step 1" in obs["text"][0]  # history shown in the prompt
        if t >= 4:
            assert dones.all() and (rewards == 0).all()
    # Fresh tasks on the next reset, still shared within groups.
    obs2, _ = envs.reset({})
    assert obs2["text"][0] == obs2["text"][2]
    envs.close(); val_envs.close()


def test_verl_agent_success_evaluator_and_task_ids():
    from seed_train.adapters.verl_agent import SeedEnvironmentManager

    m = SeedEnvironmentManager("seed/Sokoban-v0", 2, 2, max_steps=2)
    panel = _panel(2)
    _, infos = m.reset({"task_ids": panel})
    assert [i["task_id"] for i in infos] == [panel[0], panel[0], panel[1], panel[1]]
    out = m.success_evaluator(total_infos=[[{"won": False}, {"won": True}], [{"won": False}, {"won": True}]],
                              total_batch_list=[[{"active_masks": True}, {"active_masks": True}],
                                                [{"active_masks": True}, {"active_masks": False}]])
    assert out["success_rate"].tolist() == [1.0, 0.0]
    m.close()
