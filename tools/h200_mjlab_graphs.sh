#!/usr/bin/env bash
# One H200 call after staging (tools/h200_mjlab.sh's header): the gpu tests of the graphed mjlab
# step, then the step benchmark (mjlab's env.step, ours eager, ours as CUDA graphs) into $OUT.
#   bash tools/h200_mjlab_graphs.sh [TASKS] [TEST_FILTER]
set -uo pipefail
export PYTHONPATH=/tmp/mjl:/tmp/site:$PWD MUJOCO_GL=disable WANDB_MODE=disabled
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
tasks=${1:-Mjlab-Velocity-Flat-Unitree-Go1}
filter=${2:-graphed}
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/envs/test_mjlab.py -k "$filter" \
  > "$OUT/graph_tests.log" 2>&1
rc=$?; echo "$rc" > /tmp/graph_test_rc  # tools/h200_mjlab.sh trains eagerly if this failed
grep -v "^\[INFO\]\|^Module \|Warning\|warnings.warn" "$OUT/graph_tests.log" | tail -30
if [ "$rc" != 0 ]; then  # where the graphed step departs: first step and quantity
  timeout 240 python3 tools/diagnose_mjlab_graphs.py --task "${tasks%%,*}" \
    --out "$OUT/mjlab_graphs_diagnosis.json" 2>&1 | grep -v "^\[INFO\]\|Warning\|warn" | tail -20
fi
timeout 280 python3 tools/bench_mjlab_step.py --tasks "$tasks" --steps 70 --warmup 15 --profile-steps 5 \
  --out "$OUT/mjlab_step_h200" 2>&1 | grep -v "^\[INFO\]\|^Module \|Warning\|warnings.warn" | tail -20
