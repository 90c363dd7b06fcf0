#!/usr/bin/env bash
# Issue 69 item 4's camera task on the GPU: orin_rl's train and mjlab's own train of
# Mjlab-Lift-Cube-Yam-Depth side by side (same worlds, both from a cold Warp cache), each
# stopped at WALL_S; logs, metrics and mjlab's TensorBoard events under $OUT/camera.
# After ../shared/tools/stage-gpu-set.sh's four copy calls:
#   bash tools/camera_gpu_call.sh [WALL_S] [NUM_ENVS]      (carry [".gpuset/p4"])
set -uo pipefail
wall=${1:-240}; n=${2:-1024}; root=$PWD; task=Mjlab-Lift-Cube-Yam-Depth
bash .gpuset/p4/assemble.sh || exit 1
mkdir -p "$OUT/camera" /tmp/cam_mjlab
nvidia-smi --query-gpu=name --format=csv,noheader > "$OUT/camera/gpu.txt"
(cd /tmp/cam_mjlab && PYTHONPATH=/tmp/mjl:/tmp/wp timeout --signal=INT "$wall" python3 -m mjlab.scripts.train "$task" \
  --env.scene.num-envs "$n" --agent.max-iterations 3000 --agent.seed 1 --agent.logger tensorboard \
  > "$OUT/camera/mjlab.log" 2>&1) &
PYTHONPATH=/tmp/mjl:/tmp/site:$root python3 -m orin_rl.cli train --no-progress --env "$task" --device cuda \
  --num-envs "$n" --seed 1 --out /tmp/cam_ours --set "train.max_wall_s=$((wall - 100))" \
  --set train.eval_episodes=16 --set train.tensorboard=false > "$OUT/camera/ours.log" 2>&1 &
wait
cp /tmp/cam_ours/metrics.jsonl /tmp/cam_ours/summary.json "$OUT/camera/" 2>/dev/null
find /tmp/cam_mjlab -name 'events.out.tfevents*' -exec cp {} "$OUT/camera/" \;
tail -5 "$OUT/camera/ours.log"; tail -5 "$OUT/camera/mjlab.log"; ls "$OUT/camera"
