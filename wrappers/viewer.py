"""``seed-envs view``: one self-contained HTML file to browse recorded trajectories.

    seed-envs view runs/seed --out report.html          # every trajectory JSONL in a run folder
    seed-envs view runs/sokoban.jsonl --out report.html

The page needs no server and no network: CSS and JS are inline, images are inlined as base64 data
URIs (identical frames stored once), and a Content-Security-Policy forbids every fetch. Episodes are
embedded as JSON and rendered by the page's script lazily: one page of the episode list at a time,
and an episode's steps only when it is opened, so runs of 10k episodes open in seconds.

Model text is untrusted: the script puts every string into the page with ``textContent`` (never as
HTML), and the embedded JSON has ``<``, ``>`` and ``&`` escaped so no string can close its
``<script>`` element.

SEED runs: steps with ``teacher_logprobs`` show their response tokens coloured by the OPD gate
``g = sigmoid(beta * delta)``, ``delta = teacher_logprob - logprob`` (beta from the episode's
``meta["opd_beta"]``, else 5): green where the skill-augmented teacher endorsed the sampled token
(delta > 0), red where it did not. Token text comes from the step's ``response_tokens`` (pieces the
trainer decoded); without them the token ids are shown.

Only the standard library and the trajectory reader are used (no trainer, no tokenizer).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import uuid
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from wrappers.trajectory import SCHEMA, Trajectory, escape_lone_surrogates, read_trajectories, resolve_image

DEFAULT_OPD_BETA = 5.0  # the trainer's default (SeedConfig.opd_beta), for files that do not say
PAGE_SIZE = 50
_TEMPLATE = Path(__file__).with_name("viewer_template.html")


def find_trajectory_files(path: str | os.PathLike) -> list[Path]:
    """A JSONL file itself, or every trajectory JSONL under a folder (sorted; metrics.jsonl etc. skipped)."""
    path = Path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ValueError(f"view: {path} is neither a trajectory JSONL file nor a run folder")
    files = [p for p in sorted(path.rglob("*.jsonl")) if _is_trajectory_file(p)]
    if not files:
        raise ValueError(f"view: no trajectory JSONL files under {path}")
    return files


def _is_trajectory_file(path: Path) -> bool:
    with open(path, "rb") as f:
        first = f.readline()
    return SCHEMA.encode() in first


class ImageTable:
    """Inlined images keyed by content hash, so repeated frames are stored once."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}

    def add(self, file: Path) -> str | None:
        if not file.is_file():  # missing, a folder, or a FIFO that would block the read
            return None
        try:
            raw = file.read_bytes()
        except OSError:
            return None  # a missing frame is shown as missing, not a crash
        key = hashlib.blake2b(raw, digest_size=8).hexdigest()
        if key not in self.data:
            self.data[key] = "data:image/png;base64," + base64.b64encode(raw).decode("ascii")
        return key


def episode_record(t: Trajectory, source: str, jsonl: Path, images: ImageTable | None) -> dict[str, Any]:
    """What the page needs of one episode: list columns, filter keys and the steps."""
    meta = dict(t.meta)
    beta = meta.pop("opd_beta", None)
    return {
        "id": t.episode_id, "source": source, "env": t.env_id or "", "split": t.split, "category": t.category,
        "task_id": t.task_id, "task": t.task, "group": t.group_id, "seed": t.seed,
        "success": bool(t.success), "score": t.score, "return": t.return_, "length": t.length,
        "iteration": meta.pop("iteration", None), "skill": meta.pop("skill", None),
        "beta": beta if isinstance(beta, (int, float)) else DEFAULT_OPD_BETA,
        "meta": meta,
        "steps": [step_record(s, jsonl, images) for s in t.steps],
    }


def step_record(s, jsonl: Path, images: ImageTable | None) -> dict[str, Any]:
    try:
        image = resolve_image(jsonl, s) if images is not None else None
    except ValueError as e:  # a path out of the run folder (crafted file): never inline what it names
        warnings.warn(f"view: {e}; the image is left out", stacklevel=2)
        image = None
    flags = [name for name in ("terminated", "truncated", "invalid_action", "format_error") if getattr(s, name)]
    return {
        "index": s.index, "observation": s.observation, "prompt": s.prompt, "response": s.response,
        "action": s.action, "reward": s.reward, "flags": flags, "info": s.info,
        "image": images.add(image) if image is not None else None,
        "token_ids": s.response_token_ids, "token_text": s.response_tokens,
        "logprobs": s.response_logprobs, "teacher": s.teacher_logprobs, "usage": s.usage,
    }


def collect(paths: Sequence[str | os.PathLike], *, with_images: bool = True) -> dict[str, Any]:
    """The page's data: episodes of every trajectory file under ``paths`` and the image table."""
    images = ImageTable() if with_images else None
    episodes = []
    for root in paths:
        root = Path(root)
        for file in find_trajectory_files(root):
            source = str(file.relative_to(root)) if root.is_dir() else file.name
            episodes += [episode_record(t, source, file, images) for t in read_trajectories(file)]
    return {"episodes": episodes, "images": images.data if images else {}, "page_size": PAGE_SIZE,
            "title": ", ".join(str(p) for p in paths)}


def embed_json(data: Any) -> str:
    """JSON safe inside a ``<script type="application/json">`` element.

    ``<`` ``>`` ``&`` become ``\\u003c`` etc.: JSON.parse reads them back unchanged, and no string can
    spell ``</script>`` or ``<!--``. Lone surrogates (not encodable as UTF-8) become ``\\udXXX`` escapes,
    which JavaScript strings hold as they are.
    """
    text = escape_lone_surrogates(json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(data: dict[str, Any]) -> str:
    template = _TEMPLATE.read_text(encoding="utf-8")
    return template.replace("/*__DATA__*/", embed_json(data), 1)


def write_viewer(paths: str | os.PathLike | Iterable[str | os.PathLike], out: str | os.PathLike, *,
                 with_images: bool = True) -> Path:
    """Write the HTML viewer for one or more trajectory files / run folders; returns its path."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    html = render_html(collect(list(paths), with_images=with_images))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # A temporary file renamed into place: an error leaves the old report (or none), never a 0-byte one.
    tmp = out.with_name(f".{out.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        tmp.write_text(html, encoding="utf-8")
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out
