"""``orin-rl doctor --warm``: fill, before the first real run, the caches a first run fills.

A fresh machine's first ``orin-rl train`` compiles before it trains: Python's bytecode, Warp's
kernels for MuJoCo Warp and mjlab (the bulk: a first Humanoid-v5 run on GPU physics waited
84 s for its first iteration on the H200, GPU.md), Numba's kernels, torch inductor's where the
update is compiled. ``warm`` runs one iteration of each asked task in its own process, with the
flags its real run takes, so the caches hold exactly what that run loads; it is idempotent (a
second call finds everything cached and takes the warm start-up's seconds). Where the caches
live (``cache_dirs``) is printed; their environment variables move them.
"""

from __future__ import annotations

import os
import subprocess  # nosec B404  # runs orin-rl train, this interpreter, no shell
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

GPU_PHYSICS_TASKS = ("Humanoid-v5",)
"""What ``--warm`` without a task warms on a CUDA machine with the sim extra (besides CartPole):
the GPU-physics task a new user starts with (README)."""


@dataclass
class Warmed:
    task: str
    seconds: float
    ok: bool
    detail: str = ""


def default_tasks(device: str) -> list[str]:
    """CartPole-v1, and on CUDA with MuJoCo Warp installed the GPU-physics tasks."""
    import importlib.util

    tasks = ["CartPole-v1"]
    if device == "cuda" and importlib.util.find_spec("mujoco_warp") is not None:
        tasks += list(GPU_PHYSICS_TASKS)
    return tasks


def train_command(task: str, device: str, out: Path) -> list[str]:
    """One iteration of ``task`` as its real run takes it on ``device`` (on CUDA: CUDA graphs,
    and the GPU backend where the id has one), its evaluation one episode."""
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--env", task, "--device", device,
           "--total-steps", "1", "--out", str(out), "--no-progress",
           "--set", "train.eval_episodes=1", "--set", "train.tensorboard=false"]  # fmt: skip
    if device == "cuda":
        from orin_rl.envs.gpu import gpu_env_ids

        cmd.append("--cuda-graphs")
        if task in gpu_env_ids():  # the GPU-native or MuJoCo Warp implementation of the id
            cmd += ["--env-backend", "gpu"]
    return cmd


def cache_dirs() -> dict[str, str]:
    """Where the kernels and bytecode a run compiles are kept (set the variable to move one)."""
    dirs = {
        "python bytecode (PYTHONPYCACHEPREFIX)": os.environ.get("PYTHONPYCACHEPREFIX")
        or "__pycache__ beside each module",
        "Numba (NUMBA_CACHE_DIR)": os.environ.get("NUMBA_CACHE_DIR")
        or "__pycache__ beside each module",
        "torch inductor (TORCHINDUCTOR_CACHE_DIR)": os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        or str(Path(tempfile.gettempdir()) / f"torchinductor_{_user()}"),
    }
    warp = os.environ.get("WARP_CACHE_PATH")
    if warp is None:
        try:
            import warp as wp

            wp.config.quiet = True  # no banner
            wp.init()
            warp = str(wp.config.kernel_cache_dir)
        except Exception:  # no sim extra: no Warp kernels to cache
            warp = "(warp not installed)"
    dirs["Warp kernels (WARP_CACHE_PATH)"] = warp
    return dirs


def _user() -> str:
    try:
        import getpass

        return getpass.getuser()
    except Exception:  # no user name (a container without a passwd entry)
        return "unknown"


def warm(tasks: list[str], device: str, progress: bool = True) -> list[Warmed]:
    """One iteration of each task in its own process; a failure is one line, not an abort."""
    from tqdm import tqdm

    done: list[Warmed] = []
    bar = tqdm(tasks, desc="warming", unit="task", disable=not progress, file=sys.stderr)
    for task in bar:
        bar.set_postfix_str(task)
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            cmd = train_command(task, device, Path(tmp) / "run")  # an argv list, no shell
            proc = subprocess.run(cmd, capture_output=True, text=True)  # nosec B603
            seconds = time.perf_counter() - start
        lines = proc.stderr.strip().splitlines()
        detail = "" if proc.returncode == 0 else (lines[-1] if lines else f"exit {proc.returncode}")
        done.append(Warmed(task, round(seconds, 1), proc.returncode == 0, detail))
    return done


def table(done: list[Warmed], device: str) -> str:
    rows = [f"warmed on {device}: one iteration of each task in its own process"]
    for w in done:
        state = f"{w.seconds:7.1f} s" if w.ok else f"failed: {w.detail}"
        rows.append(f"  {w.task:<28} {state}")
    rows.append("caches (a second --warm finds them filled):")
    rows += [f"  {name:<44} {where}" for name, where in cache_dirs().items()]
    return "\n".join(rows)
