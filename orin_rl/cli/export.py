"""``orin-rl export``: a run folder to a verified ONNX deploy bundle."""

from __future__ import annotations

import argparse

from orin_rl.cli.common import UsageError


def cmd_export(args: argparse.Namespace) -> int:
    """``orin-rl export``."""
    if args.run_dir.suffix == ".onnx":
        return _import_mjlab(args)
    if args.env is not None:
        raise UsageError("--env applies to mjlab's .onnx export; a run folder knows its env")
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
    _robot_line(info.deploy)
    return 0


def _robot_line(deploy: dict) -> None:
    """What the deploy contract says of a real robot: a policy that reads a term a robot in
    low-level mode does not report runs against the twin only (``run`` refuses the robot)."""
    if not deploy:
        return
    from orin_rl.robot.contract import DeployContract

    contract = DeployContract.from_dict(deploy)
    refusal = contract.real_robot_refusal()
    if refusal is not None:
        print(f"  robot        twin only: {refusal}")
    elif contract.robot:
        print(f"  robot        {contract.robot}: the actor reads only what the robot reports")


def _import_mjlab(args: argparse.Namespace) -> int:
    """``orin-rl export FILE.onnx --env TASK``: mjlab's policy export as a bundle."""
    from orin_rl.export.mjlab_onnx import import_mjlab_onnx

    if args.int8 or args.fp16 or args.batch != "dynamic" or args.no_clip:
        raise UsageError("mjlab's .onnx is imported as it is: drop --int8/--fp16/--batch/--no-clip")
    if args.env is None:
        raise UsageError(
            f"{args.run_dir}: name the mjlab task it was trained on: --env Mjlab-...; "
            "`orin-rl envs --backend mjlab` lists them"
        )
    from orin_rl.envs.mjlab import check_task

    check_task(args.env)
    out = args.out or args.run_dir.with_suffix("")
    result = import_mjlab_onnx(args.run_dir, out, args.env)
    info = result.info
    print(f"bundle: {result.bundle_dir}")
    print(f"  policy.onnx  mjlab's export, opset {info.opset}, checked against {args.env}")
    print(
        f"  parity       max abs error {info.parity_max_abs_error:.3g} vs ONNX's reference "
        f"evaluator ({info.parity['observations']} observations of the task)"
    )
    _robot_line(info.deploy)
    return 0
