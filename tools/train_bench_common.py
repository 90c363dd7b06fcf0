"""What the CPU training benchmarks against Stable-Baselines3 share (``bench_train.py`` and
``bench_train_offpolicy.py``): the peer virtual environment SB3 runs in."""

from __future__ import annotations

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
