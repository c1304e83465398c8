"""Keeps benchmarks/skill_validity.py (issue 30's per-env validity figures) from rotting: Stage 1 on the tiny
model, fresh rollouts and the analyzer pass, with the report's counts checked against each other."""
from __future__ import annotations

import re
import sys

import torch
from script_loader import load_script

from seed_train.tiny import cached_tiny_model
from wrappers import read_trajectories


def test_the_report_counts_steps_skills_and_shows_what_did_not_parse(tmp_path, monkeypatch, capsys):
    script = load_script("benchmarks/skill_validity.py")
    config = tmp_path / "tiny.yaml"
    config.write_text(f"""env_id: seed/EZPoints-v0
model: {cached_tiny_model(seed=0)}
lora: false
template: compact
history: 0
action_format: tags
max_steps: 2
max_new_tokens: 4
stage1_demos: 2
stage1_epochs: 1
stage1_batch_size: 4
group_size: 2
skill_max_new_tokens: 8
analyzer_retries: 0
threads: 1
""")
    trajectories = tmp_path / "validity.jsonl"
    monkeypatch.setattr(sys, "argv", ["skill_validity.py", "--config", str(config), "--rollouts", "4",
                                      "--examples", "2", "--trajectories", str(trajectories),
                                      "--analyzer-budgets", "8", "2", "--analyzer-temperatures", "1.0",
                                      "--rollout-top-p", "1.0", "1e-6"])
    with torch.random.fork_rng(devices=[]):  # load() seeds torch: later tests keep their RNG state
        script.main()
    out = capsys.readouterr().out
    actions = re.search(r"actions: (\d+)/(\d+) = \d+% of steps valid .*?; (\d+)% parsed", out)
    assert actions, out
    valid, steps, parsed_pct = map(int, actions.groups())
    assert 0 < steps <= 4 * 2 and valid <= steps  # 4 rollouts of at most max_steps each
    skills = re.search(r"skill validity: (\d+)/(\d+) =", out)
    assert skills and int(skills[2]) == 4 and int(skills[1]) <= 4
    # The untrained tiny model writes no <action> tags: every step is a format error, shown as written.
    assert parsed_pct == 0 and valid == 0
    errors = re.search(r"format errors: (\d+); the first (\d+) as written:\n((?:  step \d+: .*\n)*)", out)
    assert errors and int(errors[1]) == steps and int(errors[2]) == 2, out
    assert len(errors[3].splitlines()) == 2
    assert "time: load + Stage 1" in out
    # Every analyzer answer counted (no retries: one per rollout), the invalid ones split by whether they hit the
    # 8-token budget: the untrained tiny model rarely samples its stop token, so most do.
    answers = re.search(r"analyzer answers: (\d+) \(4 first, 0 retries\); invalid (\d+), (\d+) of them cut at the "
                        r"8-token budget; valid answers cut there: (\d+)", out)
    assert answers, out
    total, invalid, cut, valid_cut = map(int, answers.groups())
    assert total == 4 and invalid == 4 - int(skills[1]) and cut <= invalid and valid_cut <= int(skills[1])
    # The same rollouts re-analysed at other budgets: at the run's own (8) the same sampling seeds give the same
    # answers; at 2 tokens no skill can be valid (it needs a summary and a rule) and every answer is cut.
    again = re.search(r"analyzer budget 8 tokens: (\d+)/4 valid with 0 retries, (\d+)/4 at the first attempt; 4 answers, "
                      r"(\d+) invalid, (\d+) of them cut at 8", out)
    assert again and int(again[1]) == int(again[2]) == int(skills[1]) and int(again[3]) == invalid, out
    assert int(again[4]) == cut
    assert re.search(r"analyzer budget 2 tokens: 0/4 valid with 0 retries, 0/4 at the first attempt; 4 answers, "
                     r"4 invalid, 4 of them cut at 2", out), out
    # The same rollouts at an analyzer temperature: at the run's own (its rollout temperature, 1) the same answers.
    cooler = re.search(r"analyzer temperature 1: (\d+)/4 valid with 0 retries, (\d+)/4 at the first attempt; "
                       r"4 answers, (\d+) invalid, (\d+) of them cut at 8", out)
    assert cooler and int(cooler[1]) == int(cooler[2]) == int(skills[1]), out
    assert int(cooler[3]) == invalid and int(cooler[4]) == cut
    # The same tasks replayed at other nucleus sizes. At the run's own top_p (1) the same seeds replay the same
    # rollouts and answers: the line matches the run's own, which matches the counts above.
    own = re.search(r"rollout top_p 1: (actions (\d+)/(\d+) = .*; skills (\d+)/4 valid .*)\n", out)
    assert own and (int(own[2]), int(own[3]), int(own[4])) == (valid, steps, int(skills[1])), out
    replay = re.search(r"rollout top_p 1: (actions .*) \(\d+s\)\n", out)
    assert replay and replay[1] == own[1], out
    # The untrained model samples freely at top_p 1: the two members of each group write different answers.
    assert "distinct answer sequences per group 2.00 of 2" in own[1], out
    # At a nucleus of one token every member of a group (same task, same reset seed) writes the argmax: one answer
    # sequence per group and one return, so GRPO would have nothing to learn from.
    narrow = re.search(r"rollout top_p 1e-06: actions .*; groups whose returns differ 0/2, distinct answer sequences "
                       r"per group 1\.00 of 2 \(\d+s\)", out)
    assert narrow, out
    # The rollouts the counts came from, each with its skill (null where invalid): the same totals.
    written = list(read_trajectories(trajectories))
    assert len(written) == 4 and sum(len(t.steps) for t in written) == steps
    assert sum(t.meta["skill"] is not None for t in written) == int(skills[1])
    assert all(st.format_error for t in written for st in t.steps)
