"""Recipes (seed_train/recipes, docs/recipes.md): every one loads, validates and passes the run's own
preflight; the ``paper`` ones hold the SEED paper's released-launcher settings, checked here against the
numbers as the paper and its launcher state them (not against the recipe files' own text)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import seed_envs
from seed_train.cli import main_train
from seed_train.config import SeedConfig, _read_yaml
from seed_train.preflight import check_run_setup
from seed_train.recipes import recipe_names, recipe_path, recipe_summary
from seed_train.tiny import cached_tiny_model

#: The paper's envs, by recipe prefix.
PAPER_ENVS = {"alfworld": "seed/ALFWorld-v0", "webshop": "seed/WebShop-v0", "searchqa": "seed/SearchQA-v0",
              "sokoban": "seed/Sokoban-v0", "ezpoints": "seed/EZPoints-v0"}
#: The SEED paper's per-env agent settings (max_steps, history), as DESIGN.md and the paper state them.
PAPER_STEPS_HISTORY = {"alfworld": (30, 5), "webshop": (15, 2), "searchqa": (4, 4), "sokoban": (15, 2),
                       "ezpoints": (8, 2)}
#: Its released launcher's shared settings.
PAPER_SHARED = {"group_size": 8, "lr": 1e-6, "kl_coef": 0.01, "opd_coef": 0.01, "opd_beta": 5.0, "clip_eps": 0.2,
                "gigpo_gamma": 0.95, "format_penalty": 0.1, "tasks_per_iteration": 16, "minibatch_size": 256,
                "max_new_tokens": 512, "eval_temperature": 0.4, "lora": False,
                "gradient_checkpointing": True}  # actor_rollout_ref.model.enable_gradient_checkpointing=True


def test_every_paper_env_has_a_cpu_and_a_paper_recipe():
    names = set(recipe_names())
    for prefix, env_id in PAPER_ENVS.items():
        assert {f"{prefix}-cpu", f"{prefix}-paper"} <= names
        assert env_id in seed_envs.ENV_IDS
    assert "codelock-cpu" in names
    assert all(recipe_summary(n) and "Run:" not in recipe_summary(n) for n in names)


@pytest.mark.parametrize("name", recipe_names())
def test_recipe_loads_names_its_env_and_runs_as_it_says(name):
    data = _read_yaml(name)  # --config NAME: the recipe of that name
    cfg = SeedConfig.from_dict(data)
    prefix, size = name.rsplit("-", 1)
    assert size in ("cpu", "paper")
    assert cfg.env_id == PAPER_ENVS.get(prefix, "seed/CodeLock-v0")
    text = recipe_path(name).read_text(encoding="utf-8")
    assert f"--config {name}" in text  # its own "Run:" line uses it by name
    if size == "cpu":
        assert (cfg.model, cfg.lora, cfg.device) == ("smollm2-135m", True, "cpu")
    else:
        assert cfg.model.startswith("models/Qwen2.5") and cfg.device == "cuda"



@pytest.mark.parametrize("name", [n for n in recipe_names() if "seed-train experiment" in recipe_path(n).read_text()])
def test_a_recipes_experiment_command_plans(name, tmp_path):
    """The arms and seeds a recipe's own experiment command names pass the experiment's planning (every arm
    valid for the env: a content control the env cannot serve would fail only after Stage 1)."""
    import json
    import shlex

    from seed_train.experiment import Experiment

    line = next(ln for ln in recipe_path(name).read_text().splitlines() if "seed-train experiment" in ln)
    words = shlex.split(line.split("seed-train experiment", 1)[1])

    def values(flag: str) -> list[str]:
        start = words.index(flag) + 1
        end = next((i for i in range(start, len(words)) if words[i].startswith("--")), len(words))
        return words[start:end]

    data = _read_yaml(name)
    if "--static-skills" in words:  # the library the command's first line writes
        library = tmp_path / "rules.json"
        library.write_text(json.dumps({"any": "a rule"}))
        data["static_skills"] = str(library)
    base = SeedConfig.from_dict(data)
    plan = Experiment.plan(base, values("--arms"), [int(v) for v in values("--seeds")], tmp_path / "out")
    assert plan.arms and plan.seeds

@pytest.mark.parametrize("prefix", sorted(PAPER_ENVS))
def test_paper_recipes_hold_the_papers_settings(prefix):
    cfg = SeedConfig.from_dict(_read_yaml(f"{prefix}-paper"))
    assert {k: getattr(cfg, k) for k in PAPER_SHARED} == PAPER_SHARED
    assert (cfg.env_default("max_steps"), cfg.env_default("history")) == PAPER_STEPS_HISTORY[prefix]
    assert cfg.opd_gate == "sigmoid" and cfg.skill_source == "on_policy" and cfg.stage1_demos > 0  # SEED itself


@pytest.mark.slow
@pytest.mark.parametrize("name", recipe_names())
def test_recipe_passes_the_runs_preflight(name, tmp_path):
    """What train() checks before loading anything (model folder, env and splits, output folder), with the
    tiny test model in place of a paper recipe's Qwen folder and the CPU in place of its GPU."""
    cfg = SeedConfig.from_dict({**_read_yaml(name), "output_dir": str(tmp_path / "run")})
    if name.endswith("-paper"):
        cfg = dataclasses.replace(cfg, model=str(cached_tiny_model(seed=0)), device="cpu")
    if cfg.env_id == "seed/WebShop-v0" or cfg.env_id == "seed/ALFWorld-v0":
        pytest.importorskip("alfworld" if "ALF" in cfg.env_id else "flask", reason="the env's extra is not installed")
    check_run_setup(cfg)


def test_config_name_resolves_to_a_recipe_and_a_file_wins(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert _read_yaml("sokoban-cpu")["env_id"] == "seed/Sokoban-v0"
    Path("sokoban-cpu").write_text("env_id: seed/EZPoints-v0\n", encoding="utf-8")  # a file of that name wins
    assert _read_yaml("sokoban-cpu") == {"env_id": "seed/EZPoints-v0"}
    for bad in ("../recipes/sokoban-cpu", "recipes/sokoban-cpu.yaml", "nope"):
        with pytest.raises(ValueError, match="nor a recipe of that name"):
            _read_yaml(bad)
    assert recipe_path("../cli") is None and recipe_path("sokoban-cpu.yaml") is None


def test_recipes_command_lists_and_prints(capsys):
    assert main_train(["recipes"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in recipe_names())
    assert main_train(["recipes", "webshop-cpu"]) == 0
    assert capsys.readouterr().out == recipe_path("webshop-cpu").read_text(encoding="utf-8")
    assert main_train(["recipes", "../cli"]) == 2
    assert "no recipe '../cli'" in capsys.readouterr().err



@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in recipe_names() if n.endswith("-cpu")])
def test_a_cpu_recipes_answer_budget_fits_the_experts_answers(name):
    """max_new_tokens leaves room for every expert answer of 12 train tasks as the policy must write it (the
    recipe's answer format, SmolLM2's tokens, eos): a shorter budget cuts the answer before it closes, an
    invalid action Stage 1 cannot teach away (webshop-cpu had 24 for searches of up to 44 tokens)."""
    from script_loader import load_script
    from transformers import AutoTokenizer

    from seed_train.codec import prompt_codec
    from seed_train.policy import resolve_model

    cfg = SeedConfig.from_dict(_read_yaml(name))
    if cfg.env_id in ("seed/WebShop-v0", "seed/ALFWorld-v0"):
        pytest.importorskip("alfworld" if "ALF" in cfg.env_id else "flask", reason="the env's extra is not installed")
    codec = prompt_codec(AutoTokenizer.from_pretrained(str(resolve_model(cfg.model))))
    m = load_script("benchmarks/recipe_budgets.py").measure(cfg, "train", 12, codec)
    assert m["won"] == 12 and max(m["answers"]) <= cfg.max_new_tokens, (m["answers"], cfg.max_new_tokens)

def test_recipe_budgets_benchmark_measures_expert_episodes_and_prompts():
    """benchmarks/recipe_budgets.py, which backs the recipes' budget comments, on a small case: EZPoints'
    expert writes a formula of 4 tokens, one per step; every prompt is counted."""
    from script_loader import load_script
    from transformers import AutoTokenizer

    from seed_train.codec import prompt_codec

    bench = load_script("benchmarks/recipe_budgets.py")
    codec = prompt_codec(AutoTokenizer.from_pretrained(str(cached_tiny_model(seed=0))))
    m = bench.measure(SeedConfig.from_dict(_read_yaml("ezpoints-cpu")), "train", 3, codec)
    assert m["steps"] == [4, 4, 4] and m["won"] == 3 and m["budget"] == 5
    assert len(m["prompts"]) == 12 and min(m["prompts"]) > 20
    assert len(m["answers"]) == 12 and max(m["answers"]) <= 3  # a card or an operator, then eos
