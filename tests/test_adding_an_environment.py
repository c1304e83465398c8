"""docs/adding-an-environment.md followed literally (issue 31): an in-tree env in four places.

In a copy of the repository's packages, tests and docs, write every block of the guide that names a file
(```` ```python file=... ````), add the registration line the guide's table gives, run the guide's
"Check it" commands (the env tables, the env's own test, the README table test, the contract and agent
stack tests, ``seed-envs check``), and assert that nothing but those four places (package, registration
line, test, page) and the two generated tables changed.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "adding-an-environment.md"
COPIED = ("seed_envs", "wrappers", "seed_agents", "seed_train", "tests", "docs", "README.md", "pyproject.toml")
FILE_BLOCK = re.compile(r"^```(\w+)[^\n]*\bfile=(\S+)[^\n]*\n(.*?)^```\s*$", re.M | re.S)
REGISTRATION = re.compile(r'`("seed/Countdown-v0": "seed_envs\.countdown\.env:make",)`')


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and ".pytest_cache" not in p.parts}


def _run(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd), "PYTHONDONTWRITEBYTECODE": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_guide_adds_an_env_in_four_places(tmp_path):
    repo = tmp_path / "repo"
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, repo / name, ignore=shutil.ignore_patterns("__pycache__", "data"))
        else:
            repo.mkdir(exist_ok=True)
            shutil.copy2(source, repo / name)
    if (ROOT / "tests" / "data").exists():  # test data the copied tests read (small)
        shutil.copytree(ROOT / "tests" / "data", repo / "tests" / "data")
    before = _snapshot(repo)

    guide = GUIDE.read_text(encoding="utf-8")
    blocks = {path: code for _, path, code in FILE_BLOCK.findall(guide)}
    assert set(blocks) == {"seed_envs/countdown/__init__.py", "seed_envs/countdown/env.py", "tests/test_countdown.py",
                           "docs/countdown.md"}, sorted(blocks)
    for path, code in blocks.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(code, encoding="utf-8")
    line = REGISTRATION.search(guide)
    assert line, "the guide's table gives the registration line"
    init = repo / "seed_envs" / "__init__.py"
    head = "ENV_IDS: dict[str, str] = {\n"
    init.write_text(init.read_text().replace(head, f"{head}    {line[1]}\n", 1))

    # The guide's "Check it" commands, in the copy (PYTHONPATH puts its packages first).
    python, cli = sys.executable, [sys.executable, "-m", "seed_agents.cli"]
    tables = _run([*cli, "tables", "--write", "README.md", "docs/environments.md"], repo)
    assert tables.returncode == 0, tables.stderr
    tests = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_countdown.py",
                  "tests/test_readme.py", "tests/test_catalog.py",
                  "tests/test_hindsight.py::test_every_env_has_its_rules_and_other_ids_the_generic_ones"], repo)
    assert tests.returncode == 0, tests.stdout[-3000:]
    contract = _run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_contract.py",
                     "tests/test_env_stack.py", "-k", "Countdown"], repo)
    assert contract.returncode == 0, contract.stdout[-3000:]
    assert re.search(r"\b\d+ passed", contract.stdout) and " failed" not in contract.stdout
    check = _run([*cli, "check", "seed/Countdown-v0"], repo)
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    assert "seed/Countdown-v0" in _run([*cli, "list"], repo).stdout

    after = _snapshot(repo)
    changed = {path for path in set(before) | set(after) if before.get(path) != after.get(path)}
    places = {path if not path.startswith("seed_envs/countdown/") else "seed_envs/countdown/" for path in changed}
    assert places == {"seed_envs/countdown/", "seed_envs/__init__.py", "tests/test_countdown.py", "docs/countdown.md",
                      "README.md", "docs/environments.md"}, sorted(changed)
    row = "| [`seed/Countdown-v0`](docs/countdown.md) | Say the numbers from n down to 1, one per step. |"
    assert row in (repo / "README.md").read_text()
