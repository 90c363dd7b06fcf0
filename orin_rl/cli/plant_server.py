"""``orin-rl plant-server``: a gymnasium env served as a UDP plant for ``train --online``."""

from __future__ import annotations

import argparse


def cmd_plant_server(args: argparse.Namespace) -> int:
    """``orin-rl plant-server``."""
    from orin_rl.runners.plant_udp import serve

    print(f"plant server: {args.env} on udp://{args.host}:{args.port} (Ctrl-C stops it)")
    try:
        serve(args.env, args.host, args.port, args.max_episode_steps)
    except KeyboardInterrupt:
        return 130
    return 0
