"""Run-folder metrics: metrics.jsonl (appended), TensorBoard events and curve.png."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class MetricsLogger:
    """Writes one JSON line per logged iteration and mirrors scalars to TensorBoard."""

    def __init__(self, run_dir: Path, tensorboard: bool = True):
        self.run_dir = run_dir
        self.path = run_dir / "metrics.jsonl"
        self._file = self.path.open("a", buffering=1)
        self._tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # pragma: no cover - tensorboard is a core dependency
                log.warning("tensorboard is not installed: pip install tensorboard")
            else:
                self._tb = SummaryWriter(log_dir=str(run_dir / "tb"))

    def log(self, record: dict[str, Any]) -> None:
        """Append ``record`` (must hold ``global_step``) to metrics.jsonl and TensorBoard."""
        self._file.write(json.dumps(record) + "\n")
        if self._tb is not None:
            step = int(record["global_step"])
            for key, value in record.items():
                if (
                    key != "global_step"
                    and isinstance(value, (int, float))
                    and math.isfinite(value)
                ):
                    self._tb.add_scalar(key, value, step)

    def close(self) -> None:
        """Flush and close both sinks."""
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All records of a metrics.jsonl (a torn last line from a crash is skipped)."""
    records = []
    if not path.exists():
        return records
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def curve_figure(records: list[dict[str, Any]], title: str):
    """Episode return against environment steps and against wall time; the legend sits below
    the axes, so it never hides an evaluation point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in records if "charts/episode_return_mean" in r]
    evals = [r for r in records if "eval/return_mean" in r]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True, layout="constrained")
    for ax, xkey, xlabel in (
        (axes[0], "global_step", "environment steps"),
        (axes[1], "time_s", "wall time (s)"),
    ):
        ax.plot(
            [r[xkey] for r in train],
            [r["charts/episode_return_mean"] for r in train],
            label="training episodes (mean of last 100)",
        )
        if evals:
            ax.errorbar(
                [r[xkey] for r in evals],
                [r["eval/return_mean"] for r in evals],
                yerr=[r.get("eval/return_std", 0.0) for r in evals],
                fmt="o",
                label="deterministic evaluation",
            )
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("episode return")
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=len(handles), fontsize=8)
    fig.suptitle(title)
    return fig


def plot_curve(metrics_path: Path, out: Path, title: str) -> None:
    """curve.png: ``curve_figure`` of a metrics.jsonl."""
    import matplotlib.pyplot as plt

    fig = curve_figure(read_metrics(metrics_path), title)
    fig.savefig(out, dpi=110)
    plt.close(fig)
