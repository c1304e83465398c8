"""benchmarks/bench_device_iteration.py: the Qwen2.5 shapes it builds and the settings its recipe mode runs."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_device_iteration as bench

from seed_train.config import SeedConfig, _read_yaml
from seed_train.tiny import cached_tiny_model


@pytest.mark.parametrize("size, published_billions", [("0.5b", 0.49), ("1.5b", 1.54)])
def test_qwen_shapes_have_the_published_parameter_counts(size, published_billions):
    # Qwen2.5-0.5B-Instruct and -1.5B-Instruct's model cards: 0.49 B and 1.54 B parameters.
    from transformers import AutoModelForCausalLM

    config = bench.qwen_config(size, cached_tiny_model(seed=0))
    with torch.device("meta"):  # sizes only: no memory, no init
        model = AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) / 1e9 == pytest.approx(published_billions, abs=0.005)
    assert config.vocab_size == 151_936


def _args(**kw):
    base = {"device": None, "dtype": None, "iterations": 1, "threads": 1, "recipe": None, "tasks_per_iteration": None,
            "max_steps": None, "stage1_demos": 16}
    return argparse.Namespace(**{**base, **kw})


def test_recipe_mode_keeps_the_recipes_device_dtype_and_batches(tmp_path):
    # The first device run of this mode trained on the CPU: --device's default overrode the recipe's cuda.
    recipe = _read_yaml("sokoban-paper")
    args = _args(recipe="sokoban-paper", tasks_per_iteration=4, max_steps=3)
    args.dtype, args.device = recipe["dtype"], recipe["device"]  # as main() resolves them
    cfg = SeedConfig.from_dict(bench.run_settings(args, recipe, "smollm2-135m", tmp_path))
    assert (cfg.device, cfg.dtype, cfg.lora) == ("cuda", "bfloat16", False)
    assert (cfg.group_size, cfg.max_new_tokens, cfg.minibatch_size, cfg.micro_batch_size) == (8, 512, 256, 32)
    assert (cfg.tasks_per_iteration, cfg.max_steps, cfg.stage1_demos, cfg.stage1_epochs) == (4, 3, 16, 1)
    assert not (cfg.eval_before or cfg.eval_after or cfg.save_final) and cfg.checkpoint_every == 0


def test_quickstart_mode_has_no_stage1(tmp_path):
    args = _args(device="cpu", dtype="float32")
    cfg = SeedConfig.from_dict(bench.run_settings(args, {}, "smollm2-135m", tmp_path))
    assert cfg.stage1_demos == 0 and cfg.env_id == "seed/EZPoints-v0" and cfg.device == "cpu"
