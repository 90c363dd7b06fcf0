"""argparse pieces the ``orin-rl`` parser is built from: one-line errors, defaults in help,
value types that refuse nonsense before any work (``bench --batch 0``)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import NoReturn


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line with exit code 2, like orin-rl's others."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: MESSAGE`` (no usage block) and exit with 2."""
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _DefaultsHelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help unless the text already speaks of its
    default; None, False and [] mean "not given", which the text itself describes."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        unset = default is None or isinstance(default, bool) or default == []
        if unset or default is argparse.SUPPRESS or not action.option_strings or "default" in text:
            return text
        return f"{text} (default: %(default)s)"


def _int_type(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type``: an integer within [low, high] (no upper bound without ``high``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f">= {low}" if high is None else f"within [{low}, {high}]"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {value}")
        return value

    return parse


def _float_type(low: float, above: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite number >= ``low`` (> ``low`` with ``above``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value < low or (above and value == low):
            bound = f" {'>' if above else '>='} {low:g}" if math.isfinite(low) else ""
            raise argparse.ArgumentTypeError(f"must be a finite number{bound}, got {text}")
        return value

    return parse


_POSITIVE_INT = _int_type(1)
_NON_NEGATIVE_INT = _int_type(0)
_POSITIVE = _float_type(0.0, above=True)
_NON_NEGATIVE = _float_type(0.0)
_FINITE = _float_type(-math.inf)
"""Any finite number: for flags whose command checks the range itself (``run --rate``)."""


def _batch_sizes(text: str) -> list[int]:
    """``bench --batch``: a comma list of batch sizes, each >= 1."""
    return [_POSITIVE_INT(b) for b in text.split(",")]


def _batch_or_dynamic(text: str) -> int | str:
    """``export --batch``: ``dynamic`` or a fixed batch size >= 1."""
    if text == "dynamic":
        return text
    try:
        return _POSITIVE_INT(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected 'dynamic' or an integer >= 1, got {text!r}"
        ) from None


def _train_default(key: str, preset: bool = False) -> str:
    """``(default: ...)`` of a train flag: config.py's value of ``key``, with ``preset``
    after the environment's preset (orin_rl/config/presets.py), which may set it first."""
    from orin_rl.config import Config  # here: only a parser with train's flags needs it

    section, _, name = key.partition(".")
    value = getattr(getattr(Config(), section), name)
    shown = f"{value:,}" if type(value) is int else value
    return f"(default: the env's preset, else {shown})" if preset else f"(default: {shown})"
