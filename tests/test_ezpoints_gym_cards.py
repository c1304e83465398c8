"""``seed/EZPoints-v0`` with ``rules="gym_cards"`` against RL4VLM gym_cards' semantics (issue 17 item 3).

Expectations come from reading the original, RL4VLM/RL4VLM commit 202229a4ecf8b2745710214a134544289ab92086,
``gym-cards/gym_cards/envs/ezpoints.py`` (EZPointEnv.step, _is_valid_action, _evaluate_formula) and
``points.py`` (Point24Env): hand-derived cases below (each names the lines it follows), and seeded
random episodes compared step by step with tests/gym_cards_reference.py, a line-by-line transcription
that evaluates formulas with CPython's own parser (``ast``) instead of the env's hand-written one.
"""
from __future__ import annotations

import random

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import seed_envs  # noqa: F401  (registers the ids)
from gym_cards_reference import (episode_success, noisy_solution_tokens, play_env,
                                 play_reference, random_tokens, reference_eval)
from seed_envs.ezpoints.gym_cards import python_value
from seed_envs.ezpoints.solver import solutions

EZ_VOCAB = [str(n) for n in range(1, 11)] + ["+", "*", "="]
P24_VOCAB = [str(n) for n in range(1, 11)] + ["+", "-", "*", "/", "(", ")", "="]


# ----------------------------------------------------------------- the formula reader (eval's semantics)
@pytest.mark.parametrize("text, value", [
    ("5+7", 12), ("57", 57),                      # entries are joined with ''.join: 5 then 7 is 57
    ("+5+7", 12), ("5++7", 12), ("5*+7", 35),     # unary plus is Python
    ("2**3", 8), ("2**3**2", 512), ("-2**2", -4),  # two '*' entries make a right-associative power
    ("2**-1", 0.5), ("7//2", 3), ("7/2", 3.5),    # two '/' make floor division; '/' is float division
    (" 5+7", 12), ("5 +7", 12), ("5+7 ", 12),     # eval strips leading blanks; blanks beside operators are fine
    ("8/(3-8/3)", 8 / (3 - 8 / 3)),               # 23.99999999999999: floats, not fractions
    ("5*(5-1/5)", 24.0), ("(((5)))", 5), ("10*10", 100), ("-(-3)", 3),
])
def test_python_value_of_formula_strings(text, value):
    got = python_value(text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text", [
    "", "   ", "5 7", "5+*7", "*5", "5+", "(5+7", "5+7)", "5(3)", "(5)(3)", "()", "()+()", "4/0",
    "4//0", "5//(3-3)", "0010", "5=7", "5;7", "2**x", "５+7",
])
def test_python_value_is_none_where_eval_raises_or_gives_no_number(text):
    assert python_value(text) is None


def test_python_value_matches_cpythons_parser_on_random_strings():
    """Property test: the env's hand-written reader against ast-based evaluation on 20,000 seeded
    strings over gym_cards' alphabet (entries joined as the original joins them)."""
    rng = random.Random(17)
    entries = [str(n) for n in range(1, 11)] + ["+", "-", "*", "/", "(", ")", " "]
    agree = 0
    for i in range(20_000):
        text = "".join(rng.choice(entries) for _ in range(rng.randrange(0, 12)))
        try:
            expected = reference_eval(text)
        except Exception:
            expected = None
        got = python_value(text)
        same = (got is None and expected is None) or (
            got is not None and expected is not None and type(got) is type(expected)
            and (got == expected or (got != got and expected != expected)))
        assert same, (text, got, expected)
        agree += same
    assert agree == 20_000


# ----------------------------------------------------------------- hand-derived episodes
def _env(num_cards=2, target=12, **kwargs):
    return gym.make("seed/EZPoints-v0", rules="gym_cards", target=target, num_cards=num_cards, **kwargs)


def _task_with_values(env, values):
    """A panel task id (any split) whose cards have these values, in any order."""
    for split in ("train", "test", "unseen"):
        probe = gym.make("seed/EZPoints-v0", split=split, target=env.unwrapped.target,
                         num_cards=env.unwrapped.num_cards)
        for task_id in probe.unwrapped.task_ids():
            probe.reset(options={"task_id": task_id})
            if sorted(c.value for c in probe.unwrapped.deal) == sorted(values):
                return split, task_id
    raise AssertionError(f"no deal with values {values}")


def _play(values, tokens, num_cards=2, target=12):
    probe = _env(num_cards, target)
    split, task_id = _task_with_values(probe, values)
    env = _env(num_cards, target, split=split)
    env.reset(options={"task_id": task_id})
    out = []
    for token in tokens:
        _, reward, terminated, truncated, info = env.step(token)
        out.append((reward, terminated, truncated, info["invalid_action"]))
        if terminated or truncated:
            break
    return out, env


R = (0.0, False, False, False)  # an accepted token: ezpoints.py appends it, reward 0


@pytest.mark.parametrize("values, tokens, expected", [
    # _evaluate_formula: eval("5+7") == 12 and len(used_cards) == 2 -> 10, terminated
    ((5, 7), ["5", "+", "7", "="], [R, R, R, (10.0, True, False, False)]),
    # wrong value at "=": -1 and the episode terminates (our default rules pay 0)
    ((5, 7), ["5", "*", "7", "="], [R, R, R, (-1.0, True, False, False)]),
    # "=" first: eval("") raises SyntaxError -> except: -1; used_cards is empty -> finally: -1
    ((5, 7), ["="], [(-1.0, True, False, False)]),
    # one card left unused: finally clause sets -1 even though eval("5") succeeded
    ((5, 7), ["5", "="], [R, (-1.0, True, False, False)]),
    # operators are never checked (_is_valid_action returns True): unary plus is read by eval
    ((5, 7), ["+", "5", "+", "7", "="], [R, R, R, R, (10.0, True, False, False)]),
    # two numbers in a row concatenate: "57"
    ((5, 7), ["5", "7", "="], [R, R, (-1.0, True, False, False)]),
    # a used-up number appends " " and pays -1 (step: "Add a space to the formula"); "5 +7" is still 12
    ((5, 7), ["5", "5", "+", "7", "="], [R, (-1.0, False, False, True), R, R, (10.0, True, False, False)]),
    # a blank between two numbers: eval("5 7") is a SyntaxError -> -1
    ((5, 7), ["5", "5", "7", "="], [R, (-1.0, False, False, True), R, (-1.0, True, False, False)]),
    # six entries, then any action: "if len(self.formula) > 5" -> _terminate_step(-1, truncated)
    ((5, 7), ["+"] * 6 + ["5"], [R] * 6 + [(-1.0, False, True, False)]),
    # "=" with five entries is still judged: eval("+++++") raises -> -1
    ((5, 7), ["+"] * 5 + ["="], [R] * 5 + [(-1.0, True, False, False)]),
    # 3*+4 is 12 in Python (our default grammar refuses "+" after "*")
    ((3, 4), ["3", "*", "+", "4", "="], [R, R, R, R, (10.0, True, False, False)]),
    # two equal cards: _is_valid_action counts with list.count, so a third 6 is padded
    ((6, 6), ["6", "6", "6"], [R, R, (-1.0, False, False, True)]),
    # "2" then "10" is 210
    ((2, 10), ["2", "10", "="], [R, R, (-1.0, True, False, False)]),
])
def test_hand_derived_ezpoints_episodes(values, tokens, expected):
    got, _ = _play(values, tokens)
    assert got == expected


def test_text_that_is_no_token_is_padded_like_an_invalid_number():
    got, env = _play((5, 7), ["J", "5 + 7", "5", "+", "7", "="])
    assert [g[3] for g in got] == [True, True, False, False, False, False]
    assert env.unwrapped.formula_tokens == [" ", " ", "5", "+", "7"]
    # five entries at "=" (not more than 5): judged; eval strips the leading blanks of "  5+7" -> 12
    assert [g[0] for g in got] == [-1.0, -1.0, 0.0, 0.0, 0.0, 10.0]


def test_points24_float_division_loses_as_in_the_original():
    # points.py judges eval("8/(3-8/3)") == 24: 23.99999999999999 -> -1; 5*(5-1/5) is exactly 24.0 -> 10
    tokens = ["8", "/", "(", "3", "-", "8", "/", "3", ")", "="]
    got, _ = _play((3, 3, 8, 8), tokens, num_cards=4, target=24)
    assert got[-1] == (-1.0, True, False, False)
    default = gym.make("seed/EZPoints-v0", target=24, num_cards=4, split=_task_with_values(_env(4, 24), (3, 3, 8, 8))[0])
    default.reset(options={"task_id": _task_with_values(_env(4, 24), (3, 3, 8, 8))[1]})
    for token in tokens:
        _, reward, terminated, _, _ = default.step(token)
    assert reward == 10.0 and terminated  # the default rules compute exactly
    got, _ = _play((1, 5, 5, 5), ["5", "*", "(", "5", "-", "1", "/", "5", ")", "="], num_cards=4, target=24)
    assert got[-1] == (10.0, True, False, False)


def test_points24_truncates_after_twenty_entries():
    got, env = _play((1, 5, 5, 5), ["("] * 21 + ["5"], num_cards=4, target=24)
    assert got == [R] * 21 + [(-1.0, False, True, False)]
    assert env.unwrapped.max_steps == 22  # the default lets gym_cards' own truncation happen


def test_observation_shows_the_formula_as_gym_cards_draws_it():
    got, env = _play((5, 7), ["5", "5", "+"])
    text = env.unwrapped._observation()["text"]
    assert text.endswith("Formula: 5   +")  # " ".join(["5", " ", "+"])
    assert env.unwrapped.admissible_tokens() == ["7", "+", "*", "="]


# ----------------------------------------------------------------- seeded random episodes vs the reference
def _compare(num_cards, target, vocabulary, episodes, seed):
    env = _env(num_cards, target)
    rng = random.Random(seed)
    ids = list(env.unwrapped.task_ids())
    mismatches = 0
    for e in range(episodes):
        task_id = rng.choice(ids)
        env.reset(options={"task_id": task_id})
        values = [c.value for c in env.unwrapped.deal]
        if e % 2:
            tokens = random_tokens(rng, vocabulary)
        else:
            found = solutions(tuple(values), target, env.unwrapped.operators)
            tokens = noisy_solution_tokens(rng, rng.choice(found), vocabulary)
        ours, theirs = play_env(env, task_id, tokens), play_reference(values, target, tokens)
        if ours != theirs:
            mismatches += 1
            assert ours == theirs, (task_id, tokens)
    return mismatches


def test_ezpoints_random_episodes_agree_step_for_step_with_the_original():
    assert _compare(2, 12, EZ_VOCAB, episodes=3000, seed=0) == 0


def test_points24_random_episodes_agree_step_for_step_with_the_original():
    assert _compare(4, 24, P24_VOCAB, episodes=400, seed=1) == 0


def test_reference_success_matches_the_env_success_flag():
    env = _env()
    rng = random.Random(3)
    for e in range(200):
        env.reset(seed=e)
        values = [c.value for c in env.unwrapped.deal]
        tokens = noisy_solution_tokens(rng, solutions(tuple(values), 12, "+*")[0], EZ_VOCAB, noise=0.2)
        trace = play_env(env, env.unwrapped.task.task_id, tokens)
        info = env.unwrapped._info()
        assert info["success"] == episode_success(trace) == episode_success(play_reference(values, 12, tokens))


# ----------------------------------------------------------------- contract in gym_cards mode
def test_check_env_and_expert_in_gym_cards_mode():
    env = _env(obs_mode="text+image")
    check_env(env.unwrapped, skip_render_check=True)
    expert = seed_envs.make_expert(env)
    for task_id in env.unwrapped.task_ids():
        obs, info = env.reset(options={"task_id": task_id})
        terminated = truncated = False
        while not (terminated or truncated):
            obs, reward, terminated, truncated, info = env.step(expert(obs, info))
        assert info["success"] and reward == 10.0 and terminated


def test_reward_mode_success_and_invalid_penalty_in_gym_cards_mode():
    env = _env(reward_mode="success")
    env.reset(seed=0)
    values = [c.value for c in env.unwrapped.deal]
    rewards = [env.step(t)[1] for t in ["+", "*", "="]]
    assert rewards == [0.0, 0.0, 0.0]
    env = _env(invalid_penalty=0.0)
    env.reset(seed=0)
    unused_value = next(str(v) for v in range(1, 11) if v not in values)
    _, reward, _, _, info = env.step(unused_value)
    assert reward == 0.0 and info["invalid_action"] and env.unwrapped.formula_tokens == [" "]


@pytest.mark.parametrize("kwargs, field", [
    ({"rules": "rl4vlm"}, "rules"),
    ({"rules": "gym_cards", "action_mode": "formula"}, "rules"),
])
def test_bad_rules_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field):
        gym.make("seed/EZPoints-v0", **kwargs)


def test_default_rules_are_unchanged():
    env = gym.make("seed/EZPoints-v0")
    assert env.unwrapped.rules == "default" and env.unwrapped.max_steps == 8
    env.reset(seed=0)
    values = [c.value for c in env.unwrapped.deal]
    wrong = [str(values[0]), "*" if values[0] + values[1] == 12 else "+", str(values[1]), "="]
    rewards = [env.step(t)[1] for t in wrong]
    assert rewards == [0.0, 0.0, 0.0, 0.0]  # a wrong formula pays 0 under the default rules


def test_fidelity_benchmark_runs_and_gym_cards_rules_agree(capsys):
    from script_loader import load_script

    bench = load_script("benchmarks/bench_ezpoints_fidelity.py")
    assert bench.measure("EZPoints", 60)["gym_cards"] == (1.0, 1.0)
    assert bench.main(["--episodes", "8"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| EZ") or line.startswith("| Po")]
    assert len(rows) == 4 and all(row.count("|") == 6 for row in rows)
