"""Progress a person can follow: tqdm bars on stderr, and lines on stdout that do not break them.

Bars (Stage 1 optimizer steps, rollout episodes, evaluation episodes, Stage 2 iterations) show only
where someone watches: on the main process, when stderr is a terminal (tqdm's ``disable=None``), and
not when ``SEED_PROGRESS=0`` is set. Logs redirected to a file therefore get no carriage-return noise,
only the phase lines, which go through :func:`say` (``tqdm.write``: printed above the bars, never onto
one).
"""
from __future__ import annotations

import os
import sys
import time
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


def progress_bar(total: int | None = None, desc: str = "", unit: str = "it", **kwargs: Any) -> Any:
    """A tqdm bar on stderr that follows :func:`bars_disabled`; inner bars vanish when done (``leave``).

    Where stderr is no terminal (a log file, a CI job), the main process gets :class:`ProgressLines`
    instead: a line with done / total and an ETA at most every :data:`LINE_EVERY_S` seconds."""
    disabled = bars_disabled()
    if disabled is None and total and not _stderr_is_terminal():
        return ProgressLines(total, desc, unit)
    kwargs.setdefault("leave", False)
    kwargs.setdefault("dynamic_ncols", True)
    return tqdm(total=total, desc=desc, unit=unit, disable=disabled, **kwargs)


#: How often a log without a terminal hears of a phase's progress.
LINE_EVERY_S = 60.0


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


class ProgressLines:
    """A bar's ``update`` / ``close`` for logs: ``  eval after Stage 1: 12/24 episodes, 1m10s, ETA 1m10s``
    through :func:`say`, at most every ``every_s`` seconds (none for a phase shorter than that).

    Episodes played in one batch often all end at the last turn (Sokoban's rooms run to the step limit),
    so :meth:`turn` lets the rollout say how far it is between endings: ``0/48 episodes, turn 9 (48
    playing), 5m00s``, on the same clock. With the episodes' step limit known (``turn_limit``) and every
    episode left playing in the current batch, the ETA is at most the turns left at the batch's pace so far:
    one early win among 48 episodes otherwise gave an ETA of 47 times the time it took."""

    def __init__(self, total: int, desc: str, unit: str, every_s: float = LINE_EVERY_S, clock_fn=time.monotonic):
        self.total, self.desc, self.unit, self.every_s, self._now = total, desc, unit, every_s, clock_fn
        self.n = 0
        self.turn_limit: int | None = None  # the episodes' step limit, where the caller knows it
        self._turn: tuple[int, int] | None = None
        self._start = self._last = self._batch_start = self._last_turn = clock_fn()

    def update(self, n: int = 1) -> None:
        self.n += n
        self._maybe_say()

    def turn(self, turns: int, playing: int) -> None:
        """The rollout has played ``turns`` turns of its current batch; ``playing`` episodes go on."""
        now = self._now()
        if self._turn is not None and turns <= self._turn[0]:  # a new batch began after the last one's turn
            self._batch_start = self._last_turn
        self._turn, self._last_turn = (turns, playing), now
        self._maybe_say()

    def _eta(self, now: float) -> float | None:
        """From the episodes ended so far; bounded by the current batch's turns left where every episode
        still to end plays in it (none waits for a later batch). ``>=``: an ``update`` for episodes that
        ended this turn comes before the turn's own count of those still playing."""
        eta = (now - self._start) / self.n * (self.total - self.n) if self.n else None
        if self.turn_limit and self._turn and self._turn[0] and self.n + self._turn[1] >= self.total:
            turns = self._turn[0]
            bound = (self._last_turn - self._batch_start) / turns * max(self.turn_limit - turns, 0)
            eta = bound if eta is None else min(eta, bound)
        return eta

    def _maybe_say(self) -> None:
        now = self._now()
        if now - self._last >= self.every_s and self.n < self.total:
            self._last = now
            elapsed = now - self._start
            eta = self._eta(now)
            limit = f"/{self.turn_limit}" if self.turn_limit else ""
            where = f", turn {self._turn[0]}{limit} ({self._turn[1]} playing)" if self._turn and self._turn[1] else ""
            say(f"  {self.desc}: {self.n}/{self.total} {self.unit}s{where}, {clock(elapsed)}"
                + (f", ETA {clock(eta)}" if eta is not None else ""))

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:  # (a bar's extra figures: lines leave them out)
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def turn_reporter(bar: Any, turn_limit: int | None = None):
    """What a rollout's ``on_turn(turns, playing)`` should call for ``bar``: a log's :meth:`ProgressLines.turn`
    (``turn_limit``, the episodes' step limit where known, bounds its ETA), a terminal bar's postfix
    (``turn=9, playing=48``)."""
    if isinstance(bar, ProgressLines):
        bar.turn_limit = turn_limit
        return bar.turn
    return lambda turns, playing: bar.set_postfix(
        {"turn": f"{turns}/{turn_limit}" if turn_limit else turns, "playing": playing}, refresh=False)


def say(message: str) -> None:
    """Print a line on stdout above any live bar (a plain print would land on the bar's line)."""
    tqdm.write(message)


def clock(seconds: float) -> str:
    """A duration as 1h02m03s / 4m05s / 12s (progress lines and ETAs)."""
    seconds = int(round(seconds))
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")
