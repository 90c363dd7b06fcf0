#!/usr/bin/env bash
# The H200 calls for mjlab's robot tasks (issue "Robot tasks"), after staging (GPU.md: the sim
# wheels with stage-wheels.sh, then ../shared/peers/mjlab/stage.sh; /tmp/site and /tmp/mjl).
#   bash tools/h200_mjlab.sh tests    the gpu tests of the runners, envs and algorithms
#   bash tools/h200_mjlab.sh step [TASKS]   the env step alone (tools/bench_mjlab_step.py)
#   bash tools/h200_mjlab.sh unit [TASKS]   issue 53: the one-unit step (ORIN_RL_MJLAB_STEP=unit)
#       against the segmented one: its gpu tests against mjlab's step (masked and eager resets),
#       then the step alone, masked segments beside the one unit, in one process
#   bash tools/h200_mjlab.sh TASK N          bench_mjlab on TASK (N iterations; runs in /tmp/work)
#   bash tools/h200_mjlab.sh TASK N deploy   export that run, run it 3,000 ticks at 50 Hz
#   bash tools/h200_mjlab.sh suite TASK SEEDS N   issue 59's rows: ours and mjlab's train on TASK,
#       4,096 envs, N iterations, one row per seed (SEEDS: 1,2) added to the canonical
#       docs/benchmarks/mjlab_h200.json (carried in the tree, written to $OUT; FRESH=1 starts
#       it empty); one call per task keeps each under 10 minutes: Flat Go1, Flat G1, Rough Go1
#       (Rough cold-starts ~5 min of Warp compiles: keep the machine warm between calls)
# orin_rl runs with mjlab's mujoco 3.11 (/tmp/mjl) in front of /tmp/site (numpy 2.4, warp);
# mjlab's own train gets PYTHONPATH=/tmp/mjl:/tmp/wp, as its README says.
set -uo pipefail
export PYTHONPATH=/tmp/mjl:/tmp/site:$PWD MUJOCO_GL=disable WANDB_MODE=disabled
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ "$1" = tests ]; then
  python3 -m pytest -q -m gpu -p no:cacheprovider --durations=15 tests/runners tests/envs/test_mjlab.py \
    2>&1 | tail -45
  exit 0
fi
if [ "$1" = step ]; then  # the env step alone: mjlab's, ours eager, ours as CUDA graphs
  python3 tools/bench_mjlab_step.py --tasks "${2:-Mjlab-Velocity-Flat-Unitree-Go1,Mjlab-Velocity-Flat-Unitree-G1}" \
    --out "$OUT/mjlab_step_h200" 2>&1 | grep -v "^\[INFO\]\|^Module " | tail -25
  exit 0
fi
if [ "$1" = unit ]; then
  python3 -m pytest -q -m gpu -p no:cacheprovider tests/envs/test_mjlab_masked.py tests/envs/test_mjlab.py \
    -k "same_eager_or_as_graphs or graphed_step_is_mjlabs_step" 2>&1 | tail -25
  python3 tools/bench_mjlab_step.py --modes masked,unit \
    --tasks "${2:-Mjlab-Velocity-Flat-Unitree-Go1,Mjlab-Velocity-Flat-Unitree-G1}" \
    --out "$OUT/mjlab_step_unit_h200" 2>&1 | grep -v "^\[INFO\]\|^Module " | tail -25
  exit 0
fi
if [ "$1" = suite ]; then
  [ -f "$OUT/mjlab_h200.json" ] || [ "${FRESH:-0}" = 1 ] || cp docs/benchmarks/mjlab_h200.json "$OUT/"
  python3 tools/bench_mjlab.py --tasks "$2" --seeds "${3:-1,2}" --iterations "${4:-150}" \
    --peer-pythonpath /tmp/mjl:/tmp/wp --work "/tmp/work/suite-$(echo "$2" | tr '[:upper:]' '[:lower:]')" \
    --out "$OUT/mjlab_h200" --append 2>&1 | tail -20
  exit 0
fi
task=$1; iters=${2:-150}; slug=$(echo "$task" | awk -F- '{print tolower($NF)}')
run=/tmp/work/ours-$slug
if [ "${3:-bench}" = bench ]; then
  eager=""  # the graphed step's gpu test failed in this machine's session: train eagerly
  [ "$(cat /tmp/graph_test_rc 2>/dev/null || echo 0)" != 0 ] && eager=--ours-eager && echo "ours: eager"
  python3 tools/bench_mjlab.py --tasks "$task" --iterations "$iters" --peer-pythonpath /tmp/mjl:/tmp/wp \
    --work /tmp/work --out "$OUT/mjlab_h200_$slug" $eager 2>&1 | tail -12
  cp /tmp/work/*.log "$run/summary.json" "$run/metrics.jsonl" "$OUT/" 2>/dev/null
  tail -c 1200 "/tmp/work/ours-$slug.log"
else  # deploy: export the run, then 3,000 ticks at 50 Hz on ONNX Runtime, plant on CUDA and CPU
  # the CUDA plant's step as graphs when the graphed step's gpu test passed on this machine
  [ "$(cat /tmp/graph_test_rc 2>/dev/null || echo 1)" = 0 ] || export ORIN_RL_MJLAB_GRAPHS=0
  python3 -m orin_rl.cli -q export "$run" 2>&1 | tail -3
  for plant in ${PLANTS:-cuda cpu}; do
    timeout 200 python3 -m orin_rl.cli run --model "$run/bundle" --backend onnxruntime --rate 50 \
      --steps 3000 --plant-device "$plant" --report "$OUT/run_${slug}_$plant.json" 2>&1 | tail -6
  done
fi
