"""``orin-rl run``: a policy in the real-time control loop."""

from __future__ import annotations

import argparse

import numpy as np

from orin_rl.cli.common import (
    UsageError,
    _backend_options,
    env_kwargs_arg,
    output_file,
)


def cmd_run(args: argparse.Namespace) -> int:
    """``orin-rl run`` (torch-free unless the torch backend is chosen)."""
    from orin_rl.runtime.run import run_policy

    if args.rate < 0:
        raise UsageError(f"--rate must be >= 0 (0: as fast as possible), got {args.rate:g}")
    if args.steps <= 0:
        raise UsageError(f"--steps must be positive, got {args.steps}")
    output_file(args.report, "--report")  # before the loop, not after it
    output_file(args.histogram, "--histogram")
    loop = {
        "cpu": args.cpu,
        "fifo_priority": args.fifo,
        "lock_memory": args.mlock,
        "safe_action_on_overrun": args.safe_on_overrun,
    }
    if args.plant:
        return _run_robot(args, loop)
    report = run_policy(
        args.model,
        args.backend,
        args.env,
        args.rate,
        args.steps,
        args.device,
        args.report,
        args.histogram,
        loop_options=loop,
        backend_options=_backend_options(args, batch=1),  # the loop feeds one observation
        env_kwargs=env_kwargs_arg(args.env_kwargs),
        precision=args.precision,
        plant_device=args.plant_device,
    )
    lat = report["latency_us"]
    returns = report["episode_returns"]
    mean_return = (
        f"{np.mean(returns):.1f} over {len(returns)} episodes" if returns else "no episode ended"
    )
    where = report.get("provider") or report.get("mode") or ""
    if report.get("precision"):
        where += f", {report['precision']}"
    print(f"backend      {report['backend']} ({where})")
    print(f"iterations   {report['iterations']} at {args.rate:g} Hz")
    print(
        f"latency µs   p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  "
        f"p99.9 {lat['p999']:.1f}  max {lat['max']:.1f}"
    )
    print(
        f"misses       {report['deadline_misses']} deadline, {report['overruns']} overruns, "
        f"{report['non_finite_events']} non-finite"
    )
    print(f"return       {mean_return}")
    if "falls" in report and report.get("tracks_velocity", True):  # a locomotion task
        error = report["tracking_error_vel_xy"]
        tracking = (
            "no episode ended"
            if error is None  # mjlab's per-episode value, as eval's (envs/mjlab_episodes.py)
            else f"{error:.3f} (mjlab's Metrics/twist/error_vel_xy, mean over episodes)"
        )
        print(f"falls        {report['falls']}; tracking error {tracking}")
    elif "falls" in report:  # another mjlab task: an early end is not a fall
        print(f"terminations {report['falls']} (episodes ended before their time limit)")
    return 0


def _run_robot(args: argparse.Namespace, loop: dict) -> int:
    """``--plant unitree-g1``: the robot (or its twin) over DDS, through the safety machine."""
    from orin_rl.runtime.robot_run import run_on_robot

    report = run_on_robot(
        args.model,
        args.backend,
        args.plant,
        args.steps,
        args.device,
        args.dds_domain,
        args.dds_interface,
        args.velocity_command,
        args.command_every,
        {"stand_s": args.stand_s, "tilt_limit": args.tilt_limit},
        args.report,
        args.histogram,
        loop_options=loop,
        backend_options=_backend_options(args, batch=1),
        precision=args.precision,
        ros2={
            "domain": args.ros_domain,
            "namespace": args.ros_namespace,
            "timeout_s": args.cmd_vel_timeout,
        },
    )
    lat = report["latency_us"]
    error = report["tracking_error"]
    print(f"backend      {report['backend']} on {report['plant']} at {report['rate_hz']:g} Hz")
    print(f"ticks        {report['ticks']} of {args.steps}; safety {report['safety_mode']}")
    print(
        f"latency µs   p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  max {lat['max']:.1f}; "
        f"{report['deadline_misses']} deadline misses"
    )
    tracking = "no velocity source" if error is None else f"{error:.3f} m/s (xy velocity)"
    print(f"falls        {report['falls']}; tracking error {tracking}")
    if "ros2_domain" in report:
        print(f"ros 2        domain {report['ros2_domain']}, namespace "
              f"{report['ros2_namespace']}: cmd_vel in; joint_states, imu, diagnostics "
              "out")  # fmt: skip
    for t in report["transitions"]:
        print(
            f"  tick {t['tick']:>6}  {t['time_s']:8.3f} s  {t['from']} -> {t['to']}: {t['cause']}"
        )
    return 0
