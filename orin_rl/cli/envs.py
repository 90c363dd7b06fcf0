"""``orin-rl envs``: the environment ids each backend offers."""

from __future__ import annotations

import argparse

from orin_rl.envs import backends as env_backends


def backend_ids(name: str) -> list[str]:
    """The ids ``name`` offers (importing the backend: mjlab's registry, gymnasium's)."""
    if name == "gym":
        import gymnasium as gym

        return sorted(gym.registry)
    if name == "gpu":
        from orin_rl.envs.gpu import gpu_env_ids

        return gpu_env_ids()
    from orin_rl.envs.mjlab import task_ids

    return task_ids()


def cmd_envs(args: argparse.Namespace) -> int:
    """``orin-rl envs``."""
    names = [args.backend] if args.backend else env_backends.names()
    for name in names:
        description = env_backends.BACKENDS[name][1]
        try:
            ids = backend_ids(name)
        except Exception as exc:  # a backend whose extra is missing says so and the rest list
            if args.backend:
                raise
            print(f"{name}: {description}\n  (not available: {exc})")
            continue
        print(f"{name}: {description} ({len(ids)})")
        for env_id in ids:
            print(f"  {env_id}")
    return 0
