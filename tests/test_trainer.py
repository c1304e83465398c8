"""The SEED trainer end to end on a tiny model: rollouts, skills, config, evaluation, learning, resume."""
from __future__ import annotations

import argparse
import json

import gymnasium as gym
import numpy as np
import pytest
import torch
import toy_env  # noqa: F401  (registers test/Echo-v0)
import yaml

from seed_train.config import SeedConfig
from seed_train.evaluate import evaluate_policy, wilson_interval
from seed_train.rollout import EnvPool, EnvSpec, group_jobs, run_episodes
from seed_train.samples import build_samples, step_advantages
from seed_train.scoring import response_logprobs
from seed_train.skills import (SKILL_HEADER, Skill, analyzer_prompt, parse_skill, rule_based_skill,
                               shuffle_within_groups, skill_augmented_prompt)
from seed_train.trainer import load, train
from wrappers import Step, Trajectory, read_trajectories, render_prompt


@pytest.fixture(scope="module")
def tiny_policy(tiny_path):
    return load(SeedConfig(model=tiny_path, lora=False))


def ezpoints_spec(split="test", fmt="plain"):
    return EnvSpec(env_id="seed/EZPoints-v0", split=split, template="compact", history=1, action_format=fmt,
                   format_penalty=0.1, max_steps=4)


# ---------------------------------------------------------------------------------- config
def test_config_errors_name_the_field(tmp_path):
    for kwargs, name in [({"group_size": 0}, "group_size"), ({"clip_eps": 1.5}, "clip_eps"),
                         ({"skill_source": "magic"}, "skill_source"), ({"dtype": "int8"}, "dtype"),
                         ({"skill_source": "static"}, "static_skills"), ({"resume": str(tmp_path / "nope")}, "resume"),
                         ({"advantage": "ppo"}, "advantage"), ({"temperature": 0.0}, "temperature")]:
        with pytest.raises(ValueError, match=name):
            SeedConfig(**kwargs)
    with pytest.raises(ValueError, match="unknown fields"):
        SeedConfig.from_dict({"learning_rate": 1.0})


def test_config_from_yaml_and_cli_flags_override(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({"env_id": "seed/EZPoints-v0", "group_size": 4, "lora": False}))
    parser = argparse.ArgumentParser()
    SeedConfig.add_arguments(parser)
    args = parser.parse_args(["--config", str(path), "--group-size", "6", "--opd-coef", "0", "--lora-targets", '["q_proj"]'])
    cfg = SeedConfig.from_args(args)
    assert (cfg.env_id, cfg.group_size, cfg.opd_coef, cfg.lora, cfg.lora_targets) == (
        "seed/EZPoints-v0", 6, 0.0, False, ["q_proj"])
    assert cfg.env_default("max_steps") == 8 and cfg.env_default("history") == 2
    assert SeedConfig.from_yaml(path).group_size == 4


# ---------------------------------------------------------------------------------- skills
def _trajectory(success: bool, actions=("4", "*", "3", "="), group="g") -> Trajectory:
    steps = [Step(index=i, observation=f"obs {i}", action=a, reward=0.0, info={}) for i, a in enumerate(actions)]
    return Trajectory(episode_id=f"e{success}", env_id="x", task_id="t", task="Make 12 from the cards.",
                      category="product", split="train", group_id=group, steps=steps).finish(success=success, score=float(success))


def test_analyzer_prompt_and_skill_parsing():
    prompt = analyzer_prompt(_trajectory(False))
    assert "Task: Make 12 from the cards." in prompt and "Outcome: FAILURE" in prompt and "avoidance rule" in prompt
    assert "Step 4: saw: obs 3 | did: =" in prompt
    assert "workflow rule" in analyzer_prompt(_trajectory(True))
    good = 'Sure. {"episode_summary": "won", "episode_skill": "Multiply the two cards when their product is the target."}'
    assert parse_skill(good) == Skill("won", "Multiply the two cards when their product is the target.")
    assert parse_skill('{"episode_summary": "x", "episode_skill": "too short"}') is None  # < 5 words
    assert parse_skill("no json at all") is None
    assert parse_skill('{"episode_skill": "a b c d e"}', min_words=5).text == "a b c d e"


def test_skill_is_inserted_right_after_the_task_line():
    parts = {"intro": "", "task": "Do it.", "observation": "Now here", "admissible": ["a", "b"], "format": "Reply.",
             "history": [], "step": 0, "insert_after_task": "", "template": {}}
    plain = render_prompt(parts)
    with_skill = skill_augmented_prompt(parts, "Always check the goal first, then act.")
    head, tail = plain.split("\n\n", 1)
    assert with_skill == f"{head}\n\n{SKILL_HEADER}\nAlways check the goal first, then act.\n\n{tail}"


def test_rule_based_skills_and_shuffled_control():
    # Rules for the category, never the episode's action list (env "x" has no rules of its own: generic ones).
    win = rule_based_skill(_trajectory(True, ("up", "up", "left")))
    assert win.summary == "Solved the task." and "up" not in win.text.split() and "left" not in win.text
    lose = _trajectory(False, ("x", "up", "up", "up"))
    lose.steps[0].invalid_action = True
    lose.steps[1].info["expert_action"] = "left"
    lost = rule_based_skill(lose)
    assert lost.summary == "Failed: invalid actions." and "required format" in lost.text and "'up'" not in lost.text
    ez = _trajectory(True)  # 4 * 3 = 12 on a product deal
    ez.env_id = "seed/EZPoints-v0"
    assert "multiply" in rule_based_skill(ez).text and not any(ch.isdigit() for ch in rule_based_skill(ez).text)
    skills = [Skill("", f"s{i}") for i in range(6)]
    groups = ["a", "a", "a", "b", "b", "c"]
    out = shuffle_within_groups(skills, groups, np.random.default_rng(0))
    assert out[5] is skills[5]  # a group of one cannot shuffle
    for i in range(5):
        assert out[i] is not skills[i] and groups[skills.index(out[i])] == groups[i]
    assert sorted(s.text for s in out[:3]) == ["s0", "s1", "s2"]


def test_grpo_step_advantages_and_samples(tiny_policy):
    t1, t2, t3 = _trajectory(True, group="g1"), _trajectory(False, group="g1"), _trajectory(True, group="g2")
    t1.return_, t2.return_, t3.return_ = 10.0, 0.0, 10.0
    adv = step_advantages([t1, t2, t3])
    # Group g1 returns [10, 0]: mean 5, unbiased std 7.071 -> +-0.7071 on every step; g2 alone -> 0.
    assert adv[0] == pytest.approx([0.70711] * 4, abs=1e-4) and adv[1] == pytest.approx([-0.70711] * 4, abs=1e-4)
    assert adv[2] == [0.0] * 4
    assert step_advantages([t1, t2], method="grpo_mean")[0] == pytest.approx([5.0] * 4)


# ---------------------------------------------------------------------------------- rollout
def test_rollout_records_exact_tokens_and_logprobs(tiny_policy):
    policy = tiny_policy
    pool = EnvPool(ezpoints_spec())
    panel = list(gym.make("seed/EZPoints-v0", split="test").unwrapped.task_ids()[:2])
    jobs = group_jobs(panel, 3, base_seed=7, prefix="it0")
    trajs = run_episodes(policy.backend, policy.codec, pool, jobs, max_new_tokens=6, seed=1)
    assert [t.task_id for t in trajs] == [panel[0]] * 3 + [panel[1]] * 3
    assert len({t.group_id for t in trajs[:3]}) == 1 and trajs[0].group_id != trajs[3].group_id
    assert {t.seed for t in trajs[:3]} == {7}
    steps = [s for t in trajs for s in t.steps]
    eos = policy.codec.tokenizer.eos_token_id
    for s in steps:  # the text is the decoded ids, less a final eos (special tokens inside it stay)
        ids = s.response_token_ids[:-1] if s.response_token_ids[-1] == eos else s.response_token_ids
        assert policy.codec.tokenizer.decode(ids, skip_special_tokens=False) == s.response
    lp, mask = response_logprobs(policy.model, [s.prompt_token_ids for s in steps], [s.response_token_ids for s in steps])
    for i, s in enumerate(steps):
        assert torch.allclose(lp[i, : len(s.response_token_ids)], torch.tensor(s.response_logprobs), atol=1e-4)
    again = run_episodes(policy.backend, policy.codec, pool, jobs, max_new_tokens=6, seed=1)
    assert [[s.response_token_ids for s in t.steps] for t in again] == [[s.response_token_ids for s in t.steps] for t in trajs]
    skills = [Skill("", "Use both cards and check the target value.")] * 3 + [None] * 3
    samples = build_samples(trajs, step_advantages(trajs), skills, policy.codec)
    assert len(samples) == len(steps)
    assert all((s.teacher_prompt_ids is not None) == (s.episode < 3) for s in samples)


def test_wilson_interval_matches_reference_values():
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.27753), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.23659, 0.76341), abs=1e-4)
    assert wilson_interval(20, 20) == pytest.approx((0.83889, 1.0), abs=1e-4)


def test_evaluation_runs_each_panel_task_once_whatever_the_batch_size(tiny_policy):
    spec = EnvSpec(env_id="test/Echo-v0", split="test", template="compact", history=0, action_format="plain",
                   format_penalty=0.1)
    a = evaluate_policy(tiny_policy.backend, tiny_policy.codec, spec, max_new_tokens=4, batch_size=5)
    b = evaluate_policy(tiny_policy.backend, tiny_policy.codec, spec, max_new_tokens=4, batch_size=32)
    assert a["categories"]["all"]["episodes"] == 32
    assert a["categories"] == b["categories"]


def test_sampled_evaluation_plays_each_task_k_times_with_paired_noise(tiny_policy, tmp_path):
    from seed_train.evaluate import episode_outcomes
    from wrappers import read_trajectories

    spec = EnvSpec(env_id="test/Echo-v0", split="test", template="compact", history=0, action_format="plain",
                   format_penalty=0.1)
    runs = []
    for name, batch in (("a", 7), ("b", 64)):
        path = tmp_path / f"{name}.jsonl"
        summary = evaluate_policy(tiny_policy.backend, tiny_policy.codec, spec, max_new_tokens=4, limit=6,
                                  greedy=False, temperature=1.0, seed=3, samples_per_task=3, batch_size=batch,
                                  trajectories_path=path)
        runs.append((summary, list(read_trajectories(path))))
    (summary, trajs), (_, again) = runs
    assert summary["categories"]["all"]["episodes"] == 18
    assert summary["meta"]["samples_per_task"] == 3 and summary["meta"]["temperature"] == 1.0
    outcomes = episode_outcomes(trajs)
    assert len(outcomes) == 18 and all("#s" in key for key in outcomes)
    # The noise is a function of (seed, task, sample): another batch size draws the same tokens.
    assert [[s.response_token_ids for s in t.steps] for t in trajs] == [[s.response_token_ids for s in t.steps] for t in again]
    # The three samples of a task are not one episode three times (the untrained model's outputs vary).
    by_task = {}
    for t in trajs:
        by_task.setdefault(t.task_id, set()).add(tuple(t.steps[0].response_token_ids))
    assert any(len(v) > 1 for v in by_task.values())
    with pytest.raises(ValueError, match="samples_per_task"):
        evaluate_policy(tiny_policy.backend, tiny_policy.codec, spec, max_new_tokens=4, samples_per_task=2)


def test_sampled_evaluation_draws_from_the_nucleus_it_is_given(tiny_policy, tmp_path):
    """top_p reaches the sampler: with a nucleus of one token every sample of a task plays the greedy episode."""
    from wrappers import read_trajectories

    spec = EnvSpec(env_id="test/Echo-v0", split="test", template="compact", history=0, action_format="plain",
                   format_penalty=0.1)
    greedy, narrow = tmp_path / "greedy.jsonl", tmp_path / "narrow.jsonl"
    evaluate_policy(tiny_policy.backend, tiny_policy.codec, spec, max_new_tokens=4, limit=4, trajectories_path=greedy)
    summary = evaluate_policy(tiny_policy.backend, tiny_policy.codec, spec, max_new_tokens=4, limit=4, greedy=False,
                              temperature=1.0, top_p=1e-6, seed=3, samples_per_task=2, trajectories_path=narrow)
    assert summary["meta"]["top_p"] == 1e-6 and summary["meta"]["temperature"] == 1.0
    played = {t.task_id: [s.response_token_ids for s in t.steps] for t in read_trajectories(greedy)}
    sampled = list(read_trajectories(narrow))
    assert len(sampled) == 8 and all([s.response_token_ids for s in t.steps] == played[t.task_id] for t in sampled)
    # The whole distribution (top_p 1, the same seed) draws other tokens from the untrained model.
    wide = evaluate_policy(tiny_policy.backend, tiny_policy.codec, spec, max_new_tokens=4, limit=4, greedy=False,
                           temperature=1.0, seed=3, samples_per_task=2, trajectories_path=tmp_path / "wide.jsonl")
    assert wide["meta"]["top_p"] == 1.0
    assert any([s.response_token_ids for s in t.steps] != played[t.task_id]
               for t in read_trajectories(tmp_path / "wide.jsonl"))


def test_the_evaluation_decodes_with_the_rollouts_nucleus_where_it_samples(tiny_policy):
    from seed_train.experiment_report import decoding_phrase, recorded_decoding
    from seed_train.trainer import eval_decoding

    sampled = SeedConfig(eval_temperature=1.0, eval_samples=2, top_p=0.9)
    assert eval_decoding(sampled, tiny_policy)["top_p"] == 0.9
    assert eval_decoding(SeedConfig(top_p=0.9), tiny_policy) | {"max_prompt_tokens": 0} == {
        "greedy": True, "temperature": 1.0, "top_p": 1.0, "samples_per_task": 1, "max_prompt_tokens": 0}
    # Records keep the nucleus only where it narrows a sampled evaluation: older records read as before.
    assert recorded_decoding(sampled) == {"eval_temperature": 1.0, "eval_samples": 2, "top_p": 0.9}
    assert recorded_decoding(SeedConfig(eval_temperature=1.0, eval_samples=2)) == {"eval_temperature": 1.0,
                                                                                    "eval_samples": 2}
    assert recorded_decoding(SeedConfig(top_p=0.9)) == {"eval_temperature": 0.0, "eval_samples": 1}
    assert decoding_phrase({"eval_decoding": recorded_decoding(sampled)}) == "sampled (T=1, top_p 0.9, 2 episode(s) per task)"
    assert decoding_phrase({"eval_decoding": {"eval_temperature": 1.0, "eval_samples": 2}}) == \
        "sampled (T=1, 2 episode(s) per task)"


def test_a_local_evaluation_writes_each_episode_as_it_ends_and_a_crash_loses_none(tiny_policy, tmp_path):
    """The backend dies on the third batch: the two batches played before are in the file, whole; a finished
    evaluation's file is in panel order."""
    from wrappers import read_trajectories

    spec = EnvSpec(env_id="test/Echo-v0", split="test", template="compact", history=0, action_format="plain",
                   format_penalty=0.1)

    class DiesOnThirdBatch:
        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def generate(self, prompts, **kwargs):
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("device lost")
            return self.inner.generate(prompts, **kwargs)

    path = tmp_path / "eval.jsonl"
    with pytest.raises(RuntimeError, match="device lost"):
        evaluate_policy(DiesOnThirdBatch(tiny_policy.backend), tiny_policy.codec, spec, max_new_tokens=4,
                        batch_size=3, trajectories_path=path)
    written = list(read_trajectories(path))
    assert len(written) == 6 and all(t.steps for t in written)  # Echo episodes take one step
    evaluate_policy(tiny_policy.backend, tiny_policy.codec, spec, max_new_tokens=4, batch_size=5, limit=12,
                    trajectories_path=path)
    assert [t.seed for t in read_trajectories(path)] == list(range(12))
    assert not path.with_name(path.name + ".tmp").exists()


def test_eval_samples_need_sampling():
    with pytest.raises(ValueError, match="eval_samples"):
        SeedConfig(eval_samples=3)
    with pytest.raises(ValueError, match="eval_temperature"):
        SeedConfig(eval_temperature=-1.0)
    assert SeedConfig(eval_samples=3, eval_temperature=0.7).eval_samples == 3


# ---------------------------------------------------------------------------------- training
def echo_config(tmp_path, tiny_path, **overrides) -> SeedConfig:
    base = dict(env_id="test/Echo-v0", model=tiny_path, lora=False, template="compact", history=0,
                action_format="plain", max_new_tokens=4, skill_max_new_tokens=8, analyzer_retries=0,
                stage1_demos=0, iterations=2, tasks_per_iteration=4, group_size=4, lr=3e-3, minibatch_size=16,
                kl_coef=0.0, eval_before=False, eval_after=False, output_dir=str(tmp_path / "run"), seed=0)
    return SeedConfig(**{**base, **overrides})


@pytest.mark.parametrize("threads", [1, 2])
def test_tiny_model_learns_echo(tmp_path, tiny_path, threads):
    """Stage 1 on 32 expert demos (80 epochs, lr 2e-3) + 2 SEED iterations (lr 3e-4) take the greedy
    success on Echo's unseen panel (32 tasks) from <= 0.15 (measured 0.0) to >= 0.6, at 1 and 2 torch
    threads (the run sets them, and restores the caller's count after). Measured at 1 thread over
    training seeds 0-3: 1.0 after Stage 1 alone on every seed, 1.0 after the two iterations (the 95%
    intervals, [0, 0.11] and [0.89, 1], do not overlap). The gain is Stage 1's: this test pins the
    pipeline, not a SEED result. The old setting (40 epochs at lr 5e-3) gave 1.0, 0.5, 0.75, 0.75 over
    the same seeds: too close to the threshold to hold."""
    cfg = echo_config(tmp_path, tiny_path, stage1_demos=32, stage1_epochs=80, stage1_lr=2e-3, stage1_batch_size=8,
                      eval_before=True, eval_after=True, kl_coef=0.01, lr=3e-4, threads=threads)
    results = train(cfg, say=lambda _: None)
    before = results["before"]["categories"]["all"]["success"]
    after = results["after"]["categories"]["all"]["success"]
    assert before <= 0.15 and after >= 0.6, (before, after)
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [0, 1]
    for key in ("success", "return", "length", "loss", "pg_loss", "kl", "skill_valid_rate", "skill_words",
                "skill_answers", "skill_answers_cut", "rollout_s", "analyze_s", "score_s", "update_s", "tokens_per_s",
                "format_error_rate"):
        assert key in metrics[-1], key
    for m in metrics:  # one answer per episode at least (retries add more); the cut ones among them
        assert m["skill_answers"] >= m["skills_written"] and 0 <= m["skill_answers_cut"] <= m["skill_answers"]
        if cfg.analyzer_retries == 0:
            assert m["skill_answers"] == m["skills_written"]
    assert any(k.startswith("success/") for k in metrics[-1])  # success by category
    # The process's memory high-water mark: at least the model's weights, never falling.
    assert 100 < metrics[0]["peak_rss_mb"] <= metrics[1]["peak_rss_mb"]
    trajs = list(read_trajectories(tmp_path / "run" / "trajectories.jsonl"))
    assert len(trajs) == 2 * 4 * 4 and all(t.steps[0].response_token_ids for t in trajs)
    assert (tmp_path / "run" / "curves.png").stat().st_size > 1000


@pytest.mark.parametrize("extra", [{}, {"lora": True, "stage1_demos": 8, "kl_coef": 0.01, "skill_source": "frozen"}],
                         ids=["full", "lora+stage1+kl"])
def test_resume_gives_the_same_next_update(tmp_path, tiny_path, extra):
    full = echo_config(tmp_path / "a", tiny_path, iterations=2, checkpoint_every=1, **extra)
    train(full, say=lambda _: None)
    first = [json.loads(line) for line in (tmp_path / "a" / "run" / "metrics.jsonl").read_text().splitlines()]
    ckpt = tmp_path / "a" / "run" / "checkpoints" / "iter0000"
    resumed = echo_config(tmp_path / "a", tiny_path, iterations=2, checkpoint_every=1, resume=str(ckpt), **extra)
    train(resumed, say=lambda _: None)
    second = [json.loads(line) for line in (tmp_path / "a" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in second] == [0, 1]
    for key in ("loss", "pg_loss", "success", "return", "grad_norm") + (("kl",) if "kl_coef" in extra else ()):
        assert second[1][key] == pytest.approx(first[1][key], abs=1e-6), key
    assert len(list(read_trajectories(tmp_path / "a" / "run" / "trajectories.jsonl"))) == 2 * 16  # no duplicates


@pytest.mark.parametrize("overrides", [
    {"opd_coef": 0.0},
    {"skill_source": "shuffled"},
    {"skill_source": "shuffled_tasks"},
    {"skill_source": "frozen"},
    {"skill_source": "empty", "opd_gate": "constant"},
    {"skill_source": "none"},
    {"advantage": "gigpo", "kl_coef": 0.01},
    # the released code's conventions switched off: episode statistics and penalty, env reward, no dual clip
    {"group_stats": "episodes", "format_penalty_on": "episode", "reward_mode": "env", "dual_clip_c": 0.0},
    {"stage1_demos": 4, "annotator_model": "TINY", "lora": True},
])
def test_baselines_and_controls_run(tmp_path, tiny_path, overrides):
    overrides = {k: tiny_path if v == "TINY" else v for k, v in overrides.items()}
    cfg = echo_config(tmp_path, tiny_path, iterations=1, **overrides)
    train(cfg, say=lambda _: None)
    (m,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    uses_skills = cfg.opd_coef > 0 and cfg.skill_source != "none"
    assert ("skill_valid_rate" in m) == uses_skills
    trajs = list(read_trajectories(tmp_path / "run" / "trajectories.jsonl"))
    if cfg.skill_source == "empty":  # a valid skill with no text: every token gets the OPD term, with g = 1
        assert {t.meta["skill"] for t in trajs} == {""} and m["skill_valid_rate"] == 1.0
        assert m["mean_gate"] == 1.0 and m["opd_tokens"] > 0
    if not uses_skills:
        assert all(t.meta["skill"] is None for t in trajs) and "opd_term" not in m
    # Echo's reward (reward_mode): 10 on success by default, the env's own 1 with reward_mode env
    assert {t.return_ for t in trajs if t.success} <= {10.0 if cfg.reward_mode == "success" else 1.0}


def test_static_skill_library(tmp_path, tiny_path):
    lib = tmp_path / "skills.json"
    lib.write_text(json.dumps({"default": "Read the word after Say and repeat it exactly."}))
    cfg = echo_config(tmp_path, tiny_path, iterations=1, skill_source="static", static_skills=str(lib))
    train(cfg, say=lambda _: None)
    trajs = list(read_trajectories(tmp_path / "run" / "trajectories.jsonl"))
    assert {t.meta["skill"] for t in trajs} == {"Read the word after Say and repeat it exactly."}
    (m,) = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert m["skill_valid_rate"] == 1.0 and m["opd_tokens"] > 0
    assert 0.0 < m["mean_gate"] < 1.0 and 0.0 <= m["frac_delta_pos"] <= 1.0
    assert {"gate_adv_cov_pooled", "gate_adv_cov_context"} <= m.keys()


def test_quickstart_command_runs_end_to_end_on_a_tiny_model(tmp_path, tiny_path, capsys):
    from seed_train.cli import main_train

    code = main_train(["quickstart", "--model", tiny_path, "--env-id", "test/Echo-v0", "--iterations", "1",
                       "--stage1-demos", "4", "--eval-limit", "4", "--output-dir", str(tmp_path / "qs")])
    assert code == 0
    out = capsys.readouterr().out
    assert "before training" in out and "after training" in out and "success" in out
    assert (tmp_path / "qs" / "eval_before.md").exists() and (tmp_path / "qs" / "eval_after.json").exists()
    # The trained policy is saved as a plain HF folder (LoRA merged) that seed-eval loads.
    from seed_train.cli import main_eval

    assert main_eval(["--model", str(tmp_path / "qs" / "final"), "--env", "test/Echo-v0", "--limit", "4",
                      "--action-format", "plain", "--history", "0", "--out", str(tmp_path / "ev")]) == 0


def test_seed_eval_command_writes_reports_and_aggregates_seeds(tmp_path, tiny_path):
    from seed_train.cli import main_eval

    out = tmp_path / "ev"
    code = main_eval(["--model", tiny_path, "--env", "test/Echo-v0", "--split", "test", "--seeds", "0", "1",
                      "--sample", "--limit", "8", "--action-format", "plain", "--history", "0", "--out", str(out)])
    assert code == 0
    agg = json.loads((out / "eval_seeds.json").read_text())
    assert agg["all"]["seeds"] == 2 and 0.0 <= agg["all"]["success_mean"] <= 1.0
    assert "| all | 8 |" in (out / "eval_seed0.md").read_text()


def test_a_minibatch_without_gradient_signal_skips_the_pass_and_matches_it(tiny_path, monkeypatch):
    """All advantages 0, no KL, no OPD (every episode of every group failed): the update skips forward and
    backward, and AdamW (weight decay, moments) leaves the same weights and state as the full pass."""
    import copy

    import seed_train.trainer as trainer_module
    from seed_train.trainer import update_policy

    cfg = SeedConfig(model=tiny_path, lora=False, kl_coef=0.0, opd_coef=0.01, minibatch_size=4, lr=1e-2)
    with torch.random.fork_rng(devices=[]):
        policy = load(cfg)
    spec = EnvSpec(env_id="test/Echo-v0", split="test", template="compact", history=0, action_format="plain",
                   format_penalty=0.1, max_steps=2)
    pool = EnvPool(spec)
    try:
        trajectories = run_episodes(policy.backend, policy.codec, pool,
                                    group_jobs(list(gym.make("test/Echo-v0", split="test").unwrapped.task_ids()[:2]),
                                               3, base_seed=1, prefix="it0"),
                                    max_new_tokens=4, seed=2)
    finally:
        pool.close()
    zero = [[0.0] * len(t.steps) for t in trajectories]
    samples = build_samples(trajectories, zero, [None] * len(trajectories), policy.codec)
    assert len(samples) > cfg.minibatch_size  # several minibatches
    no_scores = {"teacher_logprobs": None, "ref_logprobs": None}
    results = {}
    calls = []
    real = trainer_module.response_logprobs
    monkeypatch.setattr(trainer_module, "response_logprobs", lambda *a, **k: calls.append(1) or real(*a, **k))
    for skip in (True, False):
        if not skip:
            monkeypatch.setattr(trainer_module, "no_gradient_signal", lambda *a: False)
        model = copy.deepcopy(policy.model)
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr)
        calls.clear()
        update_policy(model, optimizer, samples, no_scores, cfg, np.random.default_rng(0))
        results[skip] = ([p.detach().clone() for p in model.parameters()],
                         [s["exp_avg_sq"].clone() for s in optimizer.state.values()], len(calls))
    (w_skip, v_skip, n_skip), (w_full, v_full, n_full) = results[True], results[False]
    assert n_skip == 0 and n_full > 0
    assert len(v_skip) == len(v_full) > 0  # every parameter was stepped both ways
    assert all(torch.equal(a, b) for a, b in zip(w_skip, w_full))
    assert all(torch.equal(a, b) for a, b in zip(v_skip, v_full))
    # and weight decay did act: the weights moved from the start
    assert any(not torch.equal(a, b) for a, b in zip(w_skip, policy.model.parameters()))
