"""Locomotion on GPU physics (MuJoCo Warp) against gymnasium's CPU physics on the same machine.

Phases, each writing ``OUT/<phase>-<task>.json`` (run them in one or several device calls,
then ``--merge`` the folders into ``docs/benchmarks/locomotion_h200.{json,md,png}``):

- ``throughput``: per task, N GPU-physics envs stepping with random actions: env-only steps/s
  (the env's own path: one Warp graph replay a step), env + policy steps/s (the GPU preset's
  policy samples every action), env-only with 16 steps in one torch CUDA graph.
- ``train``: per task, ``orin-rl train --env-backend gpu --device cuda --cuda-graphs`` with the
  GPU preset for a wall-clock budget (``train.max_wall_s``); train steps/s (periodic evaluation
  excluded), wall time to the task's threshold, final evaluation on MuJoCo Warp and on
  gymnasium's CPU MuJoCo. The run folder (checkpoint included) is copied to OUT, so the
  sim-to-sim check (export + ``orin-rl run --env`` on ONNX Runtime) can run on any machine:
  ``--sim2sim OUT`` does it and adds the return to the rows.
- ``gym``: per task, gymnasium's CPU physics with 64 async envs: env-only steps/s and the
  trainer's steps/s for a budget (the path a user had before GPU physics).
- ``hopper-cpu``: the Hopper-v5 gymnasium preset, 1M steps on the CPU cores: evaluation return
  and the first time it passed 1,500.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))
from locomotion_report import markdown, plot  # noqa: E402

TASKS = ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")
# Evaluation returns that count as reached. Hopper, Ant, Humanoid: the targets;
# HalfCheetah: gymnasium's registered reward_threshold; Walker2d has none there: ours.
THRESHOLDS = {
    "Hopper-v5": 2500.0,
    "HalfCheetah-v5": 4800.0,
    "Walker2d-v5": 3000.0,
    "Ant-v5": 3000.0,
    "Humanoid-v5": 5000.0,
}
TARGETS = {  # the wall-time targets (s) for the threshold above
    "Hopper-v5": 300.0,
    "Ant-v5": 600.0,
    "Humanoid-v5": 1200.0,
}
SEED_001_STEPS_PER_S = 28_100  # seed 001's Humanoid PPO on an RTX 5090 (quoted in the issue)
CLI = [sys.executable, "-m", "orin_rl.cli"]


def _write(out: Path, name: str, data: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out / name}.json", flush=True)


def _machine() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
    }
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
    try:
        import mujoco
        import mujoco_warp
        import warp

        info.update(mujoco=mujoco.__version__, mujoco_warp=mujoco_warp.__version__)
        info["warp"] = warp.config.version
    except ImportError:  # the gymnasium-only phases run without it: say so in the JSON
        info["sim"] = "not installed (pip install -e '.[sim]')"
    return info


# ---------------------------------------------------------------------------- throughput
def _timed(fn, repeats: int = 3) -> float:
    """Median seconds of ``fn()`` over ``repeats`` runs (CUDA synchronised around each)."""
    import torch

    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _preset_policy(task: str, env, device):
    from orin_rl import config as config_mod
    from orin_rl.config import Config
    from orin_rl.config.presets import preset_overrides
    from orin_rl.models import ActorCritic, PolicySpec

    overrides = [f"{k}={json.dumps(v)}" for k, v in preset_overrides(task, "ppo", "gpu").items()]
    cfg = config_mod.apply_overrides(Config(), overrides)
    spec = PolicySpec.from_spaces(
        env.observation_space,
        env.action_space,
        hidden_sizes=cfg.ppo.hidden_sizes,
        activation=cfg.ppo.activation,
        normalize_obs=True,
        init_log_std=cfg.ppo.init_log_std,
        obs_clip=cfg.ppo.obs_clip,
    )
    return ActorCritic(spec).to(device), cfg


def throughput(task: str, num_envs: int, steps: int) -> dict[str, Any]:
    """Env-only, env + policy and graph-captured env-only steps/s of ``num_envs`` envs."""
    import torch

    from orin_rl.envs.gpu import make_gpu

    device = torch.device("cuda")
    env = make_gpu(task, num_envs, device, seed=0)
    obs = env.reset()
    low = torch.as_tensor(env.action_space.low, device=device)
    high = torch.as_tensor(env.action_space.high, device=device)
    shape = (num_envs, *env.action_space.shape)

    def random_actions():
        return low + (high - low) * torch.rand(shape, device=device)

    def env_only():
        for _ in range(steps):
            env.step(random_actions())

    for _ in range(3):  # compile, then capture the eager Warp graphs
        env.step(random_actions())
    env_s = _timed(env_only)

    policy, _ = _preset_policy(task, env, device)
    state = {"obs": obs}

    @torch.inference_mode()
    def env_policy():
        o = state["obs"]
        for _ in range(steps):
            actions, _, _ = policy.act(policy.normalize(o, update=True))
            o = env.step(actions).obs
        state["obs"] = o

    env_policy()
    policy_s = _timed(env_policy)

    # 16 steps recorded in one torch graph (MuJoCo Warp through capture_scope), replayed.
    static = random_actions()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        env.step(static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(env.generator)
    chunk = 16
    with torch.cuda.graph(graph), env.capture_scope():
        for _ in range(chunk):
            static.copy_(low + (high - low) * torch.rand(shape, device=device))
            env.step(static)
    replays = max(1, steps // chunk)
    graph_s = _timed(lambda: [graph.replay() for _ in range(replays)])
    return {
        "task": task,
        "backend": "mujoco_warp",
        "num_envs": num_envs,
        "steps_timed": steps,
        "env_only_steps_per_s": num_envs * steps / env_s,
        "env_policy_steps_per_s": num_envs * steps / policy_s,
        "graph_env_only_steps_per_s": num_envs * replays * chunk / graph_s,
        "frame_skip": env.frame_skip,
    }


# ---------------------------------------------------------------------------- train
def _copy_run(run: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("config.yaml", "summary.json", "metrics.jsonl", "checkpoint.pt", "curve.png"):
        if (run / name).exists():
            shutil.copy2(run / name, dest / name)


def _rows_from_run(run: Path) -> dict[str, Any]:
    from orin_rl.runners.logger import read_metrics

    summary = json.loads((run / "summary.json").read_text())
    records = read_metrics(run / "metrics.jsonl")
    evals = [(r["time_s"], r["global_step"], r["eval/return_mean"]) for r in records
             if "eval/return_mean" in r]  # fmt: skip
    return {"summary": summary, "evals": evals}


def train_task(
    task: str, budget_s: float, workdir: Path, out: Path, extra: list[str], device: str = "cuda"
) -> dict[str, Any]:
    """One ``orin-rl train`` on GPU physics with the GPU preset for ``budget_s`` seconds."""
    run = workdir / f"train-{task}"
    shutil.rmtree(run, ignore_errors=True)
    cmd = [*CLI, "-q", "train", "--env", task, "--env-backend", "gpu", "--device", device,
           "--cuda-graphs", "--no-progress", "--out", str(run),
           "--set", f"train.max_wall_s={budget_s}",
           "--set", f"train.solved_threshold={THRESHOLDS[task]}",
           "--set", "train.solved_patience=1", *extra]  # fmt: skip
    start = time.perf_counter()
    try:  # start-up, capture and the two final evaluations come on top of the budget
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget_s + 150)
    except subprocess.TimeoutExpired as exc:
        return {"task": task, "backend": "mujoco_warp", "command": cmd[2:],
                "error": f"timed out after {exc.timeout:.0f} s"}  # fmt: skip
    wall = time.perf_counter() - start
    (out / f"train-{task}.log").write_text(proc.stdout + proc.stderr)
    row: dict[str, Any] = {"task": task, "backend": "mujoco_warp", "command": cmd[2:],
                           "returncode": proc.returncode, "process_wall_s": wall}  # fmt: skip
    if proc.returncode != 0 or not (run / "summary.json").exists():
        row["error"] = (proc.stderr or proc.stdout)[-2000:]
        return row
    _copy_run(run, out / f"run-{task}")
    info = _rows_from_run(run)
    s = info["summary"]
    loop_s = s["wall_time_s"] - s.get("eval_time_s", 0.0)
    reached = next((t for t, _, r in info["evals"] if r >= THRESHOLDS[task]), None)
    row.update(
        num_envs=_config_of(run)["env"]["num_envs"],
        total_steps=s["total_steps"],
        train_wall_s=s["wall_time_s"],
        eval_time_s=s.get("eval_time_s"),
        train_steps_per_s=s["total_steps"] / loop_s if loop_s > 0 else None,
        loop_steps_per_s_with_evals=s["steps_per_s"],
        threshold=THRESHOLDS[task],
        wall_to_threshold_s=reached,
        eval_return=s["eval_return_mean"],
        eval_return_std=s["eval_return_std"],
        gym_eval_return=s.get("gym_eval_return_mean"),
        gym_eval_return_std=s.get("gym_eval_return_std"),
        cuda_graphs=s["cuda_graphs"],
        stop_reason=s["stop_reason"],
        curve=[[t, step, r] for t, step, r in info["evals"]],
    )
    return row


def _config_of(run: Path) -> dict[str, Any]:
    import yaml

    return yaml.safe_load((run / "config.yaml").read_text())


# ---------------------------------------------------------------------------- gym (CPU physics)
def gym_task(task: str, budget_s: float, workdir: Path, out: Path, device: str) -> dict[str, Any]:
    """gymnasium's CPU MuJoCo with 64 async envs: env-only steps/s, then the trainer."""
    import numpy as np

    from orin_rl import envs

    env = envs.make(task, 64, "cpu", vectorization="async", seed=0)
    env.reset()
    low, high = env.action_space.low, env.action_space.high
    import torch

    rng = np.random.default_rng(0)
    for _ in range(5):
        env.step(torch.from_numpy(rng.uniform(low, high, (64, *low.shape)).astype(np.float32)))
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < min(20.0, budget_s / 3):
        env.step(torch.from_numpy(rng.uniform(low, high, (64, *low.shape)).astype(np.float32)))
        steps += 64
    env_only = steps / (time.perf_counter() - start)
    env.close()
    run = workdir / f"gym-{task}"
    shutil.rmtree(run, ignore_errors=True)
    cmd = [*CLI, "-q", "train", "--env", task, "--num-envs", "64", "--device", device,
           "--no-progress", "--out", str(run), "--set", "env.vectorization=async",
           "--set", f"train.max_wall_s={budget_s}", "--set", "train.eval_every=0",
           "--set", f"train.solved_threshold={THRESHOLDS[task]}"]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget_s + 120)
    except subprocess.TimeoutExpired as exc:
        return {"task": task, "backend": "gymnasium (CPU, 64 async envs)", "command": cmd[2:],
                "error": f"timed out after {exc.timeout:.0f} s"}  # fmt: skip
    (out / f"gym-{task}.log").write_text(proc.stdout + proc.stderr)
    row: dict[str, Any] = {"task": task, "backend": "gymnasium (CPU, 64 async envs)",
                           "num_envs": 64, "env_only_steps_per_s": env_only,
                           "command": cmd[2:], "returncode": proc.returncode}  # fmt: skip
    if proc.returncode != 0:
        row["error"] = (proc.stderr or proc.stdout)[-2000:]
        return row
    s = json.loads((run / "summary.json").read_text())
    row.update(
        train_steps_per_s=s["steps_per_s"],
        total_steps=s["total_steps"],
        train_wall_s=s["wall_time_s"],
        eval_return=s["eval_return_mean"],
        wall_to_threshold_s=None,
    )
    return row


def hopper_cpu(workdir: Path, out: Path) -> dict[str, Any]:
    """The Hopper-v5 gymnasium preset as a user runs it (1M steps, CPU learner and physics)."""
    run = workdir / "hopper-cpu"
    shutil.rmtree(run, ignore_errors=True)
    cmd = [*CLI, "-q", "train", "--env", "Hopper-v5", "--device", "cpu", "--no-progress",
           "--out", str(run), "--set", "train.solved_threshold=1500"]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=450)
    except subprocess.TimeoutExpired:
        return {"task": "Hopper-v5", "backend": "gymnasium preset (CPU, 16 envs)",
                "command": cmd[2:], "error": "timed out after 450 s"}  # fmt: skip
    (out / "hopper-cpu.log").write_text(proc.stdout + proc.stderr)
    row: dict[str, Any] = {"task": "Hopper-v5", "backend": "gymnasium preset (CPU, 16 envs)",
                           "command": cmd[2:], "returncode": proc.returncode}  # fmt: skip
    if proc.returncode != 0:
        row["error"] = (proc.stderr or proc.stdout)[-2000:]
        return row
    _copy_run(run, out / "run-hopper-cpu")
    info = _rows_from_run(run)
    s = info["summary"]
    row.update(
        num_envs=16,
        total_steps=s["total_steps"],
        train_wall_s=s["wall_time_s"],
        train_steps_per_s=s["steps_per_s"],
        eval_return=s["eval_return_mean"],
        eval_return_std=s["eval_return_std"],
        first_eval_at_1500=s["solved_at"],
        curve=[[t, step, r] for t, step, r in info["evals"]],
    )
    return row


# ---------------------------------------------------------------------------- sim-to-sim
def sim2sim(folder: Path, steps: int = 5000) -> None:
    """Export each GPU-physics run found in ``folder`` and drive gymnasium's CPU MuJoCo with
    ONNX Runtime (``orin-rl run --env``); the returns go into its train row."""
    for row_file in sorted(folder.glob("train-*.json")):
        row = json.loads(row_file.read_text())
        run = folder / f"run-{row['task']}"
        if not (run / "checkpoint.pt").exists():
            continue
        bundle = run / "bundle"
        shutil.rmtree(bundle, ignore_errors=True)
        export = subprocess.run([*CLI, "-q", "export", str(run), "--out", str(bundle)],
                                capture_output=True, text=True)  # fmt: skip
        if export.returncode != 0:
            row["sim2sim_error"] = export.stderr[-1000:]
            row_file.write_text(json.dumps(row, indent=2) + "\n")
            continue
        report = run / "sim2sim.json"
        cmd = [*CLI, "-q", "run", "--model", str(bundle), "--env", row["task"], "--rate", "0",
               "--steps", str(steps), "--report", str(report), "--backend", "onnxruntime"]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            row["sim2sim_error"] = proc.stderr[-1000:]
        else:
            rep = json.loads(report.read_text())
            episodes = rep["episode_returns"]
            row["onnx_run_command"] = ["orin-rl", *cmd[3:]]
            row["onnx_run_episodes"] = len(episodes)
            row["onnx_run_return"] = statistics.fmean(episodes) if episodes else None
        row_file.write_text(json.dumps(row, indent=2) + "\n")
        print(f"{row['task']}: sim-to-sim {row.get('onnx_run_return')}", flush=True)


# ---------------------------------------------------------------------------- merge
def steady_state(run: Path) -> dict[str, Any]:
    """The training loop's steps/s once running: from metrics.jsonl, over the intervals
    between logged iterations that hold no evaluation (a record's time is taken before its
    evaluation), leaving out the start-up (imports, compile, warm-up iteration, graph capture)
    before the first record."""
    from orin_rl.runners.logger import read_metrics

    records = read_metrics(run / "metrics.jsonl")
    steps = seconds = 0.0
    for prev, nxt in itertools.pairwise(records):
        if "eval/return_mean" in prev:
            continue
        steps += nxt["global_step"] - prev["global_step"]
        seconds += nxt["time_s"] - prev["time_s"]
    first = records[0] if records else {}
    return {
        "steady_steps_per_s": steps / seconds if seconds else None,
        "steady_intervals_s": round(seconds, 3),
        "startup_to_first_record_s": first.get("time_s"),
    }


def merge(folders: list[Path], dest: Path) -> None:
    """Assemble the phases' JSON files into one JSON, a Markdown table and a plot."""
    rows: list[dict[str, Any]] = []
    throughputs, machine = [], {}
    for folder in folders:
        for f in sorted(folder.glob("*.json")):
            data = json.loads(f.read_text())
            if f.name.startswith("machine"):
                machine = data
            elif f.name.startswith("throughput-"):
                throughputs.extend(data["rows"])
            elif f.name.startswith(("train-", "gym-", "hopper-cpu")) and "error" not in data:
                if f.name.startswith("train-") and (folder / f"run-{data['task']}").is_dir():
                    data.update(steady_state(folder / f"run-{data['task']}"))
                rows.append(data)
    table = []
    for task in TASKS:
        tp = [t for t in throughputs if t["task"] == task]
        train_row = next(
            (r for r in rows if r["task"] == task and r["backend"] == "mujoco_warp"), {}
        )
        # The throughput measured at the training run's world count (else the first one).
        same = [t for t in tp if t["num_envs"] == train_row.get("num_envs")]
        match = (same or tp or [None])[0]
        if match or train_row:
            table.append(_table_row(task, "mujoco_warp", match, train_row))
        gym_row = next(
            (r for r in rows if r["task"] == task and r["backend"].startswith("gymnasium (CPU")),
            None,
        )
        if gym_row:
            table.append(_table_row(task, "gymnasium_cpu_async64", gym_row, gym_row))
    for t in table:
        base = next(
            (b for b in table if b["task"] == t["task"] and b["backend"] != t["backend"]), None
        )
        if (
            t["backend"] == "mujoco_warp"
            and base
            and base.get("train_steps_per_s")
            and t.get("train_steps_per_s")
        ):  # whole run against whole run: start-up included on both sides
            t["train_speedup_vs_gymnasium_cpu"] = t["train_steps_per_s"] / base["train_steps_per_s"]
    result = {
        "command": "python tools/bench_locomotion.py (phases throughput, train, gym, hopper-cpu; --sim2sim; --merge)",
        "machine": machine,
        "thresholds": THRESHOLDS,
        "targets_wall_s": TARGETS,
        "seed_001_quoted_steps_per_s": SEED_001_STEPS_PER_S,
        "rows": table,
        "throughput": throughputs,
        "runs": rows,
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    dest.with_suffix(".md").write_text(markdown(result))
    plot(rows, dest.with_suffix(".png"), THRESHOLDS, TASKS)
    print(f"wrote {dest}.json, .md, .png")


def _table_row(task: str, backend: str, tp: dict | None, tr: dict) -> dict[str, Any]:
    tp = tp or {}
    return {
        "task": task,
        "backend": backend,
        "num_envs": tr.get("num_envs") or tp.get("num_envs"),
        "env_only_steps_per_s": tp.get("env_only_steps_per_s"),
        "env_policy_steps_per_s": tp.get("env_policy_steps_per_s"),
        "train_steps_per_s": tr.get("train_steps_per_s"),
        "steady_steps_per_s": tr.get("steady_steps_per_s"),
        "wall_to_threshold_s": tr.get("wall_to_threshold_s"),
        "eval_return": tr.get("eval_return"),
        "threshold": THRESHOLDS[task],
        "train_wall_s": tr.get("train_wall_s"),
        "total_steps": tr.get("total_steps"),
        "gym_eval_return": tr.get("gym_eval_return"),
        "onnx_run_return": tr.get("onnx_run_return"),
        "onnx_run_episodes": tr.get("onnx_run_episodes"),
    }


# ---------------------------------------------------------------------------- main
def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--phase", choices=["throughput", "train", "gym", "hopper-cpu"], action="append"
    )
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--num-envs", default="4096", help="throughput: comma list of world counts")
    parser.add_argument("--steps", type=int, default=64, help="throughput: steps timed per repeat")
    parser.add_argument("--budget-s", default="120", help="train/gym: seconds, or task=s,task=s")
    parser.add_argument("--set", action="append", default=[], help="extra train --set overrides")
    parser.add_argument("--device", default="cuda", help="learner device of train/gym runs")
    parser.add_argument("--out", type=Path, default=Path("bench/locomotion"))
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/bench_locomotion"))
    parser.add_argument("--sim2sim", type=Path, help="export + run the runs in this folder")
    parser.add_argument("--merge", type=Path, nargs="+", help="phase folders to merge")
    parser.add_argument("--write", type=Path, default=ROOT / "docs/benchmarks/locomotion_h200")
    args = parser.parse_args()
    if args.merge:
        merge(args.merge, args.write)
        return 0
    if args.sim2sim:
        sim2sim(args.sim2sim)
        return 0
    tasks = args.tasks.split(",")
    budgets = _budgets(args.budget_s, tasks)
    args.workdir.mkdir(parents=True, exist_ok=True)
    _write(args.out, "machine", _machine())
    for phase in args.phase or []:
        for task in tasks:
            try:
                if phase == "throughput":
                    rows = [throughput(task, int(n), args.steps) for n in args.num_envs.split(",")]
                    _write(args.out, f"throughput-{task}", {"rows": rows})
                elif phase == "train":
                    extra = [a for s in args.set for a in ("--set", s)]
                    row = train_task(
                        task, budgets[task], args.workdir, args.out, extra, args.device
                    )
                    _write(args.out, f"train-{task}", row)
                elif phase == "gym":
                    row = gym_task(task, budgets[task], args.workdir, args.out, args.device)
                    _write(args.out, f"gym-{task}", row)
                elif phase == "hopper-cpu":
                    _write(args.out, "hopper-cpu", hopper_cpu(args.workdir, args.out))
                    break
            except Exception as exc:  # keep the other tasks' results; record what failed
                import traceback

                _write(
                    args.out,
                    f"error-{phase}-{task}",
                    {"error": repr(exc), "traceback": traceback.format_exc()},
                )
    return 0


def _budgets(spec: str, tasks: list[str]) -> dict[str, float]:
    if "=" not in spec:
        return dict.fromkeys(tasks, float(spec))
    out = {}
    for item in spec.split(","):
        task, seconds = item.split("=")
        out[task] = float(seconds)
    return {t: out.get(t, 120.0) for t in tasks}


if __name__ == "__main__":
    sys.exit(main())
