#!/bin/sh
# Replays the recorded tegrastats line at the requested interval (default 1000 ms), like the
# real tool: a light stand-in off a Jetson (ORIN_RL_TEGRASTATS=tools/fake_tegrastats.sh).
interval=1000
if [ "$1" = "--interval" ]; then interval=$2; fi
line=$(cat "$(dirname "$0")/data/tegrastats_agx_orin_jp7.txt")
seconds=$(awk "BEGIN { print $interval / 1000 }")
while true; do
  echo "$line"
  sleep "$seconds"
done
