"""The report of the locomotion benchmark (``bench_locomotion.py --merge``): the Markdown
tables and the plot of evaluation return against wall time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench_common import pyplot, save_figure


def _count(n: int | None) -> str:
    return f" ({n})" if n else ""


def _fmt(x: Any, digits: int = 0) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def markdown(result: dict[str, Any]) -> str:
    """The merged result (``bench_locomotion.py --merge``) as the Markdown report."""
    m = result["machine"]
    lines = [
        "# Locomotion: MuJoCo Warp (GPU physics) vs gymnasium (CPU physics)",
        "",
        f"Machine: {m.get('gpu', '?')}, {m.get('cpus', '?')} CPU cores; torch {m.get('torch')}, "
        f"mujoco {m.get('mujoco')}, mujoco_warp {m.get('mujoco_warp')}, warp {m.get('warp')}. "
        f"Command: `{result['command']}`. Thresholds: {', '.join(f'{k} {v:g}' for k, v in result['thresholds'].items())} "
        "(Hopper, Ant, Humanoid: the issue's targets; HalfCheetah: gymnasium's reward_threshold; "
        "Walker2d: ours). Train steps/s exclude the periodic evaluations; eval returns are the "
        "final deterministic evaluation on the training physics, then on gymnasium's CPU MuJoCo "
        "(in the trainer) and through the exported ONNX with `orin-rl run --env` (ONNX Runtime).",
        "",
        "Each GPU-physics run is `orin-rl train --env-backend gpu --device cuda --cuda-graphs` "
        "with the task's GPU preset, stopped at its threshold or at a wall-clock budget "
        "(`train.max_wall_s`, what one 30-minute device session could afford: 50-200 s), and "
        "evaluated on 32 episodes. Humanoid's 5,000 is mostly survival: a 1,000-step episode "
        "that never falls collects 5,000 of healthy reward, the rest is forward progress.",
        "",
        "PPO steps/s: *loop* is the training loop once running (env + policy + GAE + update, "
        "from metrics.jsonl over the logged intervals without an evaluation); *run* is the whole "
        "run's steps over its wall time less the periodic evaluations, so it includes start-up "
        "(imports, kernel loading, the eager warm-up iteration and the CUDA-graph capture). The "
        "speed-up divides the run figure by the gymnasium path's trainer steps/s (its whole "
        "run too), measured on the same machine in the same device call. The ONNX column "
        "averages the complete episodes of 5,000 `orin-rl run` steps (their count in brackets). "
        f"Seed 001's Humanoid PPO ran at {result['seed_001_quoted_steps_per_s']:,} samples/s on an RTX 5090 "
        "(quoted from the issue, not run here). Phase a ran the Hopper CPU preset beside the GPU "
        "tests, the throughput runs and HalfCheetah, so those shared the CPU cores; the Hopper "
        "CPU row comes from the first device call, whose GPU steps had failed early.",
        "",
        "| task | physics | envs | env-only steps/s | env + policy steps/s | PPO steps/s: loop | "
        "PPO steps/s: run | speed-up vs CPU physics | wall to threshold | eval return (training "
        "physics) | gymnasium eval | ONNX `orin-rl run` return | trained for |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        reached = (
            f"{r['wall_to_threshold_s']:.0f} s"
            if r["wall_to_threshold_s"] is not None
            else "not reached"
        )
        if r["backend"] != "mujoco_warp":
            reached = "—"
        trained = (
            f"{r['train_wall_s']:.0f} s, {r['total_steps']:,} steps"
            if r.get("train_wall_s") and r.get("total_steps")
            else "—"
        )
        lines.append(
            f"| {r['task']} | {r['backend']} | {_fmt(r['num_envs'])} | {_fmt(r['env_only_steps_per_s'])} "
            f"| {_fmt(r['env_policy_steps_per_s'])} | {_fmt(r.get('steady_steps_per_s'))} "
            f"| {_fmt(r['train_steps_per_s'])} "
            f"| {_fmt(r.get('train_speedup_vs_gymnasium_cpu'), 1)}{'×' if r.get('train_speedup_vs_gymnasium_cpu') else ''} "
            f"| {reached} (≥ {r['threshold']:g}) | {_fmt(r['eval_return'], 1)} | {_fmt(r['gym_eval_return'], 1)} "
            f"| {_fmt(r['onnx_run_return'], 1)}{_count(r.get('onnx_run_episodes'))} | {trained} |"
        )
    if result["throughput"]:
        lines += ["", "## Throughput by world count (random actions)", "",
                  "| task | envs | env-only | env + policy | env-only, 16 steps in one CUDA graph |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for t in result["throughput"]:
            lines.append(
                f"| {t['task']} | {t['num_envs']:,} | {_fmt(t['env_only_steps_per_s'])} | "
                f"{_fmt(t['env_policy_steps_per_s'])} | {_fmt(t['graph_env_only_steps_per_s'])} |"
            )
    cpu = [r for r in result["runs"] if r["backend"].startswith("gymnasium preset")]
    for r in cpu:
        first = r.get("first_eval_at_1500")
        lines += ["", "## Hopper-v5 gymnasium preset on the CPU cores", "",
                  f"`orin-rl {' '.join(r['command'][1:])}`: final evaluation "
                  f"{_fmt(r.get('eval_return'), 1)} ± {_fmt(r.get('eval_return_std'), 1)} after "
                  f"{r.get('total_steps', 0):,} steps ({_fmt(r.get('train_wall_s'))} s, "
                  f"{_fmt(r.get('train_steps_per_s'))} steps/s); first periodic evaluation ≥ 1,500 at "
                  + (f"step {first['global_step']:,} ({first['time_s']:.0f} s)." if first else "— (never).")]  # fmt: skip
    return "\n".join(lines) + "\n"


def plot(
    rows: list[dict[str, Any]], path: Path, thresholds: dict[str, float], tasks: tuple[str, ...]
) -> None:
    """Evaluation return against wall time, one panel a run (in the order of ``tasks``):
    periodic evaluations (line), the final evaluation (star) and the threshold (dashed: the
    task's in ``thresholds`` for GPU physics, 1,500 for the CPU Hopper preset)."""
    import math

    curves = sorted((r for r in rows if r.get("curve")), key=lambda r: tasks.index(r["task"]))
    if not curves:
        return
    cols = 3
    nrows = math.ceil(len(curves) / cols)
    fig, axes = pyplot().subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
    for ax in axes.flat[len(curves) :]:
        ax.set_visible(False)
    for ax, r in zip(axes.flat, curves, strict=False):
        gpu = r["backend"] == "mujoco_warp"
        t = [c[0] for c in r["curve"]]
        ax.plot(t, [c[2] for c in r["curve"]], marker="o", ms=3, label="periodic evaluation")
        if r.get("eval_return") is not None and r.get("train_wall_s"):
            ax.plot([r["train_wall_s"]], [r["eval_return"]], "*", ms=10, label="final evaluation")
        threshold = thresholds[r["task"]] if gpu else 1500.0
        ax.axhline(threshold, ls="--", c="grey", lw=1, label=f"threshold {threshold:g}")
        physics = "MuJoCo Warp, H200" if gpu else "gymnasium CPU, 16 envs"
        ax.set_title(f"{r['task']} ({physics})", fontsize=9)
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("eval return")
        ax.legend(fontsize=7, loc="upper left")
        ax.grid(alpha=0.3)
    save_figure(fig, path)
