"""What training benchmarks share: the peer virtual environment Stable-Baselines3 runs in
(``bench_train.py``, ``bench_train_offpolicy.py``) and the machine line of a JSON's meta
(``bench_overlap.py``, ``bench_update.py``)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import torch


def ensure_peer_venv(venv: Path) -> Path:
    """Create the SB3 venv (same torch version as ours) unless it exists; return its python."""
    python = venv / "bin" / "python"
    if not python.exists():
        torch_version = torch.__version__.split("+")[0]
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "stable-baselines3",
                f"torch=={torch_version}",
            ],
            check=True,
        )
    return python


def machine_line() -> str:
    """Architecture, CPU cores, Python, torch and the first CUDA GPU, for a benchmark's meta."""
    gpu = f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""
    return (f"{platform.machine()}, {os.cpu_count()} CPU cores, Python "
            f"{platform.python_version()}, torch {torch.__version__}{gpu}")  # fmt: skip
