"""How many CPU threads torch may use, chosen from what this process can really run on.

torch's default is one intra-op thread per core the machine reports. That oversubscribes whenever the
cores are not all ours: a CPU affinity mask or a container's CPU quota smaller than the machine,
several data-parallel ranks on one machine, or another busy process. OpenMP threads that wait for each
other at every matrix product then spin against the other work, and a step can take several times
longer than with fewer threads (``benchmarks/bench_threads.py`` measures it).

The policy (``--threads 0``, the default): the CPUs this process may use (the smaller of its affinity
mask and its cgroup quota), divided among the data-parallel ranks of this machine, less the CPUs other
processes keep busy (measured from /proc/stat, net of this process's own CPU time, and re-measured at
every phase: each evaluation, Stage 1, each iteration), at least 1. An explicit ``--threads N`` wins,
then ``OMP_NUM_THREADS`` where it is set. tokenizers' own thread pool is turned off for the run
(``TOKENIZERS_PARALLELISM=false``): it would compete with torch's threads and warns after a fork.
The setting is scoped: :func:`torch_threads` restores the previous count on exit, so a run called from
Python (or a test) leaves torch as it found it.
"""
from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator
from pathlib import Path

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_cpu_quota(root: Path = _CGROUP_ROOT) -> float | None:
    """CPUs granted by the cgroup quota (cgroup v2 ``cpu.max`` or v1 ``cpu.cfs_quota_us``), None if unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota_us / period_us if quota_us > 0 and period_us > 0 else None
    except (OSError, ValueError):
        return None


def usable_cpus(root: Path = _CGROUP_ROOT) -> int:
    """The CPUs this process may run on: its affinity mask, capped by the cgroup quota (rounded up), >= 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(root)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def local_ranks() -> int:
    """Data-parallel processes on this machine (torchrun / accelerate set LOCAL_WORLD_SIZE)."""
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def default_threads(requested: int = 0) -> int:
    """``requested`` if > 0; else ``OMP_NUM_THREADS`` when set (the user's explicit choice, as torch reads
    it); else the usable CPUs shared among this machine's ranks (>= 1)."""
    if requested > 0:
        return requested
    return _omp_threads() or max(1, usable_cpus() // local_ranks())


def _cpu_ticks(cpus: set[int], stat: Path = Path("/proc/stat")) -> tuple[int, int] | None:
    """(busy, total) clock ticks of ``cpus`` since boot, from /proc/stat; None where it cannot be read."""
    busy = total = 0
    try:
        for line in stat.read_text().splitlines():
            name, *values = line.split()
            if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus):
                continue
            ticks = [int(v) for v in values]
            idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
            busy += sum(ticks[:8]) - idle  # user nice system idle iowait irq softirq steal (guest is in user)
            total += sum(ticks[:8])
    except (OSError, ValueError, IndexError):
        return None
    return (busy, total) if total else None


class LoadProbe:
    """CPUs kept busy by other processes since the last reading: the busy time of this process's CPUs
    (/proc/stat) less this process's own CPU time, over the wall time between two readings."""

    def __init__(self, cpus: set[int] | None = None) -> None:
        try:
            self.cpus = cpus if cpus is not None else set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self.cpus = set(range(os.cpu_count() or 1))
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last = self._read()

    def _read(self) -> tuple[float, float, float] | None:
        ticks = _cpu_ticks(self.cpus)
        if ticks is None:
            return None
        return ticks[0] / self._tick, time.process_time(), time.monotonic()

    def others_busy(self) -> float | None:
        """Average CPUs used by other processes since the previous call (or construction); None if unknown."""
        now = self._read()
        last, self._last = self._last, now
        if now is None or last is None or now[2] - last[2] < 0.05:
            return None
        busy, own = now[0] - last[0], now[1] - last[1]
        return max(0.0, (busy - own) / (now[2] - last[2]))


def threads_for_load(usable: int, others_busy: float | None) -> int:
    """Threads that fit beside other work: a core another process keeps more than 20% busy is not ours.

    Erring low on purpose: an OpenMP thread that shares its core with another process makes every
    parallel region wait for it (``benchmarks/bench_threads.py``: many times slower), while one thread
    too few costs at most that thread's share.
    """
    if others_busy is None:
        return usable
    return max(1, min(usable, usable - math.ceil(others_busy - 0.2)))


class ThreadPolicy:
    """Chooses torch's intra-op threads, and re-chooses them at phase boundaries (:meth:`refresh`).

    ``requested > 0`` (``--threads N``) or ``OMP_NUM_THREADS`` fix the count. Otherwise the usable CPUs
    (affinity, cgroup quota, shared among local ranks) less the CPUs other processes kept busy since the
    last refresh (:class:`LoadProbe`), at least 1.
    """

    def __init__(self, requested: int = 0, probe_s: float = 0.3) -> None:
        self.fixed = requested > 0 or _omp_threads() > 0
        self.usable = default_threads(requested)
        self.probe = None if self.fixed else LoadProbe()
        if self.probe is not None and probe_s > 0:
            time.sleep(probe_s)  # a first reading of the other processes' load before any work
        self.threads = self.refresh()

    def refresh(self) -> int:
        """Set torch's thread count for the next phase; returns it."""
        import torch

        self.threads = self.usable if self.probe is None else threads_for_load(self.usable, self.probe.others_busy())
        torch.set_num_threads(self.threads)
        return self.threads


def _omp_threads() -> int:
    try:
        return max(0, int(os.environ.get("OMP_NUM_THREADS", "0")))
    except ValueError:
        return 0


_active: list[ThreadPolicy] = []  # the policy of the run in progress (innermost last)


def refresh_threads() -> int | None:
    """At a phase boundary (an evaluation, Stage 1, an iteration): re-choose the thread count of the run in
    progress; None (and nothing changed) outside :func:`torch_threads`."""
    return _active[-1].refresh() if _active else None


@contextlib.contextmanager
def torch_threads(requested: int = 0) -> Iterator[ThreadPolicy]:
    """Run the body under a :class:`ThreadPolicy` (yielded, for refreshes); restores torch's count after."""
    import torch

    previous = torch.get_num_threads()
    previous_tokenizers = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _active.append(ThreadPolicy(requested))
    try:
        yield _active[-1]
    finally:
        _active.pop()
        torch.set_num_threads(previous)
        if previous_tokenizers is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = previous_tokenizers
