"""What the command flag modules share (``cli/parser.py`` and ``cli/parser_train.py``): on/off
flags and the help of ``--env-kwargs``. Torch-free, like all of ``orin_rl.cli``."""

from __future__ import annotations

import argparse
from typing import Any

ENV_KWARGS_HELP = (
    "JSON object of keyword arguments for the environment's constructor, e.g. "
    """'{"size": 8}' (config env.kwargs)"""
)


def _on_off_flags(p: argparse.ArgumentParser, helps: dict[str, str], **kwargs: Any) -> None:
    """Add a store_true flag for each ``{flag: help}`` (``default=None``: unset unless given)."""
    for flag, help_line in helps.items():
        p.add_argument(flag, action="store_true", help=help_line, **kwargs)
