"""``orin-rl demo``: train -> export -> run on CartPole-v1, one summary table."""

from __future__ import annotations

import argparse

import numpy as np

from orin_rl.cli.common import plural
from orin_rl.cli.parser import build_parser
from orin_rl.cli.train import _progress, train_config


def cmd_demo(args: argparse.Namespace) -> int:
    """``orin-rl demo``: the whole chain with the CartPole preset."""
    from orin_rl.export.onnx import export_bundle
    from orin_rl.runners import train
    from orin_rl.runtime.run import run_policy

    parsed = build_parser().parse_args(["train", "--env", "CartPole-v1", "--device", args.device])
    # a bar on a terminal, plain lines piped to a file (`make demo > log`), none with -q
    parsed.no_progress, parsed.quiet = False, args.quiet
    summary = train(train_config(parsed), args.out, overwrite=args.overwrite,
                    progress=_progress(parsed))  # fmt: skip
    exported = export_bundle(args.out)
    report = run_policy(exported.bundle_dir, "auto", None, args.rate, args.steps)
    lat = report["latency_us"]
    returns = report["episode_returns"]
    verdict = "solved" if summary["solved"] else "not solved"
    rows = [
        (
            "train",
            f"{summary['total_steps']:,} steps in {summary['wall_time_s']:.1f} s "
            f"({summary['steps_per_s']:,.0f} steps/s) on {summary['device']}",
        ),
        (
            "",
            f"eval return {summary['eval_return_mean']:.1f} ± {summary['eval_return_std']:.1f} "
            f"over {plural(summary['eval_episodes'], 'episode')}: {verdict}",
        ),
        (
            "export",
            f"{exported.bundle_dir}/policy.onnx, {exported.onnx_bytes / 1024:.1f} KiB, "
            f"max error vs PyTorch {exported.info.parity_max_abs_error:.2g}",
        ),
        (
            "run",
            f"{report['backend']} at {args.rate:g} Hz, {report['iterations']} iterations: "
            f"p50 {lat['p50']:.0f} µs, p99 {lat['p99']:.0f} µs, {report['deadline_misses']} misses",
        ),
        (
            "",
            f"episode return {np.mean(returns):.1f} over {plural(len(returns), 'episode')}"
            if returns
            else "no episode ended",
        ),
    ]
    print()
    for stage, text in rows:
        print(f"{stage:<7} {text}")
    print(
        f"\nnext: orin-rl run --model {exported.bundle_dir} --rate 1000 --steps 10000 "
        "--histogram run.png"
    )
    return 0 if summary["solved"] else 1
