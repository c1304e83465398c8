"""Long prompts (issue 30 item 4): a prompt over the model's budget first loses its oldest history; an
episode whose prompt still does not fit ends truncated (``ended_by`` prompt_overflow, counted), never a
crash, a silent cut of the prompt's head or a format error. Checked with a model of small context."""
from __future__ import annotations

import json
import pickle

import pytest

import seed_envs
from seed_train.codec import PromptTokenBudget, model_context_tokens
from seed_train.config import SeedConfig
from seed_train.evaluate import evaluate_policy
from seed_train.rollout import EnvPool, EnvSpec, RolloutStats, group_jobs, run_episodes
from seed_train.tiny import cached_tiny_model
from seed_train.trainer import load, prompt_budget, train
from wrappers import PromptOverflow, PromptParts, TrajectoryRecorder, make_agent_env, read_trajectories, render_prompt

ENV_ID = "seed/EZPoints-v0"


def play(env, steps: int, seed: int = 3):
    """Reset and play ``steps`` expert moves; the prompts and infos seen, first one included."""
    obs, info = env.reset(seed=seed)
    prompts, infos = [obs["prompt"]], [info]
    expert = seed_envs.make_expert(env.unwrapped)
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(f"<action>{expert(obs, info)}</action>")
        prompts.append(obs["prompt"])
        infos.append(info)
        if terminated or truncated:
            break
    return prompts, infos


def test_renderer_leaves_out_the_oldest_history_until_the_prompt_fits():
    long, _ = play(make_agent_env(ENV_ID, split="test", history=3), 3)
    short, _ = play(make_agent_env(ENV_ID, split="test", history=1), 3)
    assert len(long[3]) > len(short[3])
    budget = len(short[3])
    trimmed, infos = play(make_agent_env(ENV_ID, split="test", history=3, prompt_fits=lambda p: len(p) <= budget), 3)
    assert trimmed[3] == short[3]  # the same prompt a 1-step history renders: the two oldest steps left out
    assert infos[3]["history_trimmed"] == 2 and "history_trimmed" not in infos[0]
    assert trimmed[:2] == long[:2]  # prompts that fit are kept whole
    # Nothing left to leave out: the prompt is handed on as it is (the agent's rollout then ends the episode).
    whole, infos = play(make_agent_env(ENV_ID, split="test", history=3, prompt_fits=lambda p: False), 1)
    assert whole[0] == long[0] and "History" not in whole[1] and infos[1]["history_trimmed"] == 1


def test_recorder_ends_an_overflowing_episode_truncated_without_stepping_the_env():
    got = []
    env = TrajectoryRecorder(make_agent_env(ENV_ID, split="test"), sink=got.append, env_id=ENV_ID)
    play(env, 1)
    overflow = pickle.loads(pickle.dumps(PromptOverflow(700, 512)))  # crosses process boundaries intact
    assert (overflow.prompt_tokens, overflow.budget, str(overflow)) == (700, 512, "")
    steps_before = env.unwrapped._steps if hasattr(env.unwrapped, "_steps") else None
    obs, reward, terminated, truncated, info = env.step(overflow)
    assert (reward, terminated, truncated, info["prompt_overflow"], info["prompt_tokens"]) == (0.0, False, True, True, 700)
    if steps_before is not None:
        assert env.unwrapped._steps == steps_before  # the env below did not move
    [trajectory] = got
    assert len(trajectory.steps) == 1 and not trajectory.success  # no step recorded for the overflow
    assert trajectory.meta["ended_by"] == "prompt_overflow" and trajectory.meta["prompt_budget"] == 512
    env.reset(seed=4)  # the next episode starts as usual; one that overflows at once has no step
    env.step(PromptOverflow(900, 512))
    assert len(got) == 2 and got[1].steps == [] and got[1].meta["ended_by"] == "prompt_overflow"


@pytest.fixture(scope="module")
def tiny():
    return load(SeedConfig(model=str(cached_tiny_model(seed=0)), lora=False))


def spec(history: int, budget_test=None) -> EnvSpec:
    return EnvSpec(env_id=ENV_ID, split="test", template="compact", history=history, action_format="plain",
                   format_penalty=0.1, max_steps=4, prompt_fits=budget_test)


def first_prompt_tokens(policy, history: int) -> int:
    env = spec(history).make(lambda t: None)
    obs, _ = env.reset(seed=0, options={"task_id": env.unwrapped.task_ids()[0]})
    return len(policy.codec.encode(obs["prompt"]))


def test_rollout_never_generates_past_the_budget(tiny):
    env = spec(2).make(lambda t: None)
    task_ids = env.unwrapped.task_ids()[:3]
    jobs = group_jobs(task_ids, 2, base_seed=0, prefix="b")
    first = first_prompt_tokens(tiny, 2)

    # Below the first prompt: nothing is generated; every episode ends at once, recorded with no step.
    stats = RolloutStats()
    played = run_episodes(tiny.backend, tiny.codec, EnvPool(spec(2)), jobs, max_new_tokens=4, seed=0, stats=stats,
                          max_prompt_tokens=first - 1)
    assert [t.meta["ended_by"] for t in played] == ["prompt_overflow"] * len(jobs)
    assert all(t.steps == [] and not t.success for t in played)
    assert (stats.prompt_overflows, stats.generate_calls, stats.generated_tokens) == (len(jobs), 0, 0)

    # A budget the first prompt fits but a 2-step history does not: history goes first, and no prompt the
    # model sees is longer than the budget.
    budget = first + 12
    stats = RolloutStats()
    played = run_episodes(tiny.backend, tiny.codec, EnvPool(spec(2, PromptTokenBudget(tiny.codec, budget))), jobs,
                          max_new_tokens=4, seed=0, stats=stats, max_prompt_tokens=budget)
    prompts = [len(s.prompt_token_ids) for t in played for s in t.steps]
    assert prompts and max(prompts) <= budget
    trimmed = sum(bool(s.info.get("history_trimmed")) for t in played for s in t.steps)
    assert trimmed or stats.prompt_overflows  # the budget bit: history was left out or an episode ended
    assert all(t.meta["ended_by"] in ("terminated", "truncated", "prompt_overflow") for t in played)


def test_a_model_of_small_context_trains_and_evaluates_without_crashing(tmp_path):
    """The budget defaults to the model's context less max_new_tokens: a tiny model of 192 positions plays
    EZPoints with a 2-step history (prompts grow past it), one SEED iteration and evaluations run, and the
    overflows are counted in the metrics and the evaluation summary."""
    model = cached_tiny_model(seed=0, context=192)
    cfg = SeedConfig(env_id=ENV_ID, model=str(model), lora=False, template="compact", history=2,
                     action_format="plain", max_steps=4, max_new_tokens=4, skill_max_new_tokens=8,
                     analyzer_retries=0, stage1_demos=0, iterations=1, tasks_per_iteration=2, group_size=2,
                     minibatch_size=8, eval_before=True, eval_after=False, eval_limit=4, output_dir=str(tmp_path / "run"))
    policy = load(cfg)
    assert model_context_tokens(policy.model) == 192 and prompt_budget(cfg, policy) == 188
    first = first_prompt_tokens(policy, 2)
    assert first <= 188, "the test needs a first prompt that fits"
    train(cfg, say=lambda _: None)
    [metrics] = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "prompt_overflows" in metrics and metrics["prompt_overflows"] >= 0
    played = list(read_trajectories(tmp_path / "run" / "trajectories.jsonl"))
    assert max(len(s.prompt_token_ids) for t in played for s in t.steps) <= 188
    assert any(s.info.get("history_trimmed") for t in played for s in t.steps) or metrics["prompt_overflows"]
    summary = json.loads((tmp_path / "run" / "eval_before.json").read_text())
    assert summary["categories"]["all"]["episodes"] == 4 and "prompt_overflows" in summary["categories"]["all"]
    # Evaluated directly with a budget every first prompt misses: every episode is counted, none crashes.
    summary = evaluate_policy(policy.backend, policy.codec, spec(2), max_new_tokens=4, limit=3,
                              max_prompt_tokens=first - 1)
    assert summary["categories"]["all"]["prompt_overflows"] == summary["categories"]["all"]["episodes"] == 3


# ------------------------------------------------------------------------------------ the env's own rule first
def test_webshop_rule_removes_the_repeated_instruction_then_cuts_past_pages_then_titles():
    from seed_envs.webshop.shorten import shorten

    instruction = "i want red shoes under 50 dollars"
    results = (f"Instruction: [SEP] {instruction} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] "
               "Next > [SEP] B0MUYOSLBG [SEP] Gigaix Plus Wireless Earbuds With A Very Long Title Indeed [SEP] $75.95")
    past = "word " * 60
    parts = {"task": instruction, "observation": results, "history": [{"step": 1, "observation": past.strip(),
                                                                     "action": "search[red shoes]"}],
             "admissible": ["click[back to search]", "click[next >]", "click[b0muyoslbg]"]}
    one = shorten(parts, 1)
    assert one["observation"] == ("Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B0MUYOSLBG "
                                  "[SEP] Gigaix Plus Wireless Earbuds With A Very Long Title Indeed [SEP] $75.95")
    assert one["history"] == parts["history"] and one["admissible"] == parts["admissible"]
    two = shorten(parts, 2)
    assert two["history"][0]["observation"] == "word " * 39 + "word ..." and two["history"][0]["action"] == "search[red shoes]"
    three = shorten(parts, 3)
    assert "[SEP] Gigaix Plus Wireless Earbuds With A ... [SEP] $75.95" in three["observation"]
    assert three["admissible"] == parts["admissible"]  # every click stays listed
    assert shorten(parts, 4) is None


def test_alfworld_rule_lists_the_acting_actions_then_cuts_past_observations():
    from seed_envs.alfworld.shorten import shorten

    parts = {"task": "put a mug in the fridge", "observation": "Nothing happens.",
             "history": [{"step": 1, "observation": "You arrive at cabinet 1. On the cabinet 1, you see a mug 1.",
                          "action": "go to cabinet 1"}],
             "admissible": ["examine cabinet 1", "go to fridge 1", "help", "inventory", "look", "take mug 1 from cabinet 1"]}
    one = shorten(parts, 1)
    assert one["admissible"] == ["go to fridge 1", "take mug 1 from cabinet 1"] and one["history"] == parts["history"]
    two = shorten(parts, 2)
    assert two["history"][0]["observation"] == "You arrive at cabinet 1. ..."
    assert shorten(parts, 3) is None


@pytest.mark.parametrize("env_id", ["seed/WebShop-v0", "seed/ALFWorld-v0"])
def test_a_prompt_over_budget_is_shortened_by_the_envs_rule_before_history_goes(env_id):
    """The budget is the prompt the env's first level gives: the renderer uses that level and keeps every
    past step; without the env's rule (shorten=False) the same budget costs past steps."""
    from wrappers.prompt import env_shorten

    full, infos = play_env(make_agent_env(env_id, split="test"), 3)
    env = make_agent_env(env_id, split="test")
    play_env(env, 3)
    parts = env.get_wrapper_attr("last_parts")
    rule = env_shorten(env)
    level_one = rule({"task": parts.task, "observation": parts.observation, "history": parts.history,
                      "admissible": parts.admissible}, 1)
    budget = len(render_prompt(PromptParts(**{**parts.__dict__, **{k: level_one[k] for k in ("observation", "history",
                                                                                              "admissible")}})))
    assert budget < len(full[-1])
    fits = lambda prompt: len(prompt) <= budget  # noqa: E731
    shortened, infos = play_env(make_agent_env(env_id, split="test", prompt_fits=fits), 3)
    assert len(shortened[-1]) <= budget and infos[-1]["prompt_shortened"] == 1 and "history_trimmed" not in infos[-1]
    assert len(infos[-1]["prompt_parts"]["history"]) == len(parts.history)
    generic, ginfos = play_env(make_agent_env_without_rule(env_id, fits), 3)
    assert "prompt_shortened" not in ginfos[-1] and ginfos[-1].get("history_trimmed", 0) >= 1


def play_env(env, steps: int):
    obs, info = env.reset(seed=0)
    expert = seed_envs.make_expert(env)
    prompts, infos = [obs["prompt"]], [info]
    for _ in range(steps):
        obs, _, terminated, truncated, info = env.step(expert(obs, info))
        prompts.append(obs["prompt"])
        infos.append(info)
        if terminated or truncated:
            break
    return prompts, infos


def make_agent_env_without_rule(env_id, fits):
    env = make_agent_env(env_id, split="test", prompt_fits=fits)
    env.get_wrapper_attr("shorten")  # the renderer holds the env's rule ...
    env.set_wrapper_attr("shorten", None)  # ... switched off: only the generic rule is left
    return env
