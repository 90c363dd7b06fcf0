"""``orin-rl doctor``: what this machine offers, with next steps."""

from __future__ import annotations

import argparse
import json


def cmd_doctor(args: argparse.Namespace) -> int:
    """``orin-rl doctor``."""
    from orin_rl import doctor

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
