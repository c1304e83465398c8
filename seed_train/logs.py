"""Run logs: metrics as JSONL (one line per update), TensorBoard scalars when available, a PNG of curves.

The trainer logs and re-plots after every iteration, so ``curves.png`` and TensorBoard
(``tensorboard --logdir RUN/tensorboard``) follow a run while it goes.
"""
from __future__ import annotations

import json
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


class MetricsLogger:
    def __init__(self, out_dir: str | Path, *, resume_from_iteration: int | None = None):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / "metrics.jsonl"
        if resume_from_iteration is not None and self.path.exists():
            # Drop lines of iterations after the checkpoint: they will be redone.
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("iteration", -1) < resume_from_iteration]
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
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def plot(self, path: str | Path | None = None) -> Path:
        """``curves.png``: one panel per metric over updates (iterations); rewritten after every update.

        Written to a temporary file and renamed, so an image viewer refreshing it never reads half a PNG.
        """
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator

        rows = self.history()
        names = list(CURVES) + [c for c in EXTRA_CURVES if any(c in r for r in rows)]
        n_rows = -(-len(names) // PANELS_PER_ROW)
        fig, axes = plt.subplots(n_rows, PANELS_PER_ROW, figsize=(3.2 * PANELS_PER_ROW, 2.6 * n_rows), squeeze=False)
        for ax in axes.flat[len(names):]:
            ax.set_visible(False)
        for ax, name in zip(axes.flat, names):
            points = [(r["iteration"], r[name]) for r in rows if isinstance(r.get(name), (int, float))]
            ax.set_title(TITLES.get(name, name), fontsize=9)
            ax.set_xlabel("update (iteration)", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if points:
                ax.plot(*zip(*points), marker="o", ms=3)
            else:
                ax.text(0.5, 0.5, "no updates yet" if not rows else "not logged in this run", ha="center",
                        va="center", transform=ax.transAxes, fontsize=8, color="gray")
        fig.tight_layout()
        out = Path(path) if path else self.out_dir / "curves.png"
        tmp = out.with_name(out.name + ".tmp.png")
        fig.savefig(tmp, dpi=90)
        plt.close(fig)
        tmp.replace(out)
        return out

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
