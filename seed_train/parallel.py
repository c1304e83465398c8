"""How the policy's weights live across data-parallel processes: replicated (DDP-style) or sharded (FSDP2).

The trainer asks one object, chosen at start from the ``accelerate launch`` configuration
(:func:`weight_layout_from_env`), four things, so the rest of the code has no per-strategy branches:

- ``prepare(model)``: lay the weights out (replicated: unchanged; sharded: ``fully_shard`` per
  transformer block and at the root, in place, so the module keeps its class and peft methods);
- ``full_weights(model)``: a context in which every rank holds the whole model and may run any
  number of forward passes on its own (rollouts, the analyzer, teacher/reference scoring all differ in
  length between ranks). Sharded: every block is all-gathered once on entry and freed on exit — the
  same "full weights for generation, shards for training" split verl and OpenRLHF make;
- ``reduce_gradients(params)`` after each backward (replicated: the explicit all-reduce average of
  :func:`seed_train.distributed.all_reduce_grads`; sharded: nothing, FSDP reduce-scatters in backward);
- ``clip_grad_norm(params, max_norm)``: the global norm as a float.

Under FSDP every forward/backward of the update is a collective, so every rank must run the same
number of them: ``sharded`` tells :func:`seed_train.trainer.update_policy` to run a zero-weighted pass
on a rank whose share of a minibatch is empty.

Supported accelerate settings (``accelerate launch --config_file fsdp.yaml`` or ``--use_fsdp ...``):
``fsdp_version: 2``, ``fsdp_auto_wrap_policy`` (TRANSFORMER_BASED_WRAP with the model's
``_no_split_modules`` or ``fsdp_transformer_layer_cls_to_wrap``, SIZE_BASED_WRAP, NO_WRAP),
``fsdp_reshard_after_forward``, ``fsdp_offload_params``, ``fsdp_activation_checkpointing``; parsed by
accelerate's own ``FullyShardedDataParallelPlugin``. FSDP version 1 and DeepSpeed configs are refused at
start with the setting named (see ``docs/integrations-scale.md``).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import torch


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


class ReplicatedWeights:
    """Every rank keeps the whole model; gradients are averaged with one all-reduce (DDP's arithmetic)."""

    name = "replicated"
    sharded = False

    def prepare(self, model: "torch.nn.Module") -> "torch.nn.Module":
        return model

    @contextlib.contextmanager
    def full_weights(self, model: "torch.nn.Module") -> Iterator[None]:
        yield

    def reduce_gradients(self, params: Iterable["torch.Tensor"]) -> None:
        from seed_train.distributed import all_reduce_grads

        all_reduce_grads(params)

    def clip_grad_norm(self, params: list["torch.Tensor"], max_norm: float) -> float:
        import torch

        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))


class ShardedWeights(ReplicatedWeights):
    """FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and optimizer state sharded.

    ``plugin``: accelerate's ``FullyShardedDataParallelPlugin`` (auto-wrap policy, reshard, offload,
    mixed precision, activation checkpointing); ``device_type``: ``cpu`` (gloo) or ``cuda`` (nccl).
    """

    name = "fsdp"
    sharded = True

    def __init__(self, plugin: Any, device_type: str = "cpu"):
        self.plugin = plugin
        self.device_type = device_type

    def prepare(self, model: "torch.nn.Module") -> "torch.nn.Module":
        import torch.distributed as dist
        from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if self.plugin.activation_checkpointing:
            # transformers' own checkpointing (non-reentrant) works through peft and FSDP2.
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        mesh = init_device_mesh(self.device_type, (dist.get_world_size(),))
        kwargs = {"mesh": mesh, "reshard_after_forward": self.plugin.reshard_after_forward,
                  "offload_policy": self.plugin.cpu_offload,
                  "mp_policy": self.plugin.mixed_precision_policy or MixedPrecisionPolicy()}
        # The FSDP root is the transformers model: peft's generate() bypasses its own wrapper and calls the
        # inner model, and FSDP needs every forward to enter through the root.
        root = model.get_base_model() if hasattr(model, "get_base_model") else model
        policy = fsdp2_prepare_auto_wrap_policy(self.plugin, root)
        if policy is not None:
            # Inner blocks first (reverse pre-order), then the root holds what is left (embeddings, head).
            for module in reversed(list(root.modules())):
                if module is not root and policy(module):
                    fully_shard(module, **kwargs)
        fully_shard(root, **kwargs)
        return model

    @contextlib.contextmanager
    def full_weights(self, model: "torch.nn.Module") -> Iterator[None]:
        from torch.distributed.fsdp import FSDPModule

        groups = [m for m in model.modules() if isinstance(m, FSDPModule)]
        # Keep the gathered weights through forwards (no reshard after each), so ranks run any number.
        for m in groups:
            m.set_reshard_after_forward(False)
            m.unshard()
        try:
            yield
        finally:
            for m in groups:
                m.reshard()
                m.set_reshard_after_forward(self.plugin.reshard_after_forward)

    def reduce_gradients(self, params: Iterable["torch.Tensor"]) -> None:
        """FSDP already reduce-scattered (averaged) the gradients during backward."""

    def clip_grad_norm(self, params: list["torch.Tensor"], max_norm: float) -> float:
        import torch

        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def weight_layout_from_env(world_size: int, device: str = "cpu") -> ReplicatedWeights:
    """The layout ``accelerate launch`` asked for (its environment variables), validated at start.

    Raises ``ValueError`` naming the accelerate setting for what the trainer cannot honour.
    """
    if _env_true("ACCELERATE_USE_DEEPSPEED"):
        raise ValueError(
            "accelerate config 'distributed_type: DEEPSPEED' is not supported by the SEED trainer: its "
            "rollouts need whole weights on every rank between updates, which ZeRO's engine does not hand "
            "out. Use 'distributed_type: FSDP' with 'fsdp_version: 2' (parameters, gradients and optimizer "
            "state sharded) or plain multi-process data parallelism ('distributed_type: MULTI_GPU').")
    if not _env_true("ACCELERATE_USE_FSDP"):
        return ReplicatedWeights()
    from accelerate.utils import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin()  # parses the FSDP_* variables accelerate launch sets
    if plugin.fsdp_version != 2:
        raise ValueError(f"accelerate config 'fsdp_version: {plugin.fsdp_version}': the SEED trainer shards with "
                         "FSDP2 only; set 'fsdp_version: 2' (the other fsdp_* settings carry over)")
    if world_size < 2:
        return ReplicatedWeights()  # one process: nothing to shard across
    return ShardedWeights(plugin, "cuda" if device.startswith("cuda") else "cpu")
