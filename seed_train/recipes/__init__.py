"""Recipes: run configs per env, in two sizes, that ``--config NAME`` accepts (docs/recipes.md).

``NAME-cpu``: the embedded SmolLM2-135M with LoRA, sized for 2 CPU cores. ``NAME-paper``: the SEED
paper's released-launcher settings for a local Qwen2.5-Instruct folder on a GPU. Each is a YAML file
in this folder whose opening comment says what it is and how to run it; ``seed-train recipes`` lists them.
"""
from __future__ import annotations

from pathlib import Path

RECIPES_DIR = Path(__file__).parent


def recipe_names() -> list[str]:
    """Every recipe's name (its file name without ``.yaml``), sorted."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def recipe_path(name: str) -> Path | None:
    """The file of recipe ``name``; None when no recipe has that name (a name, never a path: no traversal)."""
    return RECIPES_DIR / f"{name}.yaml" if name in recipe_names() else None


def recipe_summary(name: str) -> str:
    """What the recipe is: its comment lines before the ``# Run:`` line, as one line."""
    path = recipe_path(name)
    if path is None:
        raise ValueError(f"recipe {name!r}: no such recipe; recipes: {', '.join(recipe_names())}")
    words = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#") or line.startswith("# Run:"):
            break
        words.append(line.lstrip("#").strip())
    return " ".join(words)
