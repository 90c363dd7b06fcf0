"""``orin-rl doctor``: what this machine offers, with next steps."""

from __future__ import annotations

import argparse
import json


def cmd_doctor(args: argparse.Namespace) -> int:
    """``orin-rl doctor``."""
    from orin_rl import doctor

    if args.warm is not None:
        return _warm(args)
    rows = doctor.checks()
    tests = doctor.selftest() if args.selftest else []
    if args.json:
        print(
            json.dumps(
                {"checks": doctor.as_json(rows), "selftest": doctor.as_json(tests)}, indent=2
            )
        )
    else:
        print(doctor.table(rows + tests))
    failed = [t for t in tests if t.status in ("missing", "warn") and t.item != "selftest"]
    return 1 if failed else 0


def _warm(args: argparse.Namespace) -> int:
    """``orin-rl doctor --warm [TASK ...]``: exit 1 where a task failed to warm."""
    from orin_rl import cache_warm

    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    done = cache_warm.warm(args.warm or cache_warm.default_tasks(device), device)
    print(cache_warm.table(done, device))
    return 0 if all(w.ok for w in done) else 1
