"""What each env's episodes need from a recipe: expert episode lengths and prompt tokens, per env stack.

    python benchmarks/recipe_budgets.py [--tasks 30] [--split train] [--recipes sokoban-cpu ...]

For each recipe, and for the env's own defaults (the stack a config without env settings builds), the
expert plays ``--tasks`` tasks of the split through the trainer's env stack (Stage 1's demonstration
collector, no perturbation) and every prompt is tokenized as the policy sees it (chat template, the
recipe's model: SmolLM2-135M for the cpu recipes). Prints steps per episode (min / median / max) against
the stack's step budget, and prompt tokens (median / max) against the model's context, and the expert's answers in
tokens as the policy writes them (answer format and eos) against ``max_new_tokens``. The figures in the
recipes' comments and docs/recipes.md come from this script.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics

from seed_train.codec import prompt_codec
from seed_train.config import SeedConfig, _read_yaml
from seed_train.evaluate import panel_of
from seed_train.recipes import recipe_names
from seed_train.stage1 import collect_demonstrations
from seed_train.trainer import env_spec
from wrappers import format_response
from wrappers.stack import default_tools

ENV_SETTINGS = ("template", "history", "action_format", "max_steps")  # what "the env's own defaults" leaves unset


def measure(cfg: SeedConfig, split: str, tasks: int, codec) -> dict:
    spec = env_spec(cfg, split)
    panel = panel_of(spec)
    chosen = [panel[(i * len(panel)) // min(tasks, len(panel))] for i in range(min(tasks, len(panel)))]
    demos = collect_demonstrations(spec, chosen, seed=0, perturbed_share=0.0)
    steps = [len(t.steps) for t in demos]
    prompts = [len(codec.encode(s.prompt)) for t in demos for s in t.steps]
    # The expert's answer as the policy must write it (the recipe's answer format, then eos): the tokens
    # max_new_tokens must leave room for, or the answer is cut before it closes.
    tools = default_tools(spec.env_id)
    answers = [len(codec.encode_response(format_response(s.action, spec.action_format, tools=tools)))
               for t in demos for s in t.steps]
    return {"budget": cfg.env_default("max_steps"), "steps": steps, "prompts": prompts, "answers": answers,
            "won": sum(t.success for t in demos)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--recipes", nargs="+", default=[n for n in recipe_names() if n.endswith("-cpu")])
    p.add_argument("--split", default="train")
    p.add_argument("--tasks", type=int, default=30)
    args = p.parse_args()

    from transformers import AutoTokenizer

    from seed_train.policy import resolve_model

    print(f"split {args.split}, {args.tasks} tasks spread over the panel, expert play\n")
    print("| env stack | episodes won | steps min / median / max (budget) | prompt tokens median / max "
          "| answer tokens median / max (max_new_tokens) |")
    print("|---|---:|---|---|---|")
    for name in args.recipes:
        recipe = SeedConfig.from_dict(_read_yaml(name))
        codec = prompt_codec(AutoTokenizer.from_pretrained(str(resolve_model(recipe.model))))
        own = dataclasses.replace(recipe, **{k: None for k in ENV_SETTINGS})
        for label, cfg in ((f"{recipe.env_id} (its own defaults)", own), (name, recipe)):
            m = measure(cfg, args.split, args.tasks, codec)
            print(f"| {label} | {m['won']}/{len(m['steps'])} | {min(m['steps'])} / {statistics.median(m['steps']):g} / "
                  f"{max(m['steps'])} ({m['budget']}) | {statistics.median(m['prompts']):g} / {max(m['prompts'])} | "
                  f"{statistics.median(m['answers']):g} / {max(m['answers'])} ({cfg.max_new_tokens}) |")


if __name__ == "__main__":
    main()
