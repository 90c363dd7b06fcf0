"""``orin-rl`` command line: ``parser`` holds every command's flags, one module per command
holds its code, ``app.main`` runs the one asked for."""

from __future__ import annotations

from orin_rl.cli.app import COMMANDS, main
from orin_rl.cli.common import UsageError, _backend_options, env_kwargs_arg
from orin_rl.cli.parser import DESCRIPTION, EPILOG, build_parser
from orin_rl.cli.train import TRAIN_FLAGS, _resume_command, train_config
from orin_rl.config import Config

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
]
