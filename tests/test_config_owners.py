"""config.py restates the choices of its enumerated fields (it stays free of torch and the env packages);
each list must equal the one its owner acts on (issue 31: one home per fact, the restatement tied by a
test)."""
from __future__ import annotations

import json

import pytest

from seed_envs.core import REWARD_MODES as ENV_REWARD_MODES
from seed_train import config
from seed_train.env_backends import ENV_BACKENDS
from seed_train.losses import GATES
from seed_train.policy import DTYPES
from seed_train.samples import ADVANTAGE_METHODS, FORMAT_PENALTY_ON, GROUP_STATS, step_advantages
from seed_train.skill_sources import make_skill_source
from wrappers.action_parser import FORMATS


def test_each_enumeration_equals_its_owners():
    assert set(config.ENV_BACKENDS) == set(ENV_BACKENDS)
    assert set(config.OPD_GATES) == set(GATES)
    assert set(config.GROUP_STATS) == set(GROUP_STATS)
    assert set(config.FORMAT_PENALTY_ON) == set(FORMAT_PENALTY_ON)
    assert set(config.REWARD_MODES) == set(ENV_REWARD_MODES)
    assert set(config.ADVANTAGES) == set(ADVANTAGE_METHODS)
    for value in FORMATS:  # (the config takes the parser's own list)
        assert config.SeedConfig(action_format=value).action_format == value
    for value in DTYPES:
        assert config.SeedConfig(dtype=value).dtype == value
    with pytest.raises(ValueError, match="dtype"):
        config.SeedConfig(dtype="int8")


def test_every_skill_source_the_config_accepts_is_built_and_no_other(tmp_path):
    library = tmp_path / "rules.json"
    library.write_text(json.dumps({"sum": "Add the two card values, then check the total matches the target."}))
    for kind in config.SKILL_SOURCES:
        cfg = config.SeedConfig(env_id="seed/EZPoints-v0", skill_source=kind, static_skills=str(library),
                                stage2_balance_categories=True)
        if kind == "frozen":  # needs the Stage 2 start model: refused for its lack, not as unknown
            with pytest.raises(ValueError, match="start model"):
                make_skill_source(cfg)
            continue
        assert make_skill_source(cfg) is not None
    with pytest.raises(ValueError, match="skill_source"):
        config.SeedConfig(skill_source="telepathy")


def test_advantage_methods_outside_the_list_are_refused():
    with pytest.raises(ValueError, match="method"):
        step_advantages([], method="ppo")


def test_the_runners_env_limits_are_the_trainers():
    """seed-envs (which never imports seed_train) restates the env wall-clock limits; one fault policy."""
    from seed_agents import cli

    assert cli.ENV_STEP_TIMEOUT_S == config.field_default("env_step_timeout_s")
    assert cli.ENV_EPISODE_TIMEOUT_S == config.field_default("env_episode_timeout_s")
    with pytest.raises(ValueError, match="env_step_timeout_s"):
        config.SeedConfig(env_step_timeout_s=-1)
    with pytest.raises(ValueError, match="env_episode_timeout_s"):
        config.SeedConfig(env_episode_timeout_s=float("nan"))
