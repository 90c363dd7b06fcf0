"""The PPO update alone, on synthetic rollouts: seconds an update and a minibatch step, op by op
against the alternatives (``ppo.compile_update`` on any device, the CUDA graph of
``ppo.graph_update`` on a CUDA learner), per torch thread count. Each row runs in its own process
(a compile's cost is its first update). Writes JSON + Markdown.

    python tools/bench_update.py --device cpu --threads 1,2 --paths eager,compile \\
        --out docs/benchmarks/update_hopper_cpu_2core

Defaults: Hopper-v5's CPU preset (11 observations, 3 actions, 64x64 tanh networks, 128 steps x
16 envs, 32 minibatches of 64, 10 epochs: 320 minibatch steps an update).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHAPE = ("obs_dim", "act_dim", "hidden", "num_steps", "num_envs", "minibatches", "epochs")
sys.path.insert(0, str(ROOT))


def one_row(args) -> dict:
    """In this process: build PPO on random data, time ``args.updates`` updates."""
    import torch

    from orin_rl.algorithms import PPO
    from orin_rl.buffers import RolloutBuffer
    from orin_rl.config import PPOConfig
    from orin_rl.models import ActorCritic, PolicySpec
    from orin_rl.runners.graphs import GraphedUpdate

    torch.set_num_threads(args.thread)
    torch.manual_seed(0)
    device = torch.device(args.device)
    hidden = [int(h) for h in args.hidden.split(",")]
    spec = PolicySpec([args.obs_dim], "continuous", args.act_dim, hidden_sizes=hidden)
    placement = "host" if device.type == "cpu" else "device"
    buffer = RolloutBuffer(args.num_steps, args.num_envs, (args.obs_dim,), (args.act_dim,),
                           torch.float32, device, placement, args.minibatches)  # fmt: skip
    cfg = PPOConfig(num_steps=args.num_steps, num_minibatches=args.minibatches,
                    num_epochs=args.epochs, compile_update=args.path == "compile")  # fmt: skip
    graphed = args.path == "graph"
    algo = PPO(ActorCritic(spec).to(device), buffer, cfg, 1000, device, capturable=graphed)
    if graphed:
        algo.graphed_update = GraphedUpdate(algo)
    gen = torch.Generator().manual_seed(1)
    times = []
    for _ in range(args.updates):
        for name in ("obs", "actions", "values", "advantages", "returns"):
            t = getattr(buffer, name)
            t.copy_(torch.randn(t.shape, generator=gen))
        buffer.logprobs.copy_(-torch.rand(buffer.logprobs.shape, generator=gen) - 1.0)
        buffer.step = buffer.num_steps
        if device.type == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        algo.update()  # ends in a host read of the losses
        times.append(time.perf_counter() - began)
    steady = statistics.median(times[3:]) if len(times) > 3 else times[-1]
    steps = args.minibatches * args.epochs
    return {
        "path": args.path,
        "threads": args.thread,
        "first_update_s": round(times[0], 4),
        "update_s": round(steady, 5),
        "minibatch_step_ms": round(1e3 * steady / steps, 4),
        "minibatch_steps": steps,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--paths", default="eager,compile", help="eager, compile, graph (CUDA)")
    p.add_argument("--threads", default="1")
    p.add_argument("--obs-dim", type=int, default=11)
    p.add_argument("--act-dim", type=int, default=3)
    p.add_argument("--hidden", default="64,64")
    p.add_argument("--num-steps", type=int, default=128)
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--minibatches", type=int, default=32)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--updates", type=int, default=8, help="per row; the median leaves 3 out")
    p.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/update_hopper_cpu")
    p.add_argument("--path", help=argparse.SUPPRESS)  # one row, in a child process
    p.add_argument("--thread", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.path:
        print(json.dumps(one_row(args)))
        return
    rows = []
    for threads in args.threads.split(","):
        for path in args.paths.split(","):
            cmd = [sys.executable, __file__, *sys.argv[1:], "--path", path, "--thread", threads]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"{path} x{threads} failed:\n{proc.stderr[-3000:]}")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            print(json.dumps(row), flush=True)
            rows.append(row)
    for row in rows:  # against op by op at the same thread count, same call
        base = next(r for r in rows if r["path"] == "eager" and r["threads"] == row["threads"])
        row["speedup_vs_eager"] = round(base["update_s"] / row["update_s"], 3)
    write(rows, args)


def write(rows: list[dict], args) -> None:
    from train_bench_common import machine_line

    meta = {
        "machine": machine_line(),
        "command": "python tools/bench_update.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "shape": {k: getattr(args, k) for k in SHAPE},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
    )
    cols = ["path", "threads", "first_update_s", "update_s", "minibatch_step_ms",
            "speedup_vs_eager"]  # fmt: skip
    lines = [f"# The PPO update alone ({meta['date']})", "", f"{meta['machine']}. "
             f"`{meta['command']}`", "", f"Shape: {meta['shape']}. `update_s`: the median of "
             "the updates after the first three; `first_update_s` includes any compile.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]  # fmt: skip
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
