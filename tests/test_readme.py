"""README's env table is the registry's: every registered id once, its splits (or their aliases) named in
backticks, its default max_steps and a link to its page (issue 31: the front door cannot drift from the
code). The table is written from each env's declaration (``seed-envs tables``, seed_envs/catalog.py), so
README.md and docs/environments.md must equal what that writes."""
from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import pytest

import seed_envs

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def env_table() -> dict[str, tuple[set[str], int]]:
    """id -> (backticked names in the splits cell, default max_steps) from README's Environments table."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## Environments", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        link = re.fullmatch(r"\[`(seed/[^`]+)`\]\((docs/[a-z0-9_]+\.md)\)", cells[0])
        if len(cells) == 4 and link:
            assert (ROOT / link[2]).is_file(), f"{link[1]}: its page {link[2]} is missing"
            # split names are bare words; other code in the cell (`target=24`, `data_dir`) is checked below
            rows[link[1]] = (set(re.findall(r"`([a-z0-9_]+)`", cells[2])), int(cells[3]))
    return rows


def test_every_registered_env_has_one_row():
    assert sorted(env_table()) == sorted(seed_envs.ENV_IDS)


@pytest.mark.parametrize("env_id", sorted(seed_envs.ENV_IDS))
def test_row_names_the_envs_splits_and_max_steps(env_id):
    named, max_steps = env_table()[env_id]
    base = gym.make(env_id).unwrapped
    try:
        aliases = {split: {a for a, s in base.split_aliases.items() if s == split} for split in base.split_names}
        for split, alias in aliases.items():
            assert split in named or alias & named, f"{env_id}: split {split!r} missing from README's table"
        assert named - {"data_dir"} <= set(base.split_names) | set(base.split_aliases), named
        assert max_steps == type(base).default_max_steps == base.max_steps
    finally:
        base.close()


def test_readme_and_environments_md_hold_the_table_the_declarations_write():
    from seed_envs.catalog import stale_files

    assert stale_files([README, ROOT / "docs" / "environments.md"], write=False) == [], (
        "run: seed-envs tables --write README.md docs/environments.md")
