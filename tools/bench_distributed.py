"""Multi-GPU scaling: GPU-native CartPole-v1 PPO on 1 and on N GPUs, same per-GPU configuration.

Two runs per world size (each one ``orin-rl train --nproc N`` process tree):
- throughput: a fixed number of iterations, no evaluation -> global and per-rank steps/s;
  scaling efficiency = global steps/s on N GPUs / (N x steps/s on 1 GPU);
- time to solve: periodic evaluation on gymnasium's CartPole, stop at two solved evaluations.

    python tools/bench_distributed.py --gpus 2   # writes docs/benchmarks/distributed_h200x2.*
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_common import write_report

ROOT = Path(__file__).resolve().parents[1]
PER_GPU = ["--env", "CartPole-v1", "--env-backend", "gpu", "--device", "cuda", "--num-envs",
           "4096", "--no-progress", "--set", "ppo.num_steps=128", "--set", "ppo.num_epochs=4",
           "--set", "ppo.num_minibatches=4", "--set", "ppo.learning_rate=2.5e-4",
           "--set", "ppo.ent_coef=0.01", "--set", "ppo.gamma=0.99", "--set",
           "ppo.gae_lambda=0.95", "--set", "train.tensorboard=false", "--set",
           "train.log_every=10"]  # fmt: skip


def run(nproc: int, extra: list[str], workdir: Path) -> dict:
    out = workdir / f"n{nproc}-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--nproc", str(nproc), "--out",
           str(out), *PER_GPU, *extra]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"nproc": nproc, "error": proc.stderr.strip().splitlines()[-5:]}
    s = json.loads((out / "summary.json").read_text())
    return {
        "nproc": nproc,
        "process_wall_s": round(wall, 2),
        "train_time_s": s["wall_time_s"],
        "total_steps": s["total_steps"],
        "steps_per_s": round(s["steps_per_s"]),
        "per_rank_steps_per_s": [round(v) for v in s["per_rank_steps_per_s"]],
        "solved_at": s["solved_at"],
        "final_eval_mean": s["eval_return_mean"],
        "cuda_graphs": s["cuda_graphs"],
        "backend": s["backend"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=60, help="throughput run length")
    parser.add_argument("--graphs", action="store_true", help="add --cuda-graphs to every run")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--name", default=None)
    args = parser.parse_args()
    graphs = ["--cuda-graphs"] if args.graphs else []
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in (1, args.gpus):
            steps = args.iterations * 4096 * 128 * n
            throughput = ["--total-steps", str(steps), "--set", "train.eval_every=0", "--set",
                          "train.stop_at_threshold=false", *graphs]  # fmt: skip
            rows.append({"kind": "throughput", **run(n, throughput, Path(tmp))})
            solve = ["--total-steps", str(300 * 4096 * 128 * n), "--set", "train.eval_every=5",
                     "--set", "train.stop_at_threshold=true", *graphs]  # fmt: skip
            rows.append({"kind": "time_to_solve", **run(n, solve, Path(tmp))})
    one = next(r for r in rows if r["kind"] == "throughput" and r["nproc"] == 1)
    many = next(r for r in rows if r["kind"] == "throughput" and r["nproc"] == args.gpus)
    eff = None
    if "steps_per_s" in one and "steps_per_s" in many:
        eff = many["steps_per_s"] / (args.gpus * one["steps_per_s"])
    result = {
        "benchmark": "ppo_cartpole_multi_gpu_scaling",
        "date": time.strftime("%Y-%m-%d"),
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
        "torch": torch.__version__,
        "command": "python tools/bench_distributed.py " + " ".join(sys.argv[1:]),
        "scaling_efficiency": eff,
        "rows": rows,
    }
    name = args.name or f"distributed_h200x{args.gpus}"
    lines = [f"# Multi-GPU PPO scaling ({', '.join(result['gpus'])})", "",
             f"`{result['command']}`, {result['date']}, torch {result['torch']}; 4096 "
             "GPU-native CartPole envs per GPU, 128 steps, 4 epochs x 4 minibatches.", "",
             "| run | GPUs | steps/s (global) | per rank | solved at (steps, s) | final eval | "
             "graphs |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['kind']} | {r['nproc']} | failed: {r['error']} | | | | |")
            continue
        solved = r["solved_at"]
        when = f"{solved['global_step']:,}, {solved['time_s']}" if solved else "—"
        lines.append(f"| {r['kind']} | {r['nproc']} | {r['steps_per_s']:,} | "
                     f"{r['per_rank_steps_per_s']} | {when} | {r['final_eval_mean']} | "
                     f"{r['cuda_graphs']} |")  # fmt: skip
    lines += ["", f"Scaling efficiency (throughput runs): {eff:.1%}" if eff else ""]
    write_report(args.out, name, result, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
