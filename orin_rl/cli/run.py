"""``orin-rl run``: a policy in the real-time control loop."""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import numpy as np

from orin_rl.cli.common import (
    UsageError,
    _backend_options,
    env_kwargs_arg,
    output_file,
    plural,
)
from orin_rl.errors import OrinError


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
    for flag in ROBOT_FLAGS:
        if _given(args, flag):
            raise UsageError(f"{flag} drives a robot: add --plant unitree-g1, or drop it")
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
        f"{np.mean(returns):.1f} over {plural(len(returns), 'episode')}"
        if returns
        else "no episode ended"
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
            if error is None  # mjlab's per-episode value, as eval's (envs/mjlab/episodes.py)
            else f"{error:.3f} (mjlab's Metrics/twist/error_vel_xy, mean over episodes)"
        )
        print(f"falls        {report['falls']}; tracking error {tracking}")
    elif "falls" in report:  # another mjlab task: an early end is not a fall
        print(f"terminations {report['falls']} (episodes ended before their time limit)")
    return 0


EXIT_CODES = {"steps": 0, "operator stop": 0, "safety stop": 3, "interrupted": 130,
              "terminated": 143, "no robot": 2, "refused": 2}  # fmt: skip
"""``run --plant``'s exit code for each way a run ends (``runtime.robot_run.ENDS``; ``no
robot`` and ``refused`` come as the one-line error, ``failed`` as its own)."""
ROBOT_FLAGS = ("--command", "--command-every", "--dds-domain", "--dds-interface", "--dds-peers",
               "--stand-s", "--tilt-limit", "--late-factor", "--silence-s",
               "--wait-s")  # fmt: skip
"""Flags that mean something only with ``--plant`` (refused without it)."""
PLANT_OVERRIDES = {
    "--rate": "the robot runs the policy at its contract's period (step_dt)",
    "--env": "the robot is the environment: the policy's input comes from its state",
    "--env-kwargs": "the robot is the environment: there is no simulated env to configure",
    "--plant-device": "it places a simulated env's physics; the robot's are its own",
}
"""Flags of a simulated run that a robot plant decides itself, each with why: refused with
``--plant``."""


def _given(args: argparse.Namespace, flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in getattr(args, "raw_argv", []))


def _run_robot(args: argparse.Namespace, loop: dict) -> int:
    """``--plant unitree-g1``: the robot (or its twin) over DDS, through the safety machine."""
    from orin_rl.robot import wire
    from orin_rl.robot.remote import COMBOS

    for flag, why in PLANT_OVERRIDES.items():
        if _given(args, flag):
            raise UsageError(f"{flag} does not apply to --plant {args.plant}: {why}; drop it")
    wire.use_peers(args.dds_peers)
    combos = " · ".join(f"{combo} {step}" for step, combo in COMBOS.items())
    if args.velocity_command == "remote":
        print(f"remote       {combos} (damping, latched); sticks: left forward/sideways, "
              "right turn", flush=True)  # fmt: skip
    else:
        print(f"remote       {COMBOS['stop']} stops the robot (damping, latched)", flush=True)
    printer = StatusPrinter(sys.stdout)
    try:
        with printer.ends_line_before_logs():
            report = _drive(args, loop, printer)
    except OrinError as exc:  # a refusal after connecting: its report is written too
        if args.report and Path(args.report).is_file():
            raise OrinError(f"{exc} (report {args.report})") from None
        raise
    finally:
        wire.release_domains()  # DDS's threads end before the interpreter's teardown
    _print_robot_summary(report, args)
    return EXIT_CODES[report["end"]]


def _drive(args: argparse.Namespace, loop: dict, printer: StatusPrinter) -> dict:
    from orin_rl.runtime.robot_run import run_on_robot

    return run_on_robot(
        args.model,
        args.backend,
        args.plant,
        args.steps,
        args.device,
        args.dds_domain,
        args.dds_interface,
        args.velocity_command,
        args.command_every,
        {
            "stand_s": args.stand_s,
            "tilt_limit": args.tilt_limit,
            "late_factor": args.late_factor,
            "silence_s": args.silence_s,
        },
        args.report,
        args.histogram,
        loop_options=loop,
        backend_options=_backend_options(args, batch=1),
        precision=args.precision,
        wait_s=args.wait_s,
        status=printer,
        ros2={
            "domain": args.ros_domain,
            "namespace": args.ros_namespace,
            "timeout_s": args.cmd_vel_timeout,
        },
    )


def _print_robot_summary(report: dict, args: argparse.Namespace) -> None:
    lat = report["latency_us"]
    print(f"backend      {report['backend']} on {report['plant']} at {report['rate_hz']:g} Hz")
    print(f"ticks        {report['ticks']} of {args.steps} (policy ticks run)")
    print(
        f"latency µs   p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  max {lat['max']:.1f}; "
        f"{report['deadline_misses']} deadline misses"
    )
    print(f"falls        {report['falls']}; tracking error {tracking_text(report)}")
    print(f"measured     {measured_text(report)}")
    if "ros2_domain" in report:
        print(f"ros 2        domain {report['ros2_domain']}, namespace "
              f"{report['ros2_namespace']}: cmd_vel in; joint_states, imu, diagnostics "
              "out")  # fmt: skip
    end = report["end"]
    where = f"; report {args.report}" if args.report else ""
    print(f"end          {end_text(report, args.steps)}; the robot was latched to damping; "
          f"exit {EXIT_CODES[end]}{where}")  # fmt: skip
    stop = report["transitions"][-1] if report["transitions"] else None
    if end == "safety stop" and stop and stop["from"] == "passive":
        print(
            "hint         stopped before the stand-up: set the robot upright and still on its "
            "gantry (a twin is back in its start pose 1 s after a run), then run again"
        )


SIGNAL_WORDS = {"interrupted": "Ctrl-C (SIGINT)", "terminated": "SIGTERM"}
"""What the summary says of a run a signal ended."""


def end_text(report: dict, steps: int) -> str:
    """How the run ended, in the summary's words: the end and what caused it, once each."""
    end = report["end"]
    if end == "steps":
        return f"steps: its {steps} ticks ran (--steps)"
    if end in SIGNAL_WORDS:
        return f"{end} by {SIGNAL_WORDS[end]}"
    if end == "safety stop":
        return f"safety stop: {report['safety_stop']}"
    cause = report["transitions"][-1]["cause"] if report["transitions"] else "-"
    return f"{end}: {cause}"


NO_VELOCITY = (
    "no velocity source: nothing publishes rt/sportmodestate (a G1 in low-level mode does not)"
)
"""The summary's words where the run measured no base velocity."""


def tracking_text(report: dict) -> str:
    """The tracking errors of the summary: xy from the velocity source, yaw from the IMU."""
    xy, yaw = report.get("tracking_error_xy"), report.get("tracking_error_yaw")
    if report.get("velocity_source") is None:
        xy_text = f"xy - ({NO_VELOCITY})"
    else:
        xy_text = f"xy {_num(xy, 'm/s')} ({report['velocity_source']})"
    return f"{xy_text}, yaw {_num(yaw, 'rad/s')} (IMU)"


def measured_text(report: dict) -> str:
    """The measured means of the summary: forward, lateral (heading frame), yaw rate (IMU)."""
    if report.get("velocity_source") is None:
        velocity = "velocity -"
    else:
        forward, lateral = report["forward_velocity"], report["lateral_velocity"]
        velocity = (f"forward {_num(forward, 'm/s')}, lateral {_num(lateral, 'm/s')} "
                    f"({report['velocity_source']})")  # fmt: skip
    return f"{velocity}; yaw rate {_num(report.get('yaw_rate'), 'rad/s')} (IMU)"


def _num(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.3f} {unit}"


class StatusPrinter:
    """The operator's view of a robot run: each transition as a line when it happens, and a
    status line (rewritten in place on a terminal; a plain line every ``plain_every_s`` when
    piped)."""

    def __init__(self, stream: TextIO, plain_every_s: float = 5.0):
        self.stream, self.plain_every_s = stream, plain_every_s
        self.tty = stream.isatty()
        self.shown = 0
        self.phase = ""
        self.last_plain = -float("inf")  # the first status line at once
        self.width = 0
        self._lock = threading.RLock()  # the status thread, the main thread's logs

    def end_line(self) -> None:
        """End the status line a terminal shows (a newline after it), so that whatever is
        written next starts on a line of its own; nothing where none is open."""
        with self._lock:
            if self.tty and self.width:
                self.stream.write("\n")
                self.stream.flush()
                self.width = 0

    @contextlib.contextmanager
    def ends_line_before_logs(self) -> Iterator[None]:
        """While inside, a log record ends the status line before it is written (the root
        logger's handlers), and on the way out the line is ended for what follows."""

        def end_first(record: logging.LogRecord) -> bool:
            self.end_line()
            return True

        handlers = list(logging.getLogger().handlers)
        for handler in handlers:
            handler.addFilter(end_first)
        try:
            yield
        finally:
            for handler in handlers:
                handler.removeFilter(end_first)
            self.end_line()

    def __call__(self, status: dict) -> None:
        """One snapshot (``runtime.robot_run.Watch``)."""
        with self._lock:
            self._show(status)

    def _show(self, status: dict) -> None:
        for t in status["transitions"][self.shown :]:
            self._line(f"  tick {t['tick']:>6}  {t['time_s']:8.3f} s  {t['from']} -> "
                       f"{t['to']}: {t['cause']}")  # fmt: skip
        self.shown = len(status["transitions"])
        if status["phase"] not in (self.phase, "") and status["mode"] != "stopped":
            self.phase = status["phase"]
            self._line(f"status       {self.phase}")
        text = status_line(status)
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
            self.stream.flush()
        elif time.monotonic() - self.last_plain >= self.plain_every_s:
            self.last_plain = time.monotonic()
            self._line(text)

    def _line(self, text: str) -> None:
        """A line of its own: the open status line is cleared first (rewritten after)."""
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.width = 0
        self.stream.write(text + "\n")
        self.stream.flush()


def status_line(s: dict) -> str:
    """mode, tick, commanded velocity, measured velocity (forward, lateral: '-' without a
    source) and yaw rate (IMU), tilt, p99 latency, misses."""

    def vec(v):
        return "-" if v is None else " ".join(f"{x:+.2f}" for x in v)

    tilt = "-" if s["tilt"] is None else f"{s['tilt']:.2f} rad"
    p99 = "-" if s["p99_us"] is None else f"{s['p99_us']:.0f} µs"
    yaw = "-" if s.get("yaw_rate") is None else f"{s['yaw_rate']:+.2f}"
    return (f"{s['mode']:<8} tick {s['tick']:>6}  cmd {vec(s['command'])}  vel "
            f"{vec(s['velocity'])}  yaw {yaw}  tilt {tilt}  p99 {p99}  "
            f"misses {s['misses']}")  # fmt: skip
