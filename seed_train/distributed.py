"""Data-parallel helpers for ``accelerate launch -m seed_train ...`` (the weight layouts: :mod:`seed_train.parallel`).

The rules that keep N processes equivalent to one:

1. **Rollouts are sharded by whole groups** (:func:`shard_groups`): every GRPO group lives on one
   rank, so its advantages (group-normalised returns) are computed from the whole group locally, exactly
   as on one process.
2. **The loss is a token mean over the global batch**: each rank divides its token sum by the token
   count of *all* ranks over the world size (``seed_loss(token_count=...)``), so averaging gradients
   over ranks yields the full-batch token-mean gradient even when ranks hold different token counts.
3. **Seeds never depend on the rank**: all ranks sample the same tasks from the run seed, then shard
   them; each episode samples with its own seed (``EpisodeJob.sampling_seed``), so it plays the same on
   whichever rank and in whichever batch it lands.
4. **Gradients are averaged over ranks after each backward** (:func:`all_reduce_grads` for replicated
   weights, which is what DDP does, done explicitly so generation, peft's adapter switches and scoring
   keep using the plain module; FSDP2 and DeepSpeed ZeRO average in their own collectives). Every rank
   takes the same number of optimizer steps.

``accelerate launch --multi_gpu --num_processes N -m seed_train train ...`` (or ``torchrun
--nproc_per_node N -m seed_train train ...``; on CPU too) sets ``RANK`` / ``WORLD_SIZE`` /
``MASTER_ADDR``; :func:`init_from_env` then starts the process group (gloo on CPU, nccl on CUDA). With
one process every helper is the identity, so the single-process trainer is unchanged.
"""
from __future__ import annotations

import atexit
import os
import sys
import threading
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    import torch

T = TypeVar("T")


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the data-parallel world."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def dist_info() -> DistInfo:
    """Rank and world size from torch.distributed (initialised by accelerate), else a single process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return DistInfo(dist.get_rank(), dist.get_world_size())
    return DistInfo()


def shard_groups(items: Sequence[T], group_ids: Sequence[Hashable], info: DistInfo) -> list[T]:
    """This rank's items: whole groups, dealt out contiguously (groups in first-seen order).

    Ranks get ``ceil`` or ``floor`` of ``groups / world_size`` groups; a group is never split. Make the
    number of groups a multiple of the world size for equal work (the trainer's ``tasks_per_iteration``).
    """
    if len(items) != len(group_ids):
        raise ValueError(f"shard_groups: {len(items)} items but {len(group_ids)} group ids")
    order: list[Hashable] = list(dict.fromkeys(group_ids))
    per, extra = divmod(len(order), info.world_size)
    start = info.rank * per + min(info.rank, extra)
    mine = set(order[start:start + per + (1 if info.rank < extra else 0)])
    return [item for item, g in zip(items, group_ids) if g in mine]


def all_reduce_sum(value: "torch.Tensor") -> "torch.Tensor":
    """Sum over ranks (no grad flows through it); identity on one process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        value = value.detach().clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def sharded_range(n: int, info: DistInfo) -> range:
    """Indices ``[start, stop)`` of this rank's contiguous share of ``n`` items (e.g. eval tasks)."""
    per, extra = divmod(n, info.world_size)
    start = info.rank * per + min(info.rank, extra)
    return range(start, start + per + (1 if info.rank < extra else 0))


def init_from_env(device: str = "cpu") -> DistInfo:
    """Start the process group when launched on several processes (``WORLD_SIZE`` > 1); else one process.

    Returns this process's :class:`DistInfo`. Backend: nccl for CUDA devices, gloo otherwise.
    """
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
        # Destroyed before the interpreter tears down: a gloo group left to exit can abort the process
        # (SIGABRT, "terminate called without an active exception": its worker threads outlive Python,
        # pytorch/pytorch#190489). At exit, not after the run: an experiment runs several arms per process.
        # The finalization after it can still abort: the CLI ends a launched rank by end_launched_rank.
        atexit.register(_destroy_process_group)
    return dist_info()


def _destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def end_launched_rank(code: int) -> None:
    """Ends a rank of a multi-process launch with ``code`` now, once its work is written; returns at once
    where no process group was started (one process), so an in-process caller goes on there.

    What a normal exit does before finalizing is done first: the non-daemon threads are joined, the exit
    handlers run (the process group's destruction above, logging's flush, temporary folders), stdout and
    stderr are flushed; then ``os._exit`` skips the interpreter's finalization.
    That finalization is where a gloo rank could still abort after a finished run (SIGABRT, "terminate
    called without an active exception", seen once in CI under load with FSDP2, never reproduced). The
    likely cause is the one pytorch/pytorch#179291 describes: a gloo worker thread that releases its last
    work's tensors after finalization began takes a GIL that is gone (FSDP2's DeviceMesh can keep the group
    alive past ``destroy_process_group``). Nothing the run wrote is lost: its files are closed by then, and
    the joins, handlers and flushes are what a normal exit would have done before finalizing.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    for thread in threading.enumerate():  # as a normal exit does first: wait for the non-daemon threads
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # (CPython's own call at exit; every handler once, errors printed, not raised)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # (a closed or vanished stream: nothing left to write there)
            pass
    os._exit(code)


def local_device(device: str) -> str:
    """``cuda`` means this process's GPU (``LOCAL_RANK``) under a multi-process launch."""
    if device == "cuda" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def all_reduce_grads(params: Iterable["torch.Tensor"]) -> None:
    """Average the gradients of ``params`` over ranks (one flat all-reduce); a missing grad counts as 0."""
    import torch
    import torch.distributed as dist

    world = _world()
    if world == 1:
        return
    params = [p for p in params if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.flatten() for p in params])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= world
    offset = 0
    for p in params:
        n = p.grad.numel()
        p.grad.copy_(flat[offset:offset + n].view_as(p.grad))
        offset += n


def gather_lists(items: list[Any]) -> list[Any]:
    """Every rank's list, concatenated in rank order (each rank gets all); identity on one process."""
    import torch.distributed as dist

    if _world() == 1:
        return list(items)
    parts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(parts, list(items))
    return [x for part in parts for x in part]


def mean_over_ranks(values: dict[str, float]) -> dict[str, float]:
    """Each statistic averaged over the ranks that report it; identity on one process."""
    if _world() == 1:
        return dict(values)
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for part in gather_lists([values]):
        for k, v in part.items():
            sums[k] = sums.get(k, 0.0) + float(v)
            counts[k] = counts.get(k, 0) + 1
    return {k: sums[k] / counts[k] for k in sums}


def sum_over_ranks(value: float) -> float:
    import torch

    return float(all_reduce_sum(torch.tensor(float(value), dtype=torch.float64)))


def max_over_ranks(value: int) -> int:
    """The largest of the ranks' values; identity on one process."""
    import torch
    import torch.distributed as dist

    if _world() == 1:
        return int(value)
    t = torch.tensor(int(value), dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t)


def barrier() -> None:
    import torch.distributed as dist

    if _world() > 1:
        dist.barrier()
