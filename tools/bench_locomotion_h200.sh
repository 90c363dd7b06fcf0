#!/usr/bin/env bash
# The locomotion benchmark on the H200 test machine, in device calls of under ten minutes each
# (the machine keeps /tmp between back-to-back calls: installed wheels, Warp's kernel cache).
#   bash tools/bench_locomotion_h200.sh a   # GPU tests, throughput, HalfCheetah; the Hopper
#                                           # gymnasium preset on the CPU cores beside them
#   bash tools/bench_locomotion_h200.sh b   # Humanoid, Ant, Hopper; gymnasium CPU physics
#                                           # (64 async envs) for Humanoid and Hopper
#   bash tools/bench_locomotion_h200.sh c   # Walker2d
# (the budgets are what the 2026-12-01 run could afford of a 30-minute device session)
# Each step runs only if it fits before the call's deadline (DEADLINE_S, default 540 s), so the
# results are packed into $OUT/<phase>.tgz (a device call returns at most 8 files) in time.
# Merge here with: tar xzf a.tgz; python tools/bench_locomotion.py --sim2sim a;
#                  python tools/bench_locomotion.py --merge a b
set -uo pipefail
phase=${1:?phase a, b or c}
export PYTHONPATH=/tmp/site:$PWD WARP_CACHE_PATH=/tmp/warpcache NUMBA_CACHE_DIR=/tmp/numbacache
export MPLBACKEND=Agg OMP_NUM_THREADS=4 PYTHONUNBUFFERED=1
deadline=${DEADLINE_S:-540}
dest=${OUT:-bench}
out=bench/out/$phase
mkdir -p "$out" "$dest"
bench=(python3 tools/bench_locomotion.py --out "$out" --workdir /tmp/bench_locomotion)
step() {  # step NEED_S CMD...: run CMD if NEED_S seconds are left, cut at the deadline
  local need=$1; shift
  if (( SECONDS + need > deadline )); then echo "skipped (${SECONDS}s): $*" | tee -a "$out/skipped.txt"; return; fi
  timeout $(( deadline - SECONDS )) "$@"
}
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm --format=csv > "$out/nvidia-smi.csv" 2>&1
case $phase in
  a)
    timeout 470 python3 tools/bench_locomotion.py --phase hopper-cpu --out "$out" \
      --workdir /tmp/bench_locomotion > "$out/hopper-cpu.stdout" 2>&1 &
    cpu=$!
    step 200 timeout 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider \
      tests/envs/test_mjwarp_envs.py tests/runners/test_locomotion_training.py \
      tests/envs/test_gpu_envs.py \
      "tests/runners/test_gpu_backend_training.py::test_graph_replay_trains_like_the_eager_loop" \
      > "$out/pytest-gpu.log" 2>&1
    echo "pytest rc $? at ${SECONDS}s" >> "$out/pytest-gpu.log"
    step 40 "${bench[@]}" --phase throughput --tasks Hopper-v5,HalfCheetah-v5,Walker2d-v5,Ant-v5
    step 40 "${bench[@]}" --phase throughput --tasks Humanoid-v5 --num-envs 4096,8192,16384
    step 90 "${bench[@]}" --phase train --tasks HalfCheetah-v5 --budget-s 50 --set train.stop_at_threshold=true
    wait $cpu
    ;;
  b)
    step 250 "${bench[@]}" --phase train --tasks Humanoid-v5 --budget-s 200 --set train.stop_at_threshold=true
    step 115 "${bench[@]}" --phase train --tasks Ant-v5 --budget-s 75 --set train.stop_at_threshold=true
    step 90 "${bench[@]}" --phase train --tasks Hopper-v5 --budget-s 55 --set train.stop_at_threshold=true
    step 80 "${bench[@]}" --phase gym --tasks Humanoid-v5,Hopper-v5 --budget-s 15
    ;;
  c)
    step 125 "${bench[@]}" --phase train --tasks Walker2d-v5 --budget-s 60 --set train.stop_at_threshold=true
    ;;
esac
echo "phase $phase done at ${SECONDS}s" >> "$out/skipped.txt"
# One archive per run folder (checkpoints are several MiB; a returned file is at most 16 MiB)
# and one for the rest.
(cd bench/out && for r in "$phase"/run-*; do
  [ -d "$r" ] && tar czf "$dest/$phase-$(basename "$r").tgz" "$r"
done; tar czf "$dest/$phase.tgz" --exclude="$phase/run-*" "$phase")
cp "$out"/pytest-gpu.log "$dest/" 2>/dev/null
ls -la "$dest"
