"""Per-process memory and update time of the three weight layouts, side by side, on 2 CPU processes.

    python benchmarks/bench_weight_layouts.py [--model smollm2-135m] [--steps 3] [--processes 2]

For each layout the script launches ``accelerate launch`` with that layout's flags (replicated: plain
multi-process; FSDP2: ``--use_fsdp --fsdp_version 2``; ZeRO-2: ``--use_deepspeed --zero_stage 2``,
skipped without deepspeed) and runs, in every process, the trainer's own update path
(:mod:`seed_train.parallel`): full fine-tuning, ``--steps`` AdamW updates on a random batch of 4
prompts x 64 tokens with 32-token responses. Each process reports the bytes of its own share of the
parameters, of the gradients still held after the step (``zero_grad(set_to_none=False)``, so replicated
and FSDP keep theirs; ZeRO-2 reduces into transient buckets), and of the optimizer state (AdamW's moments;
for ZeRO also its fp32 master partition), and its peak resident memory (``ru_maxrss``, which includes
loading the whole model once before sharding). Prints a table with each layout's ratio to replicated.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

LAYOUTS = {
    "replicated (DDP arithmetic)": [],
    "FSDP2": ["--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP"],
    "DeepSpeed ZeRO-2": ["--use_deepspeed", "--zero_stage", "2"],
}


def _tensor_bytes(t) -> int:
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def _optimizer_state_bytes(optimizer) -> int:
    inner = getattr(optimizer, "optimizer", optimizer)  # DeepSpeed wraps the base AdamW
    total = sum(_tensor_bytes(v) for state in inner.state.values() for v in state.values() if hasattr(v, "numel"))
    # ZeRO keeps its fp32 master partition outside the base optimizer's state.
    for part in getattr(optimizer, "single_partition_of_fp32_groups", []):
        total += _tensor_bytes(part)
    return total


def worker(model_name: str, steps: int) -> None:
    import torch

    from seed_train.distributed import dist_info, gather_lists, init_from_env
    from seed_train.parallel import weight_layout_from_env
    from seed_train.policy import load_policy
    from seed_train.scoring import response_logprobs

    info = init_from_env("cpu")
    layout = weight_layout_from_env(info.world_size, "cpu")
    model, _ = load_policy(model_name)
    model = layout.prepare(model)
    optimizer = layout.make_optimizer(model, 1e-5, 1.0)
    params = [p for p in model.parameters() if p.requires_grad]
    gen = torch.Generator().manual_seed(info.rank)
    vocab = model.config.vocab_size
    times = []
    model.train()
    for _ in range(steps):
        prompts = torch.randint(3, vocab, (4, 64), generator=gen).tolist()
        responses = torch.randint(3, vocab, (4, 32), generator=gen).tolist()
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=False)
        logprobs, mask = response_logprobs(model, prompts, responses, batch_size=4, grad=True)
        layout.backward(-(logprobs * mask).sum() / mask.sum())
        layout.step(optimizer, params, 1.0)
        times.append(time.perf_counter() - t0)
    # Gradients still held after the step (ZeRO-2 reduces them into transient buckets, none are kept).
    grads = sum(_tensor_bytes(p.grad) for p in params if p.grad is not None)
    row = {"rank": dist_info().rank, "layout": layout.name,
           "param_bytes": sum(_tensor_bytes(p) for p in model.parameters()), "grad_bytes": grads,
           "optimizer_bytes": _optimizer_state_bytes(optimizer),
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           "step_s": sorted(times)[len(times) // 2]}
    rows = gather_lists([row])
    if dist_info().is_main:
        print("RESULT " + json.dumps(rows), flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.worker:
        return worker(a.model, a.steps)

    from seed_train.policy import resolve_model

    model = str(resolve_model(a.model))  # convert an embedded model once, before the processes start
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or shutil.which("accelerate")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    print(f"cpus: {os.cpu_count()}, load average: {os.getloadavg()[0]:.1f}, model {a.model}, "
          f"{a.processes} processes, full fine-tuning, {a.steps} updates")
    results = {}
    for name, flags in LAYOUTS.items():
        if "--use_deepspeed" in flags:
            try:
                import deepspeed  # noqa: F401
            except ImportError:
                print(f"{name}: skipped (pip install 'seed-gym[deepspeed]')")
                continue
        cmd = [accelerate, "launch", *flags, "--num_processes", str(a.processes), "--num_machines", "1",
               "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_free_port()),
               __file__, "--worker", "--model", model, "--steps", str(a.steps)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            print(f"{name}: failed\n{done.stderr[-2000:]}")
            continue
        results[name] = json.loads(lines[-1][len("RESULT "):])
        print(f"{name}: done", flush=True)
    base = results.get("replicated (DDP arithmetic)")
    mib = 2 ** 20
    print("\n| layout | params MiB / process | grads MiB | optimizer state MiB | params+grads+optimizer | "
          "peak RSS MiB | update s (median) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, rows in results.items():
        r = max(rows, key=lambda x: x["param_bytes"] + x["grad_bytes"] + x["optimizer_bytes"])  # worst rank
        total = r["param_bytes"] + r["grad_bytes"] + r["optimizer_bytes"]
        ratio = ""
        if base is not None:
            b = max(base, key=lambda x: x["param_bytes"] + x["grad_bytes"] + x["optimizer_bytes"])
            ratio = f" ({total / (b['param_bytes'] + b['grad_bytes'] + b['optimizer_bytes']):.2f}x)"
        step = max(x["step_s"] for x in rows)
        print(f"| {name} | {r['param_bytes'] / mib:.0f} | {r['grad_bytes'] / mib:.0f} | {r['optimizer_bytes'] / mib:.0f} | "
              f"{total / mib:.0f}{ratio} | {max(x['peak_rss_bytes'] for x in rows) / mib:.0f} | {step:.2f} |")


if __name__ == "__main__":
    main()
