"""The CPU thread policy: the CPUs this process may use, shared among local ranks, scoped to the run."""
from __future__ import annotations

import torch

from seed_train import threads


def test_cgroup_quota_v2_and_v1(tmp_path):
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert threads.cgroup_cpu_quota(tmp_path) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert threads.cgroup_cpu_quota(tmp_path) is None
    v1 = tmp_path / "v1"
    (v1 / "cpu").mkdir(parents=True)
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("50000")
    (v1 / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert threads.cgroup_cpu_quota(v1) == 0.5
    (v1 / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert threads.cgroup_cpu_quota(v1) is None
    assert threads.cgroup_cpu_quota(tmp_path / "absent") is None


def test_usable_cpus_is_capped_by_quota_and_affinity(tmp_path, monkeypatch):
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    assert threads.usable_cpus(tmp_path / "absent") == 4
    (tmp_path / "cpu.max").write_text("150000 100000\n")  # 1.5 CPUs -> 2 threads
    assert threads.usable_cpus(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("20000 100000\n")  # 0.2 CPUs -> still 1 thread
    assert threads.usable_cpus(tmp_path) == 1


def test_default_threads_shares_cpus_among_local_ranks(monkeypatch):
    monkeypatch.setattr(threads, "usable_cpus", lambda: 4)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert threads.default_threads() == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert threads.default_threads() == 2
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert threads.default_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.default_threads() == 3  # the user's OMP_NUM_THREADS is a choice too
    assert threads.default_threads(1) == 1  # an explicit --threads wins over both


def test_torch_threads_is_scoped():
    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with threads.torch_threads(target) as policy:
        assert policy.threads == target and torch.get_num_threads() == target
    assert torch.get_num_threads() == before


def test_threads_for_load_leaves_cores_other_processes_use():
    assert threads.threads_for_load(2, None) == 2  # unknown load: every usable CPU
    assert threads.threads_for_load(2, 0.0) == 2
    assert threads.threads_for_load(2, 0.15) == 2  # a little background noise
    assert threads.threads_for_load(2, 0.5) == 1  # half a core busy elsewhere: that core is not ours
    assert threads.threads_for_load(2, 1.0) == 1
    assert threads.threads_for_load(2, 5.0) == 1  # never below one
    assert threads.threads_for_load(16, 3.1) == 13


def test_cpu_ticks_reads_only_our_cpus(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  30 0 10 60 0 0 0 0 0 0\ncpu0 10 0 5 35 0 0 0 0 0 0\ncpu1 20 0 5 25 0 0 0 0 0 0\n"
                    "intr 1 2 3\n")
    assert threads._cpu_ticks({0}, stat) == (15, 50)
    assert threads._cpu_ticks({0, 1}, stat) == (40, 100)
    assert threads._cpu_ticks({7}, stat) is None


def test_load_probe_sees_a_busy_process():
    """A child process spinning on one core shows up as (at least) about one busy CPU."""
    import subprocess
    import sys
    import time

    probe = threads.LoadProbe()
    if probe._last is None:
        import pytest

        pytest.skip("no /proc/stat on this system")
    spin = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass"])
    try:
        time.sleep(0.3)
        probe.others_busy()
        time.sleep(1.0)
        busy = probe.others_busy()
    finally:
        spin.wait()
    assert busy is not None and busy > 0.6, busy


def test_fixed_policy_ignores_load(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    before = torch.get_num_threads()
    with threads.torch_threads(1) as policy:
        assert policy.fixed and policy.refresh() == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
