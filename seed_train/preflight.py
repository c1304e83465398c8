"""Checks a run's setup before any model loads and before its run folder is made.

A config can be well-typed (``SeedConfig.__post_init__``) and still not run: an env id nobody
registered, a split the env does not have, an env argument it does not take, a ``data_dir`` that is
not there, a model folder that does not exist, an output folder that cannot be written. Each used to
surface as a traceback, several only after the model had loaded (minutes for a real model) and after
the run folder had been created. :func:`check_run_setup` finds them first and raises
:class:`~seed_train.config.SetupError` naming the setting; the CLIs print that one line and exit 2.

The env is checked by building it once per split, with exactly the arguments the run will use, and
closing it: only the env knows which arguments and values it accepts. Envs build lazily (task panels,
games, browsers start at the first reset or ``task_ids()``), so this costs little.
"""
from __future__ import annotations

import importlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seed_train.config import SeedConfig, SetupError

#: The config field each checked setting is named by; seed-eval names its own flags instead.
TRAIN_NAMES = {"env_id": "config field 'env_id'", "env_kwargs": "config field 'env_kwargs'",
               "model": "config field 'model'", "output_dir": "config field 'output_dir'",
               "template": "config field 'template'", "max_steps": "config field 'max_steps'"}


def check_run_setup(cfg: SeedConfig) -> None:
    """Everything ``seed_train.trainer.train(cfg)`` needs that the config alone cannot vouch for."""
    from seed_train.trainer import env_spec

    check_model(cfg.model, TRAIN_NAMES["model"])
    check_template(cfg.template, TRAIN_NAMES["template"])
    checked: set[str] = set()
    for field_name in ("train_split", "stage1_split", "eval_split"):
        split = getattr(cfg, field_name)
        if split is None or split in checked:
            continue
        checked.add(split)
        spec = env_spec(cfg, split)  # (a panel name resolved to its split and arguments)
        names = {**TRAIN_NAMES, "split": f"config field '{field_name}'"}
        if split in cfg.panels:
            names = {**names, "split": f"config field 'panels' ({split})", "env_kwargs": f"config field 'panels' ({split})"}
        if spec.remote_urls:  # each server must serve the run's env, split and arguments
            names = {**names, "split": "config field 'env_urls'", "env_kwargs": "config field 'env_urls'"}
        for index in range(max(1, len(spec.remote_urls))):
            env_id, kwargs = spec.gym_args(index)
            kwargs["split"] = spec.split  # as rollout.EnvSpec.make builds the run's envs
            if spec.max_steps is not None:
                kwargs["max_steps"] = spec.max_steps
            obs_mode = check_env(env_id, kwargs, names)
        check_model_sees(cfg.model, spec.env_id, obs_mode, TRAIN_NAMES["env_kwargs"])
    check_skill_source(cfg)
    check_output_dir(cfg.output_dir, TRAIN_NAMES["output_dir"])


def check_skill_source(cfg: SeedConfig) -> None:
    """A skill source the env cannot serve fails here, not after Stage 1: the wrong-rule controls need the
    env's ``wrong_rule`` (``agent_defaults.wrong_rule``)."""
    from seed_envs import wrong_rule_for

    if cfg.opd_coef == 0 or cfg.skill_source not in ("wrong_rule", "static_wrong"):
        return
    if wrong_rule_for(cfg.env_id) is None:
        raise SetupError(f"config field 'skill_source': {cfg.skill_source} needs the env's wrong_rule (a function "
                         f"beside its hindsight rule, declared as agent_defaults.wrong_rule); {cfg.env_id} "
                         f"declares none")


def check_model_sees(model: str, env_id: str, obs_mode: str, name: str) -> None:
    """A text-only model on an env that shows its state only as an image (``obs_mode="image"``) would act
    blind: refused before it loads (the model folder's config says whether it is a vision-language model)."""
    from seed_train.codec import check_sees
    from seed_train.policy import EMBEDDED_MODELS, resolve_model
    from seed_train.vision import is_vision_model_folder

    if obs_mode != "image":
        return
    try:
        check_sees(env_id, obs_mode, model not in EMBEDDED_MODELS and is_vision_model_folder(resolve_model(model)))
    except ValueError as e:
        raise SetupError(f"{name}: {e}") from e


def check_model(model: str, name: str) -> None:
    """An embedded model name, or a Hugging Face model folder (``config.json`` in it); nothing is loaded."""
    from seed_train.policy import EMBEDDED_MODELS, embedded_cache_ready, embedded_gguf_path, resolve_model

    try:
        if model in EMBEDDED_MODELS:
            if not embedded_cache_ready(model):  # to be converted from its wheel: the wheel must be there
                embedded_gguf_path(model)
            return
        resolve_model(model)  # for a folder: checks it, loads nothing
    except FileNotFoundError as e:
        raise SetupError(f"{name}: {e}") from e


def check_template(template: str | None, name: str) -> None:
    from wrappers import TEMPLATES

    if template is not None and template not in TEMPLATES:
        raise SetupError(f"{name}: unknown prompt template family {template!r}; built-in: {sorted(TEMPLATES)}")


# An env's own argument checks start their message with the argument's name ("split: expected one of
# ...", "split 'nq': no records ..."); a split refused that way is the split setting's fault.
_SPLIT_MESSAGE = re.compile(r"^split\b")
_UNKNOWN_ARGUMENT = re.compile(r"unexpected keyword argument '([^']+)'")


def check_env(env_id: str, kwargs: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """Build ``gym.make(env_id, **kwargs)`` once and close it; any refusal becomes a SetupError naming
    ``names['env_id']``, ``names['split']`` (the ``split`` argument) or ``names['env_kwargs']`` (the rest).
    Returns what the env shows: its ``obs_mode`` (an env without one: ``"text"``)."""
    import gymnasium as gym

    import seed_envs  # noqa: F401  (registers the seed/... ids)

    try:
        module, _, name = env_id.rpartition(":")
        if module:  # "module:id": gym.make imports the module (which registers the id) first; gym.spec does not
            importlib.import_module(module)
        gym.spec(name)
    except (gym.error.Error, ImportError) as e:
        known = sorted(i for i, spec in gym.registry.items()  # the project's ids, not gymnasium's own
                       if not str(spec.entry_point).startswith("gymnasium"))
        raise SetupError(f"{names['env_id']}: unknown env id {env_id!r} ({e}); registered: {known}") from e
    data_dir = kwargs.get("data_dir")
    if data_dir is not None and not Path(os.fspath(data_dir)).expanduser().exists():
        raise SetupError(f"{names['env_kwargs']}: data_dir {os.fspath(data_dir)!r} does not exist")
    try:
        env = gym.make(env_id, **kwargs)
    except TypeError as e:
        unknown = _UNKNOWN_ARGUMENT.search(str(e))
        if unknown:
            raise SetupError(f"{names['env_kwargs']}: {env_id} takes no argument {unknown.group(1)!r}") from e
        raise SetupError(f"{names['env_kwargs']}: {env_id} refuses its arguments: {e}") from e
    except ImportError as e:  # an env whose extra is not installed
        raise SetupError(f"{names['env_id']}: {env_id} cannot be built here: {e}") from e
    except (ValueError, OSError, RuntimeError, KeyError) as e:
        if isinstance(e, ValueError) and _SPLIT_MESSAGE.match(str(e)):
            raise SetupError(f"{names['split']}: {env_id}: {e}") from e
        raise SetupError(f"{names['env_kwargs']}: {env_id}: {e}") from e
    obs_mode = str(getattr(env.unwrapped, "obs_mode", "text"))
    from wrappers.stack import step_limit

    unlimited = step_limit(env) is None and kwargs.get("max_steps") is None
    env.close()
    if unlimited:  # its episodes might never end: a rollout would hang
        raise SetupError(f"{names.get('max_steps', 'max_steps')}: {env_id} has no step limit (no TimeLimit, no "
                         "declared agent budget): set one")
    return obs_mode


def check_output_dir(path: str | os.PathLike, name: str) -> None:
    """``path`` is a writable folder, or can be made as one (its nearest existing parent is a writable
    folder). Creates nothing: the run folder is made only once every check has passed."""
    folder = Path(path).expanduser()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        where = "is a file" if existing == folder else f"is inside {str(existing)!r}, which is a file"
        raise SetupError(f"{name}: {str(path)!r} {where}, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SetupError(f"{name}: {str(path)!r} cannot be written ({str(existing)!r} is not writable)")
