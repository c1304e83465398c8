"""The experiment's arms: each a named set of overrides of the base config (:data:`ARMS`), optionally with
``field=value`` pairs after ``@`` (:func:`arm_overrides`); docs/trainer.md embeds :func:`arms_markdown`.

Model-free: the experiment (:mod:`seed_train.experiment`), its report and the committed records
(:mod:`seed_train.records`) read arms from here.
"""
from __future__ import annotations

from typing import Any, get_args, get_type_hints

from seed_train.config import SeedConfig

# name -> (config overrides, what the arm is). Values other engineers' fields need ("shuffled_tasks",
# "empty", opd_gate) are validated by SeedConfig when the experiment is planned.
ARM_TABLE: dict[str, tuple[dict[str, Any], str]] = {
    "grpo": ({"stage1_demos": 0, "opd_coef": 0.0}, "the paper's GRPO: no Stage 1, no OPD term"),
    "sft-grpo": ({"opd_coef": 0.0}, "Stage 1, then GRPO (no OPD term)"),
    "seed": ({"skill_source": "on_policy"}, "SEED: Stage 1, then GRPO + OPD with the policy's own skills"),
    "seed-shuffled": ({"skill_source": "shuffled"}, "SEED with skills permuted within each group (control)"),
    "seed-shuffled-tasks": ({"skill_source": "shuffled_tasks"}, "SEED with skills permuted across tasks (control)"),
    "seed-shuffled-categories": ({"skill_source": "shuffled_categories"},
                                 "SEED with each episode given a skill written for another task category (content "
                                 "control; needs --stage2-balance-categories)"),
    "seed-wrong-rule": ({"skill_source": "wrong_rule"},
                        "SEED with the policy's own skills rewritten to a rule wrong for the category (content control)"),
    "seed-static-wrong": ({"skill_source": "static_wrong"},
                          "SEED with the static library rewritten to a rule wrong for the category (content control; "
                          "needs --static-skills)"),
    "seed-empty": ({"skill_source": "empty"}, "SEED with an empty skill block (control)"),
    "seed-constant-gate": ({"opd_gate": "constant"}, "SEED with the gate fixed at g = 1 (control)"),
    "seed-static": ({"skill_source": "static"}, "SEED with a static skill library (needs --static-skills)"),
    "seed-frozen": ({"skill_source": "frozen"}, "SEED with the analyzer frozen at the Stage 2 start"),
}
ARMS: dict[str, dict[str, Any]] = {name: overrides for name, (overrides, _) in ARM_TABLE.items()}
DEFAULT_ARMS = ("grpo", "sft-grpo", "seed", "seed-shuffled")

# Fields the experiment sets per unit (the base config's values are ignored; an arm may not override them).
MANAGED_FIELDS = ("seed", "output_dir", "eval_before", "eval_after", "eval_after_stage1", "save_final", "resume",
                  "stage1_from")


def arms_markdown() -> str:
    """The arms table (docs/trainer.md embeds it): name, overrides, meaning."""
    rows = ["| arm | overrides of the base config | what it is |", "|---|---|---|"]
    for name, (overrides, meaning) in ARM_TABLE.items():
        flags = " ".join(f"`--{k.replace('_', '-')} {v}`" for k, v in overrides.items())
        rows.append(f"| `{name}` | {flags} | {meaning} |")
    return "\n".join(rows)


def arm_overrides(arm: str) -> dict[str, Any]:
    """The config overrides of ``arm``: a named arm of :data:`ARMS`, optionally followed by ``@`` and
    ``field=value`` pairs joined by commas that add to (or replace) its overrides, e.g. ``sft-grpo@lr=1e-4``:
    SFT+GRPO at another learning rate, the matched-step-size control. Raises ValueError naming the arm or
    field."""
    name, _, extra = arm.partition("@")
    if name not in ARMS:
        raise ValueError(f"unknown arm {name!r}; known: {list(ARMS)} (an arm may add field=value pairs after '@')")
    out = dict(ARMS[name])
    hints = get_type_hints(SeedConfig)
    for item in filter(None, extra.split(",")):
        field, sep, value = item.partition("=")
        field = field.strip().replace("-", "_")
        if not sep or field not in hints:
            raise ValueError(f"arm {arm!r}: {item!r} is not field=value with a config field")
        if field in MANAGED_FIELDS:
            raise ValueError(f"arm {arm!r}: config field '{field}' is set by the experiment per unit")
        out[field] = _field_value(hints[field], value.strip(), f"arm {arm!r}: config field '{field}'")
    return out


def is_arm(arm: str) -> bool:
    try:
        arm_overrides(arm)
    except ValueError:
        return False
    return True


def _field_value(hint: Any, text: str, where: str) -> Any:
    """``text`` as a value of a config field of type ``hint`` (bool, int, float, str, or None-able)."""
    if text.lower() in ("none", "null") and type(None) in get_args(hint):
        return None
    kinds = [k for k in (get_args(hint) or (hint,)) if k is not type(None)]
    try:
        if bool in kinds:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        if int in kinds:
            return int(text)
        if float in kinds:
            return float(text)
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a {kinds[0].__name__}") from None
    return text


def stage2_start(arm: str, stage1_demos: int) -> str:
    """The policy ``arm``'s Stage 2 starts from, as reports name it: ``after_stage1`` when the arm runs Stage 1
    (its own ``stage1_demos``, else the base config's ``stage1_demos``), else ``before`` (the base model)."""
    return "after_stage1" if arm_overrides(arm).get("stage1_demos", stage1_demos) > 0 else "before"


def uses_stage1(base: SeedConfig, arm: str) -> bool:
    return stage2_start(arm, base.stage1_demos) == "after_stage1"


def uses_opd(base: SeedConfig, arm: str) -> bool:
    return arm_overrides(arm).get("opd_coef", base.opd_coef) > 0
