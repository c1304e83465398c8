"""Tests of wrappers.action_parser: the pure parser, the instructions and the LLMActionParser wrapper.

The wrapper is tested on a tiny toy text env defined here; the round trip of format_response also plays
the experts of three seed envs (their real actions).
"""
from __future__ import annotations

import math
import time
from typing import Any

import gymnasium as gym
import pytest
from gymnasium.wrappers import TimeLimit

from wrappers.action_parser import (FORMATS, LLMActionParser, ParseResult, format_instructions, format_response,
                                    parse_action)


# ---------------------------------------------------------------- toy env
class StrSpace(gym.spaces.Space):
    """Any str up to max_length characters."""

    def __init__(self, max_length: int = 1_000_000):
        self.max_length = max_length
        super().__init__(shape=None, dtype=None)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask=None, probability=None) -> str:
        return "go"


class ToyEnv(gym.Env):
    """Walk to position 3 by saying "go"; "wait" does nothing; anything else is invalid."""

    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Dict({"text": StrSpace()})
        self.action_space = StrSpace()
        self.received: list[Any] = []
        self.pos = 0
        self.steps = 0
        self.invalid = False

    def _info(self) -> dict[str, Any]:
        return {
            "task_id": "toy-0",
            "task": "reach position 3",
            "category": "toy",
            "split": "train",
            "admissible_actions": ["go", "wait"],
            "invalid_action": self.invalid,
            "success": self.pos >= 3,
            "score": self.pos / 3,
            "step": self.steps,
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.steps, self.invalid = 0, 0, False
        self.received = []
        return {"text": f"You are at position {self.pos}."}, self._info()

    def step(self, action):
        self.received.append(action)
        self.steps += 1
        self.invalid = action not in ("go", "wait")
        if action == "go":
            self.pos += 1
        terminated = self.pos >= 3
        reward = 1.0 if terminated else 0.0
        return {"text": f"You are at position {self.pos}."}, reward, terminated, False, self._info()


# ---------------------------------------------------------------- parse_action: tags
@pytest.mark.parametrize(
    "text, action",
    [
        ("<think>I should move.</think><action>go</action>", "go"),
        ("<action>go</action>", "go"),  # think is optional by default
        ("<think>x</think>\n<action>\n  go to fridge 1 \n</action>\n", "go to fridge 1"),
        ("<THINK>x</THINK><Action>Up</ACTION>", "Up"),  # tags are case-insensitive, the action keeps its case
        ("<think>a</think><action>left</action> then <action>up</action>", "up"),  # the last block wins
        ("<think>maybe <action>left</action>?</think><action>up</action>", "up"),  # tags inside think ignored
        ("Sure! <think>a < b and c > d</think> <action>put 1 < 2</action> done.", "put 1 < 2"),
        ("<think></think><action>中文 ok</action>", "中文 ok"),  # CJK allowed unless reject_cjk
        ("<think>x</think><action>click[Size: 5, wide]</action>", "click[Size: 5, wide]"),
    ],
)
def test_tags_valid(text, action):
    assert parse_action(text, "tags") == ParseResult(action, False, "")


@pytest.mark.parametrize(
    "text, reason_part",
    [
        ("", "missing <action>"),
        ("just go", "missing <action>"),
        ("<think>x</think>go", "missing <action>"),
        ("<action>go", "unclosed <action>"),
        ("go</action>", "stray"),
        ("<action>go</action><action>up", "unclosed <action>"),  # cut off while revising
        ("<action><action>go</action></action>", "nested"),
        ("<action>go</action></action>", "nested"),
        ("<action>   </action>", "empty action"),
        ("<think>let me think <action>go</action>", "unclosed <think>"),
        ("<think>x</think><think>y <action>go</action>", "unclosed <think>"),
        ("<think>only <action>go</action> inside</think>", "after </think>"),
        ("<action>go</action><think>second thoughts</think>", "after </think>"),
        ("< action>go</ action>", "missing <action>"),
    ],
)
def test_tags_errors(text, reason_part):
    result = parse_action(text, "tags")
    assert result.format_error and result.action is None
    assert reason_part in result.reason


def test_tags_require_think():
    assert parse_action("<action>go</action>", "tags", require_think=True).reason == "missing <think>...</think> block"
    assert parse_action("x</think><action>go</action>", "tags", require_think=True).format_error
    assert parse_action("<think>x</think><action>go</action>", "tags", require_think=True) == ("go", False, "")


def test_tags_allow_multiple_false_keeps_the_action_but_flags_it():
    text = "<think>x</think><action>left</action><action>up</action>"
    assert parse_action(text, "tags", allow_multiple=False) == ("up", True, "more than one <action> tag")
    assert parse_action(text, "tags", allow_multiple=True) == ("up", False, "")


def test_tags_reject_cjk():
    text = "<think>我想</think><action>go</action>"
    assert parse_action(text, "tags") == ("go", False, "")
    assert parse_action(text, "tags", reject_cjk=True) == ("go", True, "contains CJK characters")


# ---------------------------------------------------------------- parse_action: search_r1
@pytest.mark.parametrize(
    "text, action",
    [
        ("<think>I need facts.</think><search> capital of France </search>", "search[capital of France]"),
        ("<search>who wrote Hamlet</search>", "search[who wrote Hamlet]"),
        ("<think>known</think>\n<answer>Paris</answer>", "answer[Paris]"),
        ("<ANSWER>Paris</Answer>", "answer[Paris]"),
        ("<think>should I <search>x</search> or <answer>y</answer>?</think><answer>Paris</answer>", "answer[Paris]"),
        ("<answer>a [b] c</answer> trailing prose", "answer[a [b] c]"),
    ],
)
def test_search_r1_valid(text, action):
    assert parse_action(text, "search_r1") == ParseResult(action, False, "")


@pytest.mark.parametrize(
    "text, reason_part",
    [
        ("Paris", "missing <search>"),
        ("<search>unfinished", "no complete"),
        ("<answer></answer>", "empty <answer>"),
        ("<think>x", "unclosed <think>"),
        ("<search>a</search><answer>b</answer>", "both"),
        ("<search>a</search><search>b</search>", "more than one <search>"),
        ("<answer>a</answer><answer>b</answer>", "more than one <answer>"),
    ],
)
def test_search_r1_errors(text, reason_part):
    result = parse_action(text, "search_r1")
    assert result.format_error
    assert reason_part in result.reason


def test_search_r1_multiple_blocks_rule():
    text = "<search>a</search><answer>b</answer>"
    assert parse_action(text, "search_r1") == ("search[a]", True, "both <search> and <answer> tags")
    # allow_multiple: the first complete block wins, as in verl-agent's extraction.
    assert parse_action(text, "search_r1", allow_multiple=True) == ("search[a]", False, "")
    assert parse_action("<answer>x <search>q</search>", "search_r1", allow_multiple=True) == ("search[q]", False, "")


def test_search_r1_require_think():
    assert parse_action("<search>q</search>", "search_r1", require_think=True).format_error
    assert parse_action("<think>t</think><search>q</search>", "search_r1", require_think=True) == ("search[q]", False, "")


# ---------------------------------------------------------------- parse_action: boxed, json, plain
@pytest.mark.parametrize(
    "text, action",
    [
        (r"The answer is \boxed{up}.", "up"),
        (r"\boxed{ 5 + 7 = }", "5 + 7 ="),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"first \boxed{left} then \boxed{x{y{z}}w}", "x{y{z}}w"),
        (r"\boxed{a \} b}", r"a \} b"),
        ("\\boxed{multi\nline}", "multi\nline"),
    ],
)
def test_boxed_valid(text, action):
    assert parse_action(text, "boxed") == ParseResult(action, False, "")


@pytest.mark.parametrize(
    "text, reason_part",
    [
        ("up", "missing"),
        (r"\boxed{up", "unclosed"),
        (r"\boxed{a}\boxed{b{c}", "unclosed"),
        (r"\boxed{  }", "empty"),
        (r"\boxed up", "missing"),
    ],
)
def test_boxed_errors(text, reason_part):
    result = parse_action(text, "boxed")
    assert result.format_error and result.action is None and reason_part in result.reason


@pytest.mark.parametrize(
    "text, action",
    [
        ('{"action": "go"}', "go"),
        ('Sure:\n```json\n{"thought": "x", "action": " go to fridge 1 "}\n```', "go to fridge 1"),
        ('{"action": "a"} and then {"action": "b"}', "b"),  # the last object with the key wins
        ('{"action": "a"} {"other": 1}', "a"),
        ('{"action": "say {hi} \\"you\\""}', 'say {hi} "you"'),
        ('{"action": "up", "meta": {"x": [1, {"y": 2}]}}', "up"),
        ('I use { braces } loosely. {"action": "up"}', "up"),
        ('a stray { brace then {"action": "up", "m": {"k": 1}}', "up"),  # unbalanced prose brace
    ],
)
def test_json_valid(text, action):
    assert parse_action(text, "json") == ParseResult(action, False, "")


@pytest.mark.parametrize(
    "text, reason_part",
    [
        ("go", "no JSON object"),
        ('{"other": "go"}', "key 'action'"),
        ('{"action": 3}', "not a string"),
        ('{"action": ""}', "empty"),
        ('{"action": "go",}', "no JSON object"),
        ('["action", "go"]', "no JSON object"),
    ],
)
def test_json_errors(text, reason_part):
    result = parse_action(text, "json")
    assert result.format_error and reason_part in result.reason


def test_json_custom_key():
    assert parse_action('{"move": "up"}', "json", json_key="move") == ("up", False, "")
    assert parse_action('{"action": "up"}', "json", json_key="move").format_error


@pytest.mark.parametrize(
    "text, action", [("go", "go"), ("  go to fridge 1\n", "go to fridge 1"), ("<action>x</action>", "<action>x</action>")]
)
def test_plain(text, action):
    assert parse_action(text, "plain") == (action, False, "")


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_plain_empty_is_an_error(text):
    assert parse_action(text, "plain") == (None, True, "empty output")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("value", [None, 3, b"<action>go</action>", ["go"]])
def test_non_text_is_a_format_error_not_an_exception(fmt, value):
    result = parse_action(value, fmt)
    assert result.format_error and result.action is None and "expected text" in result.reason


def test_unknown_format_raises():
    with pytest.raises(ValueError, match="format"):
        parse_action("x", "xml")


N = 1_000_000
HUGE = {
    "tags": [
        "<action>" * (N // 8),
        "</action>" * (N // 9),
        "<think>" * (N // 7),
        "<" * N,
        "a" * N + "<action>go</action>",
        "<action>" + "x" * N + "</action>",
    ],
    "search_r1": ["<search>" * (N // 8), "<answer><search>" * (N // 16), "<think>" + "x" * N, "<search>" + "q" * N + "</search>"],
    "boxed": ["\\boxed{" * (N // 7), "\\boxed{" + "{" * N, "\\" * N, "\\boxed{" + "x" * N + "}"],
    "json": [
        '"action"' + "{" * N,
        '{"action":"' * (N // 11),
        '{"action":[' * 64 + "1," * (N // 2),
        '{"action":1}' * (N // 12),
        "{}" * (N // 2),
        '{"action": "' + "x" * N + '"}',
    ],
    "plain": [" " * N, "x" * N],
}


@pytest.mark.parametrize("fmt, text", [(f, t) for f, texts in HUGE.items() for t in texts])
def test_huge_input_is_linear_time(fmt, text):
    # CPU time of this process, not wall time: a quadratic parse costs minutes of CPU on these inputs, while a
    # loaded machine (other jobs on the shared cores) only stretches the wall clock.
    start = time.process_time()
    result = parse_action(text, fmt, reject_cjk=True)
    elapsed = time.process_time() - start
    assert isinstance(result, ParseResult)
    assert elapsed < 5.0, f"{fmt}: {elapsed:.2f}s on a {len(text)}-char input"


def test_huge_valid_action_is_returned_whole():
    assert parse_action("<action>" + "x" * N + "</action>", "tags").action == "x" * N


# ---------------------------------------------------------------- format_instructions
def test_format_instructions_describe_what_the_parser_accepts():
    assert "<think>" in format_instructions("tags") and "<action>" in format_instructions("tags")
    text = format_instructions("search_r1")
    assert all(tag in text for tag in ("<think>", "<search>", "<answer>"))
    assert "\\boxed{" in format_instructions("boxed")
    assert '"move"' in format_instructions("json", json_key="move")
    assert format_instructions("plain")
    with pytest.raises(ValueError, match="format"):
        format_instructions("yaml")


# ---------------------------------------------------------------- the wrapper
def test_reset_info_has_format_keys():
    env = LLMActionParser(ToyEnv())
    obs, info = env.reset(seed=0)
    assert obs == {"text": "You are at position 0."}
    assert info["format_error"] is False and info["format_error_reason"] == ""
    assert info["task"] == "reach position 3"


def test_valid_output_sends_the_parsed_action():
    env = LLMActionParser(ToyEnv())
    env.reset()
    _, reward, terminated, truncated, info = env.step("<think>forward</think><action> go </action>")
    assert env.unwrapped.received == ["go"]
    assert reward == 0.0 and not terminated and not truncated
    assert info["format_error"] is False and info["format_error_reason"] == ""
    assert info["action"] == "go" and info["invalid_action"] is False


def test_format_error_invalid_mode_sends_empty_string_and_penalises():
    env = LLMActionParser(ToyEnv())
    env.reset()
    obs, reward, terminated, _, info = env.step("I will go now")
    assert env.unwrapped.received == [""]
    assert reward == pytest.approx(-0.1)
    assert info["format_error"] is True and "missing <action>" in info["format_error_reason"]
    assert info["action"] == "" and info["invalid_action"] is True
    assert info["step"] == 1 and obs["text"] == "You are at position 0."  # counted, not advanced
    assert not terminated


def test_fallback_and_raw_modes():
    env = LLMActionParser(ToyEnv(), on_error="fallback", fallback_action="wait", format_penalty=0.5)
    env.reset()
    _, reward, _, _, info = env.step("<action>go")
    assert env.unwrapped.received == ["wait"] and info["action"] == "wait"
    assert reward == pytest.approx(-0.5) and info["format_error"]

    env = LLMActionParser(ToyEnv(), on_error="raw", format_penalty=0)
    env.reset()
    _, reward, _, _, info = env.step("go")
    assert env.unwrapped.received == ["go"] and info["action"] == "go"
    assert reward == 0.0 and info["format_error"] is True
    assert info["invalid_action"] is False  # the inner env accepted the raw text


def test_penalty_applies_on_top_of_env_reward():
    env = LLMActionParser(ToyEnv(), format="json", on_error="raw", format_penalty=0.25)
    env.reset()
    for _ in range(2):
        env.step('{"action": "go"}')
    _, reward, terminated, _, info = env.step("go")  # raw "go" finishes the task, reward 1 - 0.25
    assert terminated and info["success"] and reward == pytest.approx(0.75)


def test_non_text_action_is_handled():
    env = LLMActionParser(ToyEnv(), on_error="raw")
    env.reset()
    _, _, _, _, info = env.step(42)
    assert info["format_error"] and env.unwrapped.received == [42] and info["action"] == "42"


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"format": "xml"}, "format"),
        ({"on_error": "ignore"}, "on_error"),
        ({"format_penalty": -0.1}, "format_penalty"),
        ({"format_penalty": math.nan}, "format_penalty"),
        ({"format_penalty": "0.1"}, "format_penalty"),
        ({"on_error": "fallback"}, "fallback_action"),
        ({"on_error": "fallback", "fallback_action": 3}, "fallback_action"),
        ({"json_key": None}, "json_key"),
    ],
)
def test_argument_errors_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        LLMActionParser(ToyEnv(), **kwargs)


def test_time_limit_bounds_an_agent_that_never_respects_the_format():
    env = LLMActionParser(TimeLimit(ToyEnv(), max_episode_steps=4))
    env.reset()
    total, steps, done = 0.0, 0, False
    while not done:
        _, reward, terminated, truncated, info = env.step("no tags at all")
        total, steps, done = total + reward, steps + 1, terminated or truncated
    assert steps == 4 and truncated and not terminated
    assert total == pytest.approx(-0.4)


def test_record_constructor_args_rebuild_the_stack():
    env_id = "test-action-parser/Toy-v0"
    gym.register(env_id, entry_point=ToyEnv, disable_env_checker=True)
    try:
        env = LLMActionParser(gym.make(env_id), format="boxed", format_penalty=0.2, on_error="fallback", fallback_action="wait")
        assert env._saved_kwargs == {
            "format": "boxed",
            "format_penalty": 0.2,
            "on_error": "fallback",
            "fallback_action": "wait",
            "require_think": False,
            "allow_multiple": None,
            "reject_cjk": False,
            "json_key": "action",
            "tools": None,
        }
        rebuilt = gym.make(env.spec)
        assert isinstance(rebuilt, LLMActionParser)
        assert rebuilt.format == "boxed" and rebuilt.fallback_action == "wait"
        rebuilt.reset()
        assert rebuilt.step(r"\boxed{go}")[4]["action"] == "go"
    finally:
        del gym.registry[env_id]


def test_wrapper_attributes_reachable_through_get_wrapper_attr():
    env = TimeLimit(LLMActionParser(ToyEnv(), format="plain"), max_episode_steps=5)
    assert env.get_wrapper_attr("format") == "plain"
    assert env.get_wrapper_attr("parse")(" go ") == ("go", False, "")


# ----------------------------------------------------------------------------- format_response: the inverse
def _expert_actions(env_id: str, episodes: int = 3) -> list[str]:
    """Every action the env's expert takes on a few train tasks (real actions, not made-up strings)."""
    import gymnasium as gym

    import seed_envs

    env = gym.make(env_id)
    expert = seed_envs.make_expert(env)
    actions = []
    for seed in range(episodes):
        obs, info = env.reset(seed=seed)
        for _ in range(60):
            action = expert(obs, info)
            actions.append(action)
            obs, _, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
    env.close()
    return actions


ROUND_TRIP_ACTIONS = ["7", "+", "go to cabinet 1", "search[who wrote hamlet]", "answer[Paris]", "click[Buy Now]",
                      'say "hi" {ok}', "a < b > c", "naïve café 日本", "x\\y", "{nested {braces}}", "line\nbreak"]


def _parsed_back(action: str, format: str) -> str:
    """What the parser must read: the action; search_r1 writes any other action as an answer."""
    if format == "search_r1" and not (action.startswith(("search[", "answer[")) and action.endswith("]")):
        return f"answer[{action}]"
    return action


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("env_id", ["seed/EZPoints-v0", "seed/Sokoban-v0", "seed/SearchQA-v0"])
def test_format_response_round_trips_every_expert_action(format, env_id):
    actions = set(_expert_actions(env_id))
    assert len(actions) >= 3
    for action in actions:
        assert parse_action(format_response(action, format), format) == (_parsed_back(action, format), False, "")


@pytest.mark.parametrize("format", FORMATS)
def test_format_response_round_trips(format):
    for action in ROUND_TRIP_ACTIONS:
        assert parse_action(format_response(action, format), format) == (_parsed_back(action, format), False, "")


def test_format_response_is_what_a_perfect_policy_writes():
    assert format_response("7", "tags") == "<action>7</action>"
    assert format_response("7", "boxed") == "\\boxed{7}"
    assert format_response("7", "json") == '{"action": "7"}'
    assert format_response("7", "json", json_key="move") == '{"move": "7"}'
    assert format_response("search[q]", "search_r1") == "<search>q</search>"
    assert format_response("answer[a]", "search_r1") == "<answer>a</answer>"
    assert format_response("Paris", "search_r1") == "<answer>Paris</answer>"
    assert format_response("7", "plain") == "7"


@pytest.mark.parametrize("action, format", [("a</action>b", "tags"), ("x}", "boxed"), ("  7 ", "plain"),
                                            ("", "json"), ("search[a</search>]", "search_r1")])
def test_format_response_refuses_an_action_its_format_cannot_carry(action, format):
    with pytest.raises(ValueError, match="cannot be written"):
        format_response(action, format)


def test_format_response_refuses_an_unknown_format():
    with pytest.raises(ValueError, match="format"):
        format_response("7", "yaml")


# ------------------------------------------------------------------------------------ tool calls
def test_tool_calls_read_back_as_the_verbs_action_and_every_bad_call_is_a_format_error():
    from wrappers.tools import Tool

    tools = (Tool("click", "Click.", "click[{target}]", {"target": "what"}), Tool("up", "Move up.", "up"))
    ok = lambda text: parse_action(text, "tools", tools=tools)  # noqa: E731
    assert ok('{"name": "click", "arguments": {"target": " buy now "}}').action == "click[buy now]"
    assert ok('{"name": "click", "arguments": "{\\"target\\": \\"b01\\"}"}').action == "click[b01]"  # OpenAI's string
    assert ok('{"name": "up"}').action == "up" and ok('{"name": "up", "arguments": ""}').action == "up"
    for text, reason in [("click buy now", "no tool call"), ("[1, 2]", "no tool call"), ('{"arguments": {}}', "no tool call"),
                         ('{"name": "jump"}', "unknown tool 'jump'"), ('{"name": "click"}', "missing ['target']"),
                         ('{"name": "up", "arguments": {"x": "1"}}', "unexpected ['x']"),
                         ('{"name": "click", "arguments": {"target": 3}}', "must be a string"),
                         ('{"name": "click", "arguments": "{bad"}', "not a JSON object"),
                         ('{"name": "click", "arguments": {"target": "  "}}', "empty argument 'target'"),
                         ("[" * 50_000, "longer than")]:
        result = ok(text)
        assert result.format_error, text
        if reason is not None:
            assert reason in result.reason, (text, result.reason)
    assert format_response("click[b01]", "tools", tools=tools) == '{"name": "click", "arguments": {"target": "b01"}}'
    assert format_response("anything at all", "tools") == '{"name": "act", "arguments": {"action": "anything at all"}}'
    with pytest.raises(ValueError, match="matches none of the tools"):
        format_response("down", "tools", tools=tools)


def test_every_env_is_played_to_a_win_by_the_experts_actions_as_tool_calls():
    import seed_envs
    from wrappers.stack import default_tools, make_agent_env

    for env_id in seed_envs.ENV_IDS:
        env = make_agent_env(env_id, split="test", action_format="tools")
        obs, info = env.reset(seed=0)
        expert, tools, done = seed_envs.make_expert(env), default_tools(env_id), False
        while not done:
            obs, _, terminated, truncated, info = env.step(format_response(expert(obs, info), "tools", tools=tools))
            assert not info["format_error"], (env_id, info["format_error_reason"])
            done = terminated or truncated
        assert info["success"], env_id
        env.close()
