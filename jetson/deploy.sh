#!/usr/bin/env bash
# The robot's deploy image: orin_rl's runtime in a venv without torch, numba or the training
# stack. What `orin-rl run` needs: ONNX Runtime (NVIDIA's GPU build on a Jetson, with
# JetPack's TensorRT seen through --system-site-packages), the G1 plant and its wire
# (CycloneDDS), numpy, gymnasium, pyyaml. Training needs `pip install orin-rl` (or setup.sh).
#
#   bash jetson/deploy.sh [VENV_DIR]     (default: /opt/orin_rl/.venv, where orin-rl-policy.service looks)
#
# SKIP_ROBOT=1 leaves out the wire; CYCLONEDDS_HOME / CYCLONEDDS_VERSION as in common.sh
# (aarch64 has no cyclonedds wheel: CYCLONEDDS_HOME=/usr with the distribution's
# cyclonedds-dev, or the C library built from GitHub); JETSON_INDEX as in setup.sh.
# Checked on x86-64 by tests/test_deploy_install.py and in an emulated arm64 Debian root by
# tools/aarch64_check.sh; not yet on a board.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=jetson/common.sh disable=SC1091
source "$repo/jetson/common.sh"
venv="${1:-/opt/orin_rl/.venv}"
python="${PYTHON:-python3}"
pip_flags=(--disable-pip-version-check)

jetson=""
if [[ -f /etc/nv_tegra_release ]]; then
  jetson=1
fi
site=()
if "$python" -c 'import tensorrt' 2>/dev/null; then
  site=(--system-site-packages)  # TensorRT's Python bindings come from JetPack, not from PyPI
fi
"$python" -m venv "${site[@]}" "$venv"
"$venv/bin/python" -m pip install "${pip_flags[@]}" -r "$repo/jetson/requirements-deploy.txt" \
  "onnxruntime>=1.18"
if [[ -n "$jetson" ]]; then
  release="$(head -n 1 /etc/nv_tegra_release)"
  case "$release" in
    *"REVISION: 4."*) cuda_tag=cu126 ;;
    *) cuda_tag=cu122 ;;
  esac
  install_ort_gpu "$venv" "${JETSON_INDEX:-https://pypi.jetson-ai-lab.io/jp6/$cuda_tag}"
  # pycuda: the TensorRT backend's buffers (no aarch64 wheel: builds against JetPack's CUDA).
  PATH="/usr/local/cuda/bin:$PATH" "$venv/bin/python" -m pip install "${pip_flags[@]}" \
    "pycuda>=2024.1" "jetson-stats>=4.2" \
    || echo "deploy.sh: pycuda not built (needs JetPack's CUDA); TensorRT runs need it" >&2
fi
if [[ -z "${SKIP_ROBOT:-}" ]]; then
  install_cyclonedds "$venv" || true
fi
# --no-deps: the package without its training dependencies (torch, numba, tensorboard, ...),
# as a copy (not editable): the robot needs no checkout.
"$venv/bin/python" -m pip install "${pip_flags[@]}" --no-deps "$repo"
# The doctor's cue (orin_rl/doctor.py, detect_image): this venv is the deploy image, which leaves
# training's parts out on purpose (and the wire, where SKIP_ROBOT asked for that).
left_out='"torch", "numba", "gpu physics"'
if [[ -n "${SKIP_ROBOT:-}" ]]; then
  left_out+=', "robot wire"'
fi
printf '{"image": "deploy", "by": "jetson/deploy.sh", "left_out": [%s]}\n' "$left_out" \
  > "$venv/orin-rl-image.json"
if "$venv/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("torch") is None)'; then
  echo "deploy.sh: torch is importable in $venv (from the system site?); the deploy image should not carry it" >&2
fi
# CYCLONEDDS_HOME is for the binding's build only: at run time its loader would look there
# (for $CYCLONEDDS_HOME/lib/libddsc.so) instead of where it was built against.
env -u CYCLONEDDS_HOME "$venv/bin/orin-rl" doctor
