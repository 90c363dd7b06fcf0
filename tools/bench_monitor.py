"""Overhead of the power monitor on a training run: steps/s with and without it, same run.

The monitor samples a tegrastats source in a background thread; off a Jetson the source is
``tools/fake_tegrastats.sh`` replaying a recorded AGX Orin line (the parsing and the thread
are the same work). Runs alternate off / on to spread machine noise over both.

    python tools/bench_monitor.py --repeats 3   # docs/benchmarks/monitor_cpu.json and .md
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_common import write_report

from orin_rl import config as C
from orin_rl.runners import train

ROOT = Path(__file__).resolve().parents[1]


def one_run(monitor: bool, steps: int, tmp: Path, i: int) -> dict:
    cfg = C.apply_overrides(
        C.Config(),
        [
            "env.num_envs=8",
            "ppo.num_steps=32",
            "ppo.num_epochs=10",
            "ppo.num_minibatches=1",
            f"train.total_steps={steps}",
            "train.eval_episodes=1",
            "train.tensorboard=false",
            f"train.power_monitor={'auto' if monitor else 'off'}",
            "train.device=cpu",
        ],
    )
    out = tmp / f"run-{monitor}-{i}"
    summary = train(cfg, out, progress=False)
    shutil.rmtree(out)
    return {"monitor": monitor, "steps_per_s": summary["steps_per_s"], "power": summary["power"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20480)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args()
    os.environ.setdefault("ORIN_RL_TEGRASTATS", str(ROOT / "tools" / "fake_tegrastats.sh"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeats):
            # Balanced order (off-on, on-off, ...): the second run of a pair is systematically
            # slower on this box, which a fixed order would charge to the monitor.
            order = (False, True) if i % 2 == 0 else (True, False)
            for monitor in order:
                rows.append(one_run(monitor, args.steps, Path(tmp), i))
    off = statistics.median(r["steps_per_s"] for r in rows if not r["monitor"])
    on = statistics.median(r["steps_per_s"] for r in rows if r["monitor"])
    samples = [r["power"]["samples"] for r in rows if r["monitor"]]
    result = {
        "benchmark": "monitor_overhead",
        "date": time.strftime("%Y-%m-%d"),
        "source": os.environ["ORIN_RL_TEGRASTATS"],
        "interval_ms": 500,
        "steps": args.steps,
        "median_steps_per_s_off": off,
        "median_steps_per_s_on": on,
        "overhead_pct": 100 * (off - on) / off,
        "samples_per_run": samples,
        "runs": rows,
    }
    md = (
        f"# Power-monitor overhead (CPU box, {result['date']})\n\n"
        f"CartPole PPO, {args.steps} steps, {args.repeats} runs each, alternating. Monitor source: "
        f"recorded AGX Orin tegrastats replayed at 500 ms.\n\n"
        f"| monitor | median steps/s |\n|---|---|\n| off | {off:,.0f} |\n| on | {on:,.0f} |\n\n"
        f"Overhead: **{result['overhead_pct']:.2f}%** (negative = within noise); samples per run {samples}.\n"
    )
    write_report(args.out, "monitor_cpu", result, md)
    print(md)


if __name__ == "__main__":
    main()
