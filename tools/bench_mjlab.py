"""Benchmark: orin_rl against mjlab's own runner (rsl_rl) on mjlab's robot tasks, same call.

For each task both trainers run in their own process, one after the other, with the same
number of environments, seed and environment steps: mjlab's ``python -m mjlab.scripts.train``
(rsl_rl's OnPolicyRunner) and ``orin-rl train``. Both log TensorBoard scalars with wall-clock
times; the figures come from them and from the process walls:

- steps/s over the whole loop (environment steps / time from the first to the last iteration,
  the first iteration's warm-up excluded from neither);
- the final mean reward (mean return of the last 100 finished episodes, both trainers' own
  statistic) and the velocity-tracking error (``Metrics/twist/error_vel_xy``);
- start-up: process start to the first logged iteration; wall to target: process start to the
  first iteration at or above mjlab's final mean reward.

    python tools/bench_mjlab.py --iterations 300 --peer-pythonpath /tmp/mjl:/tmp/wp
    # writes docs/benchmarks/mjlab_h200.{json,md,png}
    python tools/bench_mjlab.py --tasks Mjlab-Velocity-Rough-Unitree-Go1 --seeds 1,2 --append
    # adds (or replaces) one row per task and seed in the same canonical file

``ours_graphed_fraction`` is the share of the step's segments that replayed as CUDA graphs
(``summary.json``'s ``env_graphs``; 0 where the run was eager).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_common import pyplot, save_figure, task_seed_parser

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("Mjlab-Velocity-Flat-Unitree-Go1", "Mjlab-Velocity-Flat-Unitree-G1")
REWARD = {"ours": "charts/episode_return_mean", "mjlab": "Train/mean_reward"}
PHASES = {  # seconds per iteration: collecting the rollout, then learning from it
    "ours": ("perf/rollout_s", "perf/update_s"),
    "mjlab": ("Perf/collection_time", "Perf/learning_time"),
}
TRACKING = "Metrics/twist/error_vel_xy"


def scalars(folder: Path) -> dict[str, list[tuple[float, int, float]]]:
    """Every scalar under ``folder``'s TensorBoard events: name -> [(wall time, step, value)]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[float, int, float]]] = {}
    for events in sorted(folder.rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events.parent), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, []).extend((e.wall_time, e.step, e.value) for e in acc.Scalars(tag))
    return {k: sorted(v) for k, v in out.items()}


def run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> tuple[float, float]:
    """Run ``cmd``; (unix time at start, process wall seconds). Output goes to ``log``."""
    start_unix, start = time.time(), time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        tail = log.read_text()[-3000:]
        raise SystemExit(f"{cmd[:4]} failed ({proc.returncode}):\n{tail}")
    return start_unix, wall


def summarise(name: str, series: dict, start_unix: float, wall: float, steps_per_iter: int) -> dict:
    """Speed, final reward, tracking error and timings of one trainer's run."""
    reward = series[REWARD[name]]
    tracking = next((v for k, v in series.items() if k.endswith(TRACKING)), [])
    first, last = reward[0], reward[-1]
    # rsl_rl's TensorBoard step is the iteration, orin_rl's the environment step.
    steps = (last[1] - first[1]) * (steps_per_iter if name == "mjlab" else 1)
    loop_s = last[0] - first[0]
    phases = {}
    for key, tag in zip(("rollout_s_per_iter", "update_s_per_iter"), PHASES[name], strict=True):
        values = [v for _, _, v in series.get(tag, [])][1:]  # the first holds the warm-up
        phases[key] = round(sum(values) / len(values), 4) if values else None
    return {
        **phases,
        "steps_per_s": steps / loop_s if loop_s > 0 else None,
        "final_mean_reward": last[2],
        "tracking_error": tracking[-1][2] if tracking else None,
        "process_wall_s": round(wall, 2),
        "startup_s": round(first[0] - start_unix, 2),
        "curve": [(round(t - start_unix, 2), v) for t, _, v in reward],
    }


def wall_to(curve: list[tuple[float, float]], target: float) -> float | None:
    return next((t for t, v in curve if v >= target), None)


def bench_task(task: str, args, work: Path) -> dict:
    steps = args.iterations * args.num_envs * args.steps_per_env
    base_env = {**os.environ, "MUJOCO_GL": "disable", "WANDB_MODE": "disabled"}
    peer_env = dict(base_env)
    if args.peer_pythonpath:
        peer_env["PYTHONPATH"] = args.peer_pythonpath
    ours_env = dict(base_env)
    if args.ours_eager:  # the mjlab step eagerly, as mjlab runs it
        ours_env["ORIN_RL_MJLAB_GRAPHS"] = "0"
    if args.ours_pythonpath:
        ours_env["PYTHONPATH"] = args.ours_pythonpath
    slug = task.split("-")[-1].lower()
    peer_dir = work / f"mjlab-{slug}"
    peer_dir.mkdir(parents=True)
    peer_cmd = [sys.executable, "-m", "mjlab.scripts.train", task,
                "--env.scene.num-envs", str(args.num_envs),
                "--agent.max-iterations", str(args.iterations),
                "--agent.num-steps-per-env", str(args.steps_per_env),
                "--agent.seed", str(args.seed), "--agent.logger", "tensorboard",
                *(["--gpu-ids", "None"] if args.device == "cpu" else [])]  # fmt: skip
    ours_dir = work / f"ours-{slug}"
    ours_cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress",
                "--env", task, "--device", args.device, "--num-envs", str(args.num_envs),
                "--total-steps", str(steps), "--seed", str(args.seed), "--out", str(ours_dir),
                "--set", f"ppo.num_steps={args.steps_per_env}",
                "--set", "train.eval_episodes=64",
                *([] if args.ours_eager else ["--cuda-graphs"]), *args.ours_set]  # fmt: skip
    row: dict = {"task": task, "num_envs": args.num_envs, "env_steps": steps, "seed": args.seed,
                 "iterations": args.iterations}  # fmt: skip
    results = {}
    for name, cmd, cwd, env, logdir in (
        ("mjlab", peer_cmd, peer_dir, peer_env, peer_dir),
        ("ours", ours_cmd, work, ours_env, ours_dir),
    ):
        if name in args.skip:
            continue
        print(f"{task}: {name} ...", flush=True)
        start_unix, wall = run(cmd, cwd, env, work / f"{name}-{slug}.log")
        results[name] = summarise(
            name, scalars(logdir), start_unix, wall, args.num_envs * args.steps_per_env
        )
        print(f"  {name}: {json.dumps({k: v for k, v in results[name].items() if k != 'curve'})}")
    for name, r in results.items():
        for key, value in r.items():
            row[f"{name}_{key}"] = value
    if "mjlab" in results:
        target = results["mjlab"]["final_mean_reward"]
        row["reward_target"] = target
        for name, r in results.items():
            row[f"{name}_wall_to_target_s"] = wall_to(r["curve"], target)
    if len(results) == 2:
        m, o = results["mjlab"], results["ours"]
        row["steps_per_s_ratio"] = (  # None: a run too short for two logged iterations
            o["steps_per_s"] / m["steps_per_s"] if o["steps_per_s"] and m["steps_per_s"] else None
        )
        row["final_reward_ratio"] = o["final_mean_reward"] / m["final_mean_reward"]
        if row["ours_wall_to_target_s"] and row["mjlab_wall_to_target_s"]:
            row["wall_to_target_ratio"] = (
                row["ours_wall_to_target_s"] / row["mjlab_wall_to_target_s"]
            )
        else:
            row["wall_to_target_ratio"] = None
    ours_summary = ours_dir / "summary.json"
    if ours_summary.exists():
        s = json.loads(ours_summary.read_text())
        row["ours_eval_return_mean"] = s.get("eval_return_mean")
        row["ours_eval_log"] = s.get("eval_log")
        graphs = s.get("env_graphs") or {}  # which step segments replayed as CUDA graphs
        row["ours_env_graphs"] = graphs or None
        every = len(graphs.get("graphs", [])) + len(graphs.get("eager", []))
        row["ours_graphed_fraction"] = len(graphs.get("graphs", [])) / every if every else 0.0
        row["ours_resets"] = graphs.get("resets")
    return row


def write(rows: list[dict], out: Path, meta: dict) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({**meta, "rows": rows}, indent=2) + "\n")
    cols = ["task", "num_envs", "env_steps", "ours_steps_per_s", "mjlab_steps_per_s",
            "steps_per_s_ratio", "ours_final_mean_reward", "mjlab_final_mean_reward",
            "ours_tracking_error", "mjlab_tracking_error", "reward_target",
            "ours_wall_to_target_s", "mjlab_wall_to_target_s", "ours_process_wall_s",
            "mjlab_process_wall_s", "ours_startup_s", "mjlab_startup_s", "seed",
            "ours_graphed_fraction", "ours_resets"]  # fmt: skip

    def fmt(v):
        if isinstance(v, float):
            return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
        return "—" if v is None else str(v)

    lines = [f"# orin_rl vs mjlab's runner ({meta['machine']})", "",
             f"`{meta['command']}`", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]  # fmt: skip
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    if meta.get("note"):
        lines += ["", meta["note"]]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    try:
        fig, axes = pyplot().subplots(1, len(rows), figsize=(6 * len(rows), 4), squeeze=False)
        for ax, r in zip(axes[0], rows, strict=True):  # one panel per task and seed
            for name in ("ours", "mjlab"):
                curve = r.get(f"{name}_curve")
                if curve:
                    t, v = zip(*curve, strict=True)
                    ax.plot(t, v, label="orin_rl" if name == "ours" else "mjlab + rsl_rl")
            ax.set_title(f"{r['task']} (seed {r.get('seed')})", fontsize=9)
            ax.set_xlabel("wall time from process start (s)")
            ax.set_ylabel("mean episode reward")
            ax.legend()
        save_figure(fig, out.with_suffix(".png"))
    except Exception as exc:  # the tables stand without the picture
        print(f"plot not written: {exc}")


def main() -> None:
    p = task_seed_parser(__doc__, ",".join(TASKS), 4096, "42", ROOT / "docs/benchmarks/mjlab_h200")
    p.add_argument("--iterations", type=int, default=300)
    p.add_argument("--steps-per-env", type=int, default=24)
    p.add_argument(
        "--append",
        action="store_true",
        help="keep the out file's other rows; replace those of the same task and seed",
    )
    p.add_argument("--device", default="cuda", help="ours: the learner's and the envs' device")
    p.add_argument("--peer-pythonpath", help="PYTHONPATH of mjlab's process (its own mujoco)")
    p.add_argument("--ours-pythonpath", help="PYTHONPATH of orin_rl's process")
    p.add_argument("--ours-set", action="append", default=[], help="extra --set for ours")
    p.add_argument("--skip", action="append", default=[], choices=["ours", "mjlab"])
    p.add_argument(
        "--ours-eager",
        action="store_true",
        help="ours without --cuda-graphs (the env's step "
        "then runs its segments eagerly, as mjlab does)",
    )
    p.add_argument("--work", type=Path, help="keep the runs here (default: a temp folder)")
    args = p.parse_args()
    args.ours_set = [x for s in args.ours_set for x in ("--set", s)]
    kept = previous_rows(args.out) if args.append else []
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for task in args.tasks.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                args.seed = seed
                rows.append(bench_task(task, args, work / f"seed{seed}"))
                write(merge_rows(kept, rows), args.out, _meta())  # a cut call keeps each row
    print(args.out.with_suffix(".md").read_text())


def row_key(row: dict) -> tuple:
    """A row's identity in the canonical file: its task and seed."""
    return row["task"], row.get("seed")


def previous_rows(out: Path) -> list[dict]:
    """The rows already in ``out``'s JSON (none when it does not exist yet)."""
    path = out.with_suffix(".json")
    return json.loads(path.read_text()).get("rows", []) if path.exists() else []


def merge_rows(kept: list[dict], new: list[dict]) -> list[dict]:
    """``kept`` with each row of ``new`` replacing the one of the same task and seed (or
    added), ordered by task and seed."""
    merged = {row_key(r): r for r in kept}
    merged.update({row_key(r): r for r in new})
    return sorted(merged.values(), key=lambda r: (r["task"], r.get("seed") or 0))


def _meta() -> dict:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return {
        "machine": f"{gpu}, {os.cpu_count()} CPU cores, {platform.python_version()}",
        "command": "python tools/bench_mjlab.py " + " ".join(sys.argv[1:]),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }


if __name__ == "__main__":
    main()
