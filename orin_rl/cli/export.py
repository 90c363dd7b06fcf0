"""``orin-rl export``: a run folder to a verified ONNX deploy bundle."""

from __future__ import annotations

import argparse

from orin_rl.cli.common import UsageError


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
