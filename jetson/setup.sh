#!/usr/bin/env bash
# Set up orin_rl on a Jetson with JetPack 6 (L4T 36.x): a venv that sees JetPack's TensorRT,
# NVIDIA's CUDA build of PyTorch and ONNX Runtime, the rest from PyPI, then `orin-rl doctor`.
#
#   bash jetson/setup.sh [VENV_DIR]          (default: .venv in the repository)
#   TORCH_WHEEL=/path/or/url.whl bash jetson/setup.sh
#
# Where the Jetson builds come from (checked 2026-12 with public sources, not on a board):
# NVIDIA's Jetson AI Lab index moved from pypi.jetson-ai-lab.dev to pypi.jetson-ai-lab.io
# (github.com/jetsonhacks/jetson-orin-setup/issues/6); its JetPack 6 folders are jp6/cu126
# (JetPack 6.1/6.2, CUDA 12.6) and jp6/cu122 (JetPack 6.0), and jp6/cu126 serves
# onnxruntime-gpu (github.com/dusty-nv/jetson-containers/issues/1283). It carries
# torch 2.8.0 for Python 3.10 (JetPack 6's) at the URL below, used by several public Jetson
# setups; the torch 2.5.0 this script used to pin is not on the new index. The index also
# mirrors PyPI, whose CPU-only aarch64 torch of the same version can win a by-name install,
# so the default takes the Jetson wheel by URL and sha256.
#
# TORCH_WHEEL: a torch wheel for your JetPack (PyPI's aarch64 torch has no CUDA).
# JETSON_INDEX: the index folder for torch (when TORCH_WHEEL is empty) and onnxruntime-gpu.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=jetson/common.sh disable=SC1091
source "$repo/jetson/common.sh"
venv="${1:-$repo/.venv}"
torch_cu126="https://pypi.jetson-ai-lab.io/jp6/cu126/+f/62a/1beee9f2f1470/torch-2.8.0-cp310-cp310-linux_aarch64.whl#sha256=62a1beee9f2f147076a974d2942c90060c12771c94740830327cae705b2595fc"

if [[ ! -f /etc/nv_tegra_release ]]; then
  echo "setup.sh: this is not a Jetson (no /etc/nv_tegra_release); use 'make demo' instead" >&2
  exit 2
fi
release="$(head -n 1 /etc/nv_tegra_release)"
if [[ "$release" != *"R36"* ]]; then
  echo "setup.sh: written for JetPack 6 (L4T R36); found: $release" >&2
  echo "setup.sh: JetPack 5's TensorRT 8.5 and Python 3.8 are not supported; on JetPack 7 pick the torch wheel with TORCH_WHEEL=..." >&2
fi
# L4T 36.4.x is JetPack 6.1/6.2 (CUDA 12.6); 36.3 is JetPack 6.0 (CUDA 12.2).
case "$release" in
  *"REVISION: 4."*) cuda_tag=cu126 ;;
  *) cuda_tag=cu122 ;;
esac
index="${JETSON_INDEX:-https://pypi.jetson-ai-lab.io/jp6/$cuda_tag}"
py_tag="$(python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
if [[ -z "${TORCH_WHEEL:-}" && "$cuda_tag" == cu126 && "$py_tag" == cp310 ]]; then
  TORCH_WHEEL="$torch_cu126"
fi

if ! python3 -c 'import tensorrt' 2>/dev/null; then
  echo "setup.sh: JetPack's TensorRT is missing: sudo apt install nvidia-jetpack (or python3-libnvinfer)" >&2
  exit 2
fi

# --system-site-packages: TensorRT's Python bindings come from JetPack, not from PyPI.
python3 -m venv --system-site-packages "$venv"
rm -f "$venv/orin-rl-image.json"  # deploy.sh's mark: this venv becomes a training install
"$venv/bin/python" -m pip install --upgrade pip
if [[ -n "${TORCH_WHEEL:-}" ]]; then
  "$venv/bin/python" -m pip install "$TORCH_WHEEL"
else
  echo "setup.sh: no known torch wheel for $cuda_tag/$py_tag; trying torch from $index" >&2
  "$venv/bin/python" -m pip install --index-url "$index" torch
fi
"$venv/bin/python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || {
  echo "setup.sh: the installed torch has no CUDA; set TORCH_WHEEL to NVIDIA's JetPack wheel" >&2
  exit 2
}
# pycuda builds against JetPack's CUDA; jetson-stats gives jtop.
export PATH="/usr/local/cuda/bin:$PATH"
"$venv/bin/python" -m pip install -e "${repo}[export,jetson,cuda]"
# PyPI's onnxruntime on aarch64 is CPU-only: NVIDIA's Jetson build in its place (common.sh).
install_ort_gpu "$venv" "$index"

# GPU physics (--env-backend gpu for the MuJoCo tasks): Warp built for JetPack's CUDA. PyPI's
# warp-lang is built with CUDA 13 (JetPack 7, L4T R38); JetPack 6 (CUDA 12, L4T R36) needs the
# +cu12 aarch64 wheel of Warp's GitHub release. WARP_WHEEL overrides the choice; SKIP_SIM=1
# skips this part. Not yet run on a board: `orin-rl doctor` reports what it found.
if [[ -z "${SKIP_SIM:-}" ]]; then
  warp_version="${WARP_VERSION:-1.19.0}"
  warp_release="https://github.com/NVIDIA/warp/releases/download/v${warp_version}"
  case "$release" in
    *R36*) warp="${warp_release}/warp_lang-${warp_version}+cu12-py3-none-manylinux_2_34_aarch64.whl" ;;
    *) warp="warp-lang==${warp_version}" ;;
  esac
  if "$venv/bin/python" -m pip install "${WARP_WHEEL:-$warp}" \
    && "$venv/bin/python" -m pip install -e "${repo}[sim]"; then
    "$venv/bin/python" -c 'import warp as wp; wp.init(); assert wp.get_cuda_device_count() > 0' \
      || echo "setup.sh: Warp installed but sees no CUDA device; set WARP_WHEEL to a build for this JetPack's CUDA" >&2
    # mjlab's robot tasks (--env Mjlab-...): pure Python on top of Warp (mujoco 3.11 has a
    # cp310 aarch64 wheel). SKIP_MJLAB=1 skips it. Not yet run on a board.
    if [[ -z "${SKIP_MJLAB:-}" ]] && ! "$venv/bin/python" -m pip install -e "${repo}[mjlab]"; then
      echo "setup.sh: mjlab not installed; the gymnasium and GPU-physics tasks still work" >&2
    fi
  else
    echo "setup.sh: GPU physics not installed (Warp/MuJoCo Warp); everything else works: rerun with WARP_WHEEL=... or SKIP_SIM=1" >&2
  fi
fi
# The robot's wire (orin-rl run --plant unitree-g1): PyPI has no aarch64 cyclonedds wheel, so
# common.sh builds its Python binding against the CycloneDDS C library of the same release
# (CYCLONEDDS_HOME=/usr with the distribution's cyclonedds-dev, else built from GitHub into
# $venv/cyclonedds). SKIP_ROBOT=1 skips it; CYCLONEDDS_VERSION picks the release. Run under
# emulation in an arm64 Debian root by tools/aarch64_check.sh (against Debian's 0.10.2), not yet
# on a board.
if [[ -z "${SKIP_ROBOT:-}" ]]; then
  install_cyclonedds "$venv" || true
fi
# The GPU and DLA device nodes (/dev/nvmap, /dev/nvhost-*) belong to the video group: a user
# outside it gets "NvRmMemInitNvmap ... Permission denied" from CUDA.
if ! id -nG | tr ' ' '\n' | grep -qx video; then
  echo "setup.sh: $(id -un) is not in the video group (CUDA/DLA device nodes): sudo usermod -aG video $(id -un), then log in again" >&2
fi
"$venv/bin/orin-rl" doctor
