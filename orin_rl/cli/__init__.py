"""``orin-rl`` command line: ``parser`` holds every command's flags, one module per command
holds its code, ``app.main`` runs the one asked for.

Only ``main`` is imported with the package: a command's module (and what it needs: the
training config, yaml, ...) loads when that command runs, so ``orin-rl run`` on the robot
carries none of the others (``tools/bench_deploy_rss.py`` measures it). The other names load on
first use."""

from __future__ import annotations

from typing import Any

from orin_rl.cli.app import main

_LAZY = {
    "COMMANDS": "orin_rl.cli.app",
    "DESCRIPTION": "orin_rl.cli.parser",
    "EPILOG": "orin_rl.cli.parser",
    "build_parser": "orin_rl.cli.parser",
    "UsageError": "orin_rl.cli.common",
    "_backend_options": "orin_rl.cli.common",
    "env_kwargs_arg": "orin_rl.cli.common",
    "TRAIN_FLAGS": "orin_rl.cli.train",
    "_resume_command": "orin_rl.cli.train",
    "train_config": "orin_rl.cli.train",
    "Config": "orin_rl.config",
}

__all__ = ["main", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'orin_rl.cli' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
