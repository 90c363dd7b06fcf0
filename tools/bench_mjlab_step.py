"""One mjlab env step, several ways, in one process: mjlab's own ``env.step``, orin_rl's
segmented step run eagerly, the same segments replayed as CUDA graphs (mjlab's eager resets,
or ``masked``), and the masked step as one capture (``unit``: Warp's kernels inside torch's
capture, ``orin_rl.envs.mjlab.unit``).

For each task: steps/s of ``num_envs`` worlds under random actions (resets included), and a
torch profile of a few steps (CUDA kernels launched per step, host and device time), written
as JSON + Markdown. The ratio graphed / eager is the speed-up of the step alone; the training
benchmark (``tools/bench_mjlab.py``) measures the whole loop against mjlab's runner.

    python tools/bench_mjlab_step.py --tasks Mjlab-Velocity-Flat-Unitree-Go1 --out OUT
    python tools/bench_mjlab_step.py --modes masked,unit --out OUT   # one unit vs segments
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASKS = ("Mjlab-Velocity-Flat-Unitree-Go1", "Mjlab-Velocity-Flat-Unitree-G1")
MODES = ("eager", "graphs", "masked", "unit")
"""orin_rl's steps; mjlab's own runs first and last whatever is chosen."""


def _timed(step, actions, warmup: int) -> float:
    import torch

    for a in actions[:warmup]:
        step(a)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for a in actions[warmup:]:
        step(a)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def _profile(step, actions) -> dict:
    """CUDA kernels launched, host and device time per step, over ``actions``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        for a in actions:
            step(a)
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    events = prof.key_averages()
    kernels = sum(e.count for e in events if e.device_type.name == "CUDA")
    device_us = sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA")
    launches = sum(
        e.count
        for e in events
        if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaGraphLaunch")
        or e.key.startswith("cudaLaunchKernel")
        or e.key in ("cuGraphLaunch",)
    )
    n = len(actions)
    cuda = sorted(
        (e for e in events if e.device_type.name == "CUDA"),
        key=lambda e: -e.self_device_time_total,
    )
    top = [
        {"kernel": e.key[:90], "calls_per_step": e.count / n,
         "device_ms_per_step": round(e.self_device_time_total / 1000 / n, 4)}
        for e in cuda[:15]
    ]  # fmt: skip
    graph_launches = sum(e.count for e in events if e.key in ("cudaGraphLaunch", "cuGraphLaunch"))
    direct = launches - graph_launches
    return {
        "graphed_fraction": 1.0 - direct / max(kernels, 1),
        "graph_launches_per_step": graph_launches / n,
        "top_kernels": top,
        "kernels_per_step": kernels / n,
        "host_launch_calls_per_step": launches / n,
        "device_ms_per_step": device_us / 1000 / n,
        "profiled_wall_ms_per_step": 1000 * wall / n,
    }


def bench_task(task: str, args) -> dict:
    import torch

    from orin_rl.envs.base import EnvOptions
    from orin_rl.envs.mjlab import MjlabVecEnv

    n, steps = args.num_envs, args.steps
    # Episodes start at random steps of the time limit, as in training (rsl_rl's
    # init_at_random_ep_len): every step then has resets, as a training step has.
    row: dict = {"task": task, "num_envs": n, "steps_timed": steps - args.warmup,
                 "random_episode_start": True}  # fmt: skip
    # mjlab's step runs first and again last: the two show whether order (a warmer GPU, a
    # fuller allocator, cached kernels) moves the figures.
    for mode in ("mjlab", *args.modes, "mjlab_last"):
        env = MjlabVecEnv(task, n, "cuda", EnvOptions(seed=args.seed, random_episode_start=True))
        env.reset()
        g = torch.Generator(device="cuda").manual_seed(args.seed)
        dim = env.action_space.shape[0]
        actions = [torch.randn(n, dim, device="cuda", generator=g) for _ in range(steps)]
        if mode.startswith("mjlab"):

            def step(a, env=env):
                return env.env.step(a)

        else:
            if mode in ("graphs", "masked", "unit"):  # masked, unit: the reset path as graphs
                row[f"{mode}_plan"] = env.use_graphs(masked=mode != "graphs", unit=mode == "unit")
            step = env.step
            env.final_obs_needed = False  # as training with the task's preset (rsl_rl's bootstrap)
            env._stepper.timings = {}  # host time per phase of the step
        wall = _timed(step, actions, args.warmup)
        row[f"{mode}_steps_per_s"] = n * (steps - args.warmup) / wall
        row[f"{mode}_ms_per_step"] = 1000 * wall / (steps - args.warmup)
        if not mode.startswith("mjlab"):  # warm-up steps included: per step of all of them
            row[f"{mode}_host_ms_per_step_by_phase"] = {
                k: round(1000 * v / steps, 3) for k, v in env._stepper.timings.items()
            }
            env._stepper.timings = None
        if mode == "mjlab_last":
            env.close()
            del env
            torch.cuda.empty_cache()
            print(f"{task} {mode}: {row[f'{mode}_steps_per_s']:,.0f} steps/s", flush=True)
            continue
        prof = _profile(step, actions[: args.profile_steps])
        row.update({f"{mode}_{k}": v for k, v in prof.items()})
        if mode in ("graphs", "masked", "unit"):
            row[mode] = env.graph_report()
        env.close()
        del env
        torch.cuda.empty_cache()
        print(f"{task} {mode}: {row[f'{mode}_steps_per_s']:,.0f} steps/s", flush=True)
    # Ratios against the faster of mjlab's two runs (the conservative one).
    best = max(row["mjlab_steps_per_s"], row["mjlab_last_steps_per_s"])
    for mode in args.modes:
        row[f"{mode}_vs_mjlab"] = row[f"{mode}_steps_per_s"] / best
    return row


def write(rows: list[dict], out: Path, meta: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    lines = [
        f"# mjlab env step: mjlab's `env.step` vs orin_rl's steps ({meta['date']})",
        "",
        f"{meta['machine']}; torch {meta['torch']}. `{meta['command']}`",
        "",
        "| task | envs | mode | steps/s | ms/step | kernels/step | launch calls/step | "
        "device ms/step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for mode in ("mjlab", *(m for m in MODES if f"{m}_steps_per_s" in r)):
            lines.append(
                f"| {r['task']} | {r['num_envs']} | {mode} | {r[f'{mode}_steps_per_s']:,.0f} | "
                f"{r[f'{mode}_ms_per_step']:.2f} | {r[f'{mode}_kernels_per_step']:,.0f} | "
                f"{r[f'{mode}_host_launch_calls_per_step']:,.0f} | "
                f"{r[f'{mode}_device_ms_per_step']:.2f} |"
            )
    lines += ["", "Ratios (same process, same worlds and actions; against the faster of mjlab's "
              "two runs):", ""]  # fmt: skip
    for r in rows:
        lines.append(
            f"- {r['task']}: mjlab's step again at the end of the process: "
            f"{r['mjlab_last_steps_per_s']:,.0f} steps/s (first: {r['mjlab_steps_per_s']:,.0f})."
        )
        for mode in (m for m in MODES if f"{m}_steps_per_s" in r):
            report = r.get(mode, {})  # what ran as graphs (graphed modes)
            graphs = f"; graphs {', '.join(report['graphs'])}" if report else ""
            eager = f"; eager: {', '.join(report['eager']) or 'none'}" if report else ""
            phases = r[f"{mode}_host_ms_per_step_by_phase"]
            lines.append(
                f"- {r['task']}, {mode}: / mjlab **{r[f'{mode}_vs_mjlab']:.2f}x** (graphed "
                f"fraction of launches {r[f'{mode}_graphed_fraction']:.2f}, graph launches a "
                f"step {r[f'{mode}_graph_launches_per_step']:.1f}){graphs}{eager}; host ms a "
                "step by phase: " + ", ".join(f"{k} {v:.2f}" for k, v in phases.items())
            )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument(
        "--modes",
        type=lambda s: tuple(m for m in s.split(",") if m),
        default=MODES,
        help=f"orin_rl's steps to time, of {','.join(MODES)} (mjlab's own always runs)",
    )
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--steps", type=int, default=120, help="steps per mode, warm-up included")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--profile-steps", type=int, default=10)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/mjlab_step_h200")
    args = p.parse_args()
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown:
        p.error(f"--modes: {', '.join(unknown)} unknown; choose from {', '.join(MODES)}")
    import torch

    meta = {
        "machine": f"{torch.cuda.get_device_name(0)}, {os.cpu_count()} CPU cores, "
        f"Python {platform.python_version()}",
        "torch": torch.__version__,
        "command": "python tools/bench_mjlab_step.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
    }
    rows = []
    for task in args.tasks.split(","):
        rows.append(bench_task(task, args))
        write(rows, args.out, meta)
    print(args.out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
