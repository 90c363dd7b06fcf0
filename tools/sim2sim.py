"""Benchmark: a robot policy on its DDS twin (sim-to-sim) against the same policy in its task.

    python3 tools/sim2sim.py --model runs/g1/bundle --ticks 3000 --command 0.5,0,0 \\
        --out docs/benchmarks/sim2sim_g1_h200 [--plant-device cuda] [--domain 7]

1. The task's side: the bundle's policy drives one world of its mjlab task (play configuration,
   the command held at ``--command``) for ``--ticks`` ticks on ONNX Runtime: the velocity
   tracking error each tick, ``|command_xy − v_xy|`` with v the IMU point's velocity in the
   base frame (the task's ``base_lin_vel`` sensor), and the falls (terminations other than the
   time limit; the world resets and goes on).
2. The twin's side: ``orin-rl sim-robot`` in its own process, and ``orin-rl run --plant
   unitree-g1``'s code over DDS on ``lo`` with the same command and ticks: the same tracking
   error (v from ``rt/sportmodestate``, rotated into the base frame), falls (tilt stops, and
   the twin's own count), deadline misses, latency and the safety machine's transitions.

Writes OUT.json (keys ``ticks``, ``falls``, ``deadline_misses``, ``tracking_error``,
``training_tracking_error``, ``transitions``, ...) and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np


def task_side(model: Path, command: np.ndarray, ticks: int, device: str) -> dict:
    """The policy in its task's world with the command held: tracking error and falls."""
    import torch

    from orin_rl.envs.mjlab import MjlabGymEnv
    from orin_rl.runtime import load
    from orin_rl.runtime.robot_run import contract_of

    contract = contract_of(model)
    runner = load(model, "onnxruntime", "cpu")
    info = json.loads((Path(model) / "policy.json").read_text())
    env = MjlabGymEnv(info["env_id"], info.get("env_config"), device)
    task = env.vec.env
    term = task.command_manager.get_term(contract.commands["name"])
    start = 0
    for t in contract.observations:  # where the command sits in the policy's input
        if t.source == "command":
            break
        start += t.dim * max(1, t.history_length)
    cmd_slice = slice(start, start + len(command))
    sensor = next((t for t in task.scene.sensors if t.endswith("imu_lin_vel")), None)

    def hold() -> None:  # the command fixed: no resampling, no heading control, no standing
        term.vel_command_b[:] = torch.as_tensor(command, dtype=term.vel_command_b.dtype)
        term.time_left[:] = 1e9
        for flag in ("is_heading_env", "is_standing_env"):
            if hasattr(term, flag):
                getattr(term, flag)[:] = False

    obs, _ = env.reset(seed=0)
    errors, speeds, falls = [], [], 0
    with runner:
        for _ in range(ticks):
            hold()
            obs = obs.copy()
            obs[cmd_slice] = command
            action = runner.infer(obs[None])[0]
            obs, _, terminated, truncated, _ = env.step(action)
            v = task.scene[sensor].data[0].cpu().numpy() if sensor else None
            if v is None:
                v = task.scene["robot"].data.root_link_lin_vel_b[0].cpu().numpy()
            errors.append(float(np.linalg.norm(command[:2] - v[:2])))
            speeds.append(float(v[0]))
            if terminated or truncated:
                falls += int(terminated and not truncated)
                obs, _ = env.reset()
    env.close()
    return {"ticks": ticks, "falls": falls, "tracking_error": float(np.mean(errors)),
            "forward_velocity": float(np.mean(speeds))}  # fmt: skip


def twin_side(model: Path, command: str, ticks: int, domain: int, out: Path) -> dict:
    """The policy against ``orin-rl sim-robot`` over DDS (loopback)."""
    from orin_rl.runtime.robot_run import run_on_robot

    seconds = ticks * 0.02 + 40
    twin_report = out.with_name(out.name + "_twin.json")
    twin = subprocess.Popen(
        [sys.executable, "-m", "orin_rl.cli", "-q", "sim-robot", "--dds-domain", str(domain),
         "--dds-interface", "lo", "--seconds", str(seconds), "--report", str(twin_report)],
    )  # fmt: skip
    try:  # the twin builds the task's model first (~15 s): wait for its first state
        report = run_on_robot(model, "onnxruntime", "unitree-g1", ticks, domain=domain,
                              interface="lo", command=command, wait_s=90.0)  # fmt: skip
    finally:
        twin.terminate()
        twin.wait(timeout=30)
    report["twin"] = json.loads(twin_report.read_text()) if twin_report.is_file() else None
    return report


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, required=True, help="a bundle with a deploy contract")
    p.add_argument("--ticks", type=int, default=3000)
    p.add_argument("--command", default="0.5,0,0", help="VX,VY,WZ held for the whole run")
    p.add_argument("--plant-device", default="cpu", help="where the task's world steps")
    p.add_argument("--domain", type=int, default=7, help="DDS domain of the twin")
    p.add_argument("--out", type=Path, default=Path("docs/benchmarks/sim2sim_g1"))
    args = p.parse_args()
    command = np.array([float(x) for x in args.command.split(",")])
    task = task_side(args.model, command, args.ticks, args.plant_device)
    print("task side:", task, flush=True)
    twin = twin_side(args.model, args.command, args.ticks, args.domain, args.out)
    falls = max(twin["falls"], (twin["twin"] or {}).get("falls", 0))  # the plant's or the twin's
    result = {
        "model": str(args.model),
        "command": command.tolist(),
        "ticks": twin["ticks"],
        "falls": falls,
        "deadline_misses": twin["deadline_misses"],
        "tracking_error": twin["tracking_error"],
        "training_tracking_error": task["tracking_error"],
        "tracking_ratio": (
            twin["tracking_error"] / task["tracking_error"]
            if twin["tracking_error"] is not None and task["tracking_error"]
            else None
        ),
        "training_falls": task["falls"],
        "forward_velocity": twin.get("forward_velocity"),
        "training_forward_velocity": task["forward_velocity"],
        "transitions": twin["transitions"],
        "latency_us": twin["latency_us"],
        "backend": twin.get("backend"),
        "twin": twin["twin"],
        "task_side": task,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    lat = result["latency_us"]
    lines = [
        f"# Sim-to-sim: {args.model} on the DDS twin, command {args.command}",
        "",
        "| | ticks | falls | tracking error (m/s) | forward velocity (m/s) | deadline misses "
        "| p50 / p99 / max µs |",
        "|---|---|---|---|---|---|---|",
        f"| the task (mjlab world) | {task['ticks']} | {task['falls']} | "
        f"{task['tracking_error']:.3f} | {task['forward_velocity']:.3f} | — | — |",
        f"| the twin over DDS | {result['ticks']} | {falls} | "
        f"{_fmt(result['tracking_error'])} | {_fmt(result['forward_velocity'])} | "
        f"{result['deadline_misses']} | {lat['p50']:.0f} / {lat['p99']:.0f} / {lat['max']:.0f} |",
        "",
        "Transitions: "
        + "; ".join(
            f"tick {t['tick']} {t['from']}→{t['to']} ({t['cause']})" for t in result["transitions"]
        ),
    ]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
