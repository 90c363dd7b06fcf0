"""Benchmark the buffer kernels against the measured copy bandwidth and against baselines.

One run, one GPU (``--device cuda``, the default when torch sees one):
- device-to-device copy bandwidth (the ceiling);
- GAE over (128, num_envs) for num_envs in {4096, 65536}: our kernel vs a PyTorch loop over time;
- minibatch gather: achieved GB/s (and torch's own index_select beside it);
- prioritized replay, 1M capacity, batch 4096: sample + priority update, vs a vectorised numpy
  sum-tree, and vs TorchRL's prioritized buffer when it is installed.
GB/s count bytes read + written once each. Writes JSON and Markdown under ``--out``.

    python tools/bench_buffers.py --out docs/benchmarks --name buffers_h200
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from bench_common import write_report

from orin_rl.buffers import PrioritizedReplayBuffer, ops

ROOT = Path(__file__).resolve().parents[1]


def time_us(fn: Callable[[], object], device: torch.device, repeats: int = 50, warmup: int = 5):
    """Median and p99 wall time of ``fn`` in µs, synchronising the device around each call."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[min(len(samples) - 1, int(0.99 * len(samples)))]


def time_graph_us(fn: Callable[[], object], device: torch.device, repeats: int = 50):
    """Median and p99 of replaying ``fn`` captured in a CUDA graph: device time without the
    Python launch cost (Numba kernels launch on torch's stream, so they are captured too)."""
    if device.type != "cuda":
        return None
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return time_us(graph.replay, device, repeats)


def _gb_s(nbytes: int, us: float) -> float:
    return nbytes / (us * 1e-6) / 1e9


def copy_bandwidth(device: torch.device) -> float:
    """GB/s of a large device-to-device copy (bytes read + written)."""
    n = (1 << 30) // 4 if device.type == "cuda" else (1 << 26) // 4
    src = torch.rand(n, device=device)
    dst = torch.empty_like(src)
    med, _ = time_us(lambda: dst.copy_(src), device, repeats=20)
    return 2 * src.numel() * 4 / (med * 1e-6) / 1e9


def torch_gae(r, v, nv, term, end, gamma, lam):
    """The reference: a Python loop over time of PyTorch tensor ops."""
    adv = torch.empty_like(r)
    last = torch.zeros_like(r[0])
    not_term, not_end = (~term).float(), (~end).float()
    for t in range(r.shape[0] - 1, -1, -1):
        delta = r[t] + gamma * nv[t] * not_term[t] - v[t]
        last = delta + gamma * lam * not_end[t] * last
        adv[t] = last
    return adv


def bench_gae(device: torch.device, num_envs: int, num_steps: int = 128) -> dict:
    g = torch.Generator(device="cpu").manual_seed(num_envs)
    shape = (num_steps, num_envs)
    r, v, nv = (torch.randn(shape, generator=g).to(device) for _ in range(3))
    term = (torch.rand(shape, generator=g) < 0.01).to(device)
    end = term | (torch.rand(shape, generator=g) < 0.005).to(device)
    adv = torch.empty(shape, device=device)
    views = [ops.numba_view(t) for t in (r, v, nv, term, end, adv)]  # made once, as buffers do
    run = lambda: ops.gae(*views[:5], 0.99, 0.95, views[5], device)  # noqa: E731
    ours, graph = time_us(run, device), time_graph_us(run, device)
    ref = time_us(lambda: torch_gae(r, v, nv, term, end, 0.99, 0.95), device, repeats=20)
    torch.testing.assert_close(
        adv, torch_gae(r, v, nv, term, end, 0.99, 0.95), rtol=1e-4, atol=1e-4
    )
    nbytes = r.numel() * (3 * 4 + 2 * 1 + 4)
    return {
        "num_steps": num_steps,
        "num_envs": num_envs,
        "ours_us": ours[0],
        "ours_p99_us": ours[1],
        "torch_loop_us": ref[0],
        "speedup": ref[0] / ours[0],
        "ours_gb_s": nbytes / (ours[0] * 1e-6) / 1e9,
        "graph_us": graph[0] if graph else None,
        "graph_gb_s": _gb_s(nbytes, graph[0]) if graph else None,
    }


def bench_gather(device: torch.device, rows: int, cols: int, take: int) -> dict:
    src = torch.randn(rows, cols, device=device)
    index = torch.randperm(rows, device=device)[:take]
    dst = torch.empty(take, cols, device=device)
    sv, iv, dv = ops.numba_view(src), ops.numba_view(index), ops.numba_view(dst)
    run = lambda: ops.gather(sv, iv, dv, device)  # noqa: E731
    ours, graph = time_us(run, device), time_graph_us(run, device)
    ref = time_us(lambda: torch.index_select(src, 0, index, out=dst), device)
    nbytes = take * cols * 4 * 2 + take * 8
    return {
        "rows": rows,
        "cols": cols,
        "take": take,
        "ours_us": ours[0],
        "ours_gb_s": nbytes / (ours[0] * 1e-6) / 1e9,
        "torch_index_select_us": ref[0],
        "torch_gb_s": nbytes / (ref[0] * 1e-6) / 1e9,
        "graph_us": graph[0] if graph else None,
        "graph_gb_s": _gb_s(nbytes, graph[0]) if graph else None,
    }


class NumpySumTree:
    """Vectorised numpy proportional sampler: the reference for the sum-tree kernels."""

    def __init__(self, capacity: int):
        self.capacity = 1 << int(np.ceil(np.log2(capacity)))
        self.tree = np.zeros(2 * self.capacity)

    def update(self, leaves: np.ndarray, values: np.ndarray) -> None:
        nodes = leaves + self.capacity
        self.tree[nodes] = values
        while nodes[0] > 1:
            nodes = np.unique(nodes // 2)
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]

    def sample(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        total = self.tree[1]
        target = (np.arange(batch) + rng.random(batch)) * total / batch
        nodes = np.ones(batch, dtype=np.int64)
        while nodes[0] < self.capacity:
            left = 2 * nodes
            go_left = target < self.tree[left]
            target = np.where(go_left, target, target - self.tree[left])
            nodes = np.where(go_left, left, left + 1)
        return nodes - self.capacity


def bench_per(device: torch.device, capacity: int = 1 << 20, batch: int = 4096) -> dict:
    fields = {"obs": ((8,), torch.float32), "reward": ((), torch.float32)}
    buf = PrioritizedReplayBuffer(
        capacity, fields, device, "device" if device.type == "cuda" else "host"
    )
    chunk = min(1 << 16, capacity)
    for _ in range(0, capacity, chunk):
        buf.add(
            {
                "obs": torch.randn(chunk, 8, device=device),
                "reward": torch.randn(chunk, device=device),
            }
        )
    td = torch.rand(batch, device=device)

    def ours():
        b = buf.sample(batch)
        buf.update_priorities(b.indices, td)

    ours_t = time_us(ours, device, repeats=100)
    sample_t = time_us(lambda: buf.sample(batch), device, repeats=100)
    b = buf.sample(batch)
    update_t = time_us(lambda: buf.update_priorities(b.indices, td), device, repeats=100)
    graph_t = time_graph_us(ours, device, repeats=100)
    tree = NumpySumTree(capacity)
    rng = np.random.default_rng(0)
    tree.update(np.arange(capacity), rng.random(capacity))
    td_host = rng.random(batch)

    def reference():
        idx = tree.sample(batch, rng)
        tree.update(idx, td_host)

    ref_t = time_us(reference, torch.device("cpu"), repeats=20)
    result = {
        "capacity": capacity,
        "batch": batch,
        "ours_us": ours_t[0],
        "ours_p99_us": ours_t[1],
        "numpy_us": ref_t[0],
        "speedup_vs_numpy": ref_t[0] / ours_t[0],
        "sample_only_us": sample_t[0],
        "update_only_us": update_t[0],
        "graph_us": graph_t[0] if graph_t else None,
        "graph_speedup_vs_numpy": ref_t[0] / graph_t[0] if graph_t else None,
    }
    result.update(bench_torchrl(device, capacity, batch))
    return result


def bench_torchrl(device: torch.device, capacity: int, batch: int) -> dict:
    try:
        from tensordict import TensorDict
        from torchrl.data import LazyTensorStorage
        from torchrl.data import PrioritizedReplayBuffer as TorchRLPER
    except Exception as exc:  # missing, or built against another torch
        return {"torchrl": f"not available: {exc.__class__.__name__}: {exc}"[:200]}
    rb = TorchRLPER(
        alpha=0.6, beta=0.4, storage=LazyTensorStorage(capacity, device=device), batch_size=batch
    )
    chunk = min(1 << 16, capacity)
    for _ in range(0, capacity, chunk):
        rb.extend(TensorDict({"obs": torch.randn(chunk, 8, device=device)}, batch_size=[chunk]))
    td = torch.rand(batch, device=device)

    def run():
        _, info = rb.sample(return_info=True)
        rb.update_priority(info["index"], td)

    t = time_us(run, device, repeats=50)
    return {"torchrl_us": t[0], "torchrl_p99_us": t[1]}


def _f(x, spec=".0f"):
    return "—" if x is None else format(x, spec)


def markdown(r: dict) -> str:
    """Tables of the result. 'eager' = launched from Python per call; 'graph' = the same
    calls captured once in a CUDA graph and replayed (the device's own time)."""
    copy = r["copy_gb_s"]
    lines = [
        f"# Buffer kernels on {r['device_name']}",
        "",
        f"Run {r['date']}, torch {r['torch']}, numba {r['numba']}. Command: `{r['command']}`.",
        f"Copy bandwidth (device to device, read + write): **{copy:.0f} GB/s**. "
        "Eager = launched from Python each call; graph = captured once in a CUDA graph and "
        "replayed (device time, no Python launch cost). GB/s count bytes read + written once.",
        "",
        "| GAE (steps × envs) | eager (µs) | graph (µs) | PyTorch loop (µs) | speed-up (eager) | graph GB/s | % of copy |",
        "|---|---|---|---|---|---|---|",
    ]
    for g in r["gae"]:
        pct = 100 * g["graph_gb_s"] / copy if g["graph_gb_s"] else None
        lines.append(
            f"| {g['num_steps']} × {g['num_envs']} | {g['ours_us']:.1f} | {_f(g['graph_us'], '.1f')} | "
            f"{g['torch_loop_us']:.0f} | {g['speedup']:.0f}× | {_f(g['graph_gb_s'])} | {_f(pct)}% |"
        )
    lines += [
        "",
        "| kernel | size | eager (µs) | graph (µs) | graph GB/s | % of copy | torch (µs) | torch GB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    gw = r.get("gather_wide")
    for name, k, size, ref in (
        *(
            [
                (
                    "minibatch gather, 1 KiB rows",
                    gw,
                    f"{gw['take']:,} of {gw['rows']:,} rows × {gw['cols']}",
                    "torch_index_select_us",
                )
            ]
            if gw
            else []
        ),
        (
            "minibatch gather",
            r["gather"],
            f"{r['gather']['take']:,} of {r['gather']['rows']:,} rows × {r['gather']['cols']}",
            "torch_index_select_us",
        ),
    ):
        pct = 100 * k["graph_gb_s"] / copy if k["graph_gb_s"] else None
        lines.append(
            f"| {name} | {size} | {k['ours_us']:.0f} | {_f(k['graph_us'])} | {_f(k['graph_gb_s'])} | "
            f"{_f(pct)}% | {k[ref]:.0f} | {k['torch_gb_s']:.0f} |"
        )
    p = r["per"]
    torchrl = f"{p['torchrl_us']:.0f} µs" if "torchrl_us" in p else p.get("torchrl", "—")
    lines += [
        "",
        f"Prioritized replay, capacity {p['capacity']:,}, batch {p['batch']}, sample + priority "
        f"update: eager **{p['ours_us']:.0f} µs** (p99 {p['ours_p99_us']:.0f}; sample "
        f"{p['sample_only_us']:.0f}, update {p['update_only_us']:.0f}), graph "
        f"{_f(p['graph_us'])} µs; vectorised numpy sum-tree {p['numpy_us']:.0f} µs "
        f"(eager **{p['speedup_vs_numpy']:.1f}×**, graph {_f(p['graph_speedup_vs_numpy'], '.1f')}×); "
        f"TorchRL {torchrl}.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    import numba

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--name", default="buffers_h200")
    args = parser.parse_args()
    device = torch.device(args.device)
    result = {
        "benchmark": "buffer_kernels",
        "date": time.strftime("%Y-%m-%d"),
        "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU",
        "torch": torch.__version__,
        "numba": numba.__version__,
        "command": f"python tools/bench_buffers.py --device {args.device} --name {args.name}",
        "copy_gb_s": copy_bandwidth(device),
        "gae": [bench_gae(device, n) for n in (4096, 65536)],
        "gather": bench_gather(device, rows=128 * 65536, cols=16, take=128 * 65536 // 4),
        # Wide rows (a 1 KiB observation): random rows are read in full cache lines.
        "gather_wide": bench_gather(device, rows=1 << 20, cols=256, take=1 << 18),
        "per": bench_per(device),
    }
    text = markdown(result)
    write_report(args.out, args.name, result, text)
    print(text)


if __name__ == "__main__":
    main()
