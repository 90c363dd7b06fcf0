#!/usr/bin/env bash
# Issue 70's GPU half, one device call: the GPU tests of the paths the refactor moved (the fused
# CartPole kernels, the graphed act, the GPU backend), then the fused run before and after on
# the same seed, each twice (an empty kernel cache, then the one it filled), and the comparison.
#   device run (carry .whl .before): bash tools/refactor_gpu_call.sh
# .before/ holds the package of the commit before (git archive BEFORE orin_rl pyproject.toml).
set -u
out=${OUT:-/tmp/out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/gpu.txt"
timeout 300 python3 -m pytest -q -p no:cacheprovider -p no:randomly \
  tests/algorithms/test_fused.py tests/algorithms/test_fused_ptx.py \
  tests/runners/test_fused_training.py tests/runners/test_graphed_act.py \
  tests/runners/test_gpu_backend_training.py tests/buffers > "$out/gpu_tests.log" 2>&1
echo "pytest rc $? at ${SECONDS}s" >> "$out/gpu_tests.log"
tail -3 "$out/gpu_tests.log"
for side in before after; do
  src=()
  [ "$side" = before ] && src=(--source .before)
  for pass in cold warm; do
    timeout 150 python3 tools/refactor_curves.py run --device cuda "${src[@]}" \
      --workdir "/tmp/curves-$side" --out "$out/curves_${side}_$pass.json"
  done
done
python3 tools/refactor_curves.py compare "$out/curves_before_warm.json" \
  "$out/curves_after_warm.json" --write "$out/refactor_curves_gpu" --device cuda \
  --machine "$(head -1 "$out/gpu.txt")"
echo "done at ${SECONDS}s"
