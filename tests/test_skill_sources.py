"""The skill sources (seed_train.skill_sources) and the controls' wiring: which skill text each episode
gets, which weights the analyzer runs with, what the teacher prompt holds, and the gate diagnostics."""
from __future__ import annotations

import copy
import json
import math
import re

import gymnasium as gym
import numpy as np
import pytest
import torch
import toy_env  # noqa: F401  (registers test/Echo-v0)

from seed_train.config import BASELINES, SeedConfig, SetupError
from seed_train.generation import Generation, HFGenerateBackend
from seed_train.codec import encode_prompt
from seed_train.rollout import EnvPool, RolloutStats, group_jobs
from seed_train.samples import StepSample, build_samples, step_advantages
from seed_train.skill_sources import (EmptySkills, FrozenAnalyzer, NoSkills, OnPolicyAnalyzer, ShuffledSkills,
                                      StaticLibrary, derange_across_tasks, make_skill_source)
from seed_train.skills import SKILL_HEADER, Skill, analyzer_prompt
from seed_train.trainer import _play_and_score, env_spec, gate_diagnostics, load
from wrappers import Step, Trajectory, render_prompt

TASKS, GROUP = 3, 3  # three tasks, one GRPO group of three episodes each


def fresh_policy(tiny_path):
    with torch.random.fork_rng(devices=[]):  # load() seeds torch; keep the global RNG as it was
        return load(SeedConfig(model=tiny_path, lora=False))


def cfg_for(tiny_path, **overrides) -> SeedConfig:
    base = dict(model=tiny_path, lora=False, env_id="test/Echo-v0", template="compact", history=0,
                action_format="plain", analyzer_retries=0, skill_max_new_tokens=8, tasks_per_iteration=TASKS,
                group_size=GROUP, kl_coef=0.0, stage1_demos=0)
    return SeedConfig(**{**base, **overrides})


def marker(task: int, member: int) -> str:
    return f"ep{task}x{member}"


def batch() -> list[Trajectory]:
    """TASKS groups of GROUP one-step episodes; each episode's observation names it (``epTxM``)."""
    out = []
    for task in range(TASKS):
        for member in range(GROUP):
            step = Step(index=0, observation=marker(task, member), action="up", reward=0.0)
            out.append(Trajectory(episode_id=marker(task, member), env_id="x", task_id=f"task{task}", task="Say it.",
                                  category=f"cat{task}", split="train", group_id=f"g{task}",
                                  steps=[step]).finish(success=False, score=0.0))
    return out


def skill_marker(skill: Skill) -> str:
    return re.search(r"ep\d+x\d+", skill.text).group(0)


class SnapshotBackend:
    """A generation backend with its own copy of the weights, taken at ``sync_weights`` (as the vLLM engine
    keeps one). It answers every analyzer prompt with a valid skill naming the episode the prompt shows,
    and records which weights each generate call ran with."""

    def __init__(self, tokenizer, model):
        self.tokenizer = tokenizer
        self.generated_with: list[dict[str, torch.Tensor]] = []
        self.sync_weights(model)

    def sync_weights(self, model) -> None:
        self.weights = {k: v.detach().clone() for k, v in model.state_dict().items()}

    def generate(self, prompts, **_):
        self.generated_with.append(self.weights)
        out = []
        for p in prompts:
            shown = re.search(r"saw: (ep\d+x\d+)", self.tokenizer.decode(p)).group(1)
            text = json.dumps({"episode_summary": "x", "episode_skill": f"Remember what {shown} showed the agent"})
            out.append(Generation(list(p), [0], [0.0], text, True))
        return out


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def big_update(model) -> None:
    """One SGD step at lr 50 on a fixed sequence: θ_k far from θ_0 (no randomness involved)."""
    ids = torch.arange(3, 40)[None, :]
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=50.0)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    model.eval()


# ---------------------------------------------------------------------------------- which skill text
def test_on_policy_gives_each_episode_the_analyzers_skill_for_it(tiny_path):
    policy = fresh_policy(tiny_path)
    policy.backend = SnapshotBackend(policy.codec.tokenizer, policy.model)
    source = make_skill_source(cfg_for(tiny_path), policy.model)
    assert isinstance(source, OnPolicyAnalyzer) and source.produces_skills
    trajs = batch()
    skills = source.skills(trajs, policy, seed=0)
    assert [skill_marker(s) for s in skills] == [t.episode_id for t in trajs]


def test_shuffled_gives_another_member_of_the_same_group(tiny_path):
    policy = fresh_policy(tiny_path)
    policy.backend = SnapshotBackend(policy.codec.tokenizer, policy.model)
    source = make_skill_source(cfg_for(tiny_path, skill_source="shuffled"), policy.model)
    assert isinstance(source, ShuffledSkills) and source.kind == "shuffled"
    trajs = batch()
    donors = [skill_marker(s) for s in source.skills(trajs, policy, seed=3)]
    by_id = {t.episode_id: t for t in trajs}
    for t, donor in zip(trajs, donors):
        assert donor != t.episode_id and by_id[donor].group_id == t.group_id
    for g in range(TASKS):  # a permutation within each group: every skill used once
        assert sorted(donors[g * GROUP:(g + 1) * GROUP]) == [marker(g, m) for m in range(GROUP)]


def test_shuffled_tasks_gives_a_skill_from_a_different_task(tiny_path):
    policy = fresh_policy(tiny_path)
    policy.backend = SnapshotBackend(policy.codec.tokenizer, policy.model)
    source = make_skill_source(cfg_for(tiny_path, skill_source="shuffled_tasks"), policy.model)
    assert isinstance(source, ShuffledSkills) and source.kind == "shuffled_tasks"
    trajs = batch()
    by_id = {t.episode_id: t for t in trajs}
    for seed in range(5):
        donors = [by_id[skill_marker(s)] for s in source.skills(trajs, policy, seed=seed)]
        assert all(d.task_id != t.task_id for t, d in zip(trajs, donors))
        # a derangement of the task ids: each task's episodes draw from one other task, each task donates once
        source_task = {t.task_id: {d.task_id for tt, d in zip(trajs, donors) if tt.task_id == t.task_id} for t in trajs}
        assert all(len(v) == 1 for v in source_task.values())
        assert sorted(next(iter(v)) for v in source_task.values()) == sorted(source_task)
        assert len({d.episode_id for d in donors}) == len(trajs)  # equal task sizes: every skill used once


def test_shuffled_tasks_needs_two_tasks():
    skills = [Skill("", f"rule {i}") for i in range(3)]
    with pytest.raises(SetupError, match="skill_source"):
        derange_across_tasks(skills, ["t", "t", "t"], np.random.default_rng(0))
    with pytest.raises(ValueError, match="skill_source"):
        SeedConfig(skill_source="shuffled_tasks", tasks_per_iteration=1)
    # unequal task sizes: still always another task's skill (None entries travel like any other)
    out = derange_across_tasks([skills[0], None, skills[2]], ["a", "b", "b"], np.random.default_rng(1))
    assert out[0] is None or out[0] is skills[2]
    assert out[1] is skills[0] and out[2] is skills[0]


def test_static_gives_the_library_entry_by_category(tiny_path, tmp_path):
    lib = tmp_path / "skills.json"
    lib.write_text(json.dumps({"cat1": "Say the word you are shown and nothing else.",
                               "default": "Read the task line first, then act on it."}))
    source = make_skill_source(cfg_for(tiny_path, skill_source="static", static_skills=str(lib)))
    assert isinstance(source, StaticLibrary)
    texts = [s.text for s in source.skills(batch(), policy=None, seed=0)]
    assert texts == ["Read the task line first, then act on it."] * GROUP + [
        "Say the word you are shown and nothing else."] * GROUP + ["Read the task line first, then act on it."] * GROUP
    lib.write_text(json.dumps(["not", "a", "mapping"]))
    with pytest.raises(SetupError, match="static_skills"):
        make_skill_source(cfg_for(tiny_path, skill_source="static", static_skills=str(lib)))


def test_empty_skill_teacher_prompt_is_the_student_prompt_plus_the_header(tiny_path):
    policy = fresh_policy(tiny_path)
    source = make_skill_source(cfg_for(tiny_path, skill_source="empty"))
    assert isinstance(source, EmptySkills)
    parts = {"intro": "", "task": "Repeat the word you are shown.", "observation": "Say: up",
             "admissible": ["up", "down"], "format": "Reply with the word.", "history": [], "step": 0,
             "insert_after_task": "", "template": {}}
    student = render_prompt(parts)
    step = Step(index=0, observation="Say: up", action="up", reward=0.0, prompt=student, prompt_parts=parts,
                prompt_token_ids=encode_prompt(policy.codec, student), response_token_ids=[5, 6],
                response_logprobs=[-1.0, -2.0])
    traj = Trajectory(episode_id="e", env_id="x", task_id="t", task=parts["task"], category="c", split="train",
                      group_id="g", steps=[step]).finish(success=True, score=1.0)
    skills = source.skills([traj], policy, seed=0)
    assert skills == [Skill("", "")]
    (sample,) = build_samples([traj], [[0.0]], skills, policy.codec)
    head, tail = student.split("\n\n", 1)  # the task paragraph, then the rest
    assert sample.teacher_prompt_ids == encode_prompt(policy.codec, f"{head}\n\n{SKILL_HEADER}\n\n{tail}")
    assert sample.prompt_ids == encode_prompt(policy.codec, student)


@pytest.mark.parametrize("overrides", [{"skill_source": "none"}, {"opd_coef": 0.0}, {"opd_coef": 0.0, "skill_source": "empty"}])
def test_no_skills_means_no_teacher_pass(tiny_path, overrides):
    policy = fresh_policy(tiny_path)
    cfg = cfg_for(tiny_path, max_new_tokens=4, **overrides)
    source = make_skill_source(cfg, policy.model)
    assert isinstance(source, NoSkills) and not source.produces_skills
    pool = EnvPool(env_spec(cfg, "train"))
    try:
        jobs = group_jobs(["echo/train/0000", "echo/train/0001"], 2, base_seed=1, prefix="it0")
        played = _play_and_score(policy, cfg, pool, jobs, np.random.default_rng(0), RolloutStats(), source)
    finally:
        pool.close()
    assert played.skills == [None] * 4 and all(t.meta["skill"] is None for t in played.trajectories)
    assert played.scored["teacher_logprobs"] is None
    assert played.samples and all(s.teacher_prompt_ids is None for s in played.samples)
    assert gate_diagnostics(played.samples, played.scored, cfg) == {}
    assert set(played.times) == {"rollout_s", "analyze_s", "score_s"}


def test_empty_skill_runs_the_teacher_pass(tiny_path):
    policy = fresh_policy(tiny_path)
    cfg = cfg_for(tiny_path, max_new_tokens=4, skill_source="empty")
    pool = EnvPool(env_spec(cfg, "train"))
    try:
        jobs = group_jobs(["echo/train/0000", "echo/train/0001"], 2, base_seed=1, prefix="it0")
        played = _play_and_score(policy, cfg, pool, jobs, np.random.default_rng(0), RolloutStats(),
                                 make_skill_source(cfg))
    finally:
        pool.close()
    assert [t.meta["skill"] for t in played.trajectories] == [""] * 4
    assert played.scored["teacher_logprobs"] is not None
    assert all(s.teacher_prompt_ids is not None for s in played.samples)
    assert {"gate_adv_cov_pooled", "gate_adv_cov_context"} == set(gate_diagnostics(played.samples, played.scored, cfg))


# ---------------------------------------------------------------------------------- which weights
def test_frozen_analyzes_with_theta0_on_a_backend_with_its_own_weights(tiny_path):
    """As with vLLM: the backend holds a copy of the weights, so the frozen source must sync θ_0 into it."""
    policy = fresh_policy(tiny_path)
    theta0 = state(policy.model)
    frozen = make_skill_source(cfg_for(tiny_path, skill_source="frozen"), policy.model)
    on_policy = make_skill_source(cfg_for(tiny_path), policy.model)
    assert isinstance(frozen, FrozenAnalyzer)
    big_update(policy.model)
    theta_k = state(policy.model)
    assert not same_weights(theta0, theta_k)
    policy.backend = SnapshotBackend(policy.codec.tokenizer, policy.model)  # the iteration's sync: the engine has θ_k
    frozen.skills(batch(), policy, seed=0)
    assert same_weights(policy.backend.generated_with[-1], theta0)
    assert same_weights(state(policy.model), theta_k)  # the model has θ_k back ...
    assert same_weights(policy.backend.weights, theta_k)  # ... and so has the engine
    on_policy.skills(batch(), policy, seed=0)
    assert same_weights(policy.backend.generated_with[-1], theta_k)


class LogitRecorder(HFGenerateBackend):
    """The HF backend, recording the next-token logits of the first prompt at every generate call."""

    def generate(self, prompts, **kwargs):
        with torch.no_grad():
            self.logits = self.model(input_ids=torch.tensor([list(prompts[0])])).logits[0, -1].clone()
        return super().generate(prompts, **kwargs)


def test_frozen_analyzer_logits_are_theta0s_and_on_policy_thetaks(tiny_path):
    policy = fresh_policy(tiny_path)
    theta0_model = copy.deepcopy(policy.model)
    frozen = make_skill_source(cfg_for(tiny_path, skill_source="frozen"), policy.model)
    big_update(policy.model)
    policy.backend = LogitRecorder(policy.model, policy.codec.tokenizer)
    prompt = torch.tensor([encode_prompt(policy.codec, analyzer_prompt(batch()[0]))])  # the first analyzer prompt
    with torch.no_grad():
        at_theta0 = theta0_model(input_ids=prompt).logits[0, -1]
        at_theta_k = policy.model(input_ids=prompt).logits[0, -1]
    assert not torch.allclose(at_theta0, at_theta_k, atol=1e-3)
    frozen.skills(batch(), policy, seed=0)
    torch.testing.assert_close(policy.backend.logits, at_theta0)
    OnPolicyAnalyzer(cfg_for(tiny_path)).skills(batch(), policy, seed=0)
    torch.testing.assert_close(policy.backend.logits, at_theta_k)


# ---------------------------------------------------------------------------------- the analyzer pass
class FlakyAnalyzer:
    """Answers an analyzer prompt with a valid skill only from its ``valid_from``-th attempt on (per episode),
    and records every call's temperature, episodes and row keys."""

    def __init__(self, tokenizer, valid_from: dict[str, int], cut: frozenset[str] = frozenset()):
        self.tokenizer, self.valid_from, self.cut = tokenizer, valid_from, cut  # cut: invalid answers hit the budget
        self.calls: list[dict] = []
        self.attempts: dict[str, int] = {}

    def generate(self, prompts, *, temperature, row_keys=None, **_):
        shown = [re.search(r"saw: (ep\d+x\d+)", self.tokenizer.decode(p)).group(1) for p in prompts]
        self.calls.append({"temperature": temperature, "episodes": shown, "row_keys": row_keys})
        out = []
        for p, ep in zip(prompts, shown):
            self.attempts[ep] = self.attempts.get(ep, 0) + 1
            valid = self.attempts[ep] > self.valid_from.get(ep, 0)
            skill = f"Remember what {ep} showed the agent"
            text = json.dumps({"episode_summary": "x", "episode_skill": skill}) if valid else "{oops"
            out.append(Generation(list(p), [0], [0.0], text, valid or ep not in self.cut))
        return out


@pytest.mark.parametrize("analyzer_temperature, expected", [(None, 0.9), (0.6, 0.6)])
def test_analyzer_retries_only_unparsed_episodes_at_the_analyzer_temperature(tiny_path, analyzer_temperature, expected):
    from seed_train.skill_sources import generate_skills

    policy = fresh_policy(tiny_path)
    trajs = batch()
    # ep0x1 parses at the second attempt, ep1x2 at the third, ep2x0 never (2 retries: 3 attempts in all)
    backend = FlakyAnalyzer(policy.codec.tokenizer, {"ep0x1": 1, "ep1x2": 2, "ep2x0": 99})
    cfg = cfg_for(tiny_path, analyzer_retries=2, temperature=0.9, analyzer_temperature=analyzer_temperature)
    skills = generate_skills(backend, policy.codec, trajs, cfg, seed=0)
    assert [c["episodes"] for c in backend.calls] == [[t.episode_id for t in trajs], ["ep0x1", "ep1x2", "ep2x0"],
                                                      ["ep1x2", "ep2x0"]]
    assert {c["temperature"] for c in backend.calls} == {expected}
    index = {t.episode_id: i for i, t in enumerate(trajs)}
    # a retried episode keeps its key, so a backend can reuse its prompt's KV
    assert [c["row_keys"] for c in backend.calls[1:]] == [[("analyzer", index[e]) for e in c["episodes"]]
                                                         for c in backend.calls[1:]]
    assert [s is None for s in skills] == [t.episode_id == "ep2x0" for t in trajs]


def test_the_analyzer_pass_reports_every_answer_and_which_stopped_at_the_budget(tiny_path):
    from seed_train.skill_sources import AnalyzerAnswer, generate_skills

    policy = fresh_policy(tiny_path)
    trajs = batch()
    # ep0x1 parses at its second attempt; ep2x0 never, its answers cut at the budget; ep1x2 never, stopping by itself
    backend = FlakyAnalyzer(policy.codec.tokenizer, {"ep0x1": 1, "ep1x2": 99, "ep2x0": 99}, cut=frozenset({"ep2x0"}))
    answers: list[AnalyzerAnswer] = []
    skills = generate_skills(backend, policy.codec, trajs, cfg_for(tiny_path, analyzer_retries=1), seed=0,
                             answers=answers)
    index = {t.episode_id: i for i, t in enumerate(trajs)}
    retried = [index["ep0x1"], index["ep1x2"], index["ep2x0"]]
    assert [(a.episode, a.attempt) for a in answers] == [(i, 0) for i in range(TASKS * GROUP)] + [(i, 1) for i in retried]
    assert [a.valid for a in answers] == [i not in retried for i in range(TASKS * GROUP)] + [True, False, False]
    assert [a.cut for a in answers] == [i == index["ep2x0"] for i in range(TASKS * GROUP)] + [False, False, True]
    assert all((a.text == "{oops") != a.valid for a in answers)
    assert [s is not None for s in skills] == [i not in retried[1:] for i in range(TASKS * GROUP)]
    # without a list to fill, the same skills
    backend = FlakyAnalyzer(policy.codec.tokenizer, {"ep0x1": 1, "ep1x2": 99, "ep2x0": 99}, cut=frozenset({"ep2x0"}))
    assert generate_skills(backend, policy.codec, trajs, cfg_for(tiny_path, analyzer_retries=1), seed=0) == skills


def test_every_analyzer_source_passes_the_trainer_its_answers(tiny_path):
    """The trainer's skill_answers / skill_answers_cut metrics come from the list it hands the source: the
    analyzer sources and the controls built on them fill it; a fixed library writes no answer."""
    from types import SimpleNamespace

    from seed_train.skill_sources import AnalyzerAnswer, FrozenAnalyzer, ShuffledSkills, WrongRule

    real = fresh_policy(tiny_path)
    cfg = cfg_for(tiny_path, analyzer_retries=1)
    sources = {"on_policy": OnPolicyAnalyzer(cfg), "shuffled": ShuffledSkills(OnPolicyAnalyzer(cfg)),
               "wrong_rule": WrongRule(OnPolicyAnalyzer(cfg), lambda text, category: "Do the opposite of " + text),
               "frozen": make_skill_source(cfg_for(tiny_path, analyzer_retries=1, skill_source="frozen"), real.model)}
    assert isinstance(sources["frozen"], FrozenAnalyzer)
    for name, source in sources.items():
        # ep0x0's first answer is cut at the budget and invalid; its retry parses
        backend = FlakyAnalyzer(real.codec.tokenizer, {"ep0x0": 1}, cut=frozenset({"ep0x0"}))
        backend.sync_weights = lambda model: None
        policy = SimpleNamespace(model=real.model, codec=real.codec, backend=backend)
        answers: list[AnalyzerAnswer] = []
        skills = source.skills(batch(), policy, seed=0, answers=answers)
        assert len(answers) == TASKS * GROUP + 1 and [a.cut for a in answers].count(True) == 1, name
        assert all(s is not None for s in skills), name
    answers = []
    StaticLibrary({"default": "Say it."}).skills(batch(), None, seed=0, answers=answers)
    assert answers == []


def test_analyzer_temperature_must_be_positive(tiny_path):
    with pytest.raises(ValueError, match="analyzer_temperature.*must be > 0"):
        cfg_for(tiny_path, analyzer_temperature=0.0)


class KeylessBackend:
    """The HF backend behind a ``generate`` without ``row_keys``: every attempt prefills its prompts afresh."""

    def __init__(self, inner):
        self.inner = inner

    def generate(self, prompts, *, max_new_tokens, temperature=1.0, top_p=1.0, greedy=False, seed=None):
        return self.inner.generate(prompts, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                                   greedy=greedy, seed=seed)


def test_analyzer_retries_reuse_the_prompts_kv_and_sample_the_same_text(tiny_path):
    from seed_train.skill_sources import generate_skills

    policy = fresh_policy(tiny_path)
    cfg = cfg_for(tiny_path, analyzer_retries=2, skill_max_new_tokens=6)  # the random tiny model never parses
    texts = {}
    for name in ("keyed", "keyless"):
        hf = HFGenerateBackend(policy.model, policy.codec.tokenizer)
        recorded = []
        generate = hf.generate

        def recording(prompts, _generate=generate, _recorded=recorded, **kwargs):
            out = _generate(prompts, **kwargs)
            _recorded.append([g.text for g in out])
            return out

        hf.generate = recording
        backend = hf if name == "keyed" else KeylessBackend(hf)
        assert generate_skills(backend, policy.codec, batch(), cfg, seed=3) == [None] * TASKS * GROUP
        texts[name] = recorded
        if name == "keyed":
            assert hf.reused_tokens > 0  # the retries started from the first attempt's prompt KV
            assert hf._turns == {}  # and it was dropped after the pass
        else:
            assert hf.reused_tokens == 0
    assert len(texts["keyed"]) == 3 and texts["keyed"] == texts["keyless"]


# ---------------------------------------------------------------------------------- diagnostics and config
def test_gate_diagnostics_use_group_and_step_as_the_context(tiny_path):
    # three one-token samples: (group 0, step 0, A +1), (group 0, step 0, A -1), (group 0, step 1, A +1);
    # old log-prob 0, teacher log-probs a, b, c, beta 1: gates sigma(a), sigma(b), sigma(c).
    a, b, c = 0.5, -1.0, 2.0
    samples = [StepSample([1], [5], [0.0], adv, [1], episode=e, step=k, group=0)
               for e, (adv, k) in enumerate([(1.0, 0), (-1.0, 0), (1.0, 1)])]
    scored = {"teacher_logprobs": torch.tensor([[a], [b], [c]]), "ref_logprobs": None}
    sig = [1 / (1 + math.exp(-x)) for x in (a, b, c)]
    out = gate_diagnostics(samples, scored, cfg_for(tiny_path, opd_beta=1.0))
    # context (0, 0): population covariance of gates [sig a, sig b] with advantages [1, -1]; (0, 1) is alone
    assert out["gate_adv_cov_context"] == pytest.approx((sig[0] - sig[1]) / 2, abs=1e-6)
    adv = [1.0, -1.0, 1.0]
    pooled = sum((g - sum(sig) / 3) * (x - sum(adv) / 3) for g, x in zip(sig, adv)) / 3
    assert out["gate_adv_cov_pooled"] == pytest.approx(pooled, abs=1e-6)
    constant = gate_diagnostics(samples, scored, cfg_for(tiny_path, opd_gate="constant"))
    assert constant == {"gate_adv_cov_pooled": 0.0, "gate_adv_cov_context": 0.0}  # g = 1: no covariance


def test_build_samples_records_the_group_of_each_step(tiny_path):
    policy = fresh_policy(tiny_path)
    trajs = batch()
    for t in trajs:
        t.steps[0].prompt_token_ids, t.steps[0].response_token_ids, t.steps[0].response_logprobs = [1, 2], [3], [-1.0]
    samples = build_samples(trajs, step_advantages(trajs), [None] * len(trajs), policy.codec)
    assert [(s.group, s.step) for s in samples] == [(g, 0) for g in range(TASKS) for _ in range(GROUP)]


def test_paper_defaults_baselines_and_validation(tmp_path):
    cfg = SeedConfig()
    assert (cfg.group_stats, cfg.format_penalty_on, cfg.reward_mode, cfg.dual_clip_c, cfg.opd_gate) == (
        "steps", "step", "success", 3.0, "sigmoid")
    grpo, sft_grpo, seed = cfg.arm("GRPO"), cfg.arm("SFT+GRPO"), cfg.arm("SEED")
    assert (grpo.stage1_demos, grpo.opd_coef) == (0, 0.0)
    assert (sft_grpo.stage1_demos, sft_grpo.opd_coef) == (cfg.stage1_demos, 0.0) and sft_grpo.stage1_demos > 0
    assert seed == cfg and set(BASELINES) == {"GRPO", "SFT+GRPO", "SEED"}
    with pytest.raises(ValueError, match="stage1_demos"):
        SeedConfig(stage1_demos=0).arm("SFT+GRPO")
    for kwargs, name in [({"dual_clip_c": 1.0}, "dual_clip_c"), ({"opd_gate": "step"}, "opd_gate"),
                         ({"group_stats": "tokens"}, "group_stats"), ({"format_penalty_on": "token"}, "format_penalty_on"),
                         ({"reward_mode": "dense"}, "reward_mode")]:
        with pytest.raises(ValueError, match=name):
            SeedConfig(**kwargs)
    assert SeedConfig(dual_clip_c=0.0).dual_clip_c == 0.0  # 0 disables


def test_env_spec_passes_the_reward_mode_unless_env_kwargs_sets_it(tiny_path):
    spec = env_spec(cfg_for(tiny_path), "train")
    assert spec.env_kwargs["reward_mode"] == "success"
    assert env_spec(cfg_for(tiny_path, env_kwargs={"reward_mode": "env"}), "train").env_kwargs["reward_mode"] == "env"
    assert env_spec(cfg_for(tiny_path, reward_mode="env"), "train").env_kwargs["reward_mode"] == "env"
    env = gym.make(spec.env_id, split="train", **spec.env_kwargs)
    _, info = env.reset(options={"task_id": "echo/train/0000"})  # word "up"
    assert env.step("up")[1] == 10.0  # SEED's success reward
    env.close()


# ---------------------------------------------------------------------------------- content controls
class FixedSkills:
    """An inner skill source that returns given skills (what an analyzer would have written)."""

    kind, produces_skills = "fixed", True

    def __init__(self, skills):
        self._skills = skills

    def skills(self, trajectories, policy, seed, answers=None):
        return list(self._skills)


def ez_batch(categories) -> list[Trajectory]:
    return [Trajectory(episode_id=f"e{i}", env_id="seed/EZPoints-v0", task_id=f"t{i}", task="Make 12.", category=c,
                       split="train", group_id=f"g{i}", steps=[Step(index=0, observation="o", action="1", reward=0.0)]).finish(
        success=False, score=0.0) for i, c in enumerate(categories)]


def test_wrong_rule_rewrites_the_policys_own_skills_against_the_category(tiny_path):
    from seed_envs.ezpoints.hindsight import FAILURE_RULES, SUCCESS_RULES
    from seed_train.skill_sources import WrongRule

    source = make_skill_source(cfg_for(tiny_path, env_id="seed/EZPoints-v0", skill_source="wrong_rule"))
    assert isinstance(source, WrongRule) and isinstance(source.inner, OnPolicyAnalyzer) and source.kind == "wrong_rule"
    own = [Skill("Won: sum deal.", SUCCESS_RULES["sum"]), Skill("Won: product deal.", SUCCESS_RULES["product"]),
           Skill("", SUCCESS_RULES["sum"]),  # a product deal whose own skill (wrongly) says add: stays add
           Skill("", FAILURE_RULES["letter"]),  # names no operator: the other category's workflow instead
           None]  # an invalid skill stays invalid
    trajs = ez_batch(["sum", "product", "product", "sum", "sum"])
    got = WrongRule(FixedSkills(own), source.rewrite).skills(trajs, policy=None, seed=0)
    assert [s.text if s else None for s in got] == [
        "If the values multiply to the target, type one value, *, the other, then =.",
        "If the card values add up to the target, type one value, +, the other, then =.",
        SUCCESS_RULES["sum"],
        SUCCESS_RULES["product"],
        None]
    assert got[0].summary == "Won: sum deal."  # the summary is kept: only the rule changes
    # every rewritten skill names the operator that is wrong for its deal
    for s, t in zip(got[:4], trajs):
        assert ("*" in s.text) == (t.category == "sum") and ("+" in s.text) == (t.category == "product")
    # same format, about the same length (words)
    assert abs(len(got[0].text.split()) - len(SUCCESS_RULES["sum"].split())) <= 1
    with pytest.raises(SetupError, match="wrong_rule"):  # an env without a wrong_rule: refused at the start
        make_skill_source(cfg_for(tiny_path, skill_source="wrong_rule"))


def test_static_wrong_gives_the_librarys_rule_for_the_other_category(tiny_path, tmp_path):
    from seed_envs.ezpoints.hindsight import SUCCESS_RULES

    lib = tmp_path / "rules.json"
    lib.write_text(json.dumps({c: SUCCESS_RULES[c] for c in ("sum", "product")}))
    right = make_skill_source(cfg_for(tiny_path, env_id="seed/EZPoints-v0", skill_source="static", static_skills=str(lib)))
    wrong = make_skill_source(cfg_for(tiny_path, env_id="seed/EZPoints-v0", skill_source="static_wrong",
                                      static_skills=str(lib)))
    trajs = ez_batch(["sum", "product"])
    assert [s.text for s in right.skills(trajs, None, 0)] == [SUCCESS_RULES["sum"], SUCCESS_RULES["product"]]
    texts = [s.text for s in wrong.skills(trajs, None, 0)]
    assert "*" in texts[0] and "+" not in texts[0] and "+" in texts[1] and "*" not in texts[1]
    with pytest.raises(ValueError, match="static_skills"):
        cfg_for(tiny_path, env_id="seed/EZPoints-v0", skill_source="static_wrong")


def test_shuffled_categories_always_gives_another_categorys_skill(tiny_path):
    with pytest.raises(ValueError, match="stage2_balance_categories|stage2-balance-categories"):
        cfg_for(tiny_path, skill_source="shuffled_categories")
    analyzer = make_skill_source(cfg_for(tiny_path, skill_source="shuffled_categories", stage2_balance_categories=True))
    assert isinstance(analyzer, ShuffledSkills) and analyzer.kind == "shuffled_categories"
    categories = ["sum", "sum", "product", "product", "sum", "product", "sum", "sum"]
    trajs = ez_batch(categories)
    own = [Skill("", f"rule of {t.episode_id}") for t in trajs]
    by_rule = {f"rule of {t.episode_id}": t for t in trajs}
    source = ShuffledSkills(FixedSkills(own), "category")
    for seed in range(6):
        donors = [by_rule[s.text] for s in source.skills(trajs, None, seed)]
        assert all(d.category != t.category for t, d in zip(trajs, donors))
    with pytest.raises(SetupError, match="task categories"):
        ShuffledSkills(FixedSkills(own[:2]), "category").skills(ez_batch(["sum", "sum"]), None, 0)
