#!/usr/bin/env bash
# The locomotion benchmark on the H200 test machine, in device calls of under ten minutes each
# (the machine keeps /tmp between back-to-back calls: installed wheels, Warp's kernel cache).
#   bash tools/bench_locomotion_h200.sh a   # GPU tests, throughput + profile, Hopper, HalfCheetah;
#                                           # the Hopper gymnasium preset on the CPU cores beside
#   bash tools/bench_locomotion_h200.sh b   # Humanoid, Ant; gymnasium CPU physics (64 async envs)
#   bash tools/bench_locomotion_h200.sh c   # Walker2d
# Results land in $OUT/<phase>/ (JSON per task, logs, run folders with checkpoints); merge them
# with: python tools/bench_locomotion.py --sim2sim DIR; python tools/bench_locomotion.py --merge DIR...
# Outer timeouts are a last resort: the benchmark's own subprocess timeouts stop its runs first.
set -uo pipefail
phase=${1:?phase a, b or c}
export PYTHONPATH=/tmp/site:$PWD WARP_CACHE_PATH=/tmp/warpcache NUMBA_CACHE_DIR=/tmp/numbacache
export MPLBACKEND=Agg OMP_NUM_THREADS=4
out=${OUT:-bench/out}/$phase
mkdir -p "$out"
bench=(python3 tools/bench_locomotion.py --out "$out" --workdir /tmp/bench_locomotion)
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv > "$out/nvidia-smi.csv" 2>&1
case $phase in
  a)
    timeout 480 python3 tools/bench_locomotion.py --phase hopper-cpu --out "$out" \
      --workdir /tmp/bench_locomotion > "$out/hopper-cpu.stdout" 2>&1 &
    cpu=$!
    timeout 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider \
      tests/envs/test_mjwarp_envs.py tests/runners/test_locomotion_training.py \
      tests/envs/test_gpu_envs.py \
      "tests/runners/test_gpu_backend_training.py::test_graph_replay_trains_like_the_eager_loop" \
      > "$out/pytest-gpu.log" 2>&1
    echo "pytest rc $?" >> "$out/pytest-gpu.log"
    timeout 90 "${bench[@]}" --phase throughput --tasks Hopper-v5,HalfCheetah-v5,Walker2d-v5,Ant-v5 --profile none
    timeout 90 "${bench[@]}" --phase throughput --tasks Humanoid-v5 --num-envs 4096,8192,16384
    timeout 240 "${bench[@]}" --phase train --tasks Hopper-v5 --budget-s 90 --set train.stop_at_threshold=true
    timeout 200 "${bench[@]}" --phase train --tasks HalfCheetah-v5 --budget-s 55 --set train.stop_at_threshold=true
    wait $cpu
    ;;
  b)
    timeout 420 "${bench[@]}" --phase train --tasks Humanoid-v5 --budget-s 260 --set train.stop_at_threshold=true
    timeout 260 "${bench[@]}" --phase train --tasks Ant-v5 --budget-s 110 --set train.stop_at_threshold=true
    timeout 200 "${bench[@]}" --phase gym --tasks Humanoid-v5,Hopper-v5 --budget-s 40
    ;;
  c)
    timeout 200 "${bench[@]}" --phase train --tasks Walker2d-v5 --budget-s 60 --set train.stop_at_threshold=true
    ;;
esac
ls -la "$out"
