"""The trajectory format: the contract between environments and trainers.

A :class:`Trajectory` is one episode; each :class:`Step` is one action the agent took, with the
observation and prompt it answered, its raw response, the parsed action, the reward and flags, and,
when a trainer fills them, the exact token ids it sampled and their log-probs (never re-tokenize
text to recover them), and for SEED runs the same tokens' log-probs under the skill-augmented prompt.
Fields added later have defaults, so older files read back unchanged.

On disk (``TrajectoryWriter`` / ``read_trajectories``): JSONL, one episode a line, every line
carrying ``schema`` and ``schema_version``. Each episode is written with one ``os.write`` of the whole
line on an ``O_APPEND`` descriptor, then fsynced, so a process killed mid-run leaves a file whose
complete lines all read back; at most the last line is torn, and the reader skips it with a warning.

Several writers, in one process or many (path sinks rebuilt inside vector-env workers), may append to
one file. Each append holds an exclusive ``flock`` on the file for the whole line, so lines never
interleave; and the writer that finds the file not ending in a newline (a writer was killed mid-line)
cuts that fragment only while it holds the lock: a live writer holds the lock until its line is
complete, so the fragment can only be a dead writer's. The check runs before every append (one
``fstat`` and a one-byte read), not only on opening, so a writer opened before the kill does not glue
its line to the fragment; it reads only the last line, never the whole file. A writer carried into a
forked child reopens the file there (a shared open file would share the lock). ``flock`` is advisory:
other programs appending to the file must not be running, and on file systems without it (some
network mounts) a single writer is safe but concurrent ones are not.

Text is UTF-8, and every Python string reads back unchanged, even one holding surrogate code points
(``"\\ud800"``), which UTF-8 cannot encode. Those are stored with JSON's own ``\\ud800`` escape; but a
high surrogate escaped right before a low one is, to every JSON reader, the one character the pair
encodes (``"\\ud83d\\ude00"`` reads as an emoji), so a record with such an adjacent pair is stored
otherwise: with ``"text_escaped": true`` at its top level, and in each of its strings (keys too) every
backslash doubled and every surrogate written as the six characters ``\\udXXX``. The reader undoes
it; other tools see the escapes as text. A record never fails to save.

Images are saved as PNG files in ``<name>.images/<folder>/`` beside the JSONL, where ``<folder>`` is
a short file-name-safe prefix of the episode id and a hash of the whole id (see
:func:`image_folder_name`), and are referenced by a path relative to the JSONL's folder.
:func:`resolve_image` refuses a path that leaves that folder, so a crafted file cannot make a report
embed other local files.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import re
import threading
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

try:
    import fcntl
except ImportError:  # not POSIX: appends are still whole-line O_APPEND writes, but not locked
    fcntl = None

SCHEMA = "seed-gym/trajectory"
SCHEMA_VERSION = 1


@dataclass
class Step:
    """One agent action and what came of it."""

    index: int
    observation: str  # text of the observation the action answered
    action: str  # the clean action the env received
    reward: float
    terminated: bool = False
    truncated: bool = False
    invalid_action: bool = False
    format_error: bool = False
    response: str | None = None  # what the agent sent: raw model output, or the action itself
    prompt: str | None = None  # rendered policy prompt, when a PromptRenderer produced one
    prompt_parts: dict[str, Any] | None = None  # the prompt's parts (see wrappers.prompt)
    image: Any = None  # uint8 HxWx3 array in memory; relative PNG path on disk; None if no image
    info: dict[str, Any] = field(default_factory=dict)  # JSON-safe subset of the step's info
    prompt_token_ids: list[int] | None = None
    response_token_ids: list[int] | None = None
    response_logprobs: list[float] | None = None
    # Filled by the SEED trainer for steps whose episode had a valid skill: each response token's
    # log-prob under the skill-augmented prompt (the OPD teacher), and the tokens' text pieces (the
    # viewer has no tokenizer; the pieces concatenate to the decoded response).
    teacher_logprobs: list[float] | None = None
    response_tokens: list[str] | None = None
    # Filled when a served model (an OpenAI-compatible endpoint) produced the response: what the server
    # reported and what the call took: prompt_tokens, completion_tokens, latency_s (the whole call, retries
    # included), retries, finish_reason, model. None for local policies and scripted agents.
    usage: dict[str, Any] | None = None


@dataclass
class Trajectory:
    """One episode. ``group_id`` ties together rollouts of the same task sampled for GRPO."""

    episode_id: str
    env_id: str | None
    task_id: str
    task: str
    category: str
    split: str
    seed: int | None = None
    group_id: str | None = None
    steps: list[Step] = field(default_factory=list)
    success: bool = False
    score: float = 0.0
    return_: float = 0.0
    length: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    def finish(self, *, success: bool, score: float) -> Trajectory:
        """Fill the episode totals from its steps and final outcome; returns self."""
        self.success = bool(success)
        self.score = float(score)
        self.return_ = float(sum(s.reward for s in self.steps))
        self.length = len(self.steps)
        return self

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (images must already be paths; see TrajectoryWriter)."""
        d = asdict(self)
        for step in d["steps"]:  # written only when set, so files of local policies keep their bytes
            if step["usage"] is None:
                del step["usage"]
        d["schema"] = SCHEMA
        d["schema_version"] = SCHEMA_VERSION
        return json_safe(d)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        if d.get("schema") != SCHEMA:
            raise ValueError(f"not a seed-gym trajectory (schema={d.get('schema')!r})")
        version = d.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise ValueError(f"trajectory schema_version {version!r} is newer than this reader ({SCHEMA_VERSION})")
        known = {f.name for f in fields(cls)}
        step_known = {f.name for f in fields(Step)}
        body = {k: v for k, v in d.items() if k in known}
        body["steps"] = [Step(**{k: v for k, v in s.items() if k in step_known}) for s in d.get("steps", [])]
        return cls(**body)


def new_episode_id() -> str:
    return uuid.uuid4().hex


def json_safe(value: Any) -> Any:
    """``value`` with numpy scalars/arrays turned into Python values and non-finite floats into None.

    Values JSON cannot hold (objects, bytes) become their ``repr`` so a record never fails to save.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return json_safe(value.item())
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return repr(value)


class TrajectoryWriter:
    """Appends trajectories to a JSONL file; safe against a killed process and other writers.

    Use as a context manager or call :meth:`close`. An existing file is appended to. Before each
    append, under an exclusive ``flock`` held for the whole line, a torn last line (a writer was
    killed mid-write) is cut off, so the episode starts on a line of its own; a last line that is a
    complete record missing only its newline gets the newline. See the module docstring.
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = True):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.image_dir = self.path.with_name(self.path.name + ".images")
        self.fsync = fsync
        self._thread_lock = threading.Lock()  # flock does not exclude threads sharing this descriptor
        self._fd: int | None = None
        self._open()
        try:
            with self._locked():
                self._end_at_line_boundary()
        except BaseException:
            self.close()
            raise
        self.count = 0

    def _open(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        self._pid = os.getpid()

    def write(self, trajectory: Trajectory) -> None:
        if self._fd is None:
            raise ValueError(f"write to a closed TrajectoryWriter ({self.path})")
        if self._pid != os.getpid():
            # A forked child shares the parent's open file, and flock does not exclude a shared one:
            # the child opens its own (and a fresh thread lock: another thread may have held it at the fork).
            os.close(self._fd)
            self._thread_lock = threading.Lock()
            self._open()
        line = encode_record(self._with_image_paths(trajectory).to_dict())
        with self._locked():
            self._end_at_line_boundary()
            _write_all(self._fd, line)
        if self.fsync:
            os.fsync(self._fd)
        self.count += 1

    __call__ = write  # a writer is itself a sink

    @contextmanager
    def _locked(self):
        with self._thread_lock:
            if fcntl is not None:
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                if fcntl is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _end_at_line_boundary(self) -> None:
        """Make the file end at a line boundary (caller holds the lock); reads only the last line."""
        fd = self._fd
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return
        keep = _last_line_start(fd, size)
        tail = _pread_all(fd, size - keep, keep)
        try:  # a complete record that lost only its newline is kept
            if isinstance(json.loads(tail.decode("utf-8")), dict):
                _write_all(fd, b"\n")
                return
        except (UnicodeDecodeError, json.JSONDecodeError):
            pass
        warnings.warn(f"{self.path}: cutting a torn last line ({size - keep} bytes) before appending", stacklevel=3)
        os.ftruncate(fd, keep)

    def _with_image_paths(self, trajectory: Trajectory) -> Trajectory:
        if not any(isinstance(s.image, np.ndarray) for s in trajectory.steps):
            return trajectory
        from PIL import Image  # lazy: only runs with image observations

        folder = self.image_dir / image_folder_name(trajectory.episode_id)
        folder.mkdir(parents=True, exist_ok=True)
        steps = []
        for s in trajectory.steps:
            if isinstance(s.image, np.ndarray):
                name = f"step{int(s.index):04d}.png"
                Image.fromarray(np.asarray(s.image, dtype=np.uint8)).save(folder / name)
                s = Step(**{**s.__dict__, "image": f"{self.image_dir.name}/{folder.name}/{name}"})
            steps.append(s)
        return Trajectory(**{**trajectory.__dict__, "steps": steps})

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # an unclosed writer must not leak its descriptor (the file object did not)
        if getattr(self, "_fd", None) is not None:
            try:
                self.close()
            except Exception:  # at interpreter exit os may already be gone
                pass


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def escape_lone_surrogates(text: str) -> str:
    """``text`` (JSON made with ``ensure_ascii=False``) with each surrogate code point as a ``\\uXXXX`` escape.

    UTF-8 cannot encode lone surrogates, but JSON strings can hold them escaped, and JSON readers
    (Python's, JavaScript's) give the same code points back. Surrogates only occur inside JSON
    strings, where an escape is always valid, and every other character keeps its UTF-8 form.
    """
    return _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


#: Top-level key of a record whose strings are backslash-escaped (see the module docstring).
TEXT_ESCAPED = "text_escaped"
_ADJACENT_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_TO_ESCAPE = re.compile("[\\\\\ud800-\udfff]")
_ESCAPED = re.compile(r"\\(\\|u[0-9a-f]{4})")


def encode_record(record: dict[str, Any]) -> bytes:
    """One JSONL line (UTF-8, newline-terminated) for a JSON-safe record; never fails on odd text."""
    text = json.dumps(record, ensure_ascii=False, allow_nan=False) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # surrogates: rare, so only then pay for the escaping passes
        pass
    # In the JSON text, two surrogates are adjacent only inside one string (strings are quoted).
    if not _ADJACENT_SURROGATE_PAIR.search(text):
        return escape_lone_surrogates(text).encode("utf-8")
    escaped = map_strings(record, _escape_text)
    escaped[TEXT_ESCAPED] = True
    return (json.dumps(escaped, ensure_ascii=False, allow_nan=False) + "\n").encode("utf-8")


def decode_record(record: Any) -> Any:
    """A record read from JSON, with the escaping of :func:`encode_record` undone where it was applied."""
    if isinstance(record, dict) and record.get(TEXT_ESCAPED) is True:
        record = map_strings({k: v for k, v in record.items() if k != TEXT_ESCAPED}, _unescape_text)
    return record


def map_strings(value: Any, convert) -> Any:
    """``value`` (parsed JSON) with ``convert`` applied to every string in it, dict keys included."""
    if isinstance(value, str):
        return convert(value)
    if isinstance(value, dict):
        return {convert(k): map_strings(v, convert) for k, v in value.items()}
    if isinstance(value, list):
        return [map_strings(v, convert) for v in value]
    return value


def _escape_text(text: str) -> str:
    return _TO_ESCAPE.sub(lambda m: "\\\\" if m.group() == "\\" else f"\\u{ord(m.group()):04x}", text)


def _unescape_text(text: str) -> str:
    return _ESCAPED.sub(lambda m: "\\" if m.group(1) == "\\" else chr(int(m.group(1)[1:], 16)), text)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:  # a short write (signal, full disk) continues: the caller holds the lock
        view = view[os.write(fd, view):]


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    chunks = []
    while size > 0:
        chunk = os.pread(fd, min(size, 1 << 26), offset)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _last_line_start(fd: int, size: int, block: int = 1 << 16) -> int:
    """Offset just after the file's last newline (0 if none), read backwards block by block."""
    end = size
    while end > 0:
        start = max(0, end - block)
        newline = os.pread(fd, end - start, start).rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        end = start
    return 0


def read_trajectories(path: str | os.PathLike) -> Iterator[Trajectory]:
    """Yield the trajectories of a JSONL file in order.

    A torn last line (the writer was killed mid-write) is skipped with a warning; a bad line
    elsewhere is corruption and raises ValueError with its line number. Image paths in steps are
    returned relative to the file's folder; use :func:`resolve_image` to open them.
    """
    path = Path(path)
    with open(path, "rb") as f:  # line by line: a large file is never held whole
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                record = decode_record(json.loads(raw.decode("utf-8")))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                if not raw.endswith(b"\n"):  # the last line, unfinished: its writer died while writing it
                    warnings.warn(f"{path}: skipping a torn last line ({len(raw)} bytes)", stacklevel=2)
                    return
                raise ValueError(f"{path}:{number}: not a JSON trajectory line: {e}") from e
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{number}: not a JSON object but {type(record).__name__}")
            yield Trajectory.from_dict(record)


def resolve_image(jsonl_path: str | os.PathLike, step: Step) -> Path | None:
    """Absolute path of a step's saved image, or None when the step has none.

    The image must lie inside the JSONL's folder (the run folder): a path that is absolute, has a
    ``..`` component, or resolves (through symlinks) to somewhere outside raises ``ValueError``, so
    a crafted file cannot make a report or a trainer read other local files.
    """
    if not isinstance(step.image, str):
        return None
    folder = Path(jsonl_path).parent.resolve()
    refused = f"{jsonl_path}: step {step.index}: image path {step.image!r}"
    relative = Path(step.image)
    if "\0" in step.image or relative.is_absolute() or ".." in relative.parts:
        raise ValueError(f"{refused} is not a plain relative path inside the run folder {folder}; refused")
    try:
        target = (folder / relative).resolve()
    except (OSError, ValueError, RuntimeError) as e:  # a symlink loop; a name the OS cannot encode
        raise ValueError(f"{refused} cannot be resolved: {e}") from e
    if target == folder or not target.is_relative_to(folder):
        raise ValueError(f"{refused} resolves to {target}, not a file inside the run folder {folder}; refused")
    return target


def image_folder_name(episode_id: str) -> str:
    """The folder of an episode's images: a file-name-safe prefix of the id, then a hash of the whole id.

    The hash keeps ids apart that the prefix would merge (``run/1`` and ``run_1``), and the name stays
    short however long the id is (file names are limited to 255 bytes).
    """
    prefix = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "_" for c in episode_id[:32])
    digest = hashlib.blake2b(episode_id.encode("utf-8", "surrogatepass"), digest_size=10).hexdigest()
    return f"{prefix}-{digest}" if prefix else digest
