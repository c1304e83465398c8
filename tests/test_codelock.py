"""CodeLock, the positive-control env: hidden family codes, the reveal after a wrong try, its hindsight
rules (the family's code), the static library and the wrong rule (wrong in every position)."""
from __future__ import annotations

import hashlib

import gymnasium as gym
import pytest

import seed_envs
from seed_envs.codelock.env import ALPHABET, FAMILIES, PANELS, family_code
from seed_envs.codelock.hindsight import hindsight_rule, static_library, wrong_code, wrong_rule
from seed_envs.hindsight import EpisodeRecord


def test_codes_are_a_hash_of_the_family_name():
    for family in ("amber", "cedar", "sable"):
        digest = hashlib.sha256(f"codelock/{family}".encode()).digest()
        assert family_code(family) == tuple("ABCDEF"[b % 6] for b in digest[:3])
    assert len(set(FAMILIES)) == 64
    trained, unseen, warmup = set(PANELS["train"][0]), set(PANELS["unseen"][0]), set(PANELS["warmup"][0])
    assert trained == set(PANELS["test"][0]) and not trained & unseen and not warmup & (trained | unseen)
    assert not set(PANELS["train"][1]) & set(PANELS["test"][1])  # test: other places of the same families
    # warmup: every lock its own code (nothing to memorise per family); elsewhere the family's code
    from seed_envs.codelock.env import lock_code

    warm = [lock_code("acorn", place, "warmup") for place in PANELS["warmup"][1]]
    assert len(set(warm)) > 4 and lock_code("cedar", "mill hatch", "test") == family_code("cedar")
    env = gym.make("seed/CodeLock-v0", split="warmup")
    env.reset(options={"task_id": "codelock/warmup/acorn/mill-hatch"})
    assert env.unwrapped.code == family_code("acorn@mill hatch")


def play(env, letters):
    obs, info = env.reset(options={"task_id": env.unwrapped.task_ids()[0]})
    out = (obs, 0.0, False, False, info)
    for a in letters:
        out = env.step(a)
    return out


def test_a_right_code_opens_a_wrong_one_reveals_the_family_code():
    env = gym.make("seed/CodeLock-v0", split="test", reward_mode="success")
    task = env.unwrapped.task_ids()[0]
    family = task.split("/")[2]
    code = family_code(family)
    obs, reward, terminated, truncated, info = play(env, [code[0].lower(), f" {code[1]} ", code[2]])
    assert terminated and info["success"] and reward == 10.0 and info["score"] == 1.0
    assert f"The {family} lock opens." in obs["text"]
    wrong = [ALPHABET[(ALPHABET.index(code[0]) + 1) % 6], code[1], code[2]]
    obs, reward, terminated, truncated, info = play(env, wrong)
    assert terminated and not info["success"] and reward == 0.0 and info["score"] == pytest.approx(2 / 3)
    assert f"The {family} lock opens with {' '.join(code)}." in obs["text"]
    # junk: invalid, nothing entered, and never the code shown before the lock is tried
    obs, info = env.reset(options={"task_id": task})
    obs, _, terminated, _, info = env.step("open it")
    assert info["invalid_action"] and not terminated and "Code so far: _ _ _" in obs["text"]
    assert " ".join(code) not in obs["text"] and info["admissible_actions"] == list(ALPHABET)


def test_expert_opens_every_lock_of_every_panel():
    for split in ("train", "test", "unseen", "warmup"):
        env = gym.make("seed/CodeLock-v0", split=split)
        expert = seed_envs.make_expert(env)
        for task in env.unwrapped.task_ids()[:: 7]:
            obs, info = env.reset(options={"task_id": task})
            done = False
            while not done:
                obs, _, terminated, truncated, info = env.step(expert(obs, info))
                done = terminated or truncated
            assert info["success"], task


def record(success, actions, final, category="cedar", invalid=None):
    return EpisodeRecord(task="Open the cedar lock on the mill hatch.", category=category, success=success,
                         actions=actions, observations=["o"] * len(actions),
                         invalid=invalid or [False] * len(actions), final_observation=final)


def test_hindsight_states_the_family_code_from_a_success_or_the_reveal():
    code = " ".join(family_code("cedar"))
    won = hindsight_rule(record(True, list(family_code("cedar")), "The cedar lock opens."))
    assert won.kind == "workflow/code" and f"cedar lock opens with {code};" in won.rule
    lost = hindsight_rule(record(False, ["A", "A", "A"], f"Wrong code A A A. The cedar lock opens with {code}."))
    assert lost.kind == "avoid/wrong_code" and f"opens with {code};" in lost.rule
    assert hindsight_rule(record(False, ["open"], "Invalid action", invalid=[True])).kind == "avoid/invalid"
    assert hindsight_rule(record(False, ["A"], "The cedar lock on the mill hatch.")).kind == "avoid/unfinished"
    assert seed_envs.hindsight_rule_for("seed/CodeLock-v0") is hindsight_rule


def test_static_library_and_wrong_rule():
    lib = static_library()
    assert len(lib) == 32 and " ".join(family_code("cedar")) in lib["cedar"]
    for family in ("cedar", "amber", "umber"):
        right, wrong = family_code(family), wrong_code(family)
        assert all(a != b for a, b in zip(right, wrong))  # wrong in every position
        text = wrong_rule(lib[family], family)
        assert text == lib[family].replace(" ".join(right), " ".join(wrong))  # same form and length
        assert wrong_rule("Enter one letter per step and stop.", family).endswith(
            f"opens with {' '.join(wrong)}; enter those letters in order, one per step.")
    assert seed_envs.wrong_rule_for("seed/CodeLock-v0") is wrong_rule


def test_stage1_split_draws_the_demonstrations_from_the_warmup_families(monkeypatch):
    """``--stage1-split warmup``: Stage 1's demos come from families Stage 2 and ``test`` never show."""
    import seed_train.trainer as trainer
    from seed_envs.codelock.env import WARMUP_FAMILIES
    from seed_train.config import SeedConfig
    from seed_train.preflight import check_run_setup

    seen = {}

    class Drawn(Exception):
        pass

    def capture(spec, tasks, seed):
        seen.update(split=spec.split, tasks=list(tasks))
        raise Drawn

    monkeypatch.setattr(trainer, "collect_demonstrations", capture)
    cfg = SeedConfig(env_id="seed/CodeLock-v0", stage1_split="warmup", stage1_demos=12)
    with pytest.raises(Drawn):
        trainer.run_stage1(policy=None, cfg=cfg, say=lambda _: None)
    assert seen["split"] == "warmup" and len(seen["tasks"]) == 12
    assert {t.split("/")[2] for t in seen["tasks"]} <= set(WARMUP_FAMILIES)
    with pytest.raises(ValueError, match="stage1_split"):
        check_run_setup(SeedConfig(env_id="seed/CodeLock-v0", stage1_split="nope", model="smollm2-135m"))


def test_num_families_narrows_train_and_test_only():
    env = gym.make("seed/CodeLock-v0", split="test", num_families=8)
    assert len(env.unwrapped.task_ids()) == 16 and {t.split("/")[2] for t in env.unwrapped.task_ids()} == set(
        PANELS["test"][0][:8])
    assert len(gym.make("seed/CodeLock-v0", split="unseen", num_families=8).unwrapped.task_ids()) == 64
    for bad in (0, 33, "8", True):
        with pytest.raises(ValueError, match="num_families"):
            gym.make("seed/CodeLock-v0", num_families=bad)
