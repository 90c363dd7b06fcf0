"""Soak: long runs with memory sampled from outside the process, and latency drift.

1. ``orin-rl train`` for ``--train-steps`` CartPole steps (no early stop); the resident memory
   of the process (VmRSS) is sampled every second; growth = last sample − first sample after
   the warm-up (the first 10% of the run).
2. ``orin-rl run`` for ``--loop-steps`` iterations as fast as possible (ONNX Runtime); RSS
   sampled the same way; latency drift = p50 of the last 10% of iterations vs the first 10%.

    python tools/soak.py --train-steps 1000000 --loop-steps 1000000   # docs/benchmarks/soak_cpu.*
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def sampled(cmd: list[str]) -> tuple[int, list[tuple[float, float]], float]:
    """Run ``cmd``; return (exit code, [(t, rss_mb)], wall seconds)."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    samples = []
    while proc.poll() is None:
        value = rss_mb(proc.pid)
        if value is not None:
            samples.append((time.monotonic() - start, value))
        time.sleep(1.0)
    return proc.returncode, samples, time.monotonic() - start


def growth(samples: list[tuple[float, float]]) -> dict[str, float]:
    if len(samples) < 3:
        return {"samples": len(samples)}
    warm = samples[max(1, len(samples) // 10) :]
    return {
        "samples": len(samples),
        "after_warmup_mb": warm[0][1],
        "end_mb": warm[-1][1],
        "growth_mb": warm[-1][1] - warm[0][1],
        "peak_mb": max(v for _, v in samples),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-steps", type=int, default=1_000_000)
    parser.add_argument("--loop-steps", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "orin_rl.cli", "-q"]
    import platform

    import torch

    result: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        code, samples, wall = sampled(
            [
                *cli,
                "train",
                "--no-progress",
                "--env",
                "CartPole-v1",
                "--device",
                "cpu",
                "--total-steps",
                str(args.train_steps),
                "--out",
                str(run),
                "--set",
                "train.stop_at_threshold=false",
                "--set",
                "train.eval_every=0",
                "--set",
                "train.tensorboard=false",
            ]
        )
        summary = json.loads((run / "summary.json").read_text()) if code == 0 else {}
        result["train"] = {
            "exit_code": code,
            "wall_s": wall,
            "steps": summary.get("total_steps"),
            "steps_per_s": summary.get("steps_per_s"),
            "eval_return_mean": summary.get("eval_return_mean"),
            "rss": growth(samples),
        }
        subprocess.run([*cli, "export", str(run)], check=True, capture_output=True)
        report = Path(tmp) / "loop.json"
        code, samples, wall = sampled(
            [
                *cli,
                "run",
                "--model",
                str(run / "bundle"),
                "--backend",
                "onnxruntime",
                "--rate",
                "0",
                "--steps",
                str(args.loop_steps),
                "--report",
                str(report),
            ]
        )
        data = json.loads(report.read_text()) if code == 0 else {}
        result["loop"] = {
            "exit_code": code,
            "wall_s": wall,
            "iterations": data.get("iterations"),
            "latency_us": data.get("latency_us"),
            "drift": data.get("latency_drift"),
            "rss": growth(samples),
        }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "soak_cpu.json").write_text(json.dumps(result, indent=2) + "\n")
    t, lp = result["train"], result["loop"]
    md = (
        f"# Soak (CPU box, {result['date']})\n\n"
        f"torch {result['torch']}, Python {result['python']}, {result['cpus']} CPUs. "
        "Command: `python tools/soak.py`. RSS sampled once a second from outside the process; "
        "growth = last sample - first sample after the first tenth.\n\n"
        f"Training: {t['steps']:,} CartPole steps in {t['wall_s']:.0f} s ({t['steps_per_s']:,.0f} steps/s), "
        f"RSS after warm-up {t['rss'].get('after_warmup_mb', float('nan')):.0f} MiB → end "
        f"{t['rss'].get('end_mb', float('nan')):.0f} MiB: **growth {t['rss'].get('growth_mb', float('nan')):+.1f} MiB** "
        f"(target < 50 MB), {t['rss']['samples']} samples.\n\n"
        f"Control loop: {lp['iterations']:,} iterations in {lp['wall_s']:.0f} s, RSS growth after warm-up "
        f"**{lp['rss'].get('growth_mb', float('nan')):+.1f} MiB**; latency µs "
        f"{json.dumps({k: round(v, 1) for k, v in (lp['latency_us'] or {}).items()})}; drift (p50 of the "
        f"last 10% / first 10%): {json.dumps(lp['drift'])}.\n"
    )
    (args.out / "soak_cpu.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
