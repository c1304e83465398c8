"""seed_envs.catalog and `seed-envs tables`: the docs' env table written from each env's declaration."""
from __future__ import annotations

import gymnasium as gym
import pytest

import seed_envs
from seed_agents.cli import main
from seed_envs.catalog import BEGIN, END, docs_page, env_table, link_prefix_for, splits_cell, with_table
from seed_envs.core import SeedEnv


class _Declared(SeedEnv):
    """First line of the docstring.

    More text that the table leaves out.
    """

    split_names = ("train", "valid_seen", "valid_unseen")
    split_aliases = {"test": "valid_seen", "unseen": "valid_unseen", "dev": "valid_seen"}
    split_notes = {"valid_unseen": "rooms never seen"}
    splits_extra = "real files via `data_dir`"


def test_a_split_cell_lists_splits_in_order_with_their_aliases_and_notes():
    assert splits_cell(_Declared) == ("`train`, `valid_seen` (`test`, `dev`), `valid_unseen` (`unseen`; rooms never "
                                      "seen); real files via `data_dir`")


def test_pages_and_links():
    assert docs_page("seed/ALFWorld-v0") == "alfworld.md" and docs_page("seed/CodeLock-v12") == "codelock.md"
    assert link_prefix_for("README.md") == "docs/" and link_prefix_for("docs/environments.md") == ""


def test_every_registered_env_gives_one_row_from_its_class():
    table = env_table(link_prefix="")
    rows = table.splitlines()[2:]
    assert [r.split("`")[1] for r in rows] == list(seed_envs.ENV_IDS)
    sokoban = rows[list(seed_envs.ENV_IDS).index("seed/Sokoban-v0")]
    base = gym.make("seed/Sokoban-v0").unwrapped
    assert sokoban == (f"| [`seed/Sokoban-v0`](sokoban.md) | {base.summary} | {splits_cell(type(base))} | "
                       f"{base.default_max_steps} |")


def test_an_env_without_a_summary_shows_its_docstrings_first_line():
    gym.register("test/Declared-v0", entry_point=seed_envs.core.time_limited(_Declared))
    try:
        row = env_table(["test/Declared-v0"]).splitlines()[-1]
        assert row.startswith("| [`test/Declared-v0`](docs/declared.md) | First line of the docstring. | `train`")
        assert row.endswith(" | 50 |")
    finally:
        del gym.registry["test/Declared-v0"]


def test_block_replacement_and_its_errors():
    text = f"intro\n{BEGIN}\nold rows\n{END}\noutro\n"
    assert with_table(text, "NEW") == f"intro\n{BEGIN}\nNEW\n{END}\noutro\n"
    with pytest.raises(ValueError, match="x.md: needs one generated block"):
        with_table("no markers", "NEW", "x.md")
    with pytest.raises(ValueError, match="needs one generated block"):
        with_table(f"{END}\n{BEGIN}\n", "NEW")
    with pytest.raises(ValueError, match="needs one generated block"):
        with_table(text + text, "NEW")  # two blocks: which one is meant?


def test_the_command_checks_writes_and_prints(tmp_path, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    page = docs / "environments.md"
    page.write_text(f"# Envs\n\n{BEGIN}\n| stale |\n{END}\n\nmore\n")
    assert main(["tables", str(page)]) == 1
    assert "differs" in capsys.readouterr().out
    assert main(["tables", "--write", str(page)]) == 0
    assert page.read_text() == f"# Envs\n\n{BEGIN}\n{env_table(link_prefix='')}\n{END}\n\nmore\n"
    assert main(["tables", str(page)]) == 0
    assert main(["tables"]) == 0 and "[`seed/EZPoints-v0`](ezpoints.md)" in capsys.readouterr().out
    assert main(["tables", str(tmp_path / "missing.md")]) == 2
    assert "no such file" in capsys.readouterr().err
