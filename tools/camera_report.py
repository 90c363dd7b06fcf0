"""The record of tools/camera_gpu_call.sh: orin_rl's training of an mjlab camera task on the GPU
(and mjlab's own train beside it, or why it did not run), as JSON + Markdown + a curve.

    python tools/camera_report.py DIR --name camera_yam_depth_h100   # DIR: the call's $OUT/camera
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--name", default="camera_yam_depth_h100")
    parser.add_argument("--date", required=True)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = parser.parse_args()
    d = args.folder
    summary = json.loads((d / "summary.json").read_text())
    records = [json.loads(x) for x in (d / "metrics.jsonl").read_text().splitlines() if x.strip()]
    train = [r for r in records if "charts/episode_return_mean" in r]
    curve = [(r["global_step"], r["time_s"], r["charts/episode_return_mean"]) for r in train]
    mjlab_log = (d / "mjlab.log").read_text(errors="replace").splitlines()
    peer_ran = any("Learning iteration" in line for line in mjlab_log)
    result = {
        "benchmark": "mjlab_camera_task_gpu",
        "date": args.date,
        "machine": (d / "gpu.txt").read_text().strip(),
        "task": summary["env_id"],
        "command": "bash tools/camera_gpu_call.sh 280 1024",
        "num_envs": 1024,
        "ours": {
            k: summary.get(k)
            for k in (
                "total_steps",
                "iterations",
                "wall_time_s",
                "steps_per_s",
                "eval_return_mean",
                "eval_return_std",
                "eval_episodes",
                "stop_reason",
                "startup",
                "seed",
            )
        },
        "ours_first_return": curve[0][2] if curve else None,
        "ours_last_return": curve[-1][2] if curve else None,
        "curve": curve,
        "mjlab_ran": peer_ran,
        "mjlab_error": None if peer_ran else (mjlab_log[-1] if mjlab_log else "no output"),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    o = result["ours"]
    md = [
        f"# An mjlab camera task trained on the GPU: {result['task']} ({result['machine']})",
        "",
        f"Run {result['date']}, `{result['command']}` (orin_rl's `train` and mjlab's own `train` "
        f"started together, {result['num_envs']} worlds each, cold Warp caches), "
        "`python tools/camera_report.py`.",
        "",
        f"- orin_rl: {o['total_steps']:,} steps in {o['iterations']} iterations, "
        f"{o['steps_per_s']:,.0f} steps/s over the loop ({o['wall_time_s']:.0f} s, stopped by "
        f"{o['stop_reason']}); start-up {o['startup']['total_s']:.0f} s (worlds and cold Warp "
        f"kernels {o['startup']['envs_s']:.0f} s); training return (mean of the last 100 "
        f"episodes) {result['ours_first_return']:.2f} at the first iteration, "
        f"{result['ours_last_return']:.2f} at the last; final deterministic evaluation "
        f"{o['eval_return_mean']:.2f} ± {o['eval_return_std']:.2f} over {o['eval_episodes']} "
        "episodes.",
        "- mjlab's own train: "
        + (
            "ran (its log beside this record)."
            if peer_ran
            else f"did not run: `{result['mjlab_error']}` (MuJoCo's import chose its EGL renderer, "
            "which that machine cannot load)."
        ),
        "",
    ]
    (args.out / f"{args.name}.md").write_text("\n".join(md))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([c[1] for c in curve], [c[2] for c in curve])
    ax.set_xlabel("loop time (s)")
    ax.set_ylabel("mean return, last 100 episodes")
    ax.set_title(f"{result['task']}: orin_rl, {result['machine']}")
    fig.tight_layout()
    fig.savefig(args.out / f"{args.name}.png", dpi=110)


if __name__ == "__main__":
    main()
