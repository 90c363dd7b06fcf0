"""``python -m orin_rl.cli``: the ``orin-rl`` command (torchrun starts its ranks this way)."""

from __future__ import annotations

import sys

from orin_rl.cli.app import main

if __name__ == "__main__":
    sys.exit(main())
