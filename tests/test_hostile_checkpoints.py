"""Hostile and damaged checkpoints (issue 16, items 1 and 8): a checkpoint never runs code when loaded,
a damaged or foreign one stops the run with a line naming the file (CLI: exit 2), ``--resume DIR`` goes on
in DIR's run, and failed or killed saves leave nothing a later save or resume trips on.

The tests use only what a user touches (save_checkpoint / load_checkpoint, the trainer's MetricsLogger,
``seed-train train``), so they state the behaviour, not the file format. Every call that loads a
checkpoint or trains runs inside ``torch.random.fork_rng``: a resume sets torch's global RNG on purpose.
"""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch
import toy_env  # noqa: F401  (registers test/Echo-v0)
from safetensors.torch import load_file, save_file

from seed_train.checkpoint import load_checkpoint, optimizer_state, save_checkpoint, trainable_state
from seed_train.cli import main_train
from seed_train.config import SeedConfig, SetupError
from seed_train.experiment import latest_checkpoint
from seed_train.logs import MetricsLogger
from seed_train.trainer import load, train

# The tiny model on the one-step Echo env: two SEED iterations take seconds on one core.
ECHO = dict(env_id="test/Echo-v0", lora=False, template="compact", history=0, action_format="plain", max_new_tokens=4,
            skill_max_new_tokens=8, analyzer_retries=0, stage1_demos=0, iterations=2, tasks_per_iteration=4,
            group_size=4, lr=3e-3, minibatch_size=16, kl_coef=0.0, eval_before=False, eval_after=False, seed=0,
            checkpoint_every=1, save_final=False, threads=1)


def echo_flags(tiny_path: str) -> list[str]:
    """ECHO as ``seed-train train`` flags (no --output-dir: the tests check where the run goes)."""
    flags = ["--model", tiny_path]
    for name, value in ECHO.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + name.replace("_", "-"))
        else:
            flags += [flag, str(value)]
    return flags


class WritesMarker:
    """Unpickling this opens (creates) ``path``: a stand-in for any payload a pickle can run."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


@pytest.fixture(scope="module")
def trained_run(tiny_path, tmp_path_factory) -> Path:
    """A finished 2-iteration run with checkpoints iter0000 and iter0001 (copy it before changing it)."""
    run = tmp_path_factory.mktemp("trained") / "run"
    with torch.random.fork_rng(devices=[]):
        train(SeedConfig(model=tiny_path, output_dir=str(run), **ECHO), say=lambda _: None)
    return run


def copy_run(trained_run: Path, tmp_path: Path) -> Path:
    run = tmp_path / "exp" / "run"
    shutil.copytree(trained_run, run)
    return run


def stepped_model(tiny_path: str):
    """The tiny model (full fine-tuning) and its AdamW after one real step: every state tensor is set."""
    model = load(SeedConfig(model=tiny_path, lora=False)).model
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    model.train()
    model(torch.tensor([[5, 6, 7, 8, 9]])).logits.float().pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    return model, optimizer


def legacy_state_pt(folder: Path, model, optimizer, **extra) -> None:
    """Make ``folder`` a checkpoint of the earlier format: optimizer and RNG state in a pickled state.pt."""
    for name in ("state.json", "state.safetensors"):
        (folder / name).unlink(missing_ok=True)
    torch.save({"optimizer": optimizer_state(model, optimizer), "torch_rng": torch.get_rng_state(), **extra},
               folder / "state.pt")


def tensors_equal(a, b) -> bool:
    """Nested optimizer states equal, tensors bit for bit."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(tensors_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(tensors_equal(x, y) for x, y in zip(a, b))
    return a == b


# ------------------------------------------------------------------------------ 1. no code from checkpoints
def test_round_trip_of_a_real_adamw_state_is_exact_and_holds_no_pickle(tmp_path, tiny_path):
    with torch.random.fork_rng(devices=[]):
        model, optimizer = stepped_model(tiny_path)
        torch.manual_seed(1234)
        rng_at_save = torch.get_rng_state()
        folder = save_checkpoint(tmp_path / "checkpoints" / "iter0003", trainable_state(model),
                                 optimizer_state(model, optimizer), 3, {"note": "x"})
        assert not [p.name for p in folder.iterdir() if p.suffix in (".pt", ".pth", ".pkl", ".bin")]
        fresh, fresh_optimizer = stepped_model(tiny_path)  # other values everywhere until the load
        torch.manual_seed(99)
        meta = load_checkpoint(folder, fresh, fresh_optimizer)
        assert meta == {"iteration": 3, "note": "x"}
        assert torch.equal(torch.get_rng_state(), rng_at_save)
        assert tensors_equal(optimizer_state(fresh, fresh_optimizer), optimizer_state(model, optimizer))
        # ... so the next AdamW step is the same, bit for bit
        for m, opt in ((model, optimizer), (fresh, fresh_optimizer)):
            m(torch.tensor([[9, 8, 7]])).logits.float().pow(2).mean().backward()
            opt.step()
        assert all(torch.equal(p, q) for p, q in zip(model.parameters(), fresh.parameters()))


def test_a_pickle_payload_in_state_pt_is_refused_without_running(tmp_path, tiny_path):
    marker = tmp_path / "payload_ran"
    with torch.random.fork_rng(devices=[]):
        model, optimizer = stepped_model(tiny_path)
        folder = save_checkpoint(tmp_path / "iter0000", trainable_state(model), optimizer_state(model, optimizer), 0)
        legacy_state_pt(folder, model, optimizer, note=WritesMarker(marker))
        with pytest.raises(SetupError, match=r"state\.pt.*refused") as refused:
            load_checkpoint(folder, model, optimizer)
    assert not marker.exists()
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("state", [
    {"__object__": "subprocess.Popen", "attrs": {"__dict__": [["args", "touch MARKER"]]}},
    {"__enum__": "os.system", "value": "touch MARKER"},
    "[" * 100_000 + "]" * 100_000,  # nesting deeper than any parser's recursion
], ids=["foreign class", "foreign callable", "deep nesting"])
def test_a_crafted_state_json_is_refused_by_name(tmp_path, tiny_path, monkeypatch, state):
    monkeypatch.chdir(tmp_path)
    with torch.random.fork_rng(devices=[]):
        model, optimizer = stepped_model(tiny_path)
        folder = save_checkpoint(tmp_path / "iter0000", trainable_state(model), optimizer_state(model, optimizer), 0)
        text = state if isinstance(state, str) else json.dumps({"format": 1, "state": state})
        (folder / "state.json").write_text(text)
        with pytest.raises(SetupError, match="state.json"):
            load_checkpoint(folder, model, optimizer)
    assert not (tmp_path / "MARKER").exists()


def test_an_earlier_format_state_pt_of_plain_tensors_still_loads(tmp_path, tiny_path):
    with torch.random.fork_rng(devices=[]):
        model, optimizer = stepped_model(tiny_path)
        folder = save_checkpoint(tmp_path / "iter0000", trainable_state(model), optimizer_state(model, optimizer), 0)
        legacy_state_pt(folder, model, optimizer)
        fresh, fresh_optimizer = stepped_model(tiny_path)
        load_checkpoint(folder, fresh, fresh_optimizer)
        assert tensors_equal(optimizer_state(fresh, fresh_optimizer), optimizer_state(model, optimizer))


def test_cli_refuses_a_payload_checkpoint_and_does_not_train(tmp_path, tiny_path, trained_run, monkeypatch, capsys):
    run = copy_run(trained_run, tmp_path)
    ckpt = run / "checkpoints" / "iter0000"
    marker = tmp_path / "payload_ran"
    with torch.random.fork_rng(devices=[]):
        model = load(SeedConfig(model=tiny_path, lora=False)).model
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
        legacy_state_pt(ckpt, model, optimizer, note=WritesMarker(marker))  # otherwise a loadable state
        metrics_before = (run / "metrics.jsonl").read_text()
        monkeypatch.chdir(tmp_path)
        code = main_train(["train", *echo_flags(tiny_path), "--resume", str(ckpt)])
    err = capsys.readouterr().err
    assert code == 2 and not marker.exists()
    assert "state.pt" in err and "Traceback" not in err
    assert (run / "metrics.jsonl").read_text() == metrics_before  # no iteration ran


# ------------------------------------------------------------------------------ 8. damaged checkpoints
def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _state_file(folder: Path) -> Path:
    return next(folder / n for n in ("state.safetensors", "state.pt") if (folder / n).exists())


def _weights_reshaped(folder: Path) -> None:
    """Another model's weights: every tensor one row long (a shape that would broadcast into the model's)."""
    path = folder / "trainable.safetensors"
    save_file({k: v[:1].clone().contiguous() for k, v in load_file(str(path)).items()}, str(path))


def _weights_subset(folder: Path) -> None:
    """Weights of a model with fewer trainable tensors (other LoRA targets, another architecture)."""
    path = folder / "trainable.safetensors"
    state = load_file(str(path))
    save_file(dict(sorted(state.items())[: len(state) // 2]), str(path))


DAMAGE = {
    "truncated weights": (lambda f: _truncate(f / "trainable.safetensors"), "trainable.safetensors"),
    "missing weights": (lambda f: (f / "trainable.safetensors").unlink(), "trainable.safetensors"),
    "garbage meta.json": (lambda f: (f / "meta.json").write_bytes(b"\x00\xff{not json"), "meta.json"),
    "missing meta.json": (lambda f: (f / "meta.json").unlink(), "meta.json"),
    "meta.json without iteration": (lambda f: (f / "meta.json").write_text('{"iter": "3"}'), "meta.json"),
    "missing state": (lambda f: [p.unlink() for p in f.glob("state.*")], "state"),
    "truncated state": (lambda f: _truncate(_state_file(f)), "state"),
    "another model's shapes": (_weights_reshaped, "trainable.safetensors"),
    "another model's keys": (_weights_subset, "trainable.safetensors"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_checkpoint_is_a_named_one_line_error(tmp_path, tiny_path, damage):
    breaks, named_file = DAMAGE[damage]
    with torch.random.fork_rng(devices=[]):
        model, optimizer = stepped_model(tiny_path)
        folder = save_checkpoint(tmp_path / "iter0000", trainable_state(model), optimizer_state(model, optimizer), 0)
        breaks(folder)
        fresh, fresh_optimizer = stepped_model(tiny_path)
        with pytest.raises(SetupError) as refused:
            load_checkpoint(folder, fresh, fresh_optimizer)
    message = str(refused.value)
    assert named_file in message and "\n" not in message, message


def test_cli_names_a_truncated_checkpoint_file_and_exits_2(tmp_path, tiny_path, trained_run, monkeypatch, capsys):
    run = copy_run(trained_run, tmp_path)
    ckpt = run / "checkpoints" / "iter0000"
    _truncate(ckpt / "trainable.safetensors")
    monkeypatch.chdir(tmp_path)
    with torch.random.fork_rng(devices=[]):
        code = main_train(["train", *echo_flags(tiny_path), "--resume", str(ckpt)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "trainable.safetensors" in err, err


def test_a_torn_last_metrics_line_is_skipped_with_a_warning_on_resume(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"iteration": 0, "success": 0.5}\n{"iteration": 1, "success": 0.75}\n{"iteration": 2, "succ')
    with pytest.warns(UserWarning, match="metrics.jsonl"):
        logger = MetricsLogger(tmp_path, resume_from_iteration=1)
    logger.close()
    assert [json.loads(line) for line in path.read_text().splitlines()] == [{"iteration": 0, "success": 0.5}]


def test_cli_resume_goes_on_in_the_checkpoints_run(tmp_path, tiny_path, trained_run, monkeypatch):
    run = copy_run(trained_run, tmp_path)
    ckpt = run / "checkpoints" / "iter0000"
    last_before = (run / "checkpoints" / "iter0001" / "trainable.safetensors").stat().st_mtime_ns
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main_train(["train", *echo_flags(tiny_path), "--resume", str(ckpt)]) == 0
    assert list(elsewhere.iterdir()) == []  # nothing in ./runs/seed
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["iteration"] for m in metrics] == [0, 1]
    assert (run / "checkpoints" / "iter0001" / "trainable.safetensors").stat().st_mtime_ns != last_before
    assert json.loads((run / "config.json").read_text())["resume"] == str(ckpt)


# ------------------------------------------------------------------------------ 8. failed and killed saves
def test_a_failed_save_leaves_no_tmp_folder_and_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    weights = {"w": torch.arange(6.0).reshape(2, 3)}
    folder = save_checkpoint(tmp_path / "checkpoints" / "iter0002", weights, {"state": {}, "param_groups": []}, 2)

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("seed_train.checkpoint.save_file", disk_full)
    with pytest.raises(OSError, match="No space"):
        save_checkpoint(folder, {"w": torch.zeros(2, 3)}, {"state": {}, "param_groups": []}, 2)
    assert sorted(p.name for p in folder.parent.iterdir()) == ["iter0002"]
    assert torch.equal(load_file(str(folder / "trainable.safetensors"))["w"], weights["w"])


def test_a_killed_saves_tmp_folder_is_never_resumed_from_nor_trips_a_save(tmp_path):
    run = tmp_path / "run"
    weights, opt = {"w": torch.ones(2)}, {"state": {}, "param_groups": []}
    save_checkpoint(run / "checkpoints" / "iter0000", weights, opt, 0)
    # A save of iteration 1 killed just before its rename: a whole folder, meta.json included, named .tmp.
    shutil.copytree(run / "checkpoints" / "iter0000", run / "checkpoints" / "iter0001.tmp")
    assert latest_checkpoint(run) == run / "checkpoints" / "iter0000"
    save_checkpoint(run / "checkpoints" / "iter0001", weights, opt, 1)
    assert latest_checkpoint(run) == run / "checkpoints" / "iter0001"
    assert not (run / "checkpoints" / "iter0001.tmp").exists()
    # Numbers, not names, order checkpoints: iter10000 comes after iter9999.
    save_checkpoint(run / "checkpoints" / "iter9999", weights, opt, 9999)
    save_checkpoint(run / "checkpoints" / "iter10000", weights, opt, 10000)
    assert latest_checkpoint(run) == run / "checkpoints" / "iter10000"
