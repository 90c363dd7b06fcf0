#!/usr/bin/env bash
# Set up orin_rl on a Jetson with JetPack 6 (L4T 36.x): a venv that sees JetPack's TensorRT,
# NVIDIA's CUDA build of PyTorch, the rest from PyPI, then `orin-rl doctor`.
#
#   bash jetson/setup.sh [VENV_DIR]          (default: .venv in the repository)
#   TORCH_WHEEL=/path/or/url.whl bash jetson/setup.sh
#
# TORCH_WHEEL: NVIDIA's torch wheel for your JetPack (see the "PyTorch for Jetson" page of
# NVIDIA's documentation); PyPI's aarch64 torch has no CUDA. Without it, torch is installed
# from PYTORCH_INDEX (default: NVIDIA's Jetson AI Lab index for JetPack 6, CUDA 12.6).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${1:-$repo/.venv}"
index="${PYTORCH_INDEX:-https://pypi.jetson-ai-lab.dev/jp6/cu126}"

if [[ ! -f /etc/nv_tegra_release ]]; then
  echo "setup.sh: this is not a Jetson (no /etc/nv_tegra_release); use 'make demo' instead" >&2
  exit 2
fi
release="$(head -n 1 /etc/nv_tegra_release)"
if [[ "$release" != *"R36"* ]]; then
  echo "setup.sh: written for JetPack 6 (L4T R36); found: $release" >&2
  echo "setup.sh: on JetPack 5 or 7 pick the matching torch wheel with TORCH_WHEEL=..." >&2
fi

if ! python3 -c 'import tensorrt' 2>/dev/null; then
  echo "setup.sh: JetPack's TensorRT is missing: sudo apt install nvidia-jetpack (or python3-libnvinfer)" >&2
  exit 2
fi

# --system-site-packages: TensorRT's Python bindings come from JetPack, not from PyPI.
python3 -m venv --system-site-packages "$venv"
"$venv/bin/python" -m pip install --upgrade pip
if [[ -n "${TORCH_WHEEL:-}" ]]; then
  "$venv/bin/python" -m pip install "$TORCH_WHEEL"
else
  "$venv/bin/python" -m pip install --index-url "$index" torch
fi
"$venv/bin/python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' || {
  echo "setup.sh: the installed torch has no CUDA; set TORCH_WHEEL to NVIDIA's JetPack wheel" >&2
  exit 2
}
# pycuda builds against JetPack's CUDA; jetson-stats gives jtop.
export PATH="/usr/local/cuda/bin:$PATH"
"$venv/bin/python" -m pip install -e "${repo}[export,jetson,cuda]"

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
  else
    echo "setup.sh: GPU physics not installed (Warp/MuJoCo Warp); everything else works: rerun with WARP_WHEEL=... or SKIP_SIM=1" >&2
  fi
fi
"$venv/bin/orin-rl" doctor
