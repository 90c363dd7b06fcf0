"""``orin-rl eval``: N seeded episodes of a policy, return and length statistics."""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from orin_rl.cli.common import EpisodeProgress, UsageError, env_kwargs_arg, output_file


def cmd_eval(args: argparse.Namespace) -> int:
    """``orin-rl eval`` (torch-free for bundles and engines)."""
    from orin_rl.evaluation import evaluate_policy
    from orin_rl.policy import load_policy

    if args.episodes <= 0:
        raise UsageError(f"--episodes must be positive, got {args.episodes}")
    env_kwargs = env_kwargs_arg(args.env_kwargs)
    output_file(args.report, "--report")  # before the episodes, not after them
    with load_policy(args.model, args.backend, args.device, precision=args.precision) as policy:
        result = evaluate_policy(
            policy,
            args.env,
            args.episodes,
            args.seed,
            deterministic=not args.stochastic,
            render=args.render,
            video_dir=args.video,
            env_kwargs=env_kwargs,
            on_episode=None if args.quiet else EpisodeProgress(sys.stderr),
        )
        described = policy.backend.describe()
    if args.report:
        args.report.write_text(json.dumps({**described, **result.to_dict()}, indent=2) + "\n")
    r, n = np.asarray(result.returns), np.asarray(result.lengths)
    mode = "sampled" if args.stochastic else "deterministic"
    extra = described.get("provider") or described.get("mode") or described.get("device") or ""
    if described.get("precision"):
        extra += f", {described['precision']}"
    print(f"environment  {result.env_id}")
    print(f"backend      {described['backend']}" + (f" ({extra})" if extra else ""))
    print(f"episodes     {result.episodes}, seeds {args.seed}..{args.seed + result.episodes - 1}, "
          f"{mode} actions")  # fmt: skip
    print(f"{'':<11}{'mean':>10}{'std':>10}{'min':>10}{'max':>10}")
    print(f"{'return':<11}{r.mean():>10.1f}{r.std():>10.1f}{r.min():>10.1f}{r.max():>10.1f}")
    print(f"{'length':<11}{n.mean():>10.1f}{n.std():>10.1f}{n.min():>10d}{n.max():>10d}")
    error = (result.task_log or {}).get("Metrics/twist/error_vel_xy")
    if error is not None:
        # not m/s: mjlab sums the per-step error over the episode (envs/mjlab/episodes.py)
        print(f"tracking     {error:.3f} mjlab's Metrics/twist/error_vel_xy, mean over episodes")
    if result.videos:
        print(f"videos       {len(result.videos)} MP4 in {args.video}")
    return 0
