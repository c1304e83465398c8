"""Every code example in docs/ runs, and the trainer's flag table is the one generated from SeedConfig.

Fenced blocks are run by language: ``python`` blocks of a page in one namespace, top to bottom (a
later block may use names from an earlier one); ``bash`` blocks with ``bash -euo pipefail``, the
project's console scripts first on PATH. Both run in a fresh temporary folder. A block whose info
string says ``skip`` (```` ```bash skip ````) is shown, not run: installs, long training runs.
Other languages (``text``, ``json``, ``yaml``) are data, not examples.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from seed_envs.catalog import replace_between
from seed_train.config import flag_table_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs"
FENCE = re.compile(r"^```([\w+-]*)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
RUNNABLE = {"python", "bash"}
FLAGS_BEGIN, FLAGS_END = "<!-- flags:begin (generated: seed_train.config.flag_table_markdown) -->", "<!-- flags:end -->"


def code_blocks(page: Path) -> list[tuple[str, str, int]]:
    """(language, code, line) of every runnable block of a page that is not marked skip."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for m in FENCE.finditer(text):
        language, info, code = m.group(1), m.group(2), m.group(3)
        if language in RUNNABLE and "skip" not in info.split():
            blocks.append((language, code, text[: m.start()].count("\n") + 1))
    return blocks


PAGES = sorted(DOCS.glob("*.md"))


def test_docs_exist():
    names = {p.name for p in PAGES}
    assert {"quickstart.md", "environments.md", "sokoban.md", "ezpoints.md", "trajectory-format.md", "trainer.md",
            "integrations.md", "inspecting-runs.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": f"docs.{page.stem}"}
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for language, code, line in code_blocks(page):
        where = f"{page.name}:{line}"
        if language == "python":
            exec(compile(code, where, "exec"), namespace)  # our own documentation's code, never model text
        else:
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path, env=env, capture_output=True,
                                  text=True, timeout=120)
            assert done.returncode == 0, f"{where} failed:\n{done.stdout}\n{done.stderr}"


def test_links_between_pages_resolve():
    for page in PAGES:
        for target in re.findall(r"\]\(([\w.-]+\.md)(?:#[\w-]*)?\)", page.read_text(encoding="utf-8")):
            assert (DOCS / target).is_file(), f"{page.name} links to missing {target}"


def test_trainer_flag_table_is_generated_from_the_config():
    """Regenerate with: python -c "import tests.test_docs as t; t.write_flag_table()" (from the repo root)."""
    text = (DOCS / "trainer.md").read_text(encoding="utf-8")
    assert FLAGS_BEGIN in text and FLAGS_END in text
    table = text.split(FLAGS_BEGIN, 1)[1].split(FLAGS_END, 1)[0].strip()
    assert table == flag_table_markdown(), "docs/trainer.md flag table is stale: run write_flag_table()"


def write_flag_table() -> None:
    """Put the generated flag table between the markers of docs/trainer.md."""
    path = DOCS / "trainer.md"
    text = path.read_text(encoding="utf-8")
    path.write_text(replace_between(text, FLAGS_BEGIN, FLAGS_END, flag_table_markdown(), str(path)), encoding="utf-8")
