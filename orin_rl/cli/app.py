"""``main``: parse the command line (``cli/parser.py``) and run the command's module."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from orin_rl.cli.parser import build_parser
from orin_rl.errors import OrinError

Command = Callable[[argparse.Namespace], int]


def _demo() -> Command:
    from orin_rl.cli.demo import cmd_demo

    return cmd_demo


def _doctor() -> Command:
    from orin_rl.cli.doctor import cmd_doctor

    return cmd_doctor


def _train() -> Command:
    from orin_rl.cli.train import cmd_train

    return cmd_train


def _export() -> Command:
    from orin_rl.cli.export import cmd_export

    return cmd_export


def _build() -> Command:
    from orin_rl.cli.build import cmd_build

    return cmd_build


def _run() -> Command:
    from orin_rl.cli.run import cmd_run

    return cmd_run


def _eval() -> Command:
    from orin_rl.cli.eval import cmd_eval

    return cmd_eval


def _bench() -> Command:
    from orin_rl.cli.bench import cmd_bench

    return cmd_bench


def _plant_server() -> Command:
    from orin_rl.cli.plant_server import cmd_plant_server

    return cmd_plant_server


def _sim_robot() -> Command:
    from orin_rl.cli.sim_robot import cmd_sim_robot

    return cmd_sim_robot


def _envs() -> Command:
    from orin_rl.cli.envs import cmd_envs

    return cmd_envs


COMMANDS: dict[str, Callable[[], Command]] = {
    "demo": _demo,
    "doctor": _doctor,
    "train": _train,
    "export": _export,
    "build": _build,
    "run": _run,
    "eval": _eval,
    "bench": _bench,
    "plant-server": _plant_server,
    "sim-robot": _sim_robot,
    "envs": _envs,
}
"""command -> the loader that imports the command's module and returns the function that runs
it: called when the command runs (only that one: ``orin-rl run`` on the robot loads no training
code). The loaders import with plain ``from ... import`` statements, which the layout test
(``tests/test_layout.py``) reads."""


def command(name: str) -> Command:
    """The function that runs command ``name`` (its module is imported now)."""
    return COMMANDS[name]()


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
