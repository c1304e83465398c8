"""How the policy's weights live across data-parallel processes: replicated, FSDP2 shards or DeepSpeed ZeRO.

The trainer asks one object, chosen at start from the ``accelerate launch`` configuration
(:func:`weight_layout_from_env`), for these things, so the rest of the code has no per-strategy branches:

- ``prepare(model)`` lays the weights out (replicated and ZeRO: unchanged; FSDP2: ``fully_shard`` per
  transformer block and at the root, in place, so the module keeps its class and peft methods);
- ``make_optimizer`` builds AdamW over the trainable parameters (ZeRO: wrapped by the DeepSpeed engine);
- ``full_weights(model)``: a context in which every rank holds the whole model and may run any number of
  forward passes on its own (rollouts, the analyzer, teacher/reference scoring all differ in length
  between ranks). FSDP2: every block is all-gathered once on entry and freed on exit, the same "full
  weights to generate, shards to train" split verl and OpenRLHF make; the others: nothing to do;
- ``backward(loss, last=True)`` and ``step(optimizer, params, max_norm)``: gradient averaging over ranks
  (replicated: one all-reduce, DDP's arithmetic; FSDP2: reduce-scatter during backward; ZeRO: the engine),
  clipping and the optimizer step; returns the global gradient norm. Gradients accumulate over several
  backward passes before a step (the trainer's micro-batches); ``last`` marks the final one (ZeRO reduces
  its partitions then);
- ``optimizer_state`` / ``load_optimizer_state`` for checkpoints.

``lockstep``: every forward/backward of the update is a collective (FSDP2, ZeRO), so a rank whose share
of a minibatch is empty runs a zero-weighted pass (``backward_no_samples``).
``wraps_model``: the layout hooks into the module (FSDP groups, a DeepSpeed engine's gradient hooks), so
after Stage 1 and after Stage 2 the trainer rebuilds a plain model from the gathered weights (a LoRA merge,
the final evaluation and the saved model then run the single-process code).

Accelerate's own plugins parse the launch settings (``accelerate launch --config_file X.yaml`` or the
``--use_fsdp`` / ``--use_deepspeed`` flags). Honoured: ``fsdp_version: 2`` with
``fsdp_auto_wrap_policy`` (TRANSFORMER_BASED_WRAP with the model's ``_no_split_modules`` or
``fsdp_transformer_layer_cls_to_wrap``, SIZE_BASED_WRAP, NO_WRAP), ``fsdp_reshard_after_forward``,
``fsdp_offload_params``, ``fsdp_activation_checkpointing``; DeepSpeed ``zero_stage`` 1 or 2 with its
``gradient_clipping``, offload and precision settings. Refused at start with the setting named
(:class:`seed_train.config.SetupError`): ``fsdp_version: 1``, ZeRO stage 3 (it partitions the
parameters every rollout needs whole: shard with FSDP2 instead), a DeepSpeed ``optimizer``/``scheduler``.
"""
from __future__ import annotations

import math

import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from seed_train.config import SetupError

if TYPE_CHECKING:  # pragma: no cover
    import torch


def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes")


class ReplicatedWeights:
    """Every rank keeps the whole model; gradients are averaged with one all-reduce (DDP's arithmetic)."""

    name = "replicated"
    wraps_model = False  # hooks into the module (FSDP groups, a DeepSpeed engine): rebuilt plain to go on
    lockstep = False  # every forward/backward of the update is a collective

    def prepare(self, model: "torch.nn.Module") -> "torch.nn.Module":
        return model

    def make_optimizer(self, model: "torch.nn.Module", lr: float, grad_clip: float) -> "torch.optim.Optimizer":
        import torch

        return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)

    @contextlib.contextmanager
    def full_weights(self, model: "torch.nn.Module") -> Iterator[None]:
        yield

    def backward(self, loss: "torch.Tensor", last: bool = True) -> None:
        loss.backward()  # (gradients accumulate until the step; the all-reduce runs in step())

    def backward_no_samples(self, model: "torch.nn.Module", last: bool = True) -> None:
        """This rank has nothing in the current step. Replicated: nothing to do (its missing gradients count
        as zeros in the average). ``lockstep`` layouts: forward and backward are collectives, so run a
        zero-weighted pass on one token to keep step with the other ranks."""
        if self.lockstep:
            from seed_train.scoring import response_logprobs

            logprobs, _ = response_logprobs(model, [[0]], [[0]], grad=True)
            self.backward(logprobs.sum() * 0.0, last=last)

    def step(self, optimizer: "torch.optim.Optimizer", params: list["torch.Tensor"], max_norm: float) -> float:
        """Average the gradients over ranks, clip them to ``max_norm``, step; returns the pre-clip norm.

        A non-finite norm (a NaN/inf loss or gradient) skips the step: the weights and the optimizer state
        stay as they were. The norm is the averaged gradients' (sharded: the global one), the same on every
        rank, so every rank skips together."""
        self.reduce_gradients(params)
        norm = self.clip_grad_norm(params, max_norm)
        if math.isfinite(norm):
            optimizer.step()
        return norm

    def reduce_gradients(self, params: Iterable["torch.Tensor"]) -> None:
        from seed_train.distributed import all_reduce_grads

        all_reduce_grads(params)

    def clip_grad_norm(self, params: list["torch.Tensor"], max_norm: float) -> float:
        import torch

        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))

    def optimizer_state(self, model: "torch.nn.Module", optimizer: "torch.optim.Optimizer") -> dict[str, Any]:
        """For a checkpoint; a collective under data parallelism (call it on every rank)."""
        from seed_train.checkpoint import optimizer_state

        return optimizer_state(model, optimizer)

    def load_optimizer_state(self, model: "torch.nn.Module", optimizer: "torch.optim.Optimizer",
                             state: dict[str, Any]) -> None:
        from seed_train.checkpoint import load_optimizer_state

        if DEEPSPEED_STATE in state:
            raise SetupError(f"resume: this checkpoint's optimizer state is DeepSpeed ZeRO's, partitioned over "
                             f"{len(state[DEEPSPEED_STATE])} processes; resume it with the same DeepSpeed launch")
        load_optimizer_state(model, optimizer, state)


DEEPSPEED_STATE = "deepspeed_zero_partitions"  # key of a DeepSpeed checkpoint's per-rank optimizer states


class DeepSpeedZeroWeights(ReplicatedWeights):
    """DeepSpeed ZeRO stage 1 (optimizer state partitioned) or 2 (also gradients), from an accelerate config.

    Parameters stay whole on every rank (rollouts and scoring use them as they are); the engine reduces
    the gradients, clips them (``gradient_clipping``, ``auto`` = the trainer's ``grad_clip``) and steps
    the trainer's AdamW on each rank's partition, then all-gathers the new weights. ``config``: the
    DeepSpeed config dict from accelerate's ``DeepSpeedPlugin`` (``auto`` values are filled here).
    """

    name = "deepspeed"
    wraps_model = True
    lockstep = True

    def __init__(self, config: dict[str, Any]):
        stage = int(config.get("zero_optimization", {}).get("stage", 0))
        if stage not in (1, 2):
            raise SetupError(
                f"deepspeed config 'zero_optimization.stage: {stage}': the SEED trainer supports ZeRO stages 1 and 2 "
                "(stage 3 partitions the parameters, which every rollout needs whole: use an FSDP config, "
                "'fsdp_version: 2', to shard parameters)")
        for section in ("optimizer", "scheduler"):
            if section in config:
                raise SetupError(f"deepspeed config '{section}': the trainer builds AdamW with --lr and no scheduler; "
                                 f"remove the '{section}' section")
        self.config = config
        self.engine: Any = None

    def make_optimizer(self, model: "torch.nn.Module", lr: float, grad_clip: float) -> "torch.optim.Optimizer":
        import deepspeed
        import torch.distributed as dist

        config = {k: v for k, v in self.config.items() if v != "auto"}
        # The trainer forms its own minibatches: one engine step per minibatch, no accumulation.
        config.update(train_micro_batch_size_per_gpu=1, gradient_accumulation_steps=1,
                      train_batch_size=dist.get_world_size())
        if self.config.get("gradient_clipping", "auto") == "auto":
            config["gradient_clipping"] = grad_clip
        for precision in ("fp16", "bf16"):  # 'auto' here means: the model's own dtype (--dtype)
            if isinstance(config.get(precision), dict) and config[precision].get("enabled") == "auto":
                del config[precision]
        base = super().make_optimizer(model, lr, grad_clip)
        self.engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=base, config=config,
                                                            dist_init_required=False)
        return optimizer

    def backward(self, loss: "torch.Tensor", last: bool = True) -> None:
        # Accumulating micro-batches: the engine reduces the gradients into its partitions at the boundary
        # only (the DeepSpeed API accelerate uses for the same purpose); the loss is not rescaled (the
        # trainer's token-mean denominators are the minibatch's already).
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss)

    def step(self, optimizer: "torch.optim.Optimizer", params: list["torch.Tensor"], max_norm: float) -> float:
        # The engine applies its own rule to a non-finite gradient (its fp16 loss scaler skips the step).
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else 0.0

    def optimizer_state(self, model: "torch.nn.Module", optimizer: "torch.optim.Optimizer") -> dict[str, Any]:
        """Every rank's ZeRO partition, in rank order (DeepSpeed's own optimizer state dicts)."""
        from seed_train.distributed import gather_lists

        return {DEEPSPEED_STATE: gather_lists([optimizer.state_dict()])}

    def load_optimizer_state(self, model: "torch.nn.Module", optimizer: "torch.optim.Optimizer",
                             state: dict[str, Any]) -> None:
        import torch.distributed as dist

        parts = state.get(DEEPSPEED_STATE)
        if parts is None or len(parts) != dist.get_world_size():
            got = "a non-DeepSpeed optimizer state" if parts is None else f"ZeRO partitions of {len(parts)} processes"
            raise SetupError(f"resume: the checkpoint holds {got}; a DeepSpeed run over {dist.get_world_size()} "
                             "processes resumes only its own kind (the weights alone load anywhere)")
        optimizer.load_state_dict(parts)  # ZeRO picks this rank's partition from the list


class ShardedWeights(ReplicatedWeights):
    """FSDP2 (``torch.distributed.fsdp.fully_shard``): parameters, gradients and optimizer state sharded.

    ``plugin``: accelerate's ``FullyShardedDataParallelPlugin`` (auto-wrap policy, reshard, offload,
    mixed precision, activation checkpointing); ``device_type``: ``cpu`` (gloo) or ``cuda`` (nccl).
    """

    name = "fsdp"
    wraps_model = True
    lockstep = True

    def __init__(self, plugin: Any, device_type: str = "cpu"):
        self.plugin = plugin
        self.device_type = device_type

    def prepare(self, model: "torch.nn.Module") -> "torch.nn.Module":
        import torch.distributed as dist
        from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if self.plugin.activation_checkpointing:
            from seed_train.policy import enable_activation_checkpointing

            enable_activation_checkpointing(model)
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
        from accelerate.utils import DeepSpeedPlugin

        plugin = DeepSpeedPlugin()  # parses ACCELERATE_DEEPSPEED_* (or the config file accelerate names)
        layout = DeepSpeedZeroWeights(plugin.deepspeed_config)  # validates the stage and sections
        try:
            import deepspeed  # noqa: F401
        except ImportError:
            raise SetupError("accelerate config 'distributed_type: DEEPSPEED' needs deepspeed: "
                             "pip install 'seed-gym[deepspeed]'") from None
        return layout if world_size > 1 else ReplicatedWeights()
    if not _env_true("ACCELERATE_USE_FSDP"):
        return ReplicatedWeights()
    from accelerate.utils import FullyShardedDataParallelPlugin

    plugin = FullyShardedDataParallelPlugin()  # parses the FSDP_* variables accelerate launch sets
    if plugin.fsdp_version != 2:
        raise SetupError(f"accelerate config 'fsdp_version: {plugin.fsdp_version}': the SEED trainer shards with "
                         "FSDP2 only; set 'fsdp_version: 2' (the other fsdp_* settings carry over)")
    if world_size < 2:
        return ReplicatedWeights()  # one process: nothing to shard across
    return ShardedWeights(plugin, "cuda" if device.startswith("cuda") else "cpu")
