"""``orin-rl doctor --warm`` (issue 41, start-up): it fills the caches a first run fills."""

from __future__ import annotations

import os
import subprocess
import sys


def test_warm_fills_the_bytecode_a_first_run_loads_and_names_a_failed_task(tmp_path):
    """One iteration of CartPole in its own process writes the bytecode of the modules a
    training run imports into an empty cache; a task that cannot train is one line and exit 1
    (mutation: warm() not running the task leaves the cache without the runner's bytecode)."""
    prefix = tmp_path / "pycache"
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmd = [sys.executable, "-m", "orin_rl.cli", "doctor", "--warm", "CartPole-v1", "Nope-v0",
           "--device", "cpu"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert any(line.split()[:1] == ["CartPole-v1"] and line.endswith(" s") for line in lines)
    assert [line for line in lines if "Nope-v0" in line and "failed:" in line]
    assert "PYTHONPYCACHEPREFIX" in proc.stdout and "WARP_CACHE_PATH" in proc.stdout
    assert list(prefix.rglob("orin_rl/runners/base.*.pyc")), "no runner bytecode cached"


def test_warm_runs_a_task_with_the_flags_of_its_real_run(tmp_path):
    """On CUDA: CUDA graphs, and the GPU backend for an id that has one (a MuJoCo Warp task, a
    GPU-native classic one), not for an mjlab task (its own backend); on the CPU neither
    (mutation: no --env-backend gpu warms gymnasium's CPU physics instead of MuJoCo Warp's)."""
    from orin_rl.cache_warm import train_command

    def flags(task, device):
        cmd = train_command(task, device, tmp_path / "run")
        return [a for a in cmd if a in ("--cuda-graphs", "--env-backend", "gpu")]

    assert flags("Humanoid-v5", "cuda") == ["--cuda-graphs", "--env-backend", "gpu"]
    assert flags("CartPole-v1", "cuda") == ["--cuda-graphs", "--env-backend", "gpu"]
    assert flags("Mjlab-Velocity-Flat-Unitree-Go1", "cuda") == ["--cuda-graphs"]
    assert flags("Humanoid-v5", "cpu") == []
