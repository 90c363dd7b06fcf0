"""What the benchmark tools share, light enough for any of them (no torch, numpy or matplotlib
at import): timed calls, the head of a result's JSON, the writing of its JSON and Markdown
files, and its figure's."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path


def task_seed_parser(
    doc: str, tasks: str, num_envs: int, seeds: str, out: Path
) -> argparse.ArgumentParser:
    """The arguments of a benchmark whose result is a row per task and seed (described by
    ``doc``'s first line): ``--tasks``, ``--num-envs``, ``--seeds`` and ``--out``, defaults as
    given; the benchmark adds its own."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--tasks", default=tasks)
    p.add_argument("--num-envs", type=int, default=num_envs)
    p.add_argument("--seeds", default=seeds, help="comma-separated: a row per task and seed")
    p.add_argument("--out", type=Path, default=out)
    return p


def call_times_ns(fn: Callable[[], object], iters: int, warmup: int):
    """``fn`` called ``warmup`` times untimed, then ``iters`` times timed: a numpy array of
    each timed call's wall time in nanoseconds."""
    import numpy as np

    for _ in range(warmup):
        fn()
    samples = np.empty(iters)
    for i in range(iters):
        t0 = time.perf_counter_ns()
        fn()
        samples[i] = time.perf_counter_ns() - t0
    return samples


def record_head(benchmark: str, machine: str, tool: str, torch: str | None = None) -> dict:
    """A result's first keys, in this order: ``benchmark``, ``date`` (today), ``machine``,
    ``torch`` (where given) and ``command``: ``python tools/<tool>`` with this process's
    arguments."""
    head = {"benchmark": benchmark, "date": time.strftime("%Y-%m-%d"), "machine": machine}
    if torch is not None:
        head["torch"] = torch
    head["command"] = f"python tools/{tool} " + " ".join(sys.argv[1:])
    return head


def write_report(out: Path, name: str, result: dict, markdown: str) -> None:
    """``out/<name>.json`` (``result``, indented) and ``out/<name>.md`` (``markdown`` as given),
    ``out`` made where missing."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / f"{name}.md").write_text(markdown)


def pyplot():
    """matplotlib's ``pyplot`` on the Agg backend: figures for files, no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path) -> None:
    """``fig`` laid out tight, written to ``path`` (110 dpi) and closed."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    pyplot().close(fig)
