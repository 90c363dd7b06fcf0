"""The robot's deploy image (issue 55): ``jetson/deploy.sh`` into a fresh venv on this machine
(x86-64; the arm64 run is tools/aarch64_check.sh's) installs what ``orin-rl run`` needs and
nothing of the training stack: torch, numba, tensorboard and matplotlib are not importable there,
and a bundle runs (ONNX Runtime), the doctor reports, the robot's wire imports. It fails when
torch slips back in: a torch import on the run path, or torch among the deploy image's
requirements. The install takes ~40 s (pip's cache warm) and needs the package registry, as
``make install`` does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRAINING_ONLY = ("torch", "numba", "tensorboard", "matplotlib", "onnx")


def _clean_env() -> dict[str, str]:
    """This process's environment without what would leak the test venv into the new one."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if Path(sys.prefix) not in Path(p).parents
    )
    return env


@pytest.fixture(scope="module")
def deploy_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("deploy") / "venv"
    proc = subprocess.run(
        ["bash", str(ROOT / "jetson" / "deploy.sh"), str(venv)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**_clean_env(), "PYTHON": sys.executable.replace(sys.prefix, sys.base_prefix)},
        cwd=venv.parent,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "robot wire" in proc.stdout  # deploy.sh ends with the doctor's table
    return venv


def _python(venv: Path, code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / "python"), "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_env(),
        cwd=venv.parent,
    )


def test_the_deploy_image_has_no_training_stack(deploy_venv):
    """torch, numba, tensorboard, matplotlib, onnx: none importable; the runtime, the G1
    plant and its wire are (the plant's modules import without torch)."""
    found = _python(
        deploy_venv,
        "import importlib.util as u; "
        f"print([m for m in {TRAINING_ONLY!r} if u.find_spec(m) is not None])",
    )
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "[]", f"training packages in the deploy image: {found.stdout}"
    imports = _python(
        deploy_venv,
        "import cyclonedds, onnxruntime, orin_rl.robot.unitree, orin_rl.runtime.onnxruntime_backend",
    )
    assert imports.returncode == 0, imports.stderr[-1500:]


def test_a_bundle_runs_and_the_doctor_reports_torch_free(deploy_venv, tiny_run):
    bundle = tiny_run("CartPole-v1") / "bundle"
    orin_rl = str(deploy_venv / "bin" / "orin-rl")
    run = subprocess.run(
        [orin_rl, "run", "--model", str(bundle), "--rate", "0", "--steps", "300"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_clean_env(),
        cwd=deploy_venv.parent,
    )
    assert run.returncode == 0, run.stdout[-1500:] + run.stderr[-1500:]
    assert "onnxruntime (CPUExecutionProvider" in run.stdout
    assert "0 non-finite" in run.stdout
    doctor = subprocess.run(
        [orin_rl, "doctor"], capture_output=True, text=True, timeout=120, env=_clean_env()
    )
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    # deploy.sh's marker: what the image leaves out on purpose is no fault, with no advice
    assert f"deploy ({deploy_venv / 'orin-rl-image.json'})" in doctor.stdout
    assert "- torch        not in this image (deploy" in doctor.stdout, doctor.stdout
    assert not any(f"✗ {item}" in doctor.stdout for item in ("torch", "numba", "gpu physics"))
    assert "pip install torch" not in doctor.stdout
    assert "✓ robot wire" in doctor.stdout
    assert "providers that start:" in doctor.stdout
