"""Run logs: metrics as JSONL (one line per update), TensorBoard scalars when available, a PNG of curves.

The trainer logs and re-plots after every iteration, so ``curves.png`` and TensorBoard
(``tensorboard --logdir RUN/tensorboard``) follow a run while it goes.
"""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

# Always drawn (a panel says so when its metric is not logged: GRPO has no OPD term, kl_coef 0 no KL) ...
CURVES = ("success", "return", "kl", "opd_term", "mean_gate", "gate_adv_cov_context")
# ... and drawn when present.
EXTRA_CURVES = ("score", "format_error_rate", "skill_valid_rate", "loss")
TITLES = {"success": "success rate", "return": "episode return", "kl": "KL to reference", "opd_term": "OPD term",
          "mean_gate": "mean gate", "gate_adv_cov_context": "Cov(gate, advantage) within context", "score": "score",
          "format_error_rate": "format-error rate", "skill_valid_rate": "valid-skill rate", "loss": "total loss"}
PANELS_PER_ROW = 4


def _records(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """(line, record) for each metrics line; a line that is not a JSON object (a torn last line of a killed
    run, above all) is skipped with a warning, so a resume goes on without it."""
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            warnings.warn(f"{path}:{number}: skipping a line that is not a JSON metrics record (torn by a "
                          f"killed run?): {line[:60]!r}", stacklevel=3)
            continue
        out.append((line, record))
    return out


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """A run's metrics records, one per iteration (``path``: its ``metrics.jsonl`` or the run folder); [] when
    there is none. The one reader of the file (reports, experiments, records and benchmarks use it): a torn
    line of a killed run is skipped with a warning, a line without an iteration number is left out."""
    file = Path(path)
    if file.is_dir():
        file = file / "metrics.jsonl"
    if not file.is_file():
        return []
    return [record for _, record in _records(file) if isinstance(record.get("iteration"), int)]


def iteration_mean(rows: list[dict[str, Any]], metric: str, iterations: Any = None) -> float | None:
    """``metric``'s mean over the metrics rows that logged it (an iteration with no update logs no step
    metrics: it is left out, not counted as a zero), only the rows of ``iterations`` when given; None when
    no row has it. The per-run figure of the update-size tables and ``benchmarks/update_size.py``."""
    values = [float(r[metric]) for r in rows
              if r.get(metric) is not None and (iterations is None or r.get("iteration") in iterations)]
    return sum(values) / len(values) if values else None


def value_limits(values: list[float]) -> tuple[float, float]:
    """y limits of a panel: the values with 8% margins, and a readable span around a single or constant
    value (matplotlib's own is +-5% of it, down to 1e-15-wide axes for values near 0)."""
    lo, hi = min(values), max(values)
    span = hi - lo
    if span <= 1e-12 * max(1.0, abs(lo), abs(hi)):
        half = 0.1 * abs(lo) if lo else 0.05
        return lo - half, hi + half
    return lo - 0.08 * span, hi + 0.08 * span


class MetricsLogger:
    def __init__(self, out_dir: str | Path, *, resume_from_iteration: int | None = None):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / "metrics.jsonl"
        if resume_from_iteration is not None and self.path.exists():
            # Drop lines of iterations after the checkpoint: they will be redone.
            kept = [line for line, record in _records(self.path)
                    if record.get("iteration", -1) < resume_from_iteration]
            self.path.write_text("".join(line + "\n" for line in kept))
        self._tb = None
        try:  # TensorBoard is optional: torch ships the writer, the tensorboard package does the work
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.out_dir / "tensorboard"))
        except Exception:
            self._tb = None

    def log(self, iteration: int, metrics: dict[str, Any]) -> None:
        record = {"iteration": iteration, **metrics}
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for k, v in metrics.items():
                if isinstance(v, (int, float)):
                    self._tb.add_scalar(k, v, iteration)
            self._tb.flush()

    def history(self) -> list[dict[str, Any]]:
        return read_metrics(self.path)

    def plot(self, path: str | Path | None = None) -> Path:
        """``curves.png``: one panel per metric over updates (iterations); rewritten after every update.

        Written to a temporary file and renamed, so an image viewer refreshing it never reads half a PNG.
        """
        import matplotlib.pyplot as plt

        fig = curves_figure(self.history())
        out = Path(path) if path else self.out_dir / "curves.png"
        tmp = out.with_name(out.name + ".tmp.png")
        fig.savefig(tmp, dpi=90)
        plt.close(fig)
        tmp.replace(out)
        return out

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def curves_figure(rows: list[dict[str, Any]]):
    """The matplotlib figure of :meth:`MetricsLogger.plot` for metrics records (``iteration`` 0-based)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, MaxNLocator

    names = list(CURVES) + [c for c in EXTRA_CURVES if any(c in r for r in rows)]
    n_rows = -(-len(names) // PANELS_PER_ROW)
    fig, axes = plt.subplots(n_rows, PANELS_PER_ROW, figsize=(3.2 * PANELS_PER_ROW, 2.6 * n_rows), squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    # Iterations numbered from 1, as the console counts them (metrics.jsonl keeps the 0-based index).
    last = max((r["iteration"] + 1 for r in rows if isinstance(r.get("iteration"), int)), default=1)
    for ax, name in zip(axes.flat, names):
        # (a non-finite value, e.g. a NaN loss of a skipped update, is left out: it has no place on an axis)
        points = [(r["iteration"] + 1, r[name]) for r in rows
                  if isinstance(r.get(name), (int, float)) and math.isfinite(r[name])]
        ax.set_title(TITLES.get(name, name), fontsize=9, pad=10)  # room for a "1e-7" scale label
        ax.set_xlabel("iteration", fontsize=8)
        ax.tick_params(labelsize=7)
        # Whole iterations only (MaxNLocator(integer=True) falls back to 0.1 steps on a 1-iteration axis).
        ax.xaxis.set_major_locator(FixedLocator(range(1, last + 1)) if last <= 12 else MaxNLocator(integer=True))
        # No offset notation ("1e-5 + 3.2e-1"): a one-point or flat panel would print nothing else.
        ax.ticklabel_format(axis="y", useOffset=False)
        if points:
            ax.plot(*zip(*points), marker="o", ms=3)
            ax.set_xlim(0.5, last + 0.5)
            ax.set_ylim(*value_limits([v for _, v in points]))
            if len(points) == 1:  # one dot says little on its own: print its value beside it
                ax.annotate(f"{points[0][1]:.4g}", points[0], xytext=(6, 4), textcoords="offset points",
                            fontsize=8)
        else:
            ax.text(0.5, 0.5, "no updates yet" if not rows else "not logged in this run", ha="center",
                    va="center", transform=ax.transAxes, fontsize=8, color="gray")
            ax.set_xticks([])
            ax.set_yticks([])
    fig.tight_layout()
    return fig
