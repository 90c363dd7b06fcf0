"""``python -m orin_rl.train ARGS`` is ``orin-rl train ARGS``: the module torchrun launches.

    torchrun --standalone --nproc-per-node 2 -m orin_rl.train --env CartPole-v1 --device cuda \\
        --env-backend gpu --out runs/ddp
"""

from __future__ import annotations

import sys

from orin_rl.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
