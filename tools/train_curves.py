"""The curves a user looks at after a robot-task run: mean episode reward, mean episode length
and velocity tracking error (xy, yaw) against iterations and against wall time, as one PNG, plus
those series thinned into a small JSON-lines file that can sit beside a benchmark (a run's own
metrics.jsonl is megabytes).

    python tools/train_curves.py RUN/metrics.jsonl --out docs/benchmarks/g1_walk_h200_training \\
        [--every 10] [--title "..."]

Writes OUT.png and OUT_metrics.jsonl. The series are the run's own records: ``charts/
episode_return_mean`` and ``charts/episode_length_mean`` (the last 100 finished episodes),
``Metrics/twist/error_vel_xy`` and ``error_vel_yaw`` (mjlab's velocity command term: an
episode's per-step errors |command - velocity| summed and divided by the steps of the longest
command, 8 s / 20 ms = 400 for the velocity tasks, so a full 1,000-step episode reads 2.5x its
mean per-step error), ``time_s`` (the training loop's wall time, a resumed run's
earlier processes included).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SERIES = {
    "charts/episode_return_mean": "mean episode reward",
    "charts/episode_length_mean": "mean episode length (steps)",
    "Metrics/twist/error_vel_xy": "xy (m/s)",
    "Metrics/twist/error_vel_yaw": "yaw (rad/s)",
}
KEEP = ("iteration", "global_step", "time_s", "steps_per_s", "losses/entropy", *SERIES,
        "Episode_Termination/fell_over", "Episode_Reward/track_linear_velocity",
        "Episode_Reward/track_angular_velocity")  # fmt: skip


def load(path: Path) -> list[dict]:
    """The run's records, one per iteration (a resumed run may repeat none: it repairs them)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def thin(records: list[dict], every: int) -> list[dict]:
    """Every ``every``-th record (and the last), the kept keys only."""
    picked = records[::every] + ([records[-1]] if (len(records) - 1) % every else [])
    return [{k: r[k] for k in KEEP if k in r} for r in picked]


def plot(records: list[dict], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 7), constrained_layout=True)
    xs = (("iteration", "iteration", 1.0), ("time_s", "wall time (min)", 60.0))
    for row, (xkey, xlabel, div) in zip(axes, xs, strict=True):
        panels = (("charts/episode_return_mean",), ("charts/episode_length_mean",),
                  ("Metrics/twist/error_vel_xy", "Metrics/twist/error_vel_yaw"))  # fmt: skip
        for ax, keys in zip(row, panels, strict=True):
            for key in keys:
                pts = [(r[xkey] / div, r[key]) for r in records if key in r and xkey in r]
                if pts:
                    ax.plot(*zip(*pts, strict=True), label=SERIES[key], lw=1.2)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(SERIES[keys[0]] if len(keys) == 1
                          else "tracking error (mjlab: episode sum / 400 steps)")  # fmt: skip
            if len(keys) > 1:
                ax.legend()
            ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("metrics", type=Path, help="a run's metrics.jsonl")
    p.add_argument("--out", type=Path, required=True, help="OUT: writes OUT.png, OUT_metrics.jsonl")
    p.add_argument("--every", type=int, default=10, help="keep every N-th iteration's record")
    p.add_argument("--title", default=None)
    args = p.parse_args(argv)
    records = load(args.metrics)
    if not records:
        raise SystemExit(f"{args.metrics}: no records")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    title = args.title or f"{args.metrics.parent.name}: {records[-1]['iteration']} iterations"
    plot(records, args.out.with_suffix(".png"), title)
    kept = thin(records, args.every)
    lines = "".join(json.dumps(r) + "\n" for r in kept)
    args.out.with_name(args.out.name + "_metrics.jsonl").write_text(lines)
    print(f"wrote {args.out.with_suffix('.png')} and {len(kept)} records")


if __name__ == "__main__":
    main()
