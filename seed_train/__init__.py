"""seed_train: the SEED trainer, evaluation and adapters for other trainers. It talks to environments only
through gymnasium, the ``wrappers`` package and the trajectory format.

The public names, imported on first use (``import seed_train`` stays light: no torch)::

    from seed_train import SeedConfig, train, evaluate_policy, Experiment

Where each step of the algorithm lives: the map at the top of :mod:`seed_train.trainer`.
"""
from __future__ import annotations

import importlib
from typing import Any

#: public name -> the module that defines it
_EXPORTS = {
    "SeedConfig": "seed_train.config",
    "SetupError": "seed_train.config",
    "train": "seed_train.trainer",
    "load": "seed_train.trainer",
    "env_spec": "seed_train.trainer",
    "evaluate_policy": "seed_train.evaluate",
    "Experiment": "seed_train.experiment",
    "seed_loss": "seed_train.losses",
    "step_advantages": "seed_train.samples",
    "run_episodes": "seed_train.rollout",
    "EnvSpec": "seed_train.rollout",
    "make_skill_source": "seed_train.skill_sources",
    "read_record": "seed_train.records",
    "recipe_names": "seed_train.recipes",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'seed_train' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
