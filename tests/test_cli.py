"""The seed-envs command line: list, eval, record and play."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from seed_agents.cli import main
from wrappers import read_trajectories


def test_list_shows_every_id_split_and_panel_size(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "seed/Sokoban-v0" in out and "seed/EZPoints-v0" in out
    sokoban_test = [line for line in out.splitlines() if line.startswith("seed/Sokoban-v0") and " test " in line]
    assert sokoban_test and sokoban_test[0].split()[2] == "200"


def test_eval_expert_wins_the_whole_panel_and_writes_json(tmp_path, capsys):
    out_json = tmp_path / "ez.json"
    assert main(["eval", "seed/EZPoints-v0", "--split", "unseen", "--agent", "expert", "--json", str(out_json)]) == 0
    table = capsys.readouterr().out
    assert "all" in table and "1.000" in table
    result = json.loads(out_json.read_text())
    assert result["summary"]["all"]["episodes"] == 64 and result["summary"]["all"]["success"] == 1.0
    assert {"product", "sum"} <= set(result["summary"])


def test_eval_random_agent_is_worse_than_expert(capsys):
    assert main(["eval", "seed/Sokoban-v0", "--split", "test", "--agent", "random", "--limit", "30", "--seed", "1"]) == 0
    line = [row for row in capsys.readouterr().out.splitlines() if row.startswith("all")][0]
    assert float(line.split()[2]) < 0.8


def test_record_writes_readable_trajectories_with_images(tmp_path):
    out = tmp_path / "sok.jsonl"
    assert main(["record", "seed/Sokoban-v0", "--split", "test", "--obs-mode", "text+image", "--agent", "expert",
                 "--episodes", "3", "--out", str(out)]) == 0
    trajs = list(read_trajectories(out))
    assert len(trajs) == 3 and all(t.success for t in trajs)
    assert all((out.parent / s.image).is_file() for t in trajs for s in t.steps)


def test_bad_config_is_a_clear_error_not_a_traceback(capsys):
    assert main(["eval", "seed/Sokoban-v0", "--split", "nope"]) == 2
    assert "split" in capsys.readouterr().err


def test_play_in_a_terminal_session():
    """A person types an invalid action, asks for a hint, and quits."""
    r = subprocess.run([sys.executable, "-m", "seed_agents", "play", "seed/EZPoints-v0", "--split", "test"],
                       input="banana\n:hint\n:quit\n", capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "Invalid action 'banana'" in r.stdout and "expert:" in r.stdout and "Actions:" in r.stdout


def test_make_alfworld_writes_playable_games(tmp_path, capsys):
    pytest.importorskip("alfworld", reason="the alfworld extra is not installed")
    out = tmp_path / "games"
    assert main(["make-alfworld", "--n", "2", "--seed", "3", "--out", str(out), "--split", "valid_seen"]) == 0
    assert "wrote 2 games" in capsys.readouterr().out
    import gymnasium as gym

    import seed_envs

    env = gym.make("seed/ALFWorld-v0", split="test", data_dir=str(out))
    assert len(env.unwrapped.task_ids()) == 2
    obs, info = env.reset(seed=0)
    expert = seed_envs.make_expert(env)
    for _ in range(50):
        obs, _, terminated, truncated, info = env.step(expert(obs, info))
        if terminated or truncated:
            break
    assert info["success"]


# ------------------------------------------------------------------------------------ seed-train quickstart
def _quickstart_run_config(monkeypatch, argv: list[str]):
    """The config ``seed-train quickstart ARGV`` would train with (train() replaced by a recorder)."""
    import seed_train.trainer
    from seed_train.cli import main_train

    seen = []
    monkeypatch.setattr(seed_train.trainer, "train", lambda cfg: seen.append(cfg) or {})
    assert main_train(["quickstart", *argv]) == 0
    return seen[0]


def test_quickstart_honours_its_config_file_and_flags_override_it(tmp_path, monkeypatch, capsys):
    from seed_train.cli import QUICKSTART

    config = tmp_path / "qs.yaml"
    config.write_text("iterations: 5\ngroup_size: 6\noutput_dir: %s\n" % (tmp_path / "from-file"))
    cfg = _quickstart_run_config(monkeypatch, ["--config", str(config), "--group-size", "2"])
    assert cfg.iterations == 5  # the file over the quickstart's 2
    assert cfg.group_size == 2  # the flag over the file's 6
    assert cfg.output_dir == str(tmp_path / "from-file")
    assert cfg.env_id == QUICKSTART["env_id"] and cfg.max_new_tokens == QUICKSTART["max_new_tokens"]  # the rest
    plain = _quickstart_run_config(monkeypatch, [])
    assert (plain.iterations, plain.group_size, plain.output_dir) == (2, 4, "runs/quickstart")
    capsys.readouterr()


def test_quickstart_help_shows_the_quickstarts_defaults(monkeypatch, capsys):
    from seed_train.cli import main_train

    monkeypatch.setenv("COLUMNS", "200")  # argparse wraps help at the terminal width
    with pytest.raises(SystemExit) as done:
        main_train(["quickstart", "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for shown in ("--env-id ENV_ID registered env id, e.g. seed/EZPoints-v0 (default: 'seed/EZPoints-v0')",
                  "(collect, analyze, update) (default: 2)", "(default: 'runs/quickstart')", "(default: 'compact')",
                  "--config CONFIG"):
        assert shown in text, shown
    with pytest.raises(SystemExit):
        main_train(["train", "--help"])
    assert "(default: 'seed/Sokoban-v0')" in " ".join(capsys.readouterr().out.split())  # train keeps its own
