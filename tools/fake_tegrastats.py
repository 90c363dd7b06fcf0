#!/usr/bin/env python3
"""Replays recorded tegrastats lines at the requested interval, like the real tool: for
measuring the monitor's overhead and testing it off a Jetson.

    ORIN_RL_TEGRASTATS=tools/fake_tegrastats.py orin-rl train ...
"""

import sys
import time
from pathlib import Path

interval_ms = 1000
if "--interval" in sys.argv:
    interval_ms = int(sys.argv[sys.argv.index("--interval") + 1])
lines = (Path(__file__).parent / "data" / "tegrastats_agx_orin_jp7.txt").read_text().splitlines()
i = 0
while True:
    print(lines[i % len(lines)], flush=True)
    i += 1
    time.sleep(interval_ms / 1000)
