"""Shared by the ``orin-rl`` commands: UsageError, ``--env-kwargs``, the run/bench backend flags."""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, TextIO

from orin_rl.errors import OrinError


class UsageError(OrinError, ValueError):
    """Bad command-line input; reported as one line with exit code 2."""


def env_kwargs_arg(raw: str | None) -> dict[str, Any] | None:
    """``--env-kwargs``: a JSON object, or one line saying what was wrong."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--env-kwargs is not valid JSON ({exc.msg}): {raw!r}") from None
    if not isinstance(value, dict):
        raise UsageError(f"--env-kwargs takes a JSON object like '{{\"size\": 8}}', got {raw!r}")
    return value


def _backend_options(args: argparse.Namespace, batch: int) -> dict[str, Any]:
    """``runtime.load`` options from the ``run`` / ``bench`` flags."""
    options: dict[str, Any] = {"batch": batch, "cuda_graph": args.cuda_graph}
    options["zero_copy"] = {"auto": None, "on": True, "off": False}[args.zero_copy]
    if args.providers:
        options["providers"] = [p.strip() for p in args.providers.split(",") if p.strip()]
    if args.ort_recipe:
        from orin_rl.export.recipes import ep_settings, load_recipe

        options["ort_settings"] = ep_settings(load_recipe(args.ort_recipe))
    return options


def output_file(path: Any, flag: str) -> None:
    """Make ``path``'s folder and check it can be written, before the work that ends in it
    (a typo in ``--report out/x.json`` must not cost the whole run)."""
    if path is None:
        return
    from pathlib import Path

    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{flag} {path}: is a folder; name a file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{flag} {path}: cannot make its folder ({exc.strerror})") from None
    if not os.access(path.parent, os.W_OK):
        raise UsageError(f"{flag} {path}: its folder is not writable")


def plural(count: int, word: str) -> str:
    """``1 episode``, ``3 episodes`` (thousands separated)."""
    return f"{count:,} {word}{'' if count == 1 else 's'}"


class EpisodeProgress:
    """``evaluate_policy``'s ``on_episode`` shown on ``stream``: rewritten in place on a
    terminal; piped, a plain line at most every ``every_s`` seconds (quick evaluations print
    none) and after the last episode where any came before."""

    def __init__(self, stream: TextIO, every_s: float = 5.0):
        self.stream, self.every_s = stream, every_s
        self.tty = stream.isatty()
        self.last = time.monotonic()
        self.printed = False

    def __call__(self, done: int, total: int, ret: float, length: int) -> None:
        """One episode finished."""
        text = f"eval         episode {done}/{total}: return {ret:.1f}, {plural(length, 'step')}"
        if self.tty:
            end = "\n" if done == total else ""
            self.stream.write(f"\r{text}\033[K{end}")
        elif time.monotonic() - self.last >= self.every_s or (done == total and self.printed):
            self.last = time.monotonic()
            self.printed = True
            self.stream.write(text + "\n")
        self.stream.flush()
