"""Trajectory format, writer/reader durability, and the TrajectoryRecorder on a toy env."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from wrappers import (Step, TokenizedResponse, Trajectory, TrajectoryRecorder, TrajectoryWriter, read_trajectories,
                      resolve_image)
from wrappers.trajectory import SCHEMA_VERSION, json_safe


class CountdownEnv(gym.Env):
    """Toy text env: say the number shown to count down; an image shows the number as gray level."""

    def __init__(self, start: int = 3):
        self.start = start
        self.observation_space = spaces.Dict(
            {"text": spaces.Text(100, charset="0123456789 abcdefghijklmnopqrstuvwxyz:."),
             "image": spaces.Box(0, 255, (4, 4, 3), np.uint8)}
        )
        self.action_space = spaces.Text(100)

    def _obs(self):
        return {"text": f"number: {self.n}", "image": np.full((4, 4, 3), self.n * 10, np.uint8)}

    def _info(self, invalid=False):
        return {"task_id": f"count/{self.start}", "task": "count down", "category": "toy", "split": "train",
                "admissible_actions": [str(self.n)], "invalid_action": invalid, "success": self.n == 0,
                "score": 1.0 - self.n / self.start, "step": self.t, "np_value": np.float32(0.5)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n, self.t = self.start, 0
        return self._obs(), self._info()

    def step(self, action):
        self.t += 1
        ok = action == str(self.n)
        if ok:
            self.n -= 1
        return self._obs(), 1.0 if ok else -0.5, self.n == 0, False, self._info(invalid=not ok)


def play(env, actions, seed=0, options=None):
    env.reset(seed=seed, options=options)
    for a in actions:
        *_, term, trunc, _ = env.step(a)
        if term or trunc:
            break


def test_recorder_records_what_the_agent_saw_and_did():
    got: list[Trajectory] = []
    env = TrajectoryRecorder(CountdownEnv(3), sink=got.append, env_id="toy/Countdown")
    play(env, ["3", "x", "2", "1"], seed=7, options={"group_id": "g0", "trajectory_meta": {"iteration": 4}})
    assert len(got) == 1
    t = got[0]
    assert (t.env_id, t.task_id, t.task, t.category, t.split, t.seed, t.group_id) == (
        "toy/Countdown", "count/3", "count down", "toy", "train", 7, "g0")
    assert [s.observation for s in t.steps] == ["number: 3", "number: 2", "number: 2", "number: 1"]
    assert [s.action for s in t.steps] == ["3", "x", "2", "1"]
    assert [s.reward for s in t.steps] == [1.0, -0.5, 1.0, 1.0]
    assert [s.invalid_action for s in t.steps] == [False, True, False, False]
    assert t.steps[-1].terminated and not any(s.terminated for s in t.steps[:-1])
    assert (t.success, t.score, t.return_, t.length) == (True, 1.0, 2.5, 4)
    assert t.meta["iteration"] == 4 and t.meta["ended_by"] == "terminated"
    assert t.meta["final_observation"] == "number: 0"
    assert int(t.steps[0].image[0, 0, 0]) == 30  # the image the first action answered
    assert t.steps[0].info["np_value"] == 0.5 and isinstance(t.steps[0].info["np_value"], float)


def test_recorder_keeps_incomplete_episode_on_reset_and_attaches_tokens():
    got = []
    env = TrajectoryRecorder(CountdownEnv(3), sink=got.append)
    env.reset(seed=1)
    env.get_wrapper_attr("attach_tokens")([1, 2], [3, 4, 5], [-0.1, -0.2, -0.3])
    env.step("3")
    env.step("2")
    env.reset(seed=2)  # cuts the first episode short
    assert len(got) == 1 and got[0].meta["ended_by"] == "reset" and got[0].length == 2
    s0, s1 = got[0].steps
    assert (s0.prompt_token_ids, s0.response_token_ids, s0.response_logprobs) == ([1, 2], [3, 4, 5], [-0.1, -0.2, -0.3])
    assert s1.response_token_ids is None  # tokens belong to one step only
    env.close()  # the second episode has no steps: nothing to hand over
    assert len(got) == 1


def test_reset_options_for_recorder_are_not_passed_to_env():
    class Strict(CountdownEnv):
        def reset(self, *, seed=None, options=None):
            assert not options, options
            return super().reset(seed=seed)

    env = TrajectoryRecorder(Strict(), sink=lambda t: None)
    env.reset(options={"group_id": "g", "episode_id": "e1"})


def test_recorder_rejects_a_non_callable_sink():
    with pytest.raises(ValueError, match="sink"):
        TrajectoryRecorder(CountdownEnv(), sink=42)
    with pytest.raises(ValueError, match="trajectory_in_info"):
        TrajectoryRecorder(CountdownEnv(), sink=None)


def test_tokens_ride_on_the_action_and_the_episode_comes_back_in_info():
    env = TrajectoryRecorder(CountdownEnv(2), sink=None, trajectory_in_info=True)
    env.reset(seed=0)
    _, _, _, _, info = env.step(TokenizedResponse("2", [7, 8], [9], [-0.25]))
    assert "trajectory" not in info
    _, _, term, _, info = env.step("1")  # a plain str: no tokens for this step
    assert term
    t = info["trajectory"]
    assert isinstance(t, Trajectory) and t.length == 2 and t.success
    assert (t.steps[0].prompt_token_ids, t.steps[0].response_token_ids, t.steps[0].response_logprobs) == ([7, 8], [9], [-0.25])
    assert t.steps[0].response == "2" and type(t.steps[0].response) is str  # stored as plain text
    assert t.steps[1].response_token_ids is None


def test_path_sink_is_owned_and_survives_spec_copies(tmp_path):
    path = tmp_path / "rec.jsonl"
    env = TrajectoryRecorder(CountdownEnv(2), sink=str(path), env_id="toy")
    assert env.spec is None or env.spec  # building the spec deep-copies kwargs: must not fail
    play(env, ["2", "1"])
    play(env, ["2", "x", "1"])
    env.close()
    assert [t.length for t in read_trajectories(path)] == [2, 3]


def _trajectory(i: int, image: bool = False) -> Trajectory:
    steps = [Step(index=k, observation=f"obs {k} ünïcødé ✓", action=f"a{k}", reward=0.5 * k, response=f"<action>a{k}</action>",
                  prompt=f"prompt {k}", prompt_parts={"task": "t", "history": [["o", "a"]]},
                  image=np.full((3, 5, 3), k, np.uint8) if image else None, info={"step": k + 1},
                  prompt_token_ids=[1, 2, 3], response_token_ids=[4, 5], response_logprobs=[-0.25, -1.5])
             for k in range(3)]
    return Trajectory(episode_id=f"ep{i}", env_id="toy", task_id=f"t{i}", task="do", category="c", split="test",
                      seed=i, group_id="g", steps=steps, meta={"k": [1, 2]}).finish(success=i % 2 == 0, score=0.5)


def test_jsonl_round_trip_with_images(tmp_path):
    path = tmp_path / "run" / "traj.jsonl"
    with TrajectoryWriter(path) as w:
        for i in range(3):
            w.write(_trajectory(i, image=True))
    back = list(read_trajectories(path))
    assert [t.episode_id for t in back] == ["ep0", "ep1", "ep2"]
    want = _trajectory(1)
    got = back[1]
    assert got.return_ == 1.5 and got.length == 3 and got.success is False
    for a, b in zip(want.steps, got.steps):
        assert (a.observation, a.action, a.reward, a.response, a.prompt, a.prompt_parts, a.info) == (
            b.observation, b.action, b.reward, b.response, b.prompt, b.prompt_parts, b.info)
        assert (a.prompt_token_ids, a.response_token_ids, a.response_logprobs) == (
            b.prompt_token_ids, b.response_token_ids, b.response_logprobs)
    from PIL import Image

    img = np.asarray(Image.open(resolve_image(path, got.steps[2])))
    assert img.shape == (3, 5, 3) and (img == 2).all()
    line = json.loads(path.read_text().splitlines()[0])
    assert line["schema"] == "seed-gym/trajectory" and line["schema_version"] == SCHEMA_VERSION


def test_torn_last_line_is_skipped_and_cut_before_append(tmp_path):
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.write(_trajectory(0))
        w.write(_trajectory(1))
    with open(path, "ab") as f:
        f.write(b'{"schema": "seed-gym/traj')  # a writer died here
    with pytest.warns(UserWarning, match="torn last line"):
        assert [t.episode_id for t in read_trajectories(path)] == ["ep0", "ep1"]
    with pytest.warns(UserWarning, match="cutting a torn last line"):
        w = TrajectoryWriter(path)
    w.write(_trajectory(2))
    w.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [t.episode_id for t in read_trajectories(path)] == ["ep0", "ep1", "ep2"]


def test_corruption_in_the_middle_raises_with_line_number(tmp_path):
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.write(_trajectory(0))
    with open(path, "ab") as f:
        f.write(b"garbage\n")
    with TrajectoryWriter(path) as w:
        w.write(_trajectory(1))
    with pytest.raises(ValueError, match=":2:"):
        list(read_trajectories(path))


def test_newer_schema_is_refused():
    d = _trajectory(0).to_dict()
    d["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="newer"):
        Trajectory.from_dict(d)


def test_json_safe_converts_numpy_and_non_finite():
    assert json_safe({"a": np.int64(3), "b": np.array([1.5, 2]), "c": float("nan"), 1: (np.bool_(True),)}) == {
        "a": 3, "b": [1.5, 2.0], "c": None, "1": [True]}


WRITER_SCRIPT = r"""
import sys, numpy as np
from wrappers import Step, Trajectory, TrajectoryWriter
w = TrajectoryWriter(sys.argv[1])
i = 0
while True:  # big episodes so the kill often lands inside a write
    steps = [Step(index=k, observation="x" * 5000, action="up", reward=1.0) for k in range(200)]
    w.write(Trajectory(episode_id=f"ep{i}", env_id="toy", task_id="t", task="t", category="c", split="train",
                       steps=steps).finish(success=True, score=1.0))
    i += 1
    print(i, flush=True)
"""


@pytest.mark.parametrize("delay", [0.3, 0.7])
def test_sigkill_mid_run_leaves_readable_complete_episodes(tmp_path, delay):
    path = tmp_path / "killed.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER_SCRIPT, str(path)], stdout=subprocess.PIPE)
    deadline = time.time() + 30
    while (not path.exists() or path.stat().st_size < 2_000_000) and time.time() < deadline:
        time.sleep(0.02)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    raw = path.read_bytes()
    complete = raw.count(b"\n")
    assert complete >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a torn tail is allowed and warned about
        back = list(read_trajectories(path))
    assert len(back) == complete
    assert [t.episode_id for t in back] == [f"ep{i}" for i in range(complete)]
    assert all(t.length == 200 for t in back)
