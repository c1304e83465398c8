"""Progress a person can follow: phase lines on stdout, bars on stderr only where a terminal watches."""
from __future__ import annotations

import io
import sys

import pytest
import torch

import toy_env  # noqa: F401  (registers test/Echo-v0)


class Terminal(io.StringIO):
    """stderr as a terminal: tqdm draws bars only on a stream whose isatty() is true."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def tiny_policy():
    from seed_train.config import SeedConfig
    from seed_train.tiny import cached_tiny_model
    from seed_train.trainer import load

    with torch.random.fork_rng(devices=[]):  # load() seeds torch: later tests keep their RNG state
        return load(SeedConfig(env_id="test/Echo-v0", model=str(cached_tiny_model(seed=0)), lora=False, threads=1))


def echo_spec():
    from seed_train.rollout import EnvSpec

    return EnvSpec(env_id="test/Echo-v0", split="unseen", template="compact", history=0, action_format="plain",
                   format_penalty=0.1, env_kwargs={"n_tasks": 6})


@pytest.mark.parametrize("terminal", [True, False])
def test_evaluation_announces_itself_and_counts_episodes(tiny_policy, capsys, monkeypatch, terminal):
    from seed_train.evaluate import evaluate_policy

    stderr = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    summary = evaluate_policy(tiny_policy.backend, tiny_policy.codec, echo_spec(), max_new_tokens=3,
                              progress="before training")
    assert summary["categories"]["all"]["episodes"] == 6
    assert "evaluating before training: test/Echo-v0 unseen, 6 episodes (6 tasks) ..." in capsys.readouterr().out
    if terminal:
        assert "eval before training:   0%|" in stderr.getvalue() and "0/6 [" in stderr.getvalue()
    else:  # a log file gets the line, not carriage-return bar frames
        assert stderr.getvalue() == ""


def test_progress_env_var_turns_bars_off_in_a_terminal(tiny_policy, capsys, monkeypatch):
    from seed_train.evaluate import evaluate_policy
    from seed_train.progress import PROGRESS_ENV

    stderr = Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    monkeypatch.setenv(PROGRESS_ENV, "0")
    evaluate_policy(tiny_policy.backend, tiny_policy.codec, echo_spec(), max_new_tokens=3, progress="after")
    assert stderr.getvalue() == "" and "evaluating after" in capsys.readouterr().out


def test_rollouts_report_each_finished_episode_once(tiny_policy):
    from seed_train.rollout import EnvPool, group_jobs, run_episodes

    spec = echo_spec()
    pool = EnvPool(spec)
    finished = []
    jobs = group_jobs([f"echo/unseen/{2000 + i:04d}" for i in range(3)], 2, base_seed=0, prefix="p")
    trajectories = run_episodes(tiny_policy.backend, tiny_policy.codec, pool, jobs, max_new_tokens=3, seed=1,
                                on_finished=finished.append)
    pool.close()
    assert sum(finished) == len(trajectories) == 6 and all(k > 0 for k in finished)


def test_rollouts_report_every_turn_with_the_episodes_still_playing(tiny_policy):
    from seed_train.rollout import EnvPool, group_jobs, run_episodes

    pool = EnvPool(echo_spec())
    turns = []
    jobs = group_jobs([f"echo/unseen/{2000 + i:04d}" for i in range(3)], 2, base_seed=0, prefix="p")
    trajectories = run_episodes(tiny_policy.backend, tiny_policy.codec, pool, jobs, max_new_tokens=3, seed=1,
                                on_turn=lambda t, playing: turns.append((t, playing)))
    pool.close()
    longest = max(t.length for t in trajectories)
    assert [t for t, _ in turns] == list(range(1, longest + 1))
    # after turn t, the episodes longer than t steps are still playing
    assert [p for _, p in turns] == [sum(t.length > k for t in trajectories) for k in range(1, longest + 1)]


def test_a_log_hears_the_turn_while_no_episode_has_ended_yet(capsys):
    """A batch whose episodes all run to the step limit ends them together: between the endings the log
    still gets a line a minute, saying which turn the batch is on."""
    from seed_train import progress

    now = [0.0]
    lines = progress.ProgressLines(48, "eval before training", "episode", every_s=60, clock_fn=lambda: now[0])
    report = progress.turn_reporter(lines)
    for turn in range(1, 6):  # 5 turns in 50 s: quiet
        now[0] += 10
        report(turn, 48)
    assert capsys.readouterr().out == ""
    now[0] += 10
    report(6, 48)
    assert capsys.readouterr().out == "  eval before training: 0/48 episodes, turn 6 (48 playing), 1m00s\n"
    now[0] += 60
    lines.update(8)  # 8 ended at turn 6: the ETA comes from finished episodes
    assert capsys.readouterr().out == "  eval before training: 8/48 episodes, turn 6 (48 playing), 2m00s, ETA 10m00s\n"


def test_the_step_limit_bounds_the_eta_while_every_episode_left_is_playing(capsys):
    """One early win among 48 episodes that all run to a 15-step limit: the ETA from ended episodes
    (47 x the 60 s the first took) is bounded by the turns left at the batch's pace (6 turns in 60 s,
    9 left: 90 s); while episodes wait for a later batch, only the ended-episode ETA holds."""
    from seed_train import progress

    now = [0.0]
    lines = progress.ProgressLines(48, "eval after Stage 2", "episode", every_s=60, clock_fn=lambda: now[0])
    report = progress.turn_reporter(lines, turn_limit=15)
    for turn in range(1, 7):
        now[0] += 10
        if turn == 2:
            lines.update(1)  # one room solved at turn 2
        report(turn, 47)
    assert capsys.readouterr().out == "  eval after Stage 2: 1/48 episodes, turn 6/15 (47 playing), 1m00s, ETA 1m30s\n"

    # 16 episodes in two batches of 8: while 8 wait for the second batch, the turn says nothing of the end
    lines = progress.ProgressLines(16, "rollouts", "episode", every_s=60, clock_fn=lambda: now[0])
    report = progress.turn_reporter(lines, turn_limit=15)
    start = now[0]
    for turn in range(1, 16):  # 5 s a turn; all 8 run to the limit
        now[0] += 5
        if turn == 15:
            lines.update(8)
        report(turn, 8 if turn < 15 else 0)
    assert capsys.readouterr().out == "  rollouts: 0/16 episodes, turn 12/15 (8 playing), 1m00s\n"
    for turn in range(1, 6):  # the second batch, 10 s a turn: its pace, timed from the first batch's end
        now[0] += 10
        report(turn, 8)
    # 125 s in: ended-episode ETA 125 s; the batch's 10 turns left at 50 s / 5 turns: 100 s
    assert now[0] - start == 125
    assert capsys.readouterr().out == "  rollouts: 8/16 episodes, turn 5/15 (8 playing), 2m05s, ETA 1m40s\n"


def test_an_env_spec_knows_its_step_limit():
    from seed_train.rollout import EnvSpec

    def spec(**kw):
        return EnvSpec(env_id="seed/Sokoban-v0", split="test", template=None, history=None, action_format="plain",
                       format_penalty=0.1, **kw)
    assert spec().step_limit() == 15  # Sokoban's declared agent budget (the paper's)
    assert spec(max_steps=6).step_limit() == 6
    assert spec(env_kwargs={"max_steps": 9}).step_limit() == 9
    assert spec(env_kwargs={"max_steps": 9}, max_steps=4).step_limit() == 4
    assert EnvSpec(env_id="test/Echo-v0", split="unseen", template=None, history=None, action_format="plain",
                   format_penalty=0.0).step_limit() is None


def test_a_terminal_bar_shows_the_turn_as_its_postfix(monkeypatch):
    from seed_train import progress

    monkeypatch.setattr(sys, "stderr", Terminal())
    with progress.progress_bar(total=4, desc="rollouts", unit="episode") as bar:
        assert not isinstance(bar, progress.ProgressLines)
        progress.turn_reporter(bar)(3, 4)
        assert bar.postfix == "turn=3, playing=4"


def test_a_run_prints_its_phases_above_the_bars_and_writes_its_report(tmp_path, capsys, monkeypatch):
    """Stage 1, rollouts, evaluations and iterations draw bars on the terminal's stderr; the phase and
    iteration lines reach stdout whole (tqdm.write), never glued to a bar frame."""
    from seed_train.config import SeedConfig
    from seed_train.tiny import cached_tiny_model
    from seed_train.trainer import train

    stderr = Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    cfg = SeedConfig(env_id="test/Echo-v0", model=str(cached_tiny_model(seed=0)), lora=False, template="compact",
                     history=0, action_format="plain", max_new_tokens=3, skill_max_new_tokens=8, analyzer_retries=0,
                     stage1_demos=4, stage1_epochs=2, stage1_batch_size=4, iterations=2, tasks_per_iteration=2,
                     group_size=2, kl_coef=0.0, eval_limit=4, checkpoint_every=0, save_final=False, threads=1,
                     env_kwargs={"n_tasks": 8}, output_dir=str(tmp_path / "run"))
    with torch.random.fork_rng(devices=[]):
        train(cfg)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "Stage 1: playing 4 expert demonstrations on test/Echo-v0 train ..." in lines
    assert any(line.startswith("Stage 1: ") and "SFT pairs (act " in line and "), 2 epoch(s) of batch 4 ..." in line for line in lines)
    for name in ("before training", "after Stage 1", "after training"):
        assert f"evaluating {name}: test/Echo-v0 unseen, 4 episodes (4 tasks) ..." in lines
    # The first iteration's line gives the time the rest will take (a log has no bar to show it).
    assert any(line.startswith("iteration 1/2: success ") and "; Stage 2 ETA " in line for line in lines)
    assert any(line.startswith("iteration 2/2: success ") and "ETA" not in line for line in lines)
    assert "\r" not in out
    bars = stderr.getvalue()
    for bar in ("Stage 1 demos", "Stage 1 SFT", "rollouts", "skills", "eval before training", "eval after training",
                "SEED iterations"):
        assert bar in bars, bar
    report = tmp_path / "run" / "report.html"
    assert f"report: {report}" in lines
    page = report.read_text(encoding="utf-8")
    assert "after Stage 1" in page and "Training (Stage 2)" in page and 'href="viewer.html"' in page


def test_iterations_eta_reads_as_a_duration():
    from seed_train.trainer import iterations_eta

    assert iterations_eta(60.0, 2, 4) == "2m00s" and iterations_eta(10.0, 1, 1) == "10s"
    assert iterations_eta(3000.0, 1, 2) == "1h40m00s" and iterations_eta(5.0, 1, 0) == ""


def test_a_log_without_a_terminal_gets_a_progress_line_with_an_eta_at_most_every_minute(capsys, monkeypatch):
    from seed_train import progress

    now = [100.0]
    lines = progress.ProgressLines(10, "eval after Stage 1", "episode", every_s=60, clock_fn=lambda: now[0])
    for _ in range(3):  # 3 episodes in 30 s: no line yet
        now[0] += 10
        lines.update()
    assert capsys.readouterr().out == ""
    now[0] += 30  # 4 done in 60 s: 15 s each, 6 left
    lines.update()
    assert capsys.readouterr().out == "  eval after Stage 1: 4/10 episodes, 1m00s, ETA 1m30s\n"
    now[0] += 10
    lines.update()  # within the minute: quiet
    assert capsys.readouterr().out == ""
    monkeypatch.setattr(sys, "stderr", io.StringIO())  # a log file: lines, not a bar
    assert isinstance(progress.progress_bar(total=5, desc="x"), progress.ProgressLines)
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert not isinstance(progress.progress_bar(total=5, desc="x"), progress.ProgressLines)
    monkeypatch.setenv(progress.PROGRESS_ENV, "0")  # everything off
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert not isinstance(progress.progress_bar(total=5, desc="x"), progress.ProgressLines)
