#!/usr/bin/env bash
# The H200 calls for the robot path (issue "The last mile"), after staging (GPU.md: the sim
# wheels with stage-wheels.sh and .whl/ with cyclonedds, then ../shared/peers/mjlab/stage.sh).
#   bash tools/h200_robot.sh train     gpu tests of the capture path; G1 trained by orin_rl and
#                                       by mjlab's own runner at once (~7 min), into /tmp/work
#   bash tools/h200_robot.sh sim2sim   both policies exported, each walked on the DDS twin as an
#                                       operator runs it, and in its task: tools/g1_walk_twin.py
set -uo pipefail
export PYTHONPATH=/tmp/mjl:/tmp/site:$PWD MUJOCO_GL=disable WANDB_MODE=disabled
OUT=${OUT:-/tmp/out}
WALL=${WALL:-380}
task=Mjlab-Velocity-Flat-Unitree-G1
mkdir -p "$OUT" /tmp/work/mjlab-g1
if [ "$1" = train ]; then
  python3 -m orin_rl.cli -q train --no-progress --env $task --device cuda --num-envs 4096 \
    --cuda-graphs --seed 1 --total-steps 400000000 --out /tmp/work/ours-g1 --set ppo.num_steps=24 \
    --set ppo.rsl_rl=true --set train.max_wall_s="$WALL" --set train.eval_episodes=8 \
    > "$OUT/train_ours_g1.log" 2>&1 &
  ours=$!
  (cd /tmp/work/mjlab-g1 && PYTHONPATH=/tmp/mjl:/tmp/wp timeout -s INT "$((WALL + 30))" \
    python3 -m mjlab.scripts.train $task --env.scene.num-envs 4096 --agent.max-iterations 2000 \
    --agent.seed 1 --agent.logger tensorboard > "$OUT/train_mjlab_g1.log" 2>&1) &
  peer=$!
  python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_capture.py 2>&1 | tail -6 | tee "$OUT/gpu_tests.log"
  wait $ours; wait $peer
  tail -c 1500 "$OUT/train_ours_g1.log"; grep -a "Mean reward\|Learning iteration" "$OUT/train_mjlab_g1.log" | tail -4
  cp /tmp/work/ours-g1/summary.json "$OUT/ours_g1_summary.json" 2>/dev/null
  ls /tmp/work/mjlab-g1/logs/rsl_rl/*/*/ 2>/dev/null | tail -5
  exit 0
fi
if [ "$1" = sim2sim ]; then
  onnx=$(ls -t /tmp/work/mjlab-g1/logs/rsl_rl/*/*/*.onnx 2>/dev/null | head -1)
  python3 -m orin_rl.cli -q export /tmp/work/ours-g1 2>&1 | tail -2
  [ -n "$onnx" ] && python3 -m orin_rl.cli -q export "$onnx" --env $task --out /tmp/work/mjlab-bundle 2>&1 | tail -2
  python3 tools/g1_walk_twin.py /tmp/work/ours-g1/bundle --train-summary /tmp/work/ours-g1/summary.json \
    --forward-ticks "${TICKS:-3000}" --task-device cuda --domain 7 --out "$OUT/g1_walk_ours_h200" \
    2>&1 | grep -v "^Warp\|Warning" | tail -24
  [ -n "$onnx" ] && python3 tools/g1_walk_twin.py /tmp/work/mjlab-bundle --gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
    --forward-ticks "${TICKS:-3000}" --task-device cuda --domain 8 --out "$OUT/g1_walk_mjlab_h200" \
    2>&1 | grep -v "^Warp\|Warning" | tail -24
  exit 0
fi
echo "usage: $0 train|sim2sim" >&2; exit 2
