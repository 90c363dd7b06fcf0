"""Gradient synchronisation for a small policy: one all-reduce of the flattened gradient (what
orin_rl does) against torch's DistributedDataParallel, on the same process group.

Each of ``--nproc`` processes runs the same PPO-sized minibatch step (64x64 tanh actor-critic,
minibatch 256) ``--steps`` times per method; the median step time is reported per method,
methods interleaved in blocks. gloo on the CPU (this box), NCCL with ``--device cuda``.

    python tools/bench_grad_sync.py --nproc 2   # writes docs/benchmarks/grad_sync_cpu.json/.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from bench_common import write_report
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from orin_rl.distributed import average_gradients
from orin_rl.models import ActorCritic, PolicySpec

ROOT = Path(__file__).resolve().parents[1]


class _Loss(nn.Module):
    """The policy's PPO-like loss as a forward(), so DDP's hooks see the whole graph."""

    def __init__(self, policy: ActorCritic):
        super().__init__()
        self.policy = policy

    def forward(self, obs, actions):
        logp, ent, values = self.policy.evaluate(obs, actions)
        return -(logp.mean()) - 0.01 * ent.mean() + 0.5 * values.square().mean()


def _worker(rank: int, nproc: int, init: str, device: str, steps: int, blocks: int, q) -> None:
    torch.set_num_threads(1)
    backend = "nccl" if device == "cuda" else "gloo"
    dev = torch.device("cuda", rank) if device == "cuda" else torch.device("cpu")
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=nproc)
    torch.manual_seed(0)
    spec = PolicySpec([4], "discrete", 2)
    flat_policy = ActorCritic(spec).to(dev)
    ddp = DistributedDataParallel(_Loss(ActorCritic(spec).to(dev)))
    opt_flat = torch.optim.Adam(flat_policy.parameters(), lr=1e-3)
    opt_ddp = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    obs = torch.randn(256, 4, device=dev)
    actions = torch.randint(0, 2, (256,), device=dev)
    flat_loss = _Loss(flat_policy)
    params = list(flat_policy.parameters())

    def step_flat():
        opt_flat.zero_grad()
        flat_loss(obs, actions).backward()
        average_gradients(params, nproc)
        opt_flat.step()

    def step_ddp():
        opt_ddp.zero_grad()
        ddp(obs, actions).backward()  # DDP all-reduces in buckets during backward
        opt_ddp.step()

    times: dict[str, list[float]] = {"flat_allreduce": [], "ddp": []}
    for _ in range(blocks):
        for name, fn in (("flat_allreduce", step_flat), ("ddp", step_ddp)):
            for _ in range(10):
                fn()  # warm-up of the block
            dist.barrier()
            for _ in range(steps):
                if device == "cuda":
                    torch.cuda.synchronize()
                t = time.perf_counter()
                fn()
                if device == "cuda":
                    torch.cuda.synchronize()
                times[name].append(time.perf_counter() - t)
    if rank == 0:
        q.put(times)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{tmp}/store"
        procs = [ctx.Process(target=_worker, args=(r, args.nproc, init, args.device, args.steps,
                                                   args.blocks, q)) for r in range(args.nproc)]  # fmt: skip
        for p in procs:
            p.start()
        times = q.get(timeout=600)
        for p in procs:
            p.join()
    med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    result = {
        "benchmark": "grad_sync",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "device": args.device,
        "nproc": args.nproc,
        "torch": torch.__version__,
        "median_step_us": med,
        "ratio_flat_over_ddp": med["flat_allreduce"] / med["ddp"],
        "command": "python tools/bench_grad_sync.py " + " ".join(
            f"--{k} {v}" for k, v in vars(args).items() if k != "out"),
    }  # fmt: skip
    name = f"grad_sync_{args.device}"
    lines = [f"# Gradient sync: flat all-reduce vs DDP ({result['machine']}, {args.device}, "
             f"{args.nproc} processes)", "", f"`{result['command']}`, {result['date']}, torch "
             f"{result['torch']}.", "", "| method | median step µs |", "|---|---|",
             *[f"| {k} | {v:,.0f} |" for k, v in med.items()], "",
             f"flat / DDP: {result['ratio_flat_over_ddp']:.2f}×"]  # fmt: skip
    write_report(args.out, name, result, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
