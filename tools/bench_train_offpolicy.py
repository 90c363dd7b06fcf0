"""SAC (Pendulum-v1) and DQN (CartPole-v1): orin_rl against Stable-Baselines3 with matching
hyper-parameters (``bench_train.py --suite offpolicy``), same machine, interleaved runs.

Reported per trainer and algorithm: median wall time and environment steps to the first
solved evaluation (SAC: >= -200 over 10 episodes every 1,000 steps; DQN: >= 475 over 20
episodes every 2,560 steps), both stopping after two solved evaluations in a row, and the final
evaluation on 20 unseen episodes. SB3's DQN is not double DQN (ours is); the rest matches.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from bench_common import record_head, write_report
from tqdm import tqdm
from train_bench_common import ensure_peer_venv

ROOT = Path(__file__).resolve().parents[1]
ENVS = {"sac": "Pendulum-v1", "dqn": "CartPole-v1"}


def run_ours(algo: str, seed: int, workdir: Path) -> dict:
    out = workdir / f"{algo}-{seed}"
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--env", ENVS[algo], "--algo",
           algo, "--device", "cpu", "--seed", str(seed), "--out", str(out), "--no-progress"]  # fmt: skip
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - start
    s = json.loads((out / "summary.json").read_text())
    return {"trainer": "orin_rl", "algo": algo, "seed": seed, "process_wall_s": round(wall, 2),
            "solved_at": s["solved_at"], "steps_per_s": s["steps_per_s"],
            "final_eval_mean": s["eval_return_mean"]}  # fmt: skip


def run_peer(python: Path, algo: str, seed: int) -> dict:
    cmd = [str(python), str(ROOT / "tools" / "peers" / "sb3_offpolicy.py"), "--algo", algo,
           "--seed", str(seed)]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    s = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"trainer": "sb3", "algo": algo, "seed": seed, "process_wall_s": round(wall, 2),
            "solved_at": s["solved_at"], "steps_per_s": s["steps_per_s"],
            "final_eval_mean": s["final_eval_mean"]}  # fmt: skip


def _median(rows: list[dict], key: str) -> float | None:
    values = [r["solved_at"][key] for r in rows if r["solved_at"]]
    return statistics.median(values) if values else None


def main(args) -> None:
    python = ensure_peer_venv(args.peer_venv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in tqdm(range(1, args.seeds + 1), desc="seeds"):
            for algo in ("sac", "dqn"):
                rows.append(run_ours(algo, seed, Path(tmp)))
                rows.append(run_peer(python, algo, seed))
    summary = {}
    for algo in ("sac", "dqn"):
        for trainer in ("orin_rl", "sb3"):
            mine = [r for r in rows if r["algo"] == algo and r["trainer"] == trainer]
            summary[f"{algo}/{trainer}"] = {
                "solved_runs": sum(1 for r in mine if r["solved_at"]),
                "runs": len(mine),
                "median_time_to_solve_s": _median(mine, "time_s"),
                "median_steps_to_solve": _median(mine, "global_step"),
                "median_steps_per_s": statistics.median(r["steps_per_s"] for r in mine),
                "median_final_eval": statistics.median(r["final_eval_mean"] for r in mine),
            }
    ratios = {}
    for algo in ("sac", "dqn"):
        o = summary[f"{algo}/orin_rl"]["median_time_to_solve_s"]
        p = summary[f"{algo}/sb3"]["median_time_to_solve_s"]
        ratios[algo] = o / p if o and p else None
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs"
    result = {
        **record_head("offpolicy_time_to_solve", machine, "bench_train.py", torch.__version__),
        "summary": summary,
        "ratio_time_to_solve": ratios,
        "runs": rows,
    }
    lines = [f"# SAC and DQN vs Stable-Baselines3 ({result['machine']})", "",
             f"`{result['command']}`, {result['date']}, torch {result['torch']}, "
             f"{args.seeds} seeds, interleaved.", "",
             "| algo | trainer | solved | median time to solve s | median steps to solve | "
             "median steps/s | median final eval |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for key, s in summary.items():
        algo, trainer = key.split("/")
        lines.append(f"| {algo} | {trainer} | {s['solved_runs']}/{s['runs']} | "
                     f"{s['median_time_to_solve_s']} | {s['median_steps_to_solve']} | "
                     f"{s['median_steps_per_s']:.0f} | {s['median_final_eval']:.1f} |")  # fmt: skip
    lines += ["", "Time to solve, ours / SB3: " + ", ".join(
        f"{a} {r:.2f}×" if r else f"{a} —" for a, r in ratios.items())]  # fmt: skip
    name = args.name if args.name != "train_cpu" else "offpolicy_cpu"
    write_report(args.out, name, result, "\n".join(lines) + "\n")
    print("\n".join(lines))
