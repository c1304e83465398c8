"""Shared test fixtures.

Real benchmark samples live in ``../shared/data`` beside the project (override with the
``SEEDGYM_TEST_DATA`` environment variable). Tests that need them use the ``shared_data`` fixture,
which skips with a clear reason where the folder is absent (a user's clone) and is present in CI.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    return Path(os.environ.get("SEEDGYM_TEST_DATA", ROOT.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not path.is_dir():
        pytest.skip(f"real benchmark samples not found at {path} (set SEEDGYM_TEST_DATA to ../shared/data)")
    return path



try:  # imported up front, so the thread count every test starts from is known
    import torch
except ImportError:  # the envs-only install: no torch, nothing to guard
    torch = None


@pytest.fixture(autouse=True)
def torch_threads_unchanged():
    """No test leaves torch's thread count changed for the next one (a learning test must not depend on
    which tests ran before it). A test that changes it fails here, after its own body, naming the count."""
    if torch is None:
        yield
        return
    before = torch.get_num_threads()
    yield
    after = torch.get_num_threads()
    if after != before:
        torch.set_num_threads(before)
        pytest.fail(f"the test changed torch's intra-op threads from {before} to {after}; restore them "
                    "(seed_train.threads.torch_threads) or set them in a subprocess")


@pytest.fixture(scope="session")
def tiny_path() -> str:
    """The tiny test model's folder (built once, cached on disk: seed_train.tiny)."""
    from seed_train.tiny import cached_tiny_model

    return str(cached_tiny_model(seed=0))


@pytest.fixture
def keep_torch_rng():
    """Loading a policy seeds torch's global generator: a test module that loads policies uses this
    (``pytestmark = pytest.mark.usefixtures("keep_torch_rng")``) to keep it from leaking into later tests."""
    with torch.random.fork_rng(devices=[]):
        yield
