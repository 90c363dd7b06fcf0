"""Latency statistics (p50 … max, jitter, deadline misses) as JSON and a histogram PNG."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

PERCENTILES = {"p50": 50, "p90": 90, "p99": 99, "p999": 99.9}


@dataclass
class LatencyRecorder:
    """Preallocated latency and period samples (ns): no allocation while recording."""

    capacity: int

    def __post_init__(self) -> None:
        # Written now, not lazily: np.zeros leaves pages uncommitted, and the first touch of each
        # page inside the loop would be a page fault (latency) and visible RSS growth.
        self.latency_ns = np.full(self.capacity, 0, dtype=np.int64)
        self.period_ns = np.full(self.capacity, 0, dtype=np.int64)
        self.count = 0

    def record(self, latency_ns: int, period_ns: int) -> None:
        """Store one iteration's latency and the time since the previous iteration started."""
        i = self.count
        if i < self.capacity:
            self.latency_ns[i] = latency_ns
            self.period_ns[i] = period_ns
        self.count = i + 1


def summarize_us(samples_ns: np.ndarray) -> dict[str, float]:
    """mean, p50, p90, p99, p99.9 and max of ns samples, in µs."""
    if len(samples_ns) == 0:
        return {k: 0.0 for k in ("mean", *PERCENTILES, "max")}
    us = samples_ns.astype(np.float64) / 1e3
    out = {"mean": float(us.mean())}
    ascending = np.sort(us)
    out.update({k: percentile(ascending, q) for k, q in PERCENTILES.items()})
    out["max"] = float(ascending[-1])
    return out


def percentile(ascending: np.ndarray, q: float) -> float:
    """``np.percentile(ascending, q)`` (its default, linear method) of a sorted 1-D array.

    Not np.percentile itself: its ``np.unique`` imports numpy.ma, 1.2 MiB of a torch-free
    ``orin-rl run``'s resident memory (tools/bench_deploy_rss.py)."""
    # rank (n - 1) q / 100 between two neighbours, interpolated from the nearer one as numpy's
    # _lerp does (bit for bit the same answer)
    rank = (len(ascending) - 1) * (q / 100)
    below = math.floor(rank)
    if below >= len(ascending) - 1:
        return float(ascending[-1])
    a, b, t = float(ascending[below]), float(ascending[below + 1]), rank - below
    return b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t


def jitter_us(period_ns: np.ndarray, target_ns: int) -> dict[str, float]:
    """Deviation of the achieved period from the target: std and max |error|, in µs."""
    if len(period_ns) < 2 or target_ns <= 0:
        return {"std": 0.0, "max_abs": 0.0}
    err = (period_ns[1:].astype(np.float64) - target_ns) / 1e3
    return {"std": float(err.std()), "max_abs": float(np.abs(err).max())}


def write_report(report: dict[str, Any], path: str | Path) -> None:
    """JSON report (keys documented in README: backend, latency_us, deadline_misses, …)."""
    Path(path).write_text(json.dumps(report, indent=2) + "\n")


MARKERS = (("p50", 50, "--"), ("p99", 99, "-."), ("p99.9", 99.9, ":"))
"""The percentiles drawn on the histogram, with their line styles."""


def histogram_figure(latency_ns: np.ndarray, title: str, deadline_us: float | None):
    """The latency histogram (log count) with the percentiles and the deadline as vertical
    lines; their values sit in a legend beside the axes, so labels of close lines (p50 and p99
    of a steady loop are often a few µs apart) never overlap each other or the bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    us = latency_ns / 1e3
    fig, ax = plt.subplots(figsize=(8, 3.5), layout="constrained")
    ax.hist(us, bins=100, log=True, color="#4c72b0")
    for name, q, style in MARKERS:
        v = np.percentile(us, q)
        ax.axvline(v, linestyle=style, color="0.25", label=f"{name} {v:,.1f} µs")
    if deadline_us:
        ax.axvline(deadline_us, color="red", label=f"deadline {deadline_us:,.0f} µs")
    ax.set_xlabel("iteration latency (µs): sensor → infer → actuate")
    ax.set_ylabel("iterations")
    ax.set_title(title)
    fig.legend(loc="outside right upper", fontsize=8)
    return fig


def histogram_png(
    latency_ns: np.ndarray, path: str | Path, title: str, deadline_us: float | None
) -> None:
    """Write ``histogram_figure`` as a PNG."""
    import matplotlib.pyplot as plt

    fig = histogram_figure(latency_ns, title, deadline_us)
    fig.savefig(path, dpi=110)
    plt.close(fig)
