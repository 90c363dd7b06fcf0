"""``orin-rl bench``: every available backend, one process, the same inputs.

Per backend and batch size: mean / median / p99 latency of ``infer`` (host input → action on
the host), throughput, resident memory of the process and GPU memory where torch reports it.
Writes JSON, a Markdown table and a bar chart.
"""

from __future__ import annotations

import json
import logging
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.runtime.base import Backend

log = logging.getLogger(__name__)


def rss_mb() -> float:
    """Resident set size of this process now (MiB), from /proc (peak where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
        return pages * resource.getpagesize() / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_backend(backend: Backend, batch: int, iters: int, seed: int = 0) -> dict[str, float]:
    """Latency statistics of ``iters`` calls at ``batch`` (after a warm-up); a model of
    several inputs (a dict observation's) is fed each of them."""
    rng = np.random.default_rng(seed)
    feeds = {spec.name: _random_input(spec, batch, rng) for spec in backend.input_specs}
    obs = feeds if len(feeds) > 1 else next(iter(feeds.values()))
    for _ in range(max(10, iters // 20)):
        backend.infer(obs)
    samples = np.empty(iters)
    for i in range(iters):
        t0 = time.perf_counter_ns()
        backend.infer(obs)
        samples[i] = time.perf_counter_ns() - t0
    us = samples / 1e3
    return {
        "batch": batch,
        "iters": iters,
        "mean_us": float(us.mean()),
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "throughput_per_s": batch / (us.mean() / 1e6),
    }


def _random_input(spec: Any, batch: int, rng: np.random.Generator) -> np.ndarray:
    """A random batch for one input: uint8 frames over their whole range, else Gaussian."""
    shape = [batch if i == 0 else d for i, d in enumerate(spec.shape)]
    dtype = np.dtype(spec.dtype)
    if dtype == np.uint8:  # frames: pixels over their whole range
        return rng.integers(0, 256, shape, dtype=np.uint8)
    return rng.standard_normal(shape).astype(dtype)


def gpu_memory_mb() -> float | None:
    """GPU memory allocated through torch in this process, if torch is loaded with CUDA."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return None
    return torch.cuda.max_memory_allocated() / 2**20


def run_bench(backends: dict[str, Backend], batches: list[int], iters: int) -> list[dict[str, Any]]:
    """Time each backend at each batch size; skip (with the reason) what cannot run."""
    rows = []
    for name, backend in backends.items():
        try:
            with backend:
                for batch in batches:
                    if (
                        isinstance(backend.input_spec.shape[0], int)
                        and backend.input_spec.shape[0] != batch
                    ):
                        continue
                    row = {
                        "backend": name,
                        **backend.describe(),
                        **time_backend(backend, batch, iters),
                    }
                    row.update(rss_mb=rss_mb(), gpu_mb=gpu_memory_mb())
                    rows.append(row)
        except Exception as exc:  # report and continue with the other backends
            log.warning("bench: %s skipped: %s", name, exc)
            rows.append({"backend": name, "error": f"{exc.__class__.__name__}: {exc}"[:300]})
    return rows


def markdown(rows: list[dict[str, Any]], title: str) -> str:
    """The seed-style table: backend, batch, latency, throughput, memory."""
    lines = [
        f"# {title}",
        "",
        "| backend | mode | batch | mean (µs) | p50 (µs) | p99 (µs) | throughput (/s) | RSS (MiB) |",  # noqa: E501
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['backend']} | — | — | — | — | — | not run: {r['error']} | — |")
            continue
        mode = r.get("mode") or r.get("provider") or ""
        lines.append(
            f"| {r['backend']} | {mode} | {r['batch']} | {r['mean_us']:.1f} | {r['p50_us']:.1f} | "
            f"{r['p99_us']:.1f} | {r['throughput_per_s']:,.0f} | {r['rss_mb']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def bar_chart(rows: list[dict[str, Any]], path: str | Path, title: str) -> None:
    """p50 and p99 latency per backend and batch, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in rows if "error" not in r]
    labels = [
        f"{r['backend']}\n{r.get('mode') or r.get('provider') or ''}\nbatch {r['batch']}"
        for r in ok
    ]
    x = np.arange(len(ok))
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(ok)), 4))
    ax.bar(x - 0.2, [r["p50_us"] for r in ok], 0.4, label="p50")
    ax.bar(x + 0.2, [r["p99_us"] for r in ok], 0.4, label="p99")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("latency (µs), host input → action on host")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(rows: list[dict[str, Any]], out_prefix: str | Path, title: str) -> None:
    """``PREFIX.json``, ``PREFIX.md`` and ``PREFIX.png``."""
    prefix = Path(out_prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    prefix.with_suffix(".json").write_text(
        json.dumps({"title": title, "rows": rows}, indent=2) + "\n"
    )
    prefix.with_suffix(".md").write_text(markdown(rows, title))
    bar_chart(rows, prefix.with_suffix(".png"), title)
