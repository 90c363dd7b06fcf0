"""Locomotion on GPU physics (MuJoCo Warp) against gymnasium's CPU physics on the same machine.

Phases, each writing ``OUT/<phase>-<task>.json`` (run them in one or several device calls,
then ``--merge`` the folders into ``docs/benchmarks/locomotion_h200.{json,md,png}``):

- ``throughput``: per task, N GPU-physics envs stepping with random actions: env-only steps/s
  (the env's own path: one Warp graph replay a step), env + policy steps/s (the GPU preset's
  policy samples every action), env-only with 16 steps in one torch CUDA graph; and a
  torch.profiler breakdown of one PPO iteration (where the GPU time goes).
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
    except ImportError:
        pass
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
    from orin_rl.models import ActorCritic, PolicySpec
    from orin_rl.presets import preset_overrides

    overrides = [f"{k}={json.dumps(v)}" for k, v in preset_overrides(task, "ppo", "gpu").items()]
    cfg = config_mod.apply_overrides(Config(), overrides)
    spec = PolicySpec.from_spaces(
        env.observation_space,
        env.action_space,
        hidden_sizes=cfg.ppo.hidden_sizes,
        activation=cfg.ppo.activation,
        normalize_obs=True,
        init_log_std=cfg.ppo.init_log_std,
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


def profile_iteration(task: str, workdir: Path) -> dict[str, Any]:
    """GPU time of one eager PPO iteration of the GPU preset, grouped (torch.profiler)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from orin_rl import config as config_mod
    from orin_rl.config import Config
    from orin_rl.presets import preset_overrides
    from orin_rl.runners.trainer import Trainer

    overrides = [f"{k}={json.dumps(v)}" for k, v in preset_overrides(task, "ppo", "gpu").items()]
    cfg = config_mod.apply_overrides(
        Config(), [*overrides, "train.device=cuda", "train.tensorboard=false"]
    )
    run = workdir / f"profile-{task}"
    shutil.rmtree(run, ignore_errors=True)
    trainer = Trainer(cfg, run, progress=False)
    obs = trainer.env.reset(seed=0)
    obs, _ = trainer._iterate(obs)  # warm-up: compiles kernels and captures Warp graphs
    torch.cuda.synchronize()
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        obs, _ = trainer._iterate(obs)
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    groups: dict[str, float] = {}
    per_name: dict[str, list[float]] = {}
    for evt in prof.events():  # every kernel execution on the GPU, with its duration
        if evt.device_type.name != "CUDA":
            continue
        us = evt.time_range.elapsed_us()
        group = _kernel_group(evt.name)
        groups[group] = groups.get(group, 0.0) + us
        per_name.setdefault(evt.name, []).append(us)
    kernels = sorted(((sum(v), len(v), k) for k, v in per_name.items()), reverse=True)
    total = sum(groups.values()) or 1.0
    return {
        "task": task,
        "num_envs": cfg.env.num_envs,
        "num_steps": cfg.ppo.num_steps,
        "iteration_wall_s": wall,
        "gpu_time_s": total / 1e6,
        "gpu_time_share": {k: v / total for k, v in sorted(groups.items(), key=lambda x: -x[1])},
        "top_kernels": [
            {"name": n[:120], "calls": c, "gpu_ms": round(us / 1e3, 3)} for us, c, n in kernels[:15]
        ],
    }


def _kernel_group(name: str) -> str:
    """Which part of an iteration a CUDA kernel belongs to, from its name."""
    low = name.lower()
    physics = ("solve", "linesearch", "update_constraint", "update_gradient", "cholesky", "efc",
               "broadphase", "narrowphase", "collision", "kinematics", "com_pos", "com_vel",
               "crb", "rne", "factor", "qfrc", "euler", "rungekutta", "rk_", "passive",
               "actuat", "transmission", "tendon", "mul_m", "solve_m", "limit", "contact",
               "advance", "next_time", "gravity", "jac", "cfrc", "cdof", "energy", "sensor")  # fmt: skip
    if "__locals__" in name or any(p in low for p in physics):
        return "physics (MuJoCo Warp)"
    if "gemm" in low or "sm90" in low or "cutlass" in low or "gemv" in low:
        return "matmuls (policy, update)"
    if "memcpy" in low or "memset" in low:
        return "copies"
    if "gae" in low or "numba" in low or "cuda_kernel" in low:
        return "GAE (Numba)"
    return "other torch element-wise (obs, reward, sampling, Adam)"


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
def merge(folders: list[Path], dest: Path) -> None:
    """Assemble the phases' JSON files into one JSON, a Markdown table and a plot."""
    rows: list[dict[str, Any]] = []
    profiles, throughputs, machine = [], [], {}
    for folder in folders:
        for f in sorted(folder.glob("*.json")):
            data = json.loads(f.read_text())
            if f.name.startswith("machine"):
                machine = data
            elif f.name.startswith("profile-"):
                profiles.append(data)
            elif f.name.startswith("throughput-"):
                throughputs.extend(data["rows"])
            elif f.name.startswith(("train-", "gym-", "hopper-cpu")):
                rows.append(data)
    table = []
    for task in TASKS:
        tp = [t for t in throughputs if t["task"] == task]
        best = max(tp, key=lambda t: t["env_only_steps_per_s"], default=None)
        train_row = next(
            (r for r in rows if r["task"] == task and r["backend"] == "mujoco_warp"), {}
        )
        if best or train_row:
            table.append(_table_row(task, "mujoco_warp", best, train_row))
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
        ):
            t["train_speedup_vs_gymnasium_cpu"] = t["train_steps_per_s"] / base["train_steps_per_s"]
    result = {
        "command": "python tools/bench_locomotion.py (phases throughput, train, gym, hopper-cpu; --sim2sim; --merge)",
        "machine": machine,
        "thresholds": THRESHOLDS,
        "targets_wall_s": TARGETS,
        "seed_001_quoted_steps_per_s": SEED_001_STEPS_PER_S,
        "rows": table,
        "throughput": throughputs,
        "profiles": profiles,
        "runs": rows,
    }
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    dest.with_suffix(".md").write_text(_markdown(result))
    _plot(rows, dest.with_suffix(".png"))
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
        "wall_to_threshold_s": tr.get("wall_to_threshold_s"),
        "eval_return": tr.get("eval_return"),
        "threshold": THRESHOLDS[task],
        "train_wall_s": tr.get("train_wall_s"),
        "total_steps": tr.get("total_steps"),
        "gym_eval_return": tr.get("gym_eval_return"),
        "onnx_run_return": tr.get("onnx_run_return"),
    }


def _fmt(x: Any, digits: int = 0) -> str:
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def _markdown(result: dict[str, Any]) -> str:
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
        "| task | physics | envs | env-only steps/s | env + policy steps/s | PPO steps/s | "
        "speed-up vs CPU physics | wall to threshold | eval return (training physics) | "
        "gymnasium eval | ONNX `orin-rl run` return | trained for |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
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
            f"{r['train_wall_s']:.0f} s, {r['total_steps'] / 1e6:.1f}M steps"
            if r.get("train_wall_s") and r.get("total_steps")
            else "—"
        )
        lines.append(
            f"| {r['task']} | {r['backend']} | {_fmt(r['num_envs'])} | {_fmt(r['env_only_steps_per_s'])} "
            f"| {_fmt(r['env_policy_steps_per_s'])} | {_fmt(r['train_steps_per_s'])} "
            f"| {_fmt(r.get('train_speedup_vs_gymnasium_cpu'), 1)}{'×' if r.get('train_speedup_vs_gymnasium_cpu') else ''} "
            f"| {reached} (≥ {r['threshold']:g}) | {_fmt(r['eval_return'], 1)} | {_fmt(r['gym_eval_return'], 1)} "
            f"| {_fmt(r['onnx_run_return'], 1)} | {trained} |"
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
    for p in result["profiles"]:
        lines += ["", f"## Profile: one eager PPO iteration of {p['task']} "
                  f"({p['num_envs']} envs x {p['num_steps']} steps; torch.profiler)", "",
                  f"Iteration wall {p['iteration_wall_s']:.3f} s, GPU kernel time {p['gpu_time_s']:.3f} s.", "",
                  "| part | share of GPU time |", "|---|---|"]  # fmt: skip
        lines += [f"| {k} | {v:.1%} |" for k, v in p["gpu_time_share"].items()]
        lines += ["", "| top kernels | calls | GPU ms |", "|---|---|---|"]
        lines += [
            f"| `{k['name']}` | {k['calls']} | {k['gpu_ms']} |" for k in p["top_kernels"][:10]
        ]
    cpu = [r for r in result["runs"] if r["backend"].startswith("gymnasium preset")]
    for r in cpu:
        first = r.get("first_eval_at_1500")
        lines += ["", "## Hopper-v5 gymnasium preset on the CPU cores", "",
                  f"`orin-rl {' '.join(r['command'][1:])}`: final evaluation "
                  f"{_fmt(r.get('eval_return'), 1)} ± {_fmt(r.get('eval_return_std'), 1)} after "
                  f"{_fmt(r.get('total_steps'))} steps ({_fmt(r.get('train_wall_s'))} s, "
                  f"{_fmt(r.get('train_steps_per_s'))} steps/s); first periodic evaluation ≥ 1,500 at "
                  + (f"step {first['global_step']:,} ({first['time_s']:.0f} s)." if first else "— (never).")]  # fmt: skip
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [r for r in rows if r.get("curve")]
    if not curves:
        return
    n = len(curves)
    fig, axes = plt.subplots(1, n, figsize=(4 * n, 3.4), squeeze=False)
    for ax, r in zip(axes[0], curves, strict=True):
        t = [c[0] for c in r["curve"]]
        ret = [c[2] for c in r["curve"]]
        ax.plot(t, ret, marker="o", ms=3, label=r["backend"])
        if r["task"] in THRESHOLDS and r["backend"] == "mujoco_warp":
            ax.axhline(THRESHOLDS[r["task"]], ls="--", c="grey", lw=1, label="threshold")
        ax.set_title(f"{r['task']} ({r['backend'].split(' ')[0]})", fontsize=9)
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("eval return")
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    parser.add_argument("--profile", default="Humanoid-v5", help="throughput: tasks to profile")
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
                    if task in args.profile.split(","):
                        _write(args.out, f"profile-{task}", profile_iteration(task, args.workdir))
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
