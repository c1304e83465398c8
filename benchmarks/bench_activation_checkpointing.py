"""Peak memory of one update-sized forward and backward with and without activation checkpointing.

    python benchmarks/bench_activation_checkpointing.py --device cuda --shape-of build/smollm2-shape --qwen-shape 1.5b

One pass of ``response_logprobs(..., grad=True)`` (the update's scoring: shared prompt heads requested, so
the checkpointed pass shows what it gives up) and its backward over ``--rows`` rows of random prompt and
response tokens, on a randomly initialised model of Qwen2.5's layer sizes (``bench_device_iteration.py``'s
``--qwen-shape``; bf16, full fine-tuning), once without and once with
``seed_train.policy.enable_activation_checkpointing``, each variant in a fresh process. Prints each one's peak
memory (CUDA: the allocator's peak; CPU: the process's peak resident set) and the sum of the log-probs,
which must agree: checkpointing recomputes, it does not change the numbers. A pass's time includes its
process's first-call warm-up. ``--layers`` cuts the model's depth for a quick run on a CPU.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a bare checkout too
sys.path.insert(0, str(Path(__file__).resolve().parent))


def one_pass(args: argparse.Namespace, checkpointing: bool) -> dict:
    """The measurement of one variant, in this process."""
    import time

    import torch
    from bench_device_iteration import qwen_config
    from transformers import AutoModelForCausalLM

    from seed_train.policy import enable_activation_checkpointing
    from seed_train.scoring import response_logprobs

    config = qwen_config(args.qwen_shape, Path(args.shape_of))
    if args.layers:
        config.num_hidden_layers = args.layers
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(100, 40_000, (args.prompt_tokens,), generator=g).tolist() for _ in range(args.rows)]
    responses = [torch.randint(100, 40_000, (args.response_tokens,), generator=g).tolist() for _ in range(args.rows)]
    torch.manual_seed(0)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    if checkpointing:
        enable_activation_checkpointing(model)
    model.train()
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    t0 = time.perf_counter()
    logprobs, mask = response_logprobs(model, prompts, responses, batch_size=args.rows, grad=True,
                                       prefix_groups=[0] * args.rows)
    (logprobs * mask).sum().backward()
    if cuda:
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {"checkpointing": checkpointing, "peak_gib": peak / 2**30, "weights_gib": weights / 2**30,
            "seconds": time.perf_counter() - t0, "logprob_sum": float((logprobs * mask).sum())}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--shape-of", required=True, help="a tokenizer folder (bench_device_iteration.py --prepare-shape)")
    p.add_argument("--qwen-shape", default="1.5b", choices=("0.5b", "1.5b"))
    p.add_argument("--layers", type=int, default=0, help="this many layers instead of the shape's (0: all)")
    p.add_argument("--rows", type=int, default=32, help="rows in the pass (the paper recipes' micro-batch: 32)")
    p.add_argument("--prompt-tokens", type=int, default=300)
    p.add_argument("--response-tokens", type=int, default=512)
    p.add_argument("--variant", choices=("off", "on"), default=None, help=argparse.SUPPRESS)  # the child's
    args = p.parse_args(argv)
    if args.variant:
        print(json.dumps(one_pass(args, args.variant == "on")))
        return
    argv = sys.argv[1:] if argv is None else argv
    print(f"{args.rows} rows x ({args.prompt_tokens} + {args.response_tokens}) tokens, Qwen2.5-{args.qwen_shape}'s "
          f"shape{f' cut to {args.layers} layers' if args.layers else ''}, bf16, full fine-tuning, {args.device}\n")
    print("| activation checkpointing | peak GiB | weights GiB | pass s | sum of log-probs |\n|---|---:|---:|---:|---:|")
    for variant in ("off", "on"):
        done = subprocess.run([sys.executable, __file__, *argv, "--variant", variant], capture_output=True,
                              text=True, check=True)
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(f"| {variant} | {r['peak_gib']:.1f} | {r['weights_gib']:.1f} | {r['seconds']:.2f} | "
              f"{r['logprob_sum']:.4f} |")


if __name__ == "__main__":
    main()
