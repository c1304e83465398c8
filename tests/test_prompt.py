"""Tests of wrappers.prompt (PromptRenderer, render_prompt, templates) on a toy text env defined here."""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.wrappers import TimeLimit

from wrappers.action_parser import LLMActionParser, format_instructions
from wrappers.prompt import TEMPLATES, PromptParts, PromptRenderer, PromptTemplate, env_template, render_prompt

TASK = "reach position 3"


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
    """Walk to position 3 with "go"; "wait" does nothing; anything else is invalid.

    Each observation carries a unique marker ``obs#<n>`` (n counts observations since reset) so a
    test can tell which observations a prompt shows.
    """

    metadata = {"render_modes": []}

    def __init__(self, image: bool = False, admissible: bool = True, pad: int = 0):
        spaces: dict[str, gym.spaces.Space] = {"text": StrSpace()}
        if image:
            spaces["image"] = gym.spaces.Box(0, 255, shape=(4, 4, 3), dtype=np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = StrSpace()
        self.image, self.admissible, self.pad = image, admissible, pad
        self.pos = self.steps = self.count = 0
        self.invalid = False

    def _obs(self) -> dict[str, Any]:
        self.count += 1
        text = f"obs#{self.count}: you are at position {self.pos}." + "~" * self.pad
        obs: dict[str, Any] = {"text": text}
        if self.image:
            obs["image"] = np.full((4, 4, 3), self.pos, dtype=np.uint8)
        return obs

    def _info(self) -> dict[str, Any]:
        return {
            "task_id": "toy-0",
            "task": TASK,
            "category": "toy",
            "split": "train",
            "admissible_actions": ["go", "wait"] if self.admissible else None,
            "invalid_action": self.invalid,
            "success": self.pos >= 3,
            "score": self.pos / 3,
            "step": self.steps,
        }

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.steps = self.count = 0
        self.invalid = False
        return self._obs(), self._info()

    def step(self, action):
        self.steps += 1
        self.invalid = action not in ("go", "wait")
        if action == "go":
            self.pos += 1
        terminated = self.pos >= 3
        return self._obs(), float(terminated), terminated, False, self._info()


#: A template worded like an env's own (ALFWorld's task header), to test placement around the task line.
HOUSEHOLD = PromptTemplate(intro="You are a household agent.", task_header="Your task is to: {task}")


class DeclaringToyEnv(ToyEnv):
    """ToyEnv declaring its own agent defaults, as seed envs do (read duck-typed: any object with the fields)."""

    class agent_defaults:  # noqa: N801  (plain data, like seed_envs.core.AgentDefaults)
        prompt = {"intro": "Walk to 3.", "observation_header": "[{step}] Where you are:"}
        history = 1


def marker(n: int) -> str:
    return f"obs#{n}:"


# ---------------------------------------------------------------- prompt content
def test_prompt_has_every_part():
    fmt = format_instructions("tags")
    env = PromptRenderer(ToyEnv(), template="default", answer_format=fmt)
    obs, info = env.reset(seed=0)
    prompt = obs["prompt"]
    assert obs["text"] in prompt
    assert prompt.startswith(TEMPLATES["default"].intro)
    assert f"Your task: {TASK}" in prompt
    assert "Admissible actions (choose exactly one):\ngo\nwait" in prompt
    assert prompt.endswith(fmt)
    assert "step(s) so far" not in prompt  # no history yet
    parts = info["prompt_parts"]
    assert parts["task"] == TASK and parts["admissible"] == ["go", "wait"] and parts["format"] == fmt
    assert parts["history"] == [] and parts["observation"] == obs["text"] and parts["insert_after_task"] == ""


def test_sections_are_in_order():
    env = PromptRenderer(ToyEnv(), answer_format="FORMAT-TEXT")
    env.reset()
    obs, *_ , info = env.step("go")
    prompt = obs["prompt"]
    order = [TEMPLATES["default"].intro, f"Your task: {TASK}", "so far", marker(1), marker(2), "Admissible", "FORMAT-TEXT"]
    positions = [prompt.index(s) for s in order]
    assert positions == sorted(positions)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_history_shows_last_k_pairs_in_order(k):
    env = PromptRenderer(ToyEnv(), history=k)
    env.reset()
    actions = ["go", "wait", "go", "wait", "go"]  # the 5th "go" would finish; stop before
    for action in actions[:4]:
        obs, _, terminated, _, info = env.step(action)
        assert not terminated
    # 4 steps taken: observations obs#1..obs#4 answered by actions[0..3]; obs#5 is current.
    positions = [0, 1, 1, 2]
    expected = [
        {"step": s, "observation": f"obs#{s}: you are at position {positions[s - 1]}.", "action": actions[s - 1]}
        for s in range(5 - k, 5)
    ]
    assert info["prompt_parts"]["history"] == expected
    prompt = obs["prompt"]
    for s in range(1, 5 - k):
        assert marker(s) not in prompt
    blocks = [f"[Step {h['step']}] Observation:\n{h['observation']}\nAction: {h['action']}" for h in expected]
    history_text = f"You have taken 4 step(s) so far. Your last {k} step(s), oldest first:\n" + "\n".join(blocks)
    assert history_text in prompt
    assert f"[Step 5] Current observation:\n{obs['text']}" in prompt


def test_history_zero_shows_none():
    env = PromptRenderer(ToyEnv(), history=0)
    env.reset()
    env.step("go")
    obs, *_, info = env.step("wait")
    assert info["prompt_parts"]["history"] == []
    assert marker(1) not in obs["prompt"] and marker(2) not in obs["prompt"] and marker(3) in obs["prompt"]
    assert "[Step 3] Current observation" in obs["prompt"]


def test_history_cleared_on_reset():
    env = PromptRenderer(ToyEnv(), history=2)
    env.reset()
    env.step("go")
    env.step("wait")
    obs, info = env.reset()
    assert info["prompt_parts"]["history"] == [] and info["prompt_parts"]["step"] == 0
    assert "so far" not in obs["prompt"] and "[Step 1] Current observation" in obs["prompt"]
    obs, *_, info = env.step("go")
    assert [h["action"] for h in info["prompt_parts"]["history"]] == ["go"]


def test_admissible_hidden_or_absent():
    obs, _ = PromptRenderer(ToyEnv(), show_admissible=False).reset()
    assert "Admissible" not in obs["prompt"]
    obs, info = PromptRenderer(ToyEnv(admissible=False)).reset()
    assert "Admissible" not in obs["prompt"] and info["prompt_parts"]["admissible"] is None
    parts = dict(info["prompt_parts"], admissible=[])
    assert "Admissible" not in render_prompt(parts)


def test_task_line_left_out_when_env_has_no_task():
    class NoTask(ToyEnv):
        def _info(self):
            info = super()._info()
            del info["task"]
            return info

    obs, info = PromptRenderer(NoTask()).reset()
    assert "Your task" not in obs["prompt"] and info["prompt_parts"]["task"] is None
    assert render_prompt(info["prompt_parts"], insert_after_task="SKILL").startswith(TEMPLATES["default"].intro + "\n\nSKILL\n\n")


# ---------------------------------------------------------------- render_prompt and insertion
def run_episode(env, actions):
    """Prompts and parts of every step (reset included)."""
    obs, info = env.reset(seed=0)
    seen = [(obs, info)]
    for action in actions:
        obs, _, terminated, truncated, info = env.step(action)
        seen.append((obs, info))
        if terminated or truncated:
            break
    return seen


@pytest.mark.parametrize("family", sorted(TEMPLATES))
def test_rendering_parts_reproduces_the_prompt(family):
    env = PromptRenderer(ToyEnv(), template=family, history=2, answer_format=format_instructions("tags"))
    seen = run_episode(env, ["go", "wait", "bad", "go", "go"])
    for obs, info in seen:
        parts = info["prompt_parts"]
        assert render_prompt(parts) == obs["prompt"]
        assert render_prompt(PromptParts.from_dict(parts)) == obs["prompt"]
        assert render_prompt(json.loads(json.dumps(parts))) == obs["prompt"]  # JSON-safe round trip
    assert env.last_parts.to_dict() == seen[-1][1]["prompt_parts"]


def test_insert_after_task_line():
    env = PromptRenderer(ToyEnv(), template=HOUSEHOLD, answer_format="FMT")
    for obs, info in run_episode(env, ["go", "wait", "go"]):
        skill = "Skill: say go until you arrive; never wait."
        task_line = f"Your task is to: {TASK}"
        augmented = render_prompt(info["prompt_parts"], insert_after_task=skill)
        assert augmented == obs["prompt"].replace(task_line, f"{task_line}\n\n{skill}", 1)
        prefix = HOUSEHOLD.intro + "\n\n" + task_line + "\n\n"
        assert obs["prompt"].startswith(prefix) and augmented.startswith(prefix + skill + "\n\n")
        # the parts' own slot gives the same result; an explicit empty insert removes it
        stored = dict(info["prompt_parts"], insert_after_task=skill)
        assert render_prompt(stored) == augmented
        assert render_prompt(stored, insert_after_task="") == obs["prompt"]


def test_static_insert_from_the_renderer():
    env = TimeLimit(PromptRenderer(ToyEnv(), insert_after_task="Static skill."), max_episode_steps=5)
    obs, info = env.reset()
    assert f"Your task: {TASK}\n\nStatic skill.\n\n" in obs["prompt"]
    assert info["prompt_parts"]["insert_after_task"] == "Static skill."
    assert render_prompt(info["prompt_parts"]) == obs["prompt"]
    assert render_prompt(info["prompt_parts"], insert_after_task="") == obs["prompt"].replace("Static skill.\n\n", "")
    env.set_wrapper_attr("insert_after_task", "")
    obs, *_ = env.step("go")
    assert "Static skill." not in obs["prompt"]


def test_render_prompt_is_pure_and_validates_input():
    parts = PromptParts(intro="I", task="T", observation="O", admissible=["a"], format="F")
    assert render_prompt(parts) == (
        "I\n\nYour task: T\n\n[Step 1] Current observation:\nO\n\nAdmissible actions (choose exactly one):\na\n\nF"
    )
    assert parts.insert_after_task == ""  # not modified by rendering with an insert
    render_prompt(parts, insert_after_task="S")
    assert parts.insert_after_task == ""
    with pytest.raises(ValueError, match="parts"):
        render_prompt({"intro": "I", "bogus": 1})
    with pytest.raises(ValueError, match="parts"):
        render_prompt("a string")


def test_braces_in_texts_are_kept_literally():
    class Braces(ToyEnv):
        def _obs(self):
            return {"text": "{observation} {0} {{x}}"}

    obs, info = PromptRenderer(Braces()).reset()
    assert "{observation} {0} {{x}}" in obs["prompt"]
    assert render_prompt(info["prompt_parts"]) == obs["prompt"]


# ---------------------------------------------------------------- templates
def test_builtin_templates_are_generic():
    # Env wording lives with each env (agent_defaults.prompt, tests/test_env_stack.py checks it).
    assert set(TEMPLATES) == {"default", "compact"}
    assert TEMPLATES["compact"].intro == ""
    for template in TEMPLATES.values():
        template.validate()


def test_env_declared_defaults_are_used_when_not_given():
    env = PromptRenderer(DeclaringToyEnv())
    assert env.template == PromptTemplate(intro="Walk to 3.", observation_header="[{step}] Where you are:")
    assert env.history == 1
    seen = run_episode(env, ["go", "wait", "go"])
    obs, info = seen[-1]
    assert obs["prompt"].startswith(f"Walk to 3.\n\nYour task: {TASK}\n\n")  # unset fields: generic text
    assert "[4] Where you are:\n" + marker(4) in obs["prompt"]
    assert [h["step"] for h in info["prompt_parts"]["history"]] == [3]
    # what the caller passes wins over the env's own
    explicit = PromptRenderer(DeclaringToyEnv(), template="default", history=0)
    assert explicit.template == TEMPLATES["default"] and explicit.history == 0
    # an env that declares nothing gets the generic defaults
    plain = PromptRenderer(ToyEnv())
    assert plain.template == TEMPLATES["default"] and plain.history == 2


def test_env_declared_prompt_with_unknown_fields_is_refused():
    class Typo(ToyEnv):
        class agent_defaults:  # noqa: N801
            prompt = {"intro": "x", "task_heading": "{task}"}

    with pytest.raises(ValueError, match="task_heading"):
        env_template(Typo())


def test_custom_template():
    template = PromptTemplate(intro="Be brief.", task_header="Goal => {task}", step_format="{step}: {action} <- {observation}")
    env = PromptRenderer(ToyEnv(), template=template, history=1)
    env.reset()
    obs, *_ = env.step("go")
    assert obs["prompt"].startswith(f"Be brief.\n\nGoal => {TASK}\n\n")
    assert "1: go <- obs#1: you are at position 0." in obs["prompt"]


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"template": "chess"}, "template"),
        ({"template": 3}, "template"),
        ({"template": PromptTemplate(task_header="{goal}")}, "template"),
        ({"template": PromptTemplate(step_format="{step")}, "template"),
        ({"history": -1}, "history"),
        ({"history": 1.5}, "history"),
        ({"answer_format": None}, "answer_format"),
        ({"prompt_space": "text"}, "prompt_space"),
        ({"insert_after_task": None}, "insert_after_task"),
    ],
)
def test_argument_errors_name_the_argument(kwargs, name):
    with pytest.raises(ValueError, match=name):
        PromptRenderer(ToyEnv(), **kwargs)


def test_unknown_template_lists_the_names():
    with pytest.raises(ValueError) as excinfo:
        PromptRenderer(ToyEnv(), template="chess")
    assert all(name in str(excinfo.value) for name in TEMPLATES)


def test_env_without_text_observation_is_refused():
    class NoText(ToyEnv):
        def __init__(self):
            super().__init__()
            self.observation_space = gym.spaces.Dict({"image": gym.spaces.Box(0, 1, (1,))})

    with pytest.raises(ValueError, match="env"):
        PromptRenderer(NoText())


# ---------------------------------------------------------------- spaces and gymnasium conventions
def test_observation_space_contains_observations_and_keeps_the_image():
    inner = ToyEnv(image=True)
    env = PromptRenderer(inner, history=2)
    space = env.observation_space
    assert set(space.spaces) == {"text", "image", "prompt"}
    assert type(space["prompt"]) is StrSpace and space["prompt"].max_length > inner.observation_space["text"].max_length
    assert space["image"] == inner.observation_space["image"]
    assert inner.observation_space["text"].max_length == 1_000_000  # the inner space is not modified
    for obs, _ in run_episode(env, ["go", "wait", "go", "go"]):
        assert space.contains(obs)
        assert obs["image"].dtype == np.uint8


def test_custom_prompt_space_with_gymnasium_text():
    charset = "".join(chr(c) for c in range(32, 127)) + "\n√"
    prompt_space = gym.spaces.Text(max_length=100_000, charset=charset)
    template = PromptTemplate(intro="Symbols: # wall, √ box on a target.")
    env = PromptRenderer(ToyEnv(), template=template, prompt_space=prompt_space)
    assert env.observation_space["prompt"] is prompt_space
    for obs, _ in run_episode(env, ["go", "go"]):
        assert env.observation_space.contains(obs)


def test_huge_observation_is_kept_whole_and_rendering_is_fast():
    pad = 1_000_000 - 40
    env = PromptRenderer(ToyEnv(pad=pad), history=2)
    start = time.perf_counter()
    seen = run_episode(env, ["go", "wait", "wait"])
    elapsed = time.perf_counter() - start
    obs, info = seen[-1]
    assert len(obs["prompt"]) > 3 * pad  # current observation and two in the history, uncut
    assert env.observation_space.contains(obs)
    assert render_prompt(info["prompt_parts"]) == obs["prompt"]
    assert elapsed < 5.0


def test_record_constructor_args_rebuild_the_stack():
    env_id = "test-prompt/Toy-v0"
    gym.register(env_id, entry_point=ToyEnv, disable_env_checker=True)
    try:
        env = PromptRenderer(gym.make(env_id), template="compact", history=3, show_admissible=False, answer_format="F")
        assert env._saved_kwargs == {
            "template": "compact",
            "history": 3,
            "show_admissible": False,
            "answer_format": "F",
            "insert_after_task": "",
            "prompt_space": None,
            "prompt_fits": None,
            "shorten": None,
        }
        rebuilt = gym.make(env.spec)
        assert isinstance(rebuilt, PromptRenderer)
        assert rebuilt.history == 3 and rebuilt.template == TEMPLATES["compact"]
        assert rebuilt.reset(seed=0)[0]["prompt"] == env.reset(seed=0)[0]["prompt"]
    finally:
        del gym.registry[env_id]


# ---------------------------------------------------------------- the stack with the action parser
def test_parser_over_renderer_end_to_end():
    fmt = format_instructions("tags")
    renderer = PromptRenderer(ToyEnv(), template="default", history=2, answer_format=fmt)
    env = TimeLimit(LLMActionParser(renderer), max_episode_steps=10)
    obs, info = env.reset(seed=0)
    assert obs["prompt"].endswith(fmt) and info["format_error"] is False
    outputs = [
        "<think>I should move forward.</think><action>go</action>",
        "I refuse to use tags.",  # format error: the inner env receives ""
        "<think>again</think>\n<action> go </action>",
        "<think>last one</think><action>go</action>",
    ]
    history_seen = []
    for text in outputs:
        obs, reward, terminated, truncated, info = env.step(text)
        history_seen = info["prompt_parts"]["history"]
        assert render_prompt(info["prompt_parts"]) == obs["prompt"]
        assert "<think>" not in "".join(h["action"] for h in history_seen)  # clean actions only
    assert terminated and info["success"] and reward == 1.0
    assert [h["action"] for h in history_seen] == ["go", "go"]  # last two steps, parsed
    assert env.get_wrapper_attr("history") == 2
    # the failed step is in the history as the empty action it sent
    obs, info = env.reset()
    env.step("<action>go</action>")
    obs, reward, *_, info = env.step("no tags")
    assert info["format_error"] and reward == pytest.approx(-0.1)
    assert [h["action"] for h in info["prompt_parts"]["history"]] == ["go", ""]
    assert "\nAction: \n\n[Step 3] Current observation:" in obs["prompt"]


def test_template_dataclass_roundtrip_in_parts():
    template = HOUSEHOLD
    env = PromptRenderer(ToyEnv(), template=template)
    _, info = env.reset()
    assert info["prompt_parts"]["template"] == asdict(template)
