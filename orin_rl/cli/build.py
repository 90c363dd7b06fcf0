"""``orin-rl build``: a TensorRT engine (+ sidecar) from a bundle."""

from __future__ import annotations

import argparse
from pathlib import Path

from orin_rl.cli.common import UsageError


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
