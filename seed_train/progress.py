"""Progress a person can follow: tqdm bars on stderr, and lines on stdout that do not break them.

Bars (Stage 1 optimizer steps, rollout episodes, evaluation episodes, Stage 2 iterations) show only
where someone watches: on the main process, when stderr is a terminal (tqdm's ``disable=None``), and
not when ``SEED_PROGRESS=0`` is set. Logs redirected to a file therefore get no carriage-return noise,
only the phase lines, which go through :func:`say` (``tqdm.write``: printed above the bars, never onto
one).
"""
from __future__ import annotations

import os
from typing import Any

from tqdm import tqdm

#: Set to 0 (or off/false/no) to turn every bar off, e.g. in a terminal recorded by a tool.
PROGRESS_ENV = "SEED_PROGRESS"


def bars_disabled() -> bool | None:
    """tqdm's ``disable``: True off the main process or with ``SEED_PROGRESS=0``; else None, which shows
    the bar only when its stream (stderr) is a terminal."""
    from seed_train.distributed import dist_info

    if os.environ.get(PROGRESS_ENV, "").strip().lower() in ("0", "off", "false", "no"):
        return True
    return None if dist_info().is_main else True


def progress_bar(total: int | None = None, desc: str = "", unit: str = "it", **kwargs: Any) -> tqdm:
    """A tqdm bar on stderr that follows :func:`bars_disabled`; inner bars vanish when done (``leave``)."""
    kwargs.setdefault("leave", False)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(total=total, desc=desc, unit=unit, disable=bars_disabled(), **kwargs)


def say(message: str) -> None:
    """Print a line on stdout above any live bar (a plain print would land on the bar's line)."""
    tqdm.write(message)


def clock(seconds: float) -> str:
    """A duration as 1h02m03s / 4m05s / 12s (progress lines and ETAs)."""
    seconds = int(round(seconds))
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")
