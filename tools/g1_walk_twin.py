"""Benchmark: a trained G1 policy walking on its DDS twin, run as an operator runs it.

    python3 tools/g1_walk_twin.py runs/g1/bundle --train-summary runs/g1/summary.json \\
        --out docs/benchmarks/g1_walk_h200 [--gpu "NVIDIA H200"] [--forward-ticks 3000] \\
        [--yaw-ticks 1500] [--domain 7] [--task-device cuda]

The scenario is one remote script (``orin_rl.robot.remote.RemoteScript``), timed from the
run's first command as on a robot: passive; ``L2+up`` at 0.5 s (stand, 2 s); ``R1+X`` at
3.5 s (the policy, after the gantry let go at ~3 s); 2 s at zero command; the left stick
forward for ``--forward-ticks`` ticks of 20 ms (0.5 m/s); the right stick left for
``--yaw-ticks`` (0.5 rad/s, turning left: positive yaw); 2 s at zero; ``L2+B`` (the operator's
stop, damping). The stick values are computed from the bundle's command ranges
(``StickCommand.sticks_for``: the 0.1 deadzone, full deflection at the range's end; the
right stick's x is minus the turn) and checked back through the bytes the remote sends
(float32). The twin (``orin-rl sim-robot``, its own process, loopback DDS) plays the script
and pushes the pelvis sideways (``--push-n`` newtons to the left for ``--push-s``, two thirds
into the forward segment: the G1's 33.3 kg take 110 N × 0.15 s as 0.49 m/s, the per-axis
bound of mjlab's training push, which adds up to ±0.5 m/s in x and in y to the base's velocity); ``run_on_robot`` (what
``orin-rl run --plant unitree-g1 --command remote`` runs) drives it.

Every figure of motion comes from the twin's own base state (its report's series every 20 ms:
heading-frame forward and lateral speed, world yaw rate, height, tilt), never from the
command: ``forward_speed_mean`` over the forward segment and ``yaw_rate_mean`` over the turn,
each without its first ``--skip-s`` (1 s: the acceleration) and without the 3 s after the
push (which falls in the forward one unless the walk is short), each cut at a fall. ``falls`` is
the twin's count of falls while the run drove the robot (the twin counts the collapse under
damping after the operator's stop apart, as ``falls_after_end``).

Writes OUT.json (``task``, ``train_steps``, ``train_wall_s``, ``gpu``, ``ticks``, ``falls``,
``deadline_misses``, ``command``, ``forward_speed_mean``, ``yaw_ticks``, ``yaw_rate_mean``,
``push``, ``transitions``, ``latency_us``, ...), OUT.md (the table), OUT_twin.json (the
twin's report with its series) and OUT_remote.json (the script). ``--task-device`` adds the
same commands held in the policy's own mjlab world, for comparison.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

DT = 0.02
"""The policy's period (the G1 velocity tasks: 50 Hz)."""
STAND_AT, POLICY_AT, SETTLE_S, TAIL_S = 0.5, 3.5, 2.0, 2.0
"""Script times (s from the run's first command): stand, policy; zero command before the
walk and after the turn."""
PUSH_WATCH_S = 3.0
"""Left out of the means after the push (the twin's fall watch)."""
PLANT_KEYS = ("falls", "velocity_source", "forward_velocity", "yaw_rate", "tracking_error_xy",
              "tracking_error_yaw", "command_range")  # fmt: skip
"""The plant's own figures kept in OUT.json (its tilt stops, its means over all policy ticks)."""
TWIN_KEYS = ("mass_kg", "physics_dt", "late_steps", "seconds", "commands", "bad_crc", "falls",
             "falls_after_end")  # fmt: skip
"""The twin's figures kept in OUT.json (late steps: it fell behind real time)."""


@dataclass
class Segment:
    """A commanded stretch of the script: ``command`` (lin_vel_x, lin_vel_y, ang_vel_z) as the
    plant decodes the sticks, held from ``start_s`` to ``end_s``."""

    name: str
    command: list[float]
    sticks: dict[str, float]
    start_s: float
    end_s: float

    @property
    def ticks(self) -> int:
        return round((self.end_s - self.start_s) / DT)

    def report(self) -> dict[str, Any]:
        """OUT.json's ``command`` entry."""
        return {"segment": self.name, "command": self.command, "sticks": self.sticks,
                "start_s": round(self.start_s, 3), "end_s": round(self.end_s, 3),
                "ticks": self.ticks}  # fmt: skip


@dataclass
class Scenario:
    """The remote script and what it commands (module docstring)."""

    script: list[dict[str, Any]]
    segments: list[Segment]
    stop_s: float
    push: dict[str, float] | None = None
    steps: int = 0
    """Policy ticks to ask of the run: past the stop, so the operator's stop ends it."""


def scenario(ranges: list[list[float]], forward_ticks: int, yaw_ticks: int,
             forward: float = 0.5, yaw: float = 0.5, push_n: float = 110.0,
             push_s: float = 0.15) -> Scenario:  # fmt: skip
    """The operator's script for the contract's command ``ranges`` (one line where 0.5 m/s or
    0.5 rad/s is outside them)."""
    from orin_rl.robot.remote import RemoteState, StickCommand, decode, encode

    sticks = StickCommand(ranges)

    def segment(name: str, command: list[float], start: float, ticks: int) -> Segment:
        values = sticks.sticks_for(command)
        sent = sticks.of(decode(encode(RemoteState(**values))))  # float32 on the wire
        return Segment(name, [float(v) for v in sent], values, start, start + ticks * DT)

    walk_at = POLICY_AT + SETTLE_S
    walk = segment("forward", [forward, 0.0, 0.0], walk_at, forward_ticks)
    turn = segment("yaw", [0.0, 0.0, yaw], walk.end_s, yaw_ticks)
    stop_s = turn.end_s + TAIL_S
    script = [
        {"t": STAND_AT, "buttons": "L2+up"},
        {"t": STAND_AT + 0.5},
        {"t": POLICY_AT, "buttons": "R1+X"},
        {"t": POLICY_AT + 0.5},
        {"t": round(walk.start_s, 6), **_nonzero(walk.sticks)},
        {"t": round(turn.start_s, 6), **_nonzero(turn.sticks)},
        {"t": round(turn.end_s, 6)},
        {"t": round(stop_s, 6), "buttons": "L2+B"},
    ]
    push = None
    if push_n:
        push = {"at_s": round(walk.start_s + (walk.end_s - walk.start_s) * 2 / 3, 3),
                "force_n": push_n, "duration_s": push_s}  # fmt: skip
    # policy ticks: to the stop and 5 s beyond, so the operator's stop ends the run
    steps = math.ceil((stop_s - POLICY_AT) / DT) + 250
    return Scenario(script, [walk, turn], stop_s, push, steps)


def _nonzero(sticks: dict[str, float]) -> dict[str, float]:
    return {k: round(v, 6) for k, v in sticks.items() if v}


def window(base: dict[str, list[float]], key: str, start: float, end: float,
           skip_s: float = 1.0, exclude: list[tuple[float, float]] | tuple = (),
           cut_s: float | None = None) -> dict[str, Any]:  # fmt: skip
    """The mean of column ``key`` of a twin series ``base`` over samples with
    ``start + skip_s <= t < end``, outside each ``exclude`` interval [a, b), before ``cut_s``
    (a fall); ``samples`` counts them (each one 20 ms of the run); mean None if none."""
    t = np.asarray(base["t"], dtype=np.float64)
    keep = (t >= start + skip_s) & (t < end)
    for a, b in exclude:
        keep &= ~((t >= a) & (t < b))
    if cut_s is not None:
        keep &= t < cut_s
    values = np.asarray(base[key], dtype=np.float64)[keep]
    return {"from_s": round(start + skip_s, 3), "to_s": round(end, 3),
            "excluded": [list(x) for x in exclude], "cut_s": cut_s,
            "samples": int(keep.sum()),
            "mean": float(values.mean()) if len(values) else None}  # fmt: skip


def measure(twin: dict[str, Any], plan: Scenario, skip_s: float) -> dict[str, Any]:
    """What the twin's base did in each commanded window (module docstring)."""
    if not twin.get("runs"):
        raise SystemExit("the twin saw no command: the run never reached it")
    run = twin["runs"][0]
    base = run["base"]
    falls = run["falls_s"]  # while the run drove the robot: the twin's own count
    cut = falls[0] if falls else None
    walk, turn = plan.segments
    exclude = []
    if plan.push:
        exclude = [(plan.push["at_s"], round(plan.push["at_s"] + PUSH_WATCH_S, 3))]
    windows = {
        "forward": {k: window(base, k, walk.start_s, walk.end_s, skip_s, exclude, cut)
                    for k in ("forward", "lateral", "yaw_rate", "height", "tilt")},
        "yaw": {k: window(base, k, turn.start_s, turn.end_s, skip_s, exclude, cut)
                for k in ("forward", "lateral", "yaw_rate", "height", "tilt")},
    }  # fmt: skip
    held = {  # 20 ms samples inside each whole segment before a fall: the ticks it was held
        s.name: window(base, "t", s.start_s, s.end_s, 0.0, cut_s=cut)["samples"]
        for s in plan.segments
    }
    return {"falls": len(falls), "fall_times_s": falls, "windows": windows,
            "forward_ticks": held["forward"], "yaw_ticks": held["yaw"],
            "forward_speed_mean": windows["forward"]["forward"]["mean"],
            "yaw_rate_mean": windows["yaw"]["yaw_rate"]["mean"]}  # fmt: skip


def train_info(summary: Path | None, gpu: str | None) -> dict[str, Any]:
    """``task``, ``train_steps``, ``train_wall_s``, ``gpu`` from the training's summary.json;
    ``gpu`` where it has none: a name, or a file whose first comma-separated field is one
    (``nvidia-smi --query-gpu=name,... --format=csv,noheader``, tools/g1_walk.sh's gpu.txt)."""
    data = json.loads(summary.read_text()) if summary else {}
    if gpu and Path(gpu).is_file():
        gpu = Path(gpu).read_text().split(",")[0].strip() or None
    startup = data.get("startup") or {}
    # the start-up before the training loop (process start, the worlds' build and kernel
    # compiles): wall_time_s counts from the loop's start, its first iteration included
    before = (
        startup.get("total_s", 0.0) - startup.get("first_iteration_s", 0.0) if startup else None
    )
    wall = data.get("wall_time_s")
    return {"task": data.get("env_id"), "train_steps": data.get("total_steps"),
            "train_iterations": data.get("iterations"), "train_wall_s": wall,
            "train_startup_s": None if before is None else round(before, 1),
            "train_process_wall_s": None if before is None or wall is None
            else round(before + wall, 1),
            "train_eval_return": [data.get("eval_return_mean"), data.get("eval_return_std")],
            "gpu": data.get("gpu") or data.get("gpu_name") or gpu}  # fmt: skip


def run_scenario(bundle: Path, plan: Scenario, domain: int, out: Path, late_factor: float,
                 hold_s: float | None = None) -> tuple[dict, dict]:  # fmt: skip
    """The twin in its own process with the script and the push; the policy over DDS."""
    from orin_rl.cli.run import StatusPrinter
    from orin_rl.robot import wire
    from orin_rl.runtime.robot_run import run_on_robot

    script = out.with_name(out.name + "_remote.json")
    script.write_text(json.dumps(plan.script, indent=1) + "\n")
    twin_report = out.with_name(out.name + "_twin.json")
    twin_report.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "orin_rl.cli", "-q", "sim-robot", "--dds-domain", str(domain),
            "--dds-interface", "lo", "--remote-script", str(script),
            "--seconds", str(round(plan.stop_s + 240)), "--report", str(twin_report)]  # fmt: skip
    if hold_s is not None:
        argv += ["--hold-s", str(hold_s)]
    if plan.push:
        argv += ["--push", "{at_s},{force_n},{duration_s}".format(**plan.push)]
    twin = subprocess.Popen(argv)
    printer = StatusPrinter(sys.stdout, plain_every_s=10.0)
    try:  # the twin builds the task's model first (~10 s): run waits for its first state
        report = run_on_robot(bundle, "onnxruntime", "unitree-g1", plan.steps, domain=domain,
                              interface="lo", command="remote", wait_s=120.0,
                              safety={"late_factor": late_factor},
                              report=out.with_name(out.name + "_run.json"),
                              status=printer)  # fmt: skip
    finally:
        printer.end_line()  # a terminal's status line, before the table
        wire.release_domains()
        twin.terminate()  # SIGTERM: the twin writes its report and exits
        try:
            twin.wait(timeout=60)
        except subprocess.TimeoutExpired:  # never leave a twin behind, nor hide the run's error
            twin.kill()
            twin.wait()
    if not twin_report.is_file():
        raise SystemExit(f"the twin wrote no report ({twin_report}); exit {twin.returncode}")
    seen = json.loads(twin_report.read_text())
    twin_report.write_text(json.dumps(seen, separators=(",", ":")) + "\n")  # its series: compact
    return report, seen


def push_result(twin: dict[str, Any], plan: Scenario) -> dict[str, Any] | None:
    """What was pushed (the twin's record) and whether the robot stood it."""
    if not plan.push:
        return None
    done = [p for p in twin.get("pushes", []) if p["run"] == 0]
    if not done:
        return {**plan.push, "applied": False, "survived": None}
    p = done[0]
    keys = ("at_s", "force_n", "duration_s", "direction", "mass_kg", "expected_dv", "base_dv",
            "com_dv", "on_gantry", "fell", "fell_within_s")  # fmt: skip
    survived = None if p["fell"] is None else not p["fell"]
    return {**{k: p[k] for k in keys}, "applied": True, "survived": survived}


def task_side(bundle: Path, plan: Scenario, device: str, skip_s: float) -> dict[str, Any]:
    """The policy in its own mjlab world (play configuration), each segment's command held
    for its ticks after ``SETTLE_S`` at zero: the same measures from the world's root link
    (heading-frame forward speed, world yaw rate), and its falls (the world resets, goes on)."""
    import torch

    from orin_rl.envs.mjlab.play import MjlabGymEnv
    from orin_rl.robot.observations import heading_velocity
    from orin_rl.runtime import load
    from orin_rl.runtime.robot_run import contract_of

    contract = contract_of(bundle)
    info = json.loads((bundle / "policy.json").read_text())
    env = MjlabGymEnv(info["env_id"], info.get("env_config"), device)
    task = env.vec.env
    term = task.command_manager.get_term(contract.commands["name"])
    start = 0
    for t in contract.observations:  # where the command sits in the policy's input
        if t.source == "command":
            break
        start += t.dim * max(1, t.history_length)
    robot = task.scene["robot"].data
    stretches = [("settle", [0.0, 0.0, 0.0], round(SETTLE_S / DT))]
    stretches += [(s.name, s.command, s.ticks) for s in plan.segments]
    out: dict[str, Any] = {"falls": 0, "device": device}
    obs, _ = env.reset(seed=0)
    with load(bundle, "onnxruntime", "cpu") as runner:
        for name, command, ticks in stretches:
            value = torch.as_tensor(command, dtype=term.vel_command_b.dtype)
            speeds, rates = [], []
            for i in range(ticks):  # the command fixed: no resampling, heading or standing
                term.vel_command_b[:] = value
                term.time_left[:] = 1e9
                for flag in ("is_heading_env", "is_standing_env"):
                    if hasattr(term, flag):
                        getattr(term, flag)[:] = False
                obs = obs.copy()
                obs[start : start + len(command)] = command
                obs, _, terminated, truncated, _ = env.step(runner.infer(obs[None])[0])
                quat = robot.root_link_quat_w[0].cpu().numpy()
                velocity = robot.root_link_lin_vel_w[0].cpu().numpy()
                if i * DT >= skip_s:
                    speeds.append(heading_velocity(quat, velocity)[0])
                    rates.append(float(robot.root_link_ang_vel_w[0, 2]))
                if terminated or truncated:
                    out["falls"] += int(terminated and not truncated)
                    obs, _ = env.reset()
            out[name] = {"command": command, "ticks": ticks, "samples": len(speeds),
                         "forward_speed_mean": float(np.mean(speeds)) if speeds else None,
                         "yaw_rate_mean": float(np.mean(rates)) if rates else None}  # fmt: skip
    env.close()
    return out


def _fmt(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def report_md(result: dict[str, Any], argv: str) -> str:
    """OUT.md: the table a user reads."""
    lat, push = result["latency_us"], result["push"]
    walk, turn = result["command"]
    fw, yw = result["windows"]["forward"], result["windows"]["yaw"]
    lines = [
        f"# G1 on its DDS twin, as an operator runs it: {result['task'] or result['bundle']}",
        "",
        f"Machine: {result['machine']}; policy trained {_fmt(result['train_wall_s'], 0)} s "
        f"({result['train_steps'] or '—'} steps) on {result['gpu'] or '—'}. Command: "
        f"`python3 tools/g1_walk_twin.py {argv}`. {result['date']}.",
        "",
        *_training_lines(result),
        "Measured from the twin's own base state (its 20 ms series), not from the command: "
        f"each mean leaves out the segment's first {result['skip_s']:g} s (the acceleration) "
        f"and the {PUSH_WATCH_S:g} s after the push.",
        "",
        "| segment | commanded (sticks) | ticks held | measured | samples |",
        "|---|---|---|---|---|",
        f"| forward | {walk['command'][0]:.3f} m/s ({_sticks(walk['sticks'])}) | "
        f"{result['forward_ticks']} of {walk['ticks']} | forward "
        f"{_fmt(result['forward_speed_mean'])} m/s, lateral {_fmt(fw['lateral']['mean'])} "
        f"m/s, yaw {_fmt(fw['yaw_rate']['mean'])} rad/s | {fw['forward']['samples']} |",
        f"| turn left | {turn['command'][2]:.3f} rad/s ({_sticks(turn['sticks'])}) | "
        f"{result['yaw_ticks']} of {turn['ticks']} | yaw rate "
        f"{_fmt(result['yaw_rate_mean'])} rad/s, forward {_fmt(yw['forward']['mean'])} m/s | "
        f"{yw['yaw_rate']['samples']} |",
        "",
        "| policy ticks | falls | deadline misses | latency p50 / p99 / max µs | end |",
        "|---|---|---|---|---|",
        f"| {result['ticks']} | {result['falls']} | {result['deadline_misses']} | "
        f"{lat['p50']:.0f} / {lat['p99']:.0f} / {lat['max']:.0f} | {result['end']} |",
        "",
    ]
    if push and not push["applied"]:
        lines += [f"Push: {push['force_n']:g} N for {push['duration_s']:g} s at "
                  f"{push['at_s']:g} s: not applied (the run had ended).", ""]  # fmt: skip
    elif push:
        survived = {True: "stood", False: "fell", None: "not watched"}[push["survived"]]
        gantry = " on the gantry" if push["on_gantry"] else ""
        dv = push["base_dv"]
        lines += [
            f"Push: {push['force_n']:g} N to the left for {push['duration_s']:g} s at "
            f"{push['at_s']:g} s{gantry} (impulse / {push['mass_kg']:.1f} kg = "
            f"{_fmt(push['expected_dv'], 2)} m/s; the pelvis's velocity changed by "
            f"{_fmt(dv, 2)} m/s along it, the centre of mass's by {_fmt(push['com_dv'], 2)}): "
            f"{survived} (a fall within {PUSH_WATCH_S:g} s counts).",
            "",
        ]
    if result.get("task_side"):
        ts = result["task_side"]
        lines += [
            f"In its own mjlab world ({ts['device']}), the same commands held: forward "
            f"{_fmt(ts['forward']['forward_speed_mean'])} m/s, yaw rate "
            f"{_fmt(ts['yaw']['yaw_rate_mean'])} rad/s, {ts['falls']} falls.",
            "",
        ]
    lines.append("Transitions: " + "; ".join(
        f"tick {t['tick']} {t['from']}→{t['to']} ({t['cause']})" for t in result["transitions"]
    ))  # fmt: skip
    return "\n".join(lines) + "\n"


def _training_lines(result: dict[str, Any]) -> list[str]:
    """The training's row, where the summary gave it."""
    if result.get("train_process_wall_s") is None:
        return []
    ret = result.get("train_eval_return") or [None, None]
    return [
        "| training | steps | iterations | loop wall (s) | start-up before it (s) | "
        "process wall (s) | final evaluation return |",
        "|---|---|---|---|---|---|---|",
        f"| {result['task']}, {result['gpu']} | {result['train_steps']:,} | "
        f"{result['train_iterations']} | {_fmt(result['train_wall_s'], 1)} | "
        f"{_fmt(result['train_startup_s'], 1)} | {_fmt(result['train_process_wall_s'], 1)} | "
        f"{_fmt(ret[0], 1)} ± {_fmt(ret[1], 1)} |",
        "",
    ]


def _sticks(sticks: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:+.2f}" for k, v in sticks.items() if v) or "idle"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("bundle", type=Path, help="the exported bundle (policy.json + policy.onnx)")
    p.add_argument("--train-summary", type=Path, help="the training run's summary.json")
    p.add_argument("--gpu", help="the training GPU where the summary does not say it: a name, "
                   "or nvidia-smi's csv in a file (g1_walk.sh's gpu.txt)")  # fmt: skip
    p.add_argument("--out", type=Path, default=Path("docs/benchmarks/g1_walk_h200"))
    p.add_argument("--forward-ticks", type=int, default=3000, help="ticks of 0.5 m/s forward")
    p.add_argument("--yaw-ticks", type=int, default=1500, help="ticks of 0.5 rad/s turning")
    p.add_argument("--push-n", type=float, default=110.0,
                   help="the lateral push's force, to the left (0: no push)")  # fmt: skip
    p.add_argument("--push-s", type=float, default=0.15, help="the push's duration")
    p.add_argument("--skip-s", type=float, default=1.0,
                   help="left out of each segment's mean at its start (acceleration)")  # fmt: skip
    p.add_argument("--late-factor", type=float, default=1.5,
                   help="the safety machine's late-tick stop, in periods (a loaded box: 5)")  # fmt: skip
    p.add_argument("--hold-s", type=float, help="the twin's gantry: holds the pelvis this "
                   "long after the stand-up began (default: the twin's 2.5 s; a long one keeps "
                   "a policy that does not balance up, for a check of the plumbing)")  # fmt: skip
    p.add_argument("--domain", type=int, default=7, help="DDS domain of the twin (loopback)")
    p.add_argument("--task-device", help="also hold the commands in the policy's mjlab world "
                   "on this device (cpu, cuda) for comparison")  # fmt: skip
    args = p.parse_args(argv)
    shown = " ".join(sys.argv[1:] if argv is None else argv)

    from orin_rl.runtime.robot_run import contract_of

    contract = contract_of(args.bundle)
    plan = scenario(contract.command_ranges(), args.forward_ticks, args.yaw_ticks,
                    push_n=args.push_n, push_s=args.push_s)  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    run, twin = run_scenario(args.bundle, plan, args.domain, args.out, args.late_factor,
                             args.hold_s)  # fmt: skip
    measured = measure(twin, plan, args.skip_s)
    info = json.loads((args.bundle / "policy.json").read_text())
    train = train_info(args.train_summary, args.gpu)
    result = {
        **train,
        "task": train["task"] or info.get("env_id"),
        "bundle": str(args.bundle),
        "machine": f"{os.cpu_count()} CPU cores ({platform.machine()}), the twin's physics "
        "on the CPU",
        "date": datetime.date.today().isoformat(),
        "ticks": run["ticks"],
        "falls": measured["falls"],
        "fall_times_s": measured["fall_times_s"],
        "deadline_misses": run["deadline_misses"],
        "command": [segment.report() for segment in plan.segments],
        "skip_s": args.skip_s,
        "forward_ticks": measured["forward_ticks"],
        "forward_speed_mean": measured["forward_speed_mean"],
        "yaw_ticks": measured["yaw_ticks"],
        "yaw_rate_mean": measured["yaw_rate_mean"],
        "windows": measured["windows"],
        "push": push_result(twin, plan),
        "transitions": run["transitions"],
        "end": run["end"],
        "latency_us": run["latency_us"],
        "backend": run.get("backend"),
        "plant": {k: run.get(k) for k in PLANT_KEYS},
        "twin": {k: twin.get(k) for k in TWIN_KEYS},
        "script": plan.script,
    }
    if args.task_device:
        result["task_side"] = task_side(args.bundle, plan, args.task_device, args.skip_s)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    text = report_md(result, shown)
    args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
