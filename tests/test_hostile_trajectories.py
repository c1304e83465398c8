"""Hostile input and faults for trajectory files and the reports built from them (issue 16, items 2-4).

- Image paths in a crafted JSONL cannot make a report embed files from outside the run folder.
- Lone surrogates, control characters, NULs and huge strings in any recorded text never raise from the
  recorder or writer, read back unchanged, and still give a valid, non-empty HTML report.
- Several processes appending to one file lose no episode; opening a writer reads only the file's tail;
  image folders of different episode ids never collide and stay short.
"""
from __future__ import annotations

import base64
import json
import multiprocessing
import os
import random
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from wrappers import (LLMActionParser, PromptRenderer, Step, Trajectory, TrajectoryRecorder, TrajectoryWriter,
                      read_trajectories, resolve_image)


def make_trajectory(episode_id: str, *, text: str = "obs", image: np.ndarray | None = None,
                    info: dict | None = None, task: str = "t") -> Trajectory:
    step = Step(index=0, observation=text, action=text, reward=1.0, response=text, prompt=text,
                image=image, info=info or {})
    return Trajectory(episode_id=episode_id, env_id="toy", task_id="t0", task=task, category="c", split="test",
                      steps=[step]).finish(success=True, score=1.0)


def without_images(trajectory: Trajectory) -> dict:
    """The trajectory's on-disk dict with the image fields left out (arrays in memory, paths on disk)."""
    d = trajectory.to_dict()
    for s in d["steps"]:
        s.pop("image")
    return d


def embedded_data(html: str) -> dict:
    """The JSON the viewer page embeds (its ``\\u003c`` etc. escapes read back unchanged)."""
    body = html.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0]
    return json.loads(body)


# ------------------------------------------------------------------------ item 2: images out of the folder
@pytest.fixture()
def run_with_secret(tmp_path):
    """A run folder, a secret file beside it (outside), and a symlink in the folder that points at it."""
    run = tmp_path / "run"
    run.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"TOP-SECRET-" + os.urandom(24).hex().encode())
    (run / "link.png").symlink_to(secret)
    (run / "sub").mkdir()
    (run / "sub" / "uplink").symlink_to(tmp_path)  # a folder symlink leading out
    return run, secret


def hostile_image_paths(run: Path, secret: Path) -> list[str]:
    return ["/etc/passwd", str(secret), "../secret.txt", "sub/../../secret.txt", "traj.jsonl.images/../../secret.txt",
            "link.png", "sub/uplink/secret.txt", "", ".", "bad\0name.png"]


def test_resolve_image_refuses_paths_that_leave_the_run_folder(run_with_secret):
    run, secret = run_with_secret
    jsonl = run / "traj.jsonl"
    for bad in hostile_image_paths(run, secret):
        with pytest.raises(ValueError, match="run folder|cannot be resolved"):
            resolve_image(jsonl, Step(index=3, observation="", action="", reward=0.0, image=bad))
    inside = resolve_image(jsonl, Step(index=0, observation="", action="", reward=0.0, image="x.images/e/step0000.png"))
    assert inside == run.resolve() / "x.images" / "e" / "step0000.png"
    assert resolve_image(jsonl, Step(index=0, observation="", action="", reward=0.0)) is None


def test_report_from_a_crafted_file_embeds_no_file_from_outside(run_with_secret):
    from PIL import Image

    from wrappers.viewer import write_viewer

    run, secret = run_with_secret
    Image.fromarray(np.full((2, 2, 3), 7, np.uint8)).save(run / "good.png")  # a legitimate frame inside
    steps = [Step(index=k, observation="o", action="a", reward=0.0, image=path)
             for k, path in enumerate(hostile_image_paths(run, secret) + ["good.png"])]
    crafted = Trajectory(episode_id="crafted", env_id="toy", task_id="t", task="t", category="c", split="test",
                         steps=steps).finish(success=False, score=0.0)
    with TrajectoryWriter(run / "traj.jsonl") as writer:  # image paths that are strings are stored as given
        writer.write(crafted)
    out = run / "report.html"
    with pytest.warns(UserWarning, match="the image is left out"):
        write_viewer(run / "traj.jsonl", out)
    html = out.read_text(encoding="utf-8")
    assert base64.b64encode(secret.read_bytes()).decode() not in html
    if Path("/etc/passwd").is_file():
        assert base64.b64encode(Path("/etc/passwd").read_bytes()).decode() not in html
    images = embedded_data(html)["images"]
    good = base64.b64encode((run / "good.png").read_bytes()).decode()
    assert list(images.values()) == ["data:image/png;base64," + good]


# ------------------------------------------------------------------------ item 3: odd text, lone surrogates
SURROGATE_TEXT = "a\ud800b\udfffc \udc80\x00\x1b[31m\u2028é✓\U0001F600"


def test_lone_surrogates_in_every_field_are_written_and_read_back_unchanged(tmp_path):
    info = {"note": SURROGATE_TEXT, SURROGATE_TEXT: [SURROGATE_TEXT, 1], "nested": {"k": "\ud83d"}}
    t = make_trajectory("ep-\ud800", text=SURROGATE_TEXT, info=info, task="task \udbff")
    t.meta = {"skill": "\udc00 skill"}
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as writer:
        writer.write(t)
        writer.write(make_trajectory("plain", text="é✓"))
    raw = path.read_bytes()
    raw.decode("utf-8")  # strict UTF-8 on disk
    assert b"\\ud800" in raw and "é✓".encode() in raw  # escaped surrogates; other text stays UTF-8
    back = list(read_trajectories(path))
    assert [b.episode_id for b in back] == ["ep-\ud800", "plain"]
    assert back[0].to_dict() == t.to_dict()
    assert back[0].steps[0].observation == SURROGATE_TEXT and back[0].task == "task \udbff"


def test_a_high_surrogate_next_to_a_low_one_reads_back_as_two_code_points(tmp_path):
    split_emoji = "\ud83d\ude00"  # two code points: JSON's \ud83d\ude00 escape would read back as one
    odd = f"{split_emoji} real \U0001F600, text \\ud83d and \\\\, lone \udc80"
    t = make_trajectory("pair", text=odd, info={split_emoji: odd})
    path = tmp_path / "pair.jsonl"
    with TrajectoryWriter(path) as writer:
        writer.write(t)
    (back,) = read_trajectories(path)
    assert back.steps[0].observation == odd and len(back.steps[0].observation) == len(odd)
    assert back.to_dict() == t.to_dict()


class FuzzEnv(gym.Env):
    """Every text it shows (observation, task, category, admissible actions, info strings and keys) is drawn
    from ``draw``; episodes last two steps; some observations carry a tiny image."""

    def __init__(self, draw):
        self.draw = draw
        self.observation_space = spaces.Dict({"text": spaces.Text(1 << 24),
                                              "image": spaces.Box(0, 255, (2, 2, 3), np.uint8)})
        self.action_space = spaces.Text(1 << 24)
        self.t = 0

    def _obs(self):
        return {"text": self.draw(), "image": np.full((2, 2, 3), self.t * 40 % 256, np.uint8)}

    def _info(self):
        return {"task": self.draw(), "task_id": self.draw(), "category": self.draw(), "split": "test",
                "admissible_actions": [self.draw(), self.draw()], "note": self.draw(), self.draw(): [self.draw()]}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), self._info()

    def step(self, action):
        self.t += 1
        return self._obs(), 0.5, self.t >= 2, False, {**self._info(), "echo": action}


def fuzz_strings(seed: int):
    """Seeded random strings: surrogates, control characters, NULs, quotes, markup, astral characters,
    and now and then a huge one (about 1 MB)."""
    rng = random.Random(seed)
    pools = ["abcXYZ 019", "".join(map(chr, range(0x20))) + "\x7f\x85",
             "".join(map(chr, range(0xD800, 0xD840))) + "".join(map(chr, range(0xDC00, 0xDC40))) + "\udfff",
             "é✓中\u2028\u2029\ufeff\U0001F600\u0301\U0010FFFF", '"\\<>&/{}[]</script><!--']
    count = 0
    while True:
        count += 1
        if count % 250 == 0:
            yield ("\ud800" + "x" * 999 + "\x00") * 1000
        else:
            yield "".join(rng.choice(rng.choice(pools)) for _ in range(rng.choice([0, 1, 3, 12, 80])))


def test_fuzzed_text_through_recorder_parser_renderer_writer_reader_round_trips(tmp_path):
    draw = fuzz_strings(seed=16).__next__
    path = tmp_path / "fuzz.jsonl"
    given: list[Trajectory] = []
    with TrajectoryWriter(path) as writer:
        def sink(trajectory):
            given.append(trajectory)
            writer.write(trajectory)

        env = TrajectoryRecorder(LLMActionParser(PromptRenderer(FuzzEnv(draw))), sink=sink)
        sent = []
        for episode in range(40):
            env.reset(seed=episode, options={"episode_id": draw() or "empty", "group_id": draw(),
                                             "trajectory_meta": {draw(): draw()}})
            for _ in range(2 if episode % 5 else 1):  # every fifth episode is cut short by the next reset
                action = f"<action>{draw()}</action>{draw()}" if episode % 2 else draw()
                sent.append(action)
                env.step(action)
        env.close()
    assert len(given) == 40 and len(sent) > 60
    back = list(read_trajectories(path))
    assert [without_images(b) for b in back] == [without_images(g) for g in given]
    assert [s.response for b in back for s in b.steps] == sent
    for b, g in zip(back, given):
        for s_back, s_given in zip(b.steps, g.steps):
            from PIL import Image

            with Image.open(resolve_image(path, s_back)) as image:
                assert np.array_equal(np.asarray(image), s_given.image)


def test_recorder_with_a_path_sink_survives_surrogates_in_reset_step_and_close(tmp_path):
    path = tmp_path / "rec.jsonl"
    env = TrajectoryRecorder(FuzzEnv(lambda: SURROGATE_TEXT), sink=str(path))
    env.reset(seed=0, options={"episode_id": "\ud800"})
    env.step("\udc00")
    env.step("x")  # ends the episode
    env.reset(seed=1)
    env.step("\ud800")  # cut short by close
    env.close()
    back = list(read_trajectories(path))
    assert [(b.episode_id, b.meta["ended_by"], b.length) for b in back][0] == ("\ud800", "terminated", 2)
    assert back[1].meta["ended_by"] == "close" and back[1].steps[0].response == "\ud800"
    assert back[0].task == SURROGATE_TEXT and back[0].steps[0].info["echo"] == "\udc00"


def test_viewer_writes_a_valid_report_from_a_file_with_lone_surrogates(tmp_path):
    from wrappers.viewer import write_viewer

    path = tmp_path / "s.jsonl"
    record = make_trajectory("s\ud800", text=SURROGATE_TEXT, info={"\udfff": SURROGATE_TEXT}).to_dict()
    path.write_text(json.dumps(record, ensure_ascii=True) + "\n", encoding="ascii")  # how such a file is stored
    out = tmp_path / "report.html"
    write_viewer(path, out)
    html = out.read_bytes().decode("utf-8")  # strict: a valid UTF-8 page
    episode = embedded_data(html)["episodes"][0]
    assert episode["id"] == "s\ud800" and episode["steps"][0]["observation"] == SURROGATE_TEXT
    assert episode["steps"][0]["info"] == {"\udfff": SURROGATE_TEXT}


def test_a_failed_report_leaves_the_previous_one_and_no_temporary_file(tmp_path):
    from wrappers.viewer import write_viewer

    path = tmp_path / "bad.jsonl"
    good = [json.dumps(make_trajectory(i).to_dict()) for i in ("e", "f")]
    path.write_text(good[0] + "\ngarbage\n" + good[1] + "\n")
    out = tmp_path / "report.html"
    out.write_text("previous report")
    with pytest.raises(ValueError, match=":2:"):
        write_viewer(path, out)
    assert out.read_text() == "previous report"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "report.html"]


# ------------------------------------------------------------------------ item 4: many writers, one file
def append_episodes(path: str, worker: str, count: int, size: int) -> None:
    """A worker process: reopen a writer for every episode (as path sinks rebuilt in vector-env workers do)."""
    for i in range(count):
        with TrajectoryWriter(path, fsync=False) as writer:
            writer.write(make_trajectory(f"{worker}-e{i}", text="x" * size))  # 4 text fields: ~4 * size bytes


def test_concurrent_writer_processes_lose_no_episode(tmp_path):
    path = tmp_path / "shared.jsonl"
    rounds, workers, episodes = 3, 4, 8
    context = multiprocessing.get_context("spawn")  # nothing of this process (torch threads) is inherited
    for r in range(rounds):
        procs = [context.Process(target=append_episodes, args=(str(path), f"r{r}w{w}", episodes, 75_000))
                 for w in range(workers)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(120)
        assert [p.exitcode for p in procs] == [0] * workers
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nobody was killed: no torn line anywhere
        ids = [t.episode_id for t in read_trajectories(path)]
    want = {f"r{r}w{w}-e{i}" for r in range(rounds) for w in range(workers) for i in range(episodes)}
    assert len(ids) == len(want) and set(ids) == want


def test_an_open_writer_cuts_a_dead_writers_torn_line_instead_of_gluing_to_it(tmp_path):
    path = tmp_path / "t.jsonl"
    writer = TrajectoryWriter(path)
    writer.write(make_trajectory("e0"))
    with open(path, "ab") as f:  # another writer was killed mid-line after this one opened
        f.write(b'{"schema": "seed-gym/traj')
    with pytest.warns(UserWarning, match="cutting a torn last line"):
        writer.write(make_trajectory("e1"))
    writer.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [t.episode_id for t in read_trajectories(path)] == ["e0", "e1"]


def _bytes_read_by_this_process() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io to count bytes read")
def test_opening_a_writer_reads_only_the_tail_of_a_large_file(tmp_path):
    path = tmp_path / "large.jsonl"
    last_line = json.dumps(make_trajectory("last").to_dict()).encode() + b"\n"
    with open(path, "wb") as f:
        f.truncate(64 << 20)  # 64 MB (sparse, instant); the writer must not read it
        f.seek(0, os.SEEK_END)
        f.write(b"\n" + last_line + b'{"schema": "se')  # ... and a torn line, which it must cut
    before = _bytes_read_by_this_process()
    with pytest.warns(UserWarning, match="cutting a torn last line"):
        writer = TrajectoryWriter(path)
    read = _bytes_read_by_this_process() - before
    writer.close()
    assert read < 1 << 20, f"opening read {read} bytes"
    assert path.stat().st_size == (64 << 20) + 1 + len(last_line)
    with open(path, "rb") as f:
        f.seek(-len(last_line), os.SEEK_END)
        assert f.read() == last_line


def test_image_folders_of_different_ids_never_collide_and_stay_short(tmp_path):
    from PIL import Image

    path = tmp_path / "img.jsonl"
    ids = ["run/1", "run_1", "run:1", "x" * 300, "\ud800" * 3, "../..", ""]
    with TrajectoryWriter(path) as writer:
        for k, episode_id in enumerate(ids):
            writer.write(make_trajectory(episode_id, image=np.full((2, 3, 3), 10 * k, np.uint8)))
    back = list(read_trajectories(path))
    assert [b.episode_id for b in back] == ids
    folders = {resolve_image(path, b.steps[0]).parent for b in back}
    assert len(folders) == len(ids) and all(f.parent == writer.image_dir.resolve() for f in folders)
    assert max(len(f.name) for f in folders) <= 64
    for k, b in enumerate(back):
        with Image.open(resolve_image(path, b.steps[0])) as image:
            assert (np.asarray(image) == 10 * k).all()
