"""``orin-rl`` command line: ``parser`` holds every command's flags, one module per command
holds its code, ``app.main`` runs the one asked for.

Only ``main`` is imported with the package: a command's module (and what it needs: the
training config, yaml, ...) loads when that command runs, so ``orin-rl run`` on the robot
carries none of the others (``tools/bench_deploy_rss.py`` measures it). The other names load on
first use."""

from __future__ import annotations

from orin_rl import lazy_attributes
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


__getattr__ = lazy_attributes("orin_rl.cli", _LAZY)
