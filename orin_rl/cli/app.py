"""``main``: parse the command line (``cli/parser.py``) and run the command's module."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from orin_rl.cli import bench, build, demo, doctor, export, plant_server, sim_robot, train
from orin_rl.cli import envs as envs_cmd
from orin_rl.cli import eval as eval_cmd
from orin_rl.cli import run as run_cmd
from orin_rl.cli.parser import build_parser
from orin_rl.cli.train import _resume_command
from orin_rl.errors import OrinError

COMMANDS = {
    "demo": demo.cmd_demo,
    "doctor": doctor.cmd_doctor,
    "train": train.cmd_train,
    "export": export.cmd_export,
    "build": build.cmd_build,
    "run": run_cmd.cmd_run,
    "eval": eval_cmd.cmd_eval,
    "bench": bench.cmd_bench,
    "plant-server": plant_server.cmd_plant_server,
    "sim-robot": sim_robot.cmd_sim_robot,
    "envs": envs_cmd.cmd_envs,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point: run a subcommand; known errors print one line and exit with 2."""
    args = build_parser().parse_args(argv)
    args.raw_argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.verbose:  # orin_rl's debug lines; known third-party noise shown (envs/mjlab_noise)
        logging.getLogger("orin_rl").setLevel(logging.DEBUG)
    try:
        return COMMANDS[args.command](args)
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
            resume = f"; the last checkpoint continues with: {_resume_command(run)}"
        print(f"orin-rl {args.command}: interrupted{resume}", file=sys.stderr)
        return 130
