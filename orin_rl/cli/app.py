"""``main``: parse the command line (``cli/parser.py``) and run the command's module."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from orin_rl.cli.parser import build_parser
from orin_rl.errors import OrinError

COMMANDS = {
    "demo": "orin_rl.cli.demo:cmd_demo",
    "doctor": "orin_rl.cli.doctor:cmd_doctor",
    "train": "orin_rl.cli.train:cmd_train",
    "export": "orin_rl.cli.export:cmd_export",
    "build": "orin_rl.cli.build:cmd_build",
    "run": "orin_rl.cli.run:cmd_run",
    "eval": "orin_rl.cli.eval:cmd_eval",
    "bench": "orin_rl.cli.bench:cmd_bench",
    "plant-server": "orin_rl.cli.plant_server:cmd_plant_server",
    "sim-robot": "orin_rl.cli.sim_robot:cmd_sim_robot",
    "envs": "orin_rl.cli.envs:cmd_envs",
}
"""command -> ``module:function`` that runs it, imported when it runs (only that one: ``orin-rl
run`` on the robot loads no training code)."""


def command(name: str) -> Callable:
    """The function that runs command ``name``."""
    module, _, function = COMMANDS[name].partition(":")
    return getattr(importlib.import_module(module), function)


def command_of(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word after the global flags, which take no
    value), or None where it names none."""
    word = next((a for a in argv if not a.startswith("-")), None)
    return word if word in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    """Entry point: run a subcommand; known errors print one line and exit with 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(only=command_of(argv)).parse_args(argv)
    args.raw_argv = argv
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.verbose:  # orin_rl's debug lines; known third-party noise shown (envs/mjlab_noise)
        logging.getLogger("orin_rl").setLevel(logging.DEBUG)
    try:
        return command(args.command)(args)
    except (OrinError, OSError) as exc:  # OSError: full disk, permissions, missing files
        if args.debug:
            raise
        print(f"orin-rl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C outside training (which handles its own signals)
        if args.debug:
            raise
        run = getattr(args, "run_folder", None)
        resume = ""
        if run is not None and (Path(run) / "checkpoint.pt").is_file():  # a second Ctrl-C
            from orin_rl.cli.train import _resume_command

            resume = f"; the last checkpoint continues with: {_resume_command(run)}"
        print(f"orin-rl {args.command}: interrupted{resume}", file=sys.stderr)
        return 130
