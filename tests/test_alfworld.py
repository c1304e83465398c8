"""seed/ALFWorld-v0: real games (both formats), generated games, caching, experts, vector envs.

Tests that play games need the engine (``pip install 'seed-gym[alfworld]'``); tests on real games
need ``../shared/data`` (the ``shared_data`` fixture). Generated games go to a per-session cache.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import seed_envs
from seed_envs.alfworld.games import (
    TASK_TYPES,
    GameFileError,
    find_games,
    read_game_file,
)

ENV_ID = "seed/ALFWorld-v0"
GENERATED_PANEL = 6  # one game per task type keeps first-time generation short


def need_alfworld():
    pytest.importorskip("alfworld", reason="the ALFWorld engine is an extra: pip install 'seed-gym[alfworld]'")
    pytest.importorskip("textworld", reason="the ALFWorld engine is an extra: pip install 'seed-gym[alfworld]'")


@pytest.fixture(scope="session")
def alfworld_data(shared_data) -> Path:
    return shared_data / "alfworld" / "ALFWORLD_DATA"


@pytest.fixture(scope="session")
def legacy_data(shared_data) -> Path:
    return shared_data / "alfworld" / "legacy_format_games"


@pytest.fixture(scope="session")
def generated_cache(tmp_path_factory) -> Path:
    """A session cache for generated default panels (the env reads SEEDGYM_CACHE)."""
    root = tmp_path_factory.mktemp("seedgym-cache")
    old = os.environ.get("SEEDGYM_CACHE")
    os.environ["SEEDGYM_CACHE"] = str(root)
    yield root
    if old is None:
        os.environ.pop("SEEDGYM_CACHE", None)
    else:
        os.environ["SEEDGYM_CACHE"] = old


def play_expert(env: gym.Env, task_id: str) -> dict:
    obs, info = env.reset(options={"task_id": task_id})
    expert = seed_envs.make_expert(env)
    while True:
        obs, _reward, terminated, truncated, info = env.step(expert(obs, info))
        if terminated or truncated:
            return info


# ------------------------------------------------------------------ finding games (no engine needed)
@pytest.mark.parametrize(
    ("split", "count"), [("train", 60), ("valid_seen", 30), ("valid_train", 60), ("valid_unseen", 38)]
)
def test_real_panels_have_the_right_games_and_categories(alfworld_data, split, count):
    games = find_games(alfworld_data, split)
    assert len(games) == count
    ids = [g.task_id for g in games]
    assert ids == sorted(ids) and len(set(ids)) == count
    for g in games:
        s, folder, trial = g.task_id.split("/")
        assert s == split and g.category == folder.split("-")[0] and g.path.parent.name == trial
    per_type = Counter(g.category for g in games)
    assert set(per_type) == set(TASK_TYPES)
    if split != "valid_unseen":  # stratified samples: the same number per type
        assert len(set(per_type.values())) == 1


def test_trial_folders_without_a_game_file_are_skipped(alfworld_data):
    split_dir = alfworld_data / "json_2.1.1" / "valid_unseen"
    trials = [t for task in split_dir.iterdir() for t in task.iterdir() if t.is_dir()]
    assert len(trials) == 43
    assert len(find_games(alfworld_data, "valid_unseen")) == 38


def test_legacy_games_are_found(legacy_data):
    games = find_games(legacy_data, "valid_unseen")
    assert len(games) == 6
    assert {g.category for g in games} == set(TASK_TYPES)


def test_missing_data_folder_says_how_to_get_the_data(tmp_path):
    with pytest.raises(FileNotFoundError, match="alfworld-download"):
        find_games(tmp_path / "nowhere", "train")
    with pytest.raises(FileNotFoundError, match="alfworld-download"):
        gym.make(ENV_ID, data_dir=str(tmp_path / "nowhere"))
    (tmp_path / "json_2.1.1" / "train").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="valid_seen"):
        find_games(tmp_path, "valid_seen")


@pytest.mark.parametrize("damage", ["truncate", "garbage", "missing-key", "cut-problem"])
def test_corrupt_game_file_is_a_clear_error_naming_it(alfworld_data, tmp_path, damage):
    (src,) = [g.path for g in find_games(alfworld_data, "valid_seen")][:1]
    text = src.read_text()
    bad = tmp_path / "game.tw-pddl"
    if damage == "truncate":
        bad.write_text(text[: len(text) // 2])
    elif damage == "garbage":
        bad.write_bytes(b"\x00\xff not json")
    elif damage == "missing-key":
        data = json.loads(text)
        del data["pddl_problem"]
        bad.write_text(json.dumps(data))
    else:
        data = json.loads(text)
        data["pddl_problem"] = data["pddl_problem"][: len(data["pddl_problem"]) // 2]
        bad.write_text(json.dumps(data))
    with pytest.raises(GameFileError, match=str(bad).replace("\\", "\\\\")):
        read_game_file(bad)


def test_corrupt_game_file_in_a_panel_fails_at_reset_naming_it(alfworld_data, tmp_path):
    need_alfworld()
    src = find_games(alfworld_data, "valid_seen")[0]
    trial = tmp_path / "json_2.1.1" / "valid_seen" / src.path.parent.parent.name / src.path.parent.name
    trial.mkdir(parents=True)
    (trial / "game.tw-pddl").write_text(src.path.read_text()[:5000])
    env = gym.make(ENV_ID, split="test", data_dir=str(tmp_path))
    with pytest.raises(GameFileError, match="truncated or corrupt") as e:
        env.reset(seed=0)
    assert str(trial / "game.tw-pddl") in str(e.value)


def test_import_seed_envs_does_not_import_the_engine():
    code = "import sys, seed_envs, seed_envs.alfworld.env; print(any(m.split('.')[0] in ('alfworld', 'textworld', 'fast_downward') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------ real games on the engine
def test_behaviour_on_a_real_game(alfworld_data):
    need_alfworld()
    env = gym.make(ENV_ID, split="test", data_dir=str(alfworld_data))
    base = env.unwrapped
    assert base.split == "valid_seen" and len(base.task_ids()) == 30
    task_id = next(t for t in base.task_ids() if "pick_heat" in t)
    obs, info = env.reset(options={"task_id": task_id})
    assert "Welcome to TextWorld" not in obs["text"]
    assert obs["text"].startswith("You are in the middle of a room.")
    assert info["task"].startswith("Your task is to: ") and info["task"] in obs["text"]
    assert info["category"] == "pick_heat_then_place_in_recep" and info["split"] == "valid_seen"
    assert "help" not in info["admissible_actions"] and "look" in info["admissible_actions"]
    assert info["game_format"] == "current" and 0.0 <= info["score"] < 1.0  # ALFRED counts conditions already met
    obs, reward, terminated, _truncated, info = env.step("fly to the moon")
    assert info["invalid_action"] and obs["text"] == "Nothing happens." and reward == 0.0
    walkthrough = base.game.walkthrough()
    scores = []
    for command in walkthrough:
        obs, reward, terminated, _truncated, info = env.step(command)
        assert not info["invalid_action"]
        scores.append(info["score"])
    assert terminated and info["success"] and reward == 1.0 and scores[-1] == 1.0
    assert 0.0 < max(scores[:-1]) < 1.0  # goal conditions met along the way (heated, placed)


def test_cached_engine_gives_identical_observations_and_actions(alfworld_data, legacy_data):
    need_alfworld()
    from seed_envs.alfworld.engine import AlfWorldGame

    games = [find_games(alfworld_data, "valid_seen")[7], find_games(legacy_data, "valid_unseen")[0]]
    cached, plain = AlfWorldGame(cached=True), AlfWorldGame(cached=False)
    for record in games:
        plain.load(str(record.path), record.category)
        want = plain.reset()
        for _ in range(2):  # the second load and reset are served from the caches
            cached.path = None
            cached.load(str(record.path), record.category)
            assert cached.reset() == want and cached.admissible_commands() == plain.admissible_commands()
        for command in (cached.walkthrough() or cached.plan())[:3]:
            assert cached.step(command) == plain.step(command)
            assert cached.admissible_commands() == plain.admissible_commands()
            assert cached.goal_condition_rate() == plain.goal_condition_rate()


@pytest.mark.slow
def test_expert_wins_every_valid_seen_and_legacy_game(alfworld_data, legacy_data):
    need_alfworld()
    lost = []
    for data_dir, split in ((alfworld_data, "valid_seen"), (legacy_data, "valid_unseen")):
        env = gym.make(ENV_ID, split=split, data_dir=str(data_dir))
        for task_id in env.unwrapped.task_ids():
            info = play_expert(env, task_id)
            if not info["success"]:
                lost.append(task_id)
            else:
                assert info["score"] == 1.0
        if split == "valid_unseen":
            assert {env.unwrapped.game.format} == {"legacy"}
    assert lost == []


def test_expert_replans_after_a_detour(alfworld_data):
    need_alfworld()
    env = gym.make(ENV_ID, split="test", data_dir=str(alfworld_data))
    task_id = next(t for t in env.unwrapped.task_ids() if "pick_two" in t)
    obs, info = env.reset(options={"task_id": task_id})
    for command in ("inventory", "go to " + info["admissible_actions"][-1].removeprefix("go to ")):
        obs, _, _, _, info = env.step(command)
    expert = seed_envs.make_expert(env)
    for _ in range(60):
        obs, _reward, terminated, truncated, info = env.step(expert(obs, info))
        if terminated or truncated:
            break
    assert info["success"]


def test_junk_actions_never_raise(alfworld_data):
    need_alfworld()
    env = gym.make(ENV_ID, split="test", data_dir=str(alfworld_data), max_steps=10_000)
    obs, info = env.reset(seed=3)
    rng = np.random.default_rng(0)
    junk = ["", " ", "help", "go to", "take", "look look", "x" * 100_000, "<action>look</action>", "\x00", "go to fridge 99"]
    for i in range(2000):
        if i % 3 == 0:
            action = junk[i % len(junk)]
        else:
            action = "".join(map(chr, rng.integers(0x20, 0x2FFF, size=int(rng.integers(0, 40)))))
        obs, _reward, terminated, _truncated, info = env.step(action)
        assert isinstance(obs["text"], str) and 0.0 <= info["score"] <= 1.0
        assert info["invalid_action"] == (action.strip() != "help")
    assert not terminated


def test_check_env_and_reward_mode_on_real_games(alfworld_data):
    need_alfworld()
    from gymnasium.utils.env_checker import check_env

    env = gym.make(ENV_ID, split="unseen", data_dir=str(alfworld_data), reward_mode="success")
    check_env(env.unwrapped, skip_render_check=True)
    task_id = env.unwrapped.task_ids()[0]
    info = play_expert(env, task_id)
    assert info["success"] and info["split"] == "valid_unseen"
    env.reset(options={"task_id": task_id})
    total = 0.0
    for command in env.unwrapped.game.walkthrough():
        _, reward, terminated, _, _ = env.step(command)
        total += reward
    assert terminated and total == 10.0


def test_seeded_reset_is_deterministic_and_max_steps_truncates(alfworld_data):
    need_alfworld()
    a = gym.make(ENV_ID, split="train", data_dir=str(alfworld_data), max_steps=3)
    b = gym.make(ENV_ID, split="train", data_dir=str(alfworld_data), max_steps=3)
    oa, ia = a.reset(seed=11)
    ob, ib = b.reset(seed=11)
    assert oa == ob and ia["task_id"] == ib["task_id"]
    truncated = False
    for _ in range(3):
        _, _, terminated, truncated, _ = a.step("look")
    assert truncated and not terminated
    with pytest.raises(ValueError, match="task_id"):
        a.reset(options={"task_id": "valid_seen/nope/trial"})


# ------------------------------------------------------------------ parallel
class DieOnCommand(gym.Wrapper):
    """Test helper: the worker process exits abruptly when it receives ``__die__``."""

    def step(self, action):
        if action == "__die__":
            os._exit(3)
        return self.env.step(action)


def _vector_env_fn(data_dir: str, die: bool = False):
    def make():
        env = gym.make(ENV_ID, split="test", data_dir=data_dir)
        return DieOnCommand(env) if die else env

    return make


@pytest.mark.filterwarnings("ignore:.*Calling `close` while waiting")  # closing after the dead worker
def test_async_vector_env_steps_8_envs_and_reports_a_dead_worker(alfworld_data):
    need_alfworld()
    from gymnasium.vector import AsyncVectorEnv, AutoresetMode

    n = 8
    envs = AsyncVectorEnv([_vector_env_fn(str(alfworld_data), die=True) for _ in range(n)], shared_memory=False,
                          autoreset_mode=AutoresetMode.DISABLED)
    try:
        obs, infos = envs.reset(seed=list(range(n)))
        assert all(isinstance(t, str) and t for t in obs["text"])
        for _ in range(2):
            actions = [infos["admissible_actions"][i][0] for i in range(n)]
            obs, _rewards, _term, _trunc, infos = envs.step(actions)
            assert list(infos["step"]) == [infos["step"][0]] * n
        # The same seeds in a single env give the same first observation.
        single = gym.make(ENV_ID, split="test", data_dir=str(alfworld_data))
        o, _ = single.reset(seed=5)
        first, _ = envs.reset(seed=list(range(n)))
        assert first["text"][5] == o["text"]
        envs.step_async(["look"] * 3 + ["__die__"] + ["look"] * 4)
        with pytest.raises((EOFError, BrokenPipeError, ConnectionError)):  # reported, not a hang
            envs.step_wait(timeout=120)
    finally:
        envs.close(terminate=True)


# ------------------------------------------------------------------ generated games
def test_generated_default_panel_is_balanced_and_won_by_the_expert(generated_cache):
    need_alfworld()
    env = gym.make(ENV_ID, split="test", num_games=GENERATED_PANEL)
    ids = env.unwrapped.task_ids()
    assert len(ids) == GENERATED_PANEL
    assert Counter(t.split("/")[1].split("-")[0] for t in ids) == Counter(TASK_TYPES)
    for task_id in ids:
        info = play_expert(env, task_id)
        assert info["success"], task_id
        assert info["category"] in TASK_TYPES and info["split"] == "valid_seen"


def test_generated_games_are_byte_identical_for_the_same_seed(generated_cache, tmp_path):
    need_alfworld()
    from seed_envs.alfworld.generator import ensure_default_panel, write_panel

    panel = ensure_default_panel(generated_cache, "valid_seen", GENERATED_PANEL)
    again = write_panel(2, 0, tmp_path, "valid_seen")
    for path in again:
        twin = panel / path.relative_to(tmp_path)
        assert twin.read_bytes() == path.read_bytes()
    data = read_game_file(again[0])
    assert data["solvable"] and data["walkthrough"]
    assert "_bar_" in data["pddl_problem"] and "Your task is to: UNKNOWN GOAL" not in data["grammar"]


def test_unseen_floor_plans_never_occur_in_train():
    need_alfworld()
    from seed_envs.alfworld import generator

    train, unseen = set(generator.split_floor_plans("train")), set(generator.split_floor_plans("valid_unseen"))
    assert unseen and not train & unseen and len(train | unseen) == 120
    for split, allowed in (("train", train), ("valid_unseen", unseen)):
        for index in range(30):  # sampling only (no planner): cheap, and it is what picks the scene
            rng = generator.game_rng(0, split, index)
            sampled = generator.sample_game(TASK_TYPES[index % 6], generator.split_floor_plans(split), rng)
            assert sampled.floor_plan in allowed


def test_make_alfworld_games_writes_a_playable_layout(tmp_path):
    need_alfworld()
    from seed_envs.alfworld import make_alfworld_games

    paths = make_alfworld_games(2, 5, tmp_path, "valid_unseen")
    assert len(paths) == 2 and (tmp_path / "logic" / "alfred.twl2").is_file()
    env = gym.make(ENV_ID, split="unseen", data_dir=str(tmp_path))
    ids = env.unwrapped.task_ids()
    assert len(ids) == 2 and all(t.split("-")[-1].split("/")[0] in {"10", "219", "308", "424"} for t in ids)
    assert play_expert(env, ids[1])["success"]


def test_engine_does_not_leave_alfworld_data_configured(alfworld_data):
    need_alfworld()
    code = (
        "import os, gymnasium as gym, seed_envs; os.environ.pop('ALFWORLD_DATA', None);"
        f"env = gym.make('{ENV_ID}', split='test', data_dir={str(alfworld_data)!r}); env.reset(seed=0);"
        "print(os.environ.get('ALFWORLD_DATA'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "None"


def test_game_file_the_engine_cannot_parse_is_a_clear_error(alfworld_data, tmp_path):
    need_alfworld()
    from seed_envs.alfworld.engine import AlfWorldGame

    src = find_games(alfworld_data, "valid_seen")[0]
    data = read_game_file(src.path)
    data["pddl_problem"] = data["pddl_problem"].replace("agent1 - agent", "agent1 - nosuchtype", 1)
    bad = tmp_path / "game.tw-pddl"
    bad.write_text(json.dumps(data))
    with pytest.raises(GameFileError, match=str(bad)):
        AlfWorldGame().load(str(bad), src.category)


def test_shipped_default_panels_are_what_the_generator_writes(tmp_path):
    """tasks/alfworld holds the default panels; regenerating the first games gives the same bytes."""
    pytest.importorskip("alfworld", reason="the alfworld extra is not installed")
    import tarfile

    from seed_envs.alfworld.env import DEFAULT_PANEL_SIZES
    from seed_envs.alfworld.generator import GENERATOR_VERSION, SHIPPED_PANELS, write_panel

    folder = SHIPPED_PANELS / f"generated-v{GENERATOR_VERSION}-seed0"
    for split, n in DEFAULT_PANEL_SIZES.items():
        assert (folder / f"{split}-n{n}.tar.gz").is_file(), split
    with tarfile.open(folder / f"valid_seen-n{DEFAULT_PANEL_SIZES['valid_seen']}.tar.gz") as archive:
        archive.extractall(tmp_path / "shipped", filter="data")
    write_panel(2, 0, tmp_path / "fresh", "valid_seen")
    fresh = sorted(p.relative_to(tmp_path / "fresh") for p in (tmp_path / "fresh").rglob("game.tw-pddl"))
    assert len(fresh) == 2
    for rel in fresh:
        assert (tmp_path / "shipped" / rel).read_bytes() == (tmp_path / "fresh" / rel).read_bytes()


class _FakeGame:
    """Stands in for AlfWorldGame in the planner-limit test: plans instantly, or never returns."""

    def __init__(self, plan_seconds: float):
        self.plan_seconds, self.won = plan_seconds, False

    def load_data(self, data, category):
        pass

    def reset(self):
        self.won = False

    def plan(self):
        import time

        time.sleep(self.plan_seconds)
        return ["go to fridge 1"]

    def step(self, command):
        self.won = True
        return "", True


def test_a_planner_that_never_returns_is_cut_off_and_the_sample_dropped():
    import time

    from seed_envs.alfworld.generator import solve_and_check

    assert solve_and_check({}, "pick_and_place_simple", _FakeGame(0.0), time_limit_s=5.0) == ["go to fridge 1"]
    start = time.perf_counter()
    assert solve_and_check({}, "pick_and_place_simple", _FakeGame(600.0), time_limit_s=0.5) is None
    assert time.perf_counter() - start < 5.0


# ------------------------------------------------------------------ threads (issue 34)
def _episode(env_kwargs: dict, task_id: str) -> list:
    env = gym.make(ENV_ID, **env_kwargs)
    try:
        obs, info = env.reset(seed=0, options={"task_id": task_id})
        expert = seed_envs.make_expert(env)
        trace = [obs["text"]]
        while True:
            obs, reward, terminated, truncated, info = env.step(expert(obs, info))
            trace.append((obs["text"], reward, info["success"], tuple(info["admissible_actions"] or ())))
            if terminated or truncated:
                return trace
    finally:
        env.close()


def _threads_equal_one_by_one(env_kwargs: dict, n_tasks: int, threads: int) -> None:
    from concurrent.futures import ThreadPoolExecutor

    probe = gym.make(ENV_ID, **env_kwargs)
    ids = list(probe.unwrapped.task_ids())[:n_tasks]
    probe.close()
    alone = [_episode(env_kwargs, t) for t in ids]
    with ThreadPoolExecutor(threads) as pool:
        together = list(pool.map(lambda t: _episode(env_kwargs, t), ids))
    assert together == alone
    assert all(trace[-1][2] for trace in alone)  # every game won: the traces are whole episodes


def test_generated_games_in_threads_play_as_one_by_one(generated_cache):
    """Issue 34: textworld's tatsu parsers were shared by every thread ("pop from empty list"); each
    thread now parses with its own, and fast-downward's translator runs under a lock."""
    need_alfworld()
    _threads_equal_one_by_one({"split": "unseen"}, 8, 4)


def test_real_games_in_threads_play_as_one_by_one(alfworld_data):
    need_alfworld()
    _threads_equal_one_by_one({"split": "valid_seen", "data_dir": str(alfworld_data)}, 8, 8)


def test_an_engine_error_while_loading_is_the_engines_not_a_bad_option(alfworld_data, tmp_path):
    need_alfworld()
    src = find_games(alfworld_data, "valid_seen")[0]
    trial = tmp_path / "json_2.1.1" / "valid_seen" / src.path.parent.parent.name / src.path.parent.name
    trial.mkdir(parents=True)
    data = read_game_file(src.path)
    data["pddl_problem"] = data["pddl_problem"].replace("agent1 - agent", "agent1 - nosuchtype", 1)
    (trial / "game.tw-pddl").write_text(json.dumps(data))
    env = gym.make(ENV_ID, split="test", data_dir=str(tmp_path))
    task_id = env.unwrapped.task_ids()[0]
    with pytest.raises(GameFileError) as e:
        env.reset(options={"task_id": task_id})
    assert "textworld engine failed to load" in str(e.value) and "reset options" not in str(e.value)
    with pytest.raises(ValueError, match="reset options: "):
        env.reset(options={"task_id": "no/such/game"})
