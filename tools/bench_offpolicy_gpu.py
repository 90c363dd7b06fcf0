"""Off-policy on the GPU: SAC gradient updates per second (batch 256, 256x256 networks, uniform
replay of 100k Pendulum transitions) eager against one CUDA-graph replay per update, and the
memory a 1M-transition Atari-style replay buffer (84x84x4 uint8 observations) takes in each
placement.

    python tools/bench_offpolicy_gpu.py   # writes docs/benchmarks/offpolicy_h200.json and .md
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import gymnasium as gym
import torch
from bench_common import write_report

from orin_rl.algorithms.sac import SAC
from orin_rl.buffers import ReplayBuffer
from orin_rl.config import SACConfig
from orin_rl.models import PolicySpec

ROOT = Path(__file__).resolve().parents[1]


def sac_updates_per_s(graphs: bool, updates: int, repeats: int) -> dict:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    spec = PolicySpec.from_spaces(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)),
                                  hidden_sizes=[256, 256], activation="relu", squash=True)  # fmt: skip
    sac = SAC(spec, SACConfig(batch_size=256, hidden_sizes=[256, 256], buffer_size=100_000),
              1, dev, "device", 1, graphs=graphs)  # fmt: skip
    n = 100_000
    sac.replay.add({
        "obs": torch.randn(n, 3, device=dev), "actions": torch.rand(n, 1, device=dev) * 4 - 2,
        "rewards": torch.randn(n, device=dev), "next_obs": torch.randn(n, 3, device=dev),
        "terminated": torch.zeros(n, device=dev), "discounts": torch.full((n,), 0.99, device=dev),
    })  # fmt: skip

    def one() -> None:
        batch = sac._sample()
        if graphs:
            sac._graphed_step(batch)
        else:
            torch.stack(sac._step(batch))

    for _ in range(50):  # warm-up (and the capture)
        one()
    rates = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(updates):
            one()
        torch.cuda.synchronize()
        rates.append(updates / (time.perf_counter() - start))
    return {"graphs": graphs and sac._graph is not None, "updates_per_s": statistics.median(rates),
            "runs": rates}  # fmt: skip


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def replay_memory(placement: str, capacity: int) -> dict:
    dev = torch.device("cuda")
    fields = {"obs": ((84, 84, 4), torch.uint8), "actions": ((), torch.int64),
              "rewards": ((), torch.float32), "terminated": ((), torch.float32)}  # fmt: skip
    torch.cuda.synchronize()
    free0, _ = torch.cuda.mem_get_info(dev)
    rss0 = _rss()
    start = time.perf_counter()
    try:
        buf = ReplayBuffer(capacity, fields, dev, placement)
    except Exception as exc:  # report, do not stop the other placements
        return {"placement": placement, "error": str(exc)[:200]}
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    free1, _ = torch.cuda.mem_get_info(dev)
    out = {
        "placement": buf.placement,
        "nbytes_gib": buf.nbytes / 2**30,
        "gpu_memory_gib": (free0 - free1) / 2**30,
        "resident_host_gib": (_rss() - rss0) / 2**30,
        "allocate_s": seconds,
    }
    del buf
    torch.cuda.empty_cache()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--capacity", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args()
    eager = sac_updates_per_s(False, args.updates, args.repeats)
    graph = sac_updates_per_s(True, args.updates, args.repeats)
    memory = [replay_memory(p, args.capacity) for p in ("device", "managed", "pinned", "host")]
    result = {
        "benchmark": "offpolicy_gpu",
        "date": time.strftime("%Y-%m-%d"),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "command": "python tools/bench_offpolicy_gpu.py",
        "sac_eager": eager,
        "sac_graph": graph,
        "graph_speedup": graph["updates_per_s"] / eager["updates_per_s"],
        "replay_1m_atari": memory,
    }
    lines = [f"# Off-policy on the GPU ({result['gpu']})", "",
             f"`{result['command']}`, {result['date']}, torch {result['torch']}.", "",
             "SAC gradient updates per second (batch 256, 256x256 actor and twin critics, "
             "sampling from a 100k uniform replay included), median of "
             f"{args.repeats} x {args.updates} updates:", "",
             "| update step | updates/s |", "|---|---|",
             f"| eager | {eager['updates_per_s']:,.0f} |",
             f"| CUDA graph | {graph['updates_per_s']:,.0f} |", "",
             f"Graph / eager: {result['graph_speedup']:.2f}×.", "",
             f"Replay buffer of {args.capacity:,} transitions with 84x84x4 uint8 observations "
             "(plus action, reward, terminated; no separate next observation):", "",
             "| placement | storage GiB | GPU memory GiB | host resident GiB | allocate s |",
             "|---|---|---|---|---|"]  # fmt: skip
    for m in memory:
        if "error" in m:
            lines.append(f"| {m['placement']} | failed: {m['error']} | | | |")
            continue
        lines.append(f"| {m['placement']} | {m['nbytes_gib']:.1f} | {m['gpu_memory_gib']:.1f} | "
                     f"{m['resident_host_gib']:.1f} | {m['allocate_s']:.1f} |")  # fmt: skip
    write_report(args.out, "offpolicy_h200", result, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
