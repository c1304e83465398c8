"""Checkpoints for exact resume: trainable weights, optimizer, RNG state, iteration.

Only trainable tensors are saved (LoRA adapters, or every weight under full fine-tuning), as
safetensors; the frozen base is rebuilt from the model name. Task sampling and generation seeds are
derived from (seed, iteration), so the iteration number is the data position.

Sharded models (FSDP2, :mod:`seed_train.parallel`) save the same files: weights are gathered to full
tensors and the optimizer state is saved in torch.distributed.checkpoint's full, name-keyed form, so
a checkpoint resumes under any process count or weight layout. Under data parallelism every rank
calls the gathering functions (they are collectives); only the main process writes.
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from seed_train.config import SetupError


def _full(p: torch.Tensor) -> torch.Tensor:
    """A parameter's whole value (a sharded DTensor is all-gathered: a collective)."""
    return p.full_tensor() if hasattr(p, "full_tensor") else p


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Full copies (on CPU) of the trainable parameters, by name."""
    return {n: _full(p.detach()).cpu().clone().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Copy full tensors into the named parameters (each rank keeps its shard of a sharded one)."""
    params = dict(model.named_parameters())
    missing = sorted(set(state) - set(params))
    if missing:
        raise SetupError(f"checkpoint has weights the model lacks (different model or LoRA settings?): {missing[:3]}")
    with torch.no_grad():
        for name, value in state.items():
            p = params[name]
            value = value.to(p.device, p.dtype)
            if hasattr(p, "device_mesh"):  # DTensor: keep this rank's slice, laid out like the parameter
                from torch.distributed.tensor import distribute_tensor

                value = distribute_tensor(value, p.device_mesh, p.placements)
            p.copy_(value)


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer state, full and keyed by parameter name (independent of sharding and world size)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=False))


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


def save_checkpoint(folder: str | Path, trainable: dict[str, torch.Tensor], optimizer: dict[str, Any],
                    iteration: int, extra: dict[str, Any] | None = None) -> Path:
    """Write ``trainable`` (:func:`trainable_state`) and ``optimizer`` (:func:`optimizer_state`) atomically
    (temp folder, then rename), so a killed save never leaves a half checkpoint."""
    folder = Path(folder)
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(trainable, str(tmp / "trainable.safetensors"))
    torch.save({"optimizer": optimizer, "torch_rng": torch.get_rng_state()}, tmp / "state.pt")
    (tmp / "meta.json").write_text(json.dumps({"iteration": iteration, **(extra or {})}, indent=1))
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(tmp, folder)
    return folder


def load_checkpoint(folder: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    load_optimizer: Callable[..., None] | None = None) -> dict[str, Any]:
    """Restore weights, optimizer and torch RNG; returns the meta dict (``iteration`` and extras).

    ``load_optimizer(model, optimizer, state)`` restores the optimizer state (default
    :func:`load_optimizer_state`; the trainer passes its weight layout's, see :mod:`seed_train.parallel`).
    """
    folder = Path(folder)
    if not (folder / "meta.json").is_file():
        raise SetupError(f"resume: {folder} is not a checkpoint folder (no meta.json)")
    load_trainable_state(model, load_file(str(folder / "trainable.safetensors")))
    state = torch.load(folder / "state.pt", weights_only=False)
    (load_optimizer or load_optimizer_state)(model, optimizer, state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    return json.loads((folder / "meta.json").read_text())
