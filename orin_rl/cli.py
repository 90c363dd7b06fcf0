"""``orin-rl`` command line: parse, build the config, call a stage function. Nothing more."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from orin_rl import __version__
from orin_rl import config as config_mod
from orin_rl.config import Config, ConfigError
from orin_rl.errors import OrinError

log = logging.getLogger("orin_rl")

# Flag → config key for the common fields; everything else goes through --set.
TRAIN_FLAGS = {
    "env": "env.env_id",
    "num_envs": "env.num_envs",
    "vectorization": "env.vectorization",
    "total_steps": "train.total_steps",
    "device": "train.device",
    "seed": "train.seed",
    "buffer_placement": "buffer.placement",
}


class UsageError(OrinError, ValueError):
    """Bad command-line input; reported as one line with exit code 2."""


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a PPO policy into a run folder",
        description="Train PPO. Precedence: defaults < env preset < --config < flags < --set.",
    )
    p.add_argument("--env", help="gymnasium id, e.g. CartPole-v1 (default: CartPole-v1)")
    p.add_argument("--num-envs", type=int, help="parallel environments")
    p.add_argument("--vectorization", choices=["sync", "async"], help="gymnasium vectorisation")
    p.add_argument("--total-steps", type=int, help="environment steps to train for")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="learner device")
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument(
        "--buffer-placement",
        choices=["auto", "host", "device", "pinned", "managed"],
        help="rollout buffer memory",
    )
    p.add_argument("--out", type=Path, help="run folder (default: runs/ENV-TIMESTAMP)")
    p.add_argument("--config", type=Path, help="YAML config file")
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue the run in DIR")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override any config field, e.g. --set ppo.learning_rate=3e-4 (repeatable)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--print-config", action="store_true", help="print the config and exit")


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="turn a run folder into a verified ONNX deploy bundle",
        description="Export the deterministic policy (normaliser folded in) to ONNX, check it "
        "and compare it with PyTorch through ONNX Runtime.",
    )
    p.add_argument("run_dir", type=Path, help="run folder written by orin-rl train")
    p.add_argument("--out", type=Path, help="bundle folder (default: RUN_DIR/bundle)")
    p.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    p.add_argument("--batch", default="dynamic", help="'dynamic' or a fixed batch size")
    p.add_argument("--fp16", action="store_true", help="fp16 weights and maths (fp32 I/O)")
    p.add_argument("--int8", action="store_true", help="also write a Q/DQ int8 model")
    p.add_argument("--no-clip", action="store_true", help="do not clip continuous actions")


def _add_build(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build",
        help="build a TensorRT engine (+ sidecar) from a bundle",
        description="Build a TensorRT engine for this board. Needs TensorRT (JetPack).",
    )
    p.add_argument("source", type=Path, help="bundle folder, policy.json or an .onnx file")
    p.add_argument("--recipe", type=Path, help="engines/NAME.yaml (flags override it)")
    p.add_argument("--precision", choices=["fp32", "fp16", "int8"])
    p.add_argument("--dla", type=int, metavar="CORE", help="build for DLA core CORE")
    p.add_argument("--gpu-fallback", action="store_true", default=None)
    p.add_argument("--batch", metavar="MIN,OPT,MAX", help="optimisation profile, e.g. 1,1,1")
    p.add_argument("--workspace", type=int, metavar="MB", help="builder workspace (MiB)")
    p.add_argument("--timing-cache", metavar="FILE", help="timing cache to reuse and update")
    p.add_argument("--version-compatible", action="store_true", default=None)
    p.add_argument("--calib", metavar="RUN_DIR|BUNDLE|NPZ", help="int8 calibration data")
    p.add_argument("--out", type=Path, help="engine file (default engines/NAME-PRECISION.engine)")


def build_parser() -> argparse.ArgumentParser:
    """The ``orin-rl`` argument parser."""
    parser = argparse.ArgumentParser(prog="orin-rl", description=__doc__)
    parser.add_argument("--version", action="version", version=f"orin-rl {__version__}")
    parser.add_argument("--debug", action="store_true", help="full tracebacks on errors")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_train(sub)
    _add_export(sub)
    _add_build(sub)
    return parser


def train_config(args: argparse.Namespace) -> Config:
    """Assemble the config: defaults < env preset < --config file < flags < --set."""
    from orin_rl.presets import preset_overrides

    file_data: dict[str, Any] = {}
    if args.config is not None:
        try:
            file_data = yaml.safe_load(args.config.read_text()) or {}
        except OSError as exc:
            raise ConfigError(f"{args.config}: cannot read config ({exc.strerror})") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{args.config}: not valid YAML ({exc.__class__.__name__})") from None
        if not isinstance(file_data, dict):
            raise ConfigError(f"{args.config}: expected a mapping of sections")
    env_id = args.env or (file_data.get("env") or {}).get("env_id") or Config().env.env_id
    preset = [f"{k}={json.dumps(v)}" for k, v in preset_overrides(env_id).items()]
    cfg = config_mod.apply_overrides(Config(), preset)
    if file_data:
        try:
            cfg = config_mod.from_dict(file_data, cfg)
        except ConfigError as exc:
            raise ConfigError(f"{args.config}: {exc}") from None
    flags = [
        f"{key}={json.dumps(getattr(args, name))}"
        for name, key in TRAIN_FLAGS.items()
        if getattr(args, name) is not None
    ]
    return config_mod.apply_overrides(cfg, flags + list(args.set))


def cmd_train(args: argparse.Namespace) -> int:
    """``orin-rl train``."""
    from orin_rl.runners import train

    if args.resume is not None:
        if args.config or args.set or any(getattr(args, n) is not None for n in TRAIN_FLAGS):
            raise UsageError(
                "--resume continues the run with its saved config.yaml; drop the other options"
            )
        summary = train(Config(), args.resume, resume=True, progress=not args.no_progress)
        return _report(summary)
    cfg = train_config(args)
    if args.print_config:
        print(yaml.safe_dump(config_mod.to_dict(cfg), sort_keys=False), end="")
        return 0
    out = args.out or Path("runs") / f"{cfg.env.env_id}-{datetime.now():%Y%m%d-%H%M%S}"
    summary = train(cfg, out, overwrite=args.overwrite, progress=not args.no_progress)
    print(f"run folder: {out}")
    return _report(summary)


def _report(summary: dict[str, Any]) -> int:
    mean, std = summary["eval_return_mean"], summary["eval_return_std"]
    rows = [
        ("environment", summary["env_id"]),
        ("steps", f"{summary['total_steps']:,}"),
        ("wall time", f"{summary['wall_time_s']:.1f} s"),
        ("steps/s", f"{summary['steps_per_s']:,.0f}"),
        ("stopped by", summary["stop_reason"]),
    ]
    if mean is not None:
        rows.append(
            ("eval return", f"{mean:.1f} ± {std:.1f} over {summary['eval_episodes']} episodes")
        )
    if summary["solved_threshold"] is not None:
        solved = summary["solved_at"]
        when = (
            f" (first at step {solved['global_step']:,}, {solved['time_s']:.1f} s)"
            if solved
            else ""
        )
        verdict = "yes" if summary["solved"] else "no"
        rows.append(("solved", f"{verdict} (threshold {summary['solved_threshold']}){when}"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    if summary["interrupted"]:
        return 128 + (15 if summary["stop_reason"] == "SIGTERM" else 2)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``orin-rl export``."""
    from orin_rl.export.onnx import export_bundle

    batch: int | str = args.batch
    if batch != "dynamic":
        try:
            batch = int(batch)
        except ValueError:
            raise UsageError(
                f"--batch must be 'dynamic' or an integer, got {args.batch!r}"
            ) from None
    result = export_bundle(
        args.run_dir, args.out, args.opset, batch, args.fp16, args.int8, not args.no_clip
    )
    info = result.info
    print(f"bundle: {result.bundle_dir}")
    print(
        f"  policy.onnx  {result.onnx_bytes / 1024:.1f} KiB, opset {info.opset}, {info.precision}"
    )
    print(f"  parity       max abs error {info.parity_max_abs_error:.3g} vs PyTorch")
    for name, variant in info.variants.items():
        print(f"  {variant['onnx_file']}  {name}: {variant['parity']}")
    print(f"  export time  {result.export_time_s:.1f} s")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    """``orin-rl build``."""
    from orin_rl.export.recipes import load_recipe

    batch = None
    if args.batch:
        try:
            batch = [int(v) for v in args.batch.split(",")]
        except ValueError:
            raise UsageError(f"--batch takes MIN,OPT,MAX integers, got {args.batch!r}") from None
        if len(batch) == 1:
            batch = batch * 3
    recipe = load_recipe(
        args.recipe,
        precision=args.precision,
        dla_core=args.dla,
        gpu_fallback=args.gpu_fallback,
        batch=batch,
        workspace_mb=args.workspace,
        timing_cache=args.timing_cache,
        version_compatible=args.version_compatible,
        calib=args.calib,
    )
    from orin_rl.export.tensorrt import build_engine, describe

    name = args.source.stem if args.source.suffix else args.source.name
    where = f"dla{recipe.dla_core}" if recipe.dla_core is not None else "gpu"
    out = args.out or Path("engines") / f"{name}-{where}-{recipe.precision}.engine"
    sidecar = build_engine(args.source, out, recipe)
    print(f"engine: {out}")
    print(describe(sidecar))
    return 0


COMMANDS = {"train": cmd_train, "export": cmd_export, "build": cmd_build}


def main(argv: list[str] | None = None) -> int:
    """Entry point: run a subcommand; known errors print one line and exit with 2."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return COMMANDS[args.command](args)
    except OrinError as exc:
        if args.debug:
            raise
        print(f"orin-rl {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
