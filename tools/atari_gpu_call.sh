#!/usr/bin/env bash
# The GPU call of issue 69 item 4, after tools/stage_atari_gpu.sh's copy calls: installs the
# Atari set, runs the gpu and envpool tests, a smoke run of each trainer, the inference tables
# (MLP and the seed CNN, ONNX Runtime's CUDA EP included), then launches tools/bench_atari.py's
# runs (they outlive this call) and waits for them up to WAIT_S.
#   bash tools/atari_gpu_call.sh WALL_S WAIT_S      (results under $OUT)
set -uo pipefail
wall=${1:-960}; wait_s=${2:-300}; root=$PWD
bash .gpuset-atari/p7/assemble.sh || exit 1
export PYTHONPATH=/tmp/site:$root
# envpool imports every family's registration; all but Atari's load libEGL.so.1, which the GPU
# machine lacks (seen 2026-12-06): keep Atari's only.
printf 'import envpool.atari.registration  # noqa: F401 (Atari only: tools/atari_gpu_call.sh)\n' \
  > /tmp/site/envpool/entry.py
python3 -c "import envpool, tyro, tensorboard, numpy, torch; print('envpool', envpool.__version__, 'numpy', numpy.__version__, torch.cuda.get_device_name(0))" || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt"
timeout 200 python3 -m pytest -q -p no:randomly -p no:cacheprovider tests/runners/test_graphed_act.py \
  tests/envs/test_envpool_env.py tests/models/test_cnn.py > "$OUT/gpu_tests.log" 2>&1; tail -4 "$OUT/gpu_tests.log"
timeout 90 python3 -m orin_rl.cli train --env Pong-v5 --env-backend envpool --device cuda --cuda-graphs \
  --total-steps 8192 --out /tmp/smoke --set train.eval_episodes=2 --set train.tensorboard=false > "$OUT/smoke_ours.log" 2>&1
ours=$?; tail -6 "$OUT/smoke_ours.log"
(cd /tmp && timeout 60 python3 -u "$root/tools/peers/cleanrl_ppo_atari_envpool.py" --total-timesteps 8192 > "$OUT/smoke_cleanrl.log" 2>&1)
peer=$?; tail -3 "$OUT/smoke_cleanrl.log"; echo "smoke rc ours=$ours cleanrl=$peer"
if [ $ours -eq 0 ] && [ $peer -eq 0 ]; then
  python3 tools/bench_atari.py launch --out /tmp/atari --wall "$wall" --seeds 1,2
fi
PYTHONPATH=/tmp/ortgpu:$PYTHONPATH timeout 150 python3 tools/bench_infer.py --name infer_h100_cnn --out "$OUT" \
  --iters 3000 --tables-only > "$OUT/infer.log" 2>&1; tail -25 "$OUT/infer.log"
[ -f /tmp/atari/launch.json ] && python3 tools/bench_atari.py wait --out /tmp/atari --until "$wait_s"
mkdir -p "$OUT/atari" && cp /tmp/atari/*.log /tmp/atari/launch.json "$OUT/atari/" 2>/dev/null; true
