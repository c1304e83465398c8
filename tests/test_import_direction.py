"""Dependency direction (issue 18.5): ``seed_envs`` imports neither ``wrappers``, ``seed_train`` nor
``seed_agents``; ``wrappers`` imports neither ``seed_envs``, ``seed_train`` nor torch. Each package's
modules are all imported in a fresh interpreter, which then reports what else got imported."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

_IMPORT_ALL = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
failed = {}
for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
    if module.name.endswith(".__main__"):  # running it would start the command line
        continue
    try:
        importlib.import_module(module.name)
    except ImportError as e:  # a module behind an optional extra that is not installed
        failed[module.name] = str(e)
print(json.dumps({"loaded": sorted(sys.modules), "failed": failed}))
"""


def import_every_module(package: str) -> tuple[set[str], dict[str, str]]:
    """Top-level names in sys.modules after importing every module of ``package`` in a fresh interpreter,
    and the modules that could not be imported (missing optional extras) with why."""
    r = subprocess.run([sys.executable, "-c", _IMPORT_ALL, package], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.splitlines()[-1])
    return {name.split(".")[0] for name in report["loaded"]}, report["failed"]


@pytest.mark.parametrize(("package", "forbidden"), [
    ("seed_envs", {"wrappers", "seed_train", "seed_agents"}),
    ("wrappers", {"seed_envs", "seed_train", "seed_agents", "torch"}),
])
def test_package_imports_only_what_it_may(package, forbidden):
    loaded, failed = import_every_module(package)
    assert package in loaded
    assert not loaded & forbidden, f"importing {package} pulled in {sorted(loaded & forbidden)}"
    # A module that failed because it itself imports a forbidden package would hide from the check above.
    assert not [m for m, why in failed.items() if any(f"'{name}" in why for name in forbidden)], failed


def test_seed_agents_never_imports_the_trainer():
    loaded, failed = import_every_module("seed_agents")
    assert {"seed_envs", "wrappers"} <= loaded
    assert not loaded & {"seed_train", "torch"}, sorted(loaded & {"seed_train", "torch"})
    assert not failed, failed


def test_seed_train_exports_its_public_names_and_imports_light():
    """``from seed_train import train, SeedConfig, ...`` works (issue 31), and ``import seed_train`` alone
    imports no torch: each name's module loads on first use."""
    import subprocess
    import sys

    code = ("import sys, seed_train; assert 'torch' not in sys.modules, 'torch imported'; "
            "names = seed_train.__all__; [getattr(seed_train, n) for n in names]; "
            "from seed_train import SeedConfig, train; print(len(names))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) >= 10
