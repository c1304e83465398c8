"""Keeps benchmarks/bench_micro_batches.py from rotting: it times its variants on a finished tiny run."""
from __future__ import annotations

import toy_env  # noqa: F401  (registers test/Echo-v0)
import torch
from script_loader import load_script

from seed_train.config import SeedConfig
from seed_train.tiny import cached_tiny_model
from seed_train.trainer import train

bench = load_script("benchmarks/bench_micro_batches.py")


def tiny_run(tmp_path):
    """A finished one-iteration run of the tiny model on the echo env (its trajectories carry token ids)."""
    run = tmp_path / "run"
    cfg = SeedConfig(env_id="test/Echo-v0", model=str(cached_tiny_model(seed=0)), lora=False, template="compact",
                     history=0, action_format="plain", max_new_tokens=4, skill_max_new_tokens=8, analyzer_retries=0,
                     stage1_demos=0, iterations=1, tasks_per_iteration=2, group_size=4, kl_coef=0.0,
                     eval_before=False, eval_after=False, checkpoint_every=0, save_final=False,
                     output_dir=str(run), seed=0)
    train(cfg, say=lambda _: None)
    return run


def test_bench_micro_batches_times_both_orders_on_a_runs_samples(tmp_path, capsys):
    run = tiny_run(tmp_path)
    threads = torch.get_num_threads()
    bench.main([str(run), "--samples", "6", "--micro", "2", "--repeats", "2", "--threads", "1"])
    assert torch.get_num_threads() == threads  # the caller's count is back
    out = capsys.readouterr().out
    assert "6 step samples" in out and "micro-batch 2" in out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("drawn", "heads"))}
    assert rows["drawn"][-1] == "1.00" and float(rows["heads"][-1]) > 0  # ratios to the drawn order
    assert out.count("round ") == 4  # 2 variants x 2 rounds


def test_bench_micro_batches_memory_mode_runs_each_variant_in_its_own_process(tmp_path, capsys):
    run = tiny_run(tmp_path)
    bench.main([str(run), "--samples", "6", "--micro", "2", "--one-pass", "--memory", "--threads", "1"])
    out = capsys.readouterr().out
    assert "one process per variant" in out
    table = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("drawn", "heads", "one"))
             and "MiB" not in line}
    assert set(table) == {"drawn", "heads", "one"}, out
    for row in table.values():
        seconds, base, peak, update = (float(x) for x in row[-4:])
        assert seconds >= 0 and 0 < base <= peak and abs(update - (peak - base)) <= 1  # (the tiny update: ~0 s)


def test_bench_micro_batches_memory_mode_reports_a_killed_variant(tmp_path, capsys, monkeypatch):
    import subprocess

    killed = subprocess.CompletedProcess(args=[], returncode=-9, stdout="", stderr="Loading weights: 100%\n")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: killed)  # every child OOM-killed
    bench.main([str(tmp_path), "--samples", "4", "--micro", "2", "--one-pass", "--memory"])
    out = capsys.readouterr().out
    assert out.count("failed, killed by SIGKILL (out of memory? see dmesg)") == 3  # three variants, no table rows
    assert not [line for line in out.splitlines() if line.startswith(("drawn", "heads", "one"))]
