#!/usr/bin/env bash
# Issue 65: train the G1 task a real G1 can feed (Orin-Velocity-Flat-Unitree-G1-Real: no
# base_lin_vel in the actor) on one GPU, in chained device calls of under 10 minutes each; the
# run folder stays in the warm machine's /tmp between calls.
#
# Staging first (GPU.md): `bash ../shared/tools/stage-gpu-set.sh` here, then one copy call per
# part (carry [".gpuset/pK"]: `mkdir -p /tmp/stage && cp .gpuset/pK/part* /tmp/stage/`), the last
# part's call running `bash .gpuset/pN/assemble.sh && bash tools/g1_walk.sh train ...`.
#
#   bash tools/g1_walk.sh probe            start a sleeper in its own session: does a process
#                                          started by one call outlive it? (`probe check` says)
#   bash tools/g1_walk.sh train CALL_S WALL_S
#       The training process (started here, or resumed where the last one ended) runs in its
#       own session with train.max_wall_s=WALL_S (its loop's seconds); this call waits CALL_S
#       seconds or until it ends, then copies to $OUT what the CPU side needs: metrics.jsonl,
#       summary.json (once the run has ended), config.yaml, checkpoint.pt without the worlds'
#       state (the policy, its normaliser and optimiser: < 16 MiB), the log's tail, the GPU's
#       name. Where a process outlives its call, later calls only wait and copy.
#       DIAG=1: issue 66's tools/diagnose_mjlab_unit.py beside it (small worlds), from 150 s.
#
# The code runs from a copy pinned at the first call (/tmp/orin_src), so edits to the tree
# between calls never reach a resumed run. On the CPU afterwards: `orin-rl export RUN`, then
# tools/g1_walk_twin.py on the bundle and tools/train_curves.py for the curves.
set -uo pipefail
export MUJOCO_GL=disable WANDB_MODE=disabled
OUT=${OUT:-/tmp/out}
TASK=Orin-Velocity-Flat-Unitree-G1-Real
RUN=/tmp/work/g1-real
LOG=/tmp/work/train.log
PIDF=/tmp/work/train.pid
mkdir -p "$OUT" /tmp/work

if [ "${1:-}" = probe ]; then
  if [ "${2:-}" = check ]; then
    if kill -0 "$(cat /tmp/probe.pid 2>/dev/null)" 2>/dev/null; then echo "probe: alive"; else echo "probe: gone"; fi
  else
    setsid nohup sleep 1500 > /dev/null 2>&1 < /dev/null &
    echo $! > /tmp/probe.pid; echo "probe started: $(cat /tmp/probe.pid)"
  fi
  exit 0
fi

[ "${1:-}" = train ] || { echo "usage: $0 probe [check] | train CALL_S WALL_S" >&2; exit 2; }
CALL_S=${2:?CALL_S}; WALL_S=${3:?WALL_S}
[ -d /tmp/orin_src ] || { cp -a "$PWD" /tmp/orin_src && rm -rf /tmp/orin_src/.gpuset; }
export PYTHONPATH=/tmp/mjl:/tmp/site:/tmp/orin_src
cd /tmp/orin_src
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
alive() { [ -s "$PIDF" ] && grep -qa orin_rl "/proc/$(cat "$PIDF")/cmdline" 2>/dev/null; }
began=$SECONDS

if alive; then
  echo "training running (pid $(cat "$PIDF")): waiting"
else
  if [ -f "$RUN/checkpoint.pt" ]; then
    args=(train --resume "$RUN" --set "train.max_wall_s=$WALL_S")
  else
    args=(train --env "$TASK" --device cuda --num-envs 4096 --cuda-graphs --seed 1
          --total-steps 1000000000 --out "$RUN" --set "train.max_wall_s=$WALL_S")
  fi
  echo "=== $(date -u +%T) orin-rl ${args[*]}" >> "$LOG"
  rm -f "$PIDF" /tmp/work/train.rc
  # the process writes its own pid (setsid may fork) and, when it ends, its exit status
  setsid nohup bash -c 'echo $$ > "$1"; shift; python3 -m orin_rl.cli "$@"; echo $? > /tmp/work/train.rc' \
    _ "$PIDF" "${args[@]}" >> "$LOG" 2>&1 < /dev/null &
  for _ in 1 2 3 4 5 6 7 8 9 10; do [ -s "$PIDF" ] && break; sleep 0.2; done
  echo "started pid $(cat "$PIDF"): ${args[*]}"
fi

if [ "${DIAG:-0}" = 1 ] && [ "$CALL_S" -gt 250 ]; then
  ( sleep 150; timeout $((CALL_S - 190)) python3 tools/diagnose_mjlab_unit.py \
      --out "$OUT/mjlab_unit_diagnosis.json" > "$OUT/diagnose_unit.log" 2>&1 ) &
  diag=$!
fi

while alive && [ $((SECONDS - began)) -lt "$CALL_S" ]; do sleep 5; done
if alive; then echo "still training after ${CALL_S}s"
else echo "training process ended: exit status $(cat /tmp/work/train.rc 2>/dev/null || echo unknown)"; fi
[ -n "${diag:-}" ] && wait "$diag"  # its own timeout ends it before CALL_S

cp "$RUN/metrics.jsonl" "$RUN/config.yaml" "$OUT/" 2>/dev/null
[ -f "$RUN/summary.json" ] && ! alive && cp "$RUN/summary.json" "$OUT/"
[ -f "$RUN/checkpoint.pt" ] && python3 - "$RUN/checkpoint.pt" "$OUT/checkpoint.pt" <<'PY' || echo "no checkpoint yet"
import os, sys, torch
state = torch.load(sys.argv[1], map_location="cpu", weights_only=True)
state["env_state"], state["obs"] = None, None  # the 4,096 worlds' state: the policy is the rest
torch.save(state, sys.argv[2] + ".part")  # a call cut mid-write sends no truncated file back
os.replace(sys.argv[2] + ".part", sys.argv[2])
print(f"checkpoint: step {state['global_step']}, iteration {state['algo'].get('iteration')}")
PY
grep -a -v "^Warp\|^Module \|^\[INFO\]" "$LOG" | tail -c 6000 > "$OUT/train_log_tail.txt"
tail -n 25 "$OUT/train_log_tail.txt"
[ -f "$OUT/diagnose_unit.log" ] && tail -n 30 "$OUT/diagnose_unit.log"
du -sh "$OUT"/* 2>/dev/null | sort -h | tail -4
exit 0
