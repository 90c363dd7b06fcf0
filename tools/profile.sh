#!/usr/bin/env bash
# Profile a short GPU training run under Nsight Systems, with orin_rl's NVTX ranges
# (rollout, gae, update; or one range per CUDA-graph replay) on the timeline.
#
#   tools/profile.sh [REPORT_NAME] [extra orin-rl train flags...]
#   e.g. tools/profile.sh cartpole-graphs --cuda-graphs --num-envs 4096
#
# Writes REPORT_NAME.nsys-rep (open it in nsys-ui) and prints the CUDA kernel and NVTX summaries.
# Needs `nsys` (Nsight Systems: JetPack ships it; on a workstation install the CUDA toolkit).
set -euo pipefail

name="${1:-orin-rl-profile}"
shift || true
if ! command -v nsys >/dev/null 2>&1; then
    echo "profile.sh: nsys not found; install Nsight Systems (part of JetPack / the CUDA toolkit)" >&2
    exit 2
fi
out_dir="$(mktemp -d)"
trap 'rm -rf "$out_dir"' EXIT

# --trace: CUDA API + kernels, NVTX ranges, OS runtime; --cuda-graph-trace=node shows the
# kernels inside each replayed graph instead of one opaque block; the capture range limits the
# report to the NVTX-marked training work after start-up.
nsys profile \
    --output "$name" --force-overwrite true \
    --trace cuda,nvtx,osrt \
    --cuda-graph-trace node \
    --sample none --cpuctxsw none \
    python -m orin_rl.cli train --env CartPole-v1 --env-backend gpu --device cuda \
        --total-steps 200000 --no-progress --nvtx --out "$out_dir/run" \
        --set train.eval_every=0 --set train.stop_at_threshold=false "$@"

nsys stats --report cuda_gpu_kern_sum,nvtx_sum --format table "$name.nsys-rep"
