"""Benchmark: orin_rl PPO against Stable-Baselines3 PPO on CartPole-v1, same machine, same run.

For each seed, both trainers run in their own process (interleaved, so machine noise hits both)
and evaluate 20 deterministic episodes every 2560 steps. Reported per trainer: wall time to the
first solved evaluation (>= 475) measured from the start of training, process wall time
(interpreter start-up and imports included), steps/s and the final evaluation on unseen seeds.

SB3 runs in its own virtual environment (``--peer-venv``, created on first use with the same
torch version as ours); it is not a dependency of orin_rl.

    python tools/bench_train.py --seeds 5   # writes docs/benchmarks/train_cpu.json and .md
"""

from __future__ import annotations

import argparse
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
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from bench_common import write_report  # noqa: E402
from train_bench_common import ensure_peer_venv  # noqa: E402


def _run_row(
    trainer: str, seed: int, wall: float, s: dict, train_time: float, final: float
) -> dict:
    """One run's row: its process wall time ``wall``, from the trainer's summary ``s`` its
    first solved evaluation, steps and steps/s, and its training time and final evaluation
    (each trainer names them its own way)."""
    solved = s["solved_at"]
    return {
        "trainer": trainer,
        "seed": seed,
        "process_wall_s": round(wall, 3),
        "time_to_solve_s": solved["time_s"] if solved else None,
        "steps_to_solve": solved["global_step"] if solved else None,
        "train_time_s": train_time,
        "total_steps": s["total_steps"],
        "steps_per_s": s["steps_per_s"],
        "final_eval_mean": final,
    }


def run_ours(seed: int, workdir: Path) -> dict:
    out = workdir / f"ours-{seed}"
    cmd = [
        sys.executable,
        "-m",
        "orin_rl.cli",
        "-q",
        "train",
        "--env",
        "CartPole-v1",
        "--device",
        "cpu",
        "--seed",
        str(seed),
        "--out",
        str(out),
        "--no-progress",
    ]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    wall = time.perf_counter() - start
    s = json.loads((out / "summary.json").read_text())
    return _run_row("orin_rl", seed, wall, s, s["wall_time_s"], s["eval_return_mean"])


def run_peer(python: Path, seed: int) -> dict:
    cmd = [str(python), str(ROOT / "tools" / "peers" / "sb3_ppo.py"), "--seed", str(seed)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - start
    s = json.loads(proc.stdout.strip().splitlines()[-1])
    return _run_row("sb3", seed, wall, s, s["train_time_s"], s["final_eval_mean"])


def summarise(rows: list[dict]) -> dict:
    solved = [r["time_to_solve_s"] for r in rows if r["time_to_solve_s"] is not None]
    return {
        "runs": len(rows),
        "solved_runs": len(solved),
        "median_time_to_solve_s": statistics.median(solved) if solved else None,
        "median_process_wall_s": statistics.median(r["process_wall_s"] for r in rows),
        "median_steps_per_s": statistics.median(r["steps_per_s"] for r in rows),
        "median_final_eval": statistics.median(r["final_eval_mean"] for r in rows),
    }


def _row(*cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def markdown(result: dict) -> str:
    """The result as a Markdown report: summary table, ratio, per-run table."""
    lines = [
        "# Training benchmark: CartPole-v1 on the CPU",
        "",
        f"Machine: {result['machine']}. torch {result['torch']}, {result['seeds']} seeds, "
        f"run {result['date']}. Command: `{result['command']}`.",
        "",
        "Time to solve = training wall time (evaluations included) until the first evaluation of "
        "20 deterministic episodes averages >= 475: the comparable column. Process wall = the "
        "whole command, start-up included; it is not comparable: our runs stop once solved, the "
        "SB3 runs always train their fixed 100,000 steps. Final eval = 20 episodes on seeds no "
        "evaluation used during training (ours: the policy it stopped with; SB3: after 100k "
        "steps).",
        "",
        _row(
            "trainer",
            "solved runs",
            "median time to solve (s)",
            "median process wall (s)",
            "median steps/s",
            "median final eval",
        ),
        _row(*["---"] * 6),
    ]
    names = {"orin_rl": "orin_rl PPO (CartPole preset)", "sb3": "SB3 PPO (zoo hyper-parameters)"}
    for key, name in names.items():
        s = result["summary"][key]
        tts = s["median_time_to_solve_s"]
        lines.append(
            _row(
                name,
                f"{s['solved_runs']}/{s['runs']}",
                f"{tts:.2f}" if tts else "—",
                f"{s['median_process_wall_s']:.1f}",
                f"{s['median_steps_per_s']:,.0f}",
                f"{s['median_final_eval']:.1f}",
            )
        )
    ratio = result["ratio_time_to_solve"]
    if ratio:
        lines += ["", f"Ratio orin_rl / SB3, median time to solve: **{ratio:.2f}**"]
    lines += [
        "",
        "Per run:",
        "",
        _row(
            "trainer",
            "seed",
            "time to solve (s)",
            "steps to solve",
            "steps/s",
            "final eval",
            "process wall (s)",
        ),
        _row(*["---"] * 7),
    ]
    for r in result["runs"]:
        tts = r["time_to_solve_s"] if r["time_to_solve_s"] is not None else "—"
        lines.append(
            _row(
                r["trainer"],
                r["seed"],
                tts,
                r["steps_to_solve"] or "—",
                f"{r['steps_per_s']:,.0f}",
                f"{r['final_eval_mean']:.1f}",
                f"{r['process_wall_s']:.1f}",
            )
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--name", default="train_cpu")
    parser.add_argument("--peer-venv", type=Path, default=ROOT / ".bench-venv")
    parser.add_argument(
        "--suite",
        choices=["sb3", "gpu", "offpolicy"],
        default="sb3",
        help="sb3: PPO against Stable-Baselines3 on the CPU; gpu: GPU-native path "
        "(bench_train_gpu); offpolicy: SAC and DQN against SB3 (bench_train_offpolicy)",
    )
    parser.add_argument("--rows", default="single,envs4096,seeds512",
                        help="gpu suite: PureJaxRL's settings to run")  # fmt: skip
    parser.add_argument("--paths", default="fused,general",
                        help="gpu suite: our paths per row (bench_train_gpu.PATHS: fused, general, "
                        "fused-kernel, fused-gemm, fused-tf32, fused-compile-tf32, ...)")  # fmt: skip
    parser.add_argument("--peer-dir", type=Path, default=ROOT / ".peers-purejaxrl",
                        help="gpu suite: a copy of ../shared/peers/purejaxrl")  # fmt: skip
    args = parser.parse_args()
    if args.suite == "offpolicy":
        from bench_train_offpolicy import main as offpolicy_main

        offpolicy_main(args)
        return
    if args.suite == "gpu":
        from bench_train_gpu import main as gpu_main

        gpu_main(args)
        return
    python = ensure_peer_venv(args.peer_venv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in tqdm(range(1, args.seeds + 1), desc="seeds"):
            rows.append(run_ours(seed, Path(tmp)))
            rows.append(run_peer(python, seed))
    summary = {
        "orin_rl": summarise([r for r in rows if r["trainer"] == "orin_rl"]),
        "sb3": summarise([r for r in rows if r["trainer"] == "sb3"]),
    }
    o, p = summary["orin_rl"]["median_time_to_solve_s"], summary["sb3"]["median_time_to_solve_s"]
    result = {
        "benchmark": "ppo_cartpole_time_to_solve",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs ({platform.processor() or 'cpu'})",
        "torch": torch.__version__,
        "seeds": args.seeds,
        "command": "python tools/bench_train.py " + " ".join(sys.argv[1:]),
        "summary": summary,
        "ratio_time_to_solve": (o / p) if o and p else None,
        "runs": rows,
    }
    text = markdown(result)
    write_report(args.out, args.name, result, text)
    print(text)


if __name__ == "__main__":
    main()
