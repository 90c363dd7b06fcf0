"""``orin-rl`` command line: ``parser`` holds every command's flags, one module per command
holds its code, ``app.main`` runs the one asked for.

Only ``main`` is imported with the package: a command's module (and what it needs: the
training config, yaml, ...) loads when that command runs, so ``orin-rl run`` on the robot
carries none of the others (``tools/bench_deploy_rss.py`` measures it). The other names load on
first use."""

from __future__ import annotations

from typing import Any

from orin_rl.cli.app import main

__all__ = [
    "COMMANDS",
    "DESCRIPTION",
    "EPILOG",
    "TRAIN_FLAGS",
    "Config",
    "UsageError",
    "_backend_options",
    "_resume_command",
    "build_parser",
    "env_kwargs_arg",
    "main",
    "train_config",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    """The other names, each imported on first use with a plain ``from ... import`` (which the
    layout test reads)."""
    if name == "COMMANDS":
        from orin_rl.cli import app

        return app.COMMANDS
    if name in ("DESCRIPTION", "EPILOG", "build_parser"):
        from orin_rl.cli import parser

        return getattr(parser, name)
    if name in ("UsageError", "_backend_options", "env_kwargs_arg"):
        from orin_rl.cli import common

        return getattr(common, name)
    if name in ("TRAIN_FLAGS", "_resume_command", "train_config"):
        from orin_rl.cli import train

        return getattr(train, name)
    if name == "Config":
        from orin_rl.config import Config

        return Config
    raise AttributeError(f"module 'orin_rl.cli' has no attribute {name!r}")
