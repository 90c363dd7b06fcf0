"""Online learning: a real-time actor and a concurrent learner, per rate (SAC on Pendulum-v1,
or ``--algo dqn``: DQN on CartPole-v1).

Each online row is one ``orin-rl train --algo sac --env Pendulum-v1 --online --control-rate HZ``
(the Pendulum SAC preset: evaluation of 10 episodes every 1,000 env steps, stop once two
evaluations in a row and the verdict reach -200; DQN: the CartPole preset, 20 episodes every
10 iterations of 256 env steps, threshold 475), capped at ``--max-wall`` seconds. Beside
them, in the same call:

- ``offline``: the same preset without ``--online`` (the env stepped as fast as it goes):
  steps to threshold to compare with;
- ``actor only``: the actor at each rate with no learner working (learning never starts):
  the tick latency the learner's thread adds is the difference (the threads-or-processes
  question of issue 18).

Writes ``docs/benchmarks/online_<machine>.{json,md,png}`` (DQN: ``online_<machine>_dqn``).

    python tools/bench_online.py [--algo sac|dqn] [--rates 20,50,100,200] [--max-wall 300]
                                 [--tag cpu] [--device cpu|cuda] [--cuda-graphs]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from bench_common import pyplot, save_figure

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TASKS = {
    "sac": {"env": "Pendulum-v1", "threshold": -200.0, "suffix": "",
            "eval": "10 deterministic episodes every 1,000 env steps"},
    "dqn": {"env": "CartPole-v1", "threshold": 475.0, "suffix": "_dqn",
            "eval": "20 deterministic episodes every 10 iterations of 256 env steps"},
}  # fmt: skip
"""Per algorithm: the env its preset trains, the threshold, the output suffix."""
ALGO = "sac"
"""The algorithm of this call (``--algo``)."""
DEVICE = "cpu"
"""The learner's device of this call (``--device``)."""
GRAPHS: list[str] = []
"""``--cuda-graphs`` for every run of this call (SAC's gradient step replayed from a graph)."""


def _train(args: list[str], run: Path, timeout: float) -> dict:
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress", "--overwrite",
           "--algo", ALGO, "--env", TASKS[ALGO]["env"], "--device", DEVICE, "--out", str(run),
           *GRAPHS, *args]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((run / "summary.json").read_text())
    summary["process_wall_s"] = wall
    return summary


def _curve(run: Path) -> list[tuple[float, float]]:
    points = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        r = json.loads(line)
        if "eval/return_mean" in r:
            points.append((r["time_s"], r["eval/return_mean"]))
    return points


DROQ = ["--set", "sac.critic_dropout=0.01", "--set", "sac.critic_layer_norm=true"]
"""DroQ critics (Hiraoka et al. 2021: dropout 0.01 + LayerNorm), for update-to-data > 1."""


def _solve_fields(s: dict) -> dict:
    """When the run first reached the threshold, and how it ended."""
    solved_at = s["solved_at"]
    return {
        "stop_reason": s["stop_reason"],
        "solved": s["solved"],
        "wall_to_threshold_s": solved_at["time_s"] if solved_at else None,
        "steps_to_threshold": solved_at["global_step"] if solved_at else None,
        "wall_to_solved_stop_s": s["wall_time_s"] if s["stop_reason"] == "solved" else None,
        "final_eval": s["eval_return_mean"],
        "env_steps": s["total_steps"],
    }


def _tick_fields(on: dict) -> dict:
    """The control loop's figures from summary.json's online section."""
    return {
        "ticks": on["ticks"],
        "deadline_misses": on["deadline_misses"],
        "deadline_miss_fraction": on["deadline_miss_fraction"],
        "tick_p50_us": on["latency_us"].get("p50"),
        "tick_p99_us": on["latency_us"].get("p99"),
        "tick_max_us": on["latency_us"].get("max"),
    }


def online_row(rate: float, max_wall: float, work: Path, utd: float = 1.0,
               droq: bool = False) -> dict:  # fmt: skip
    name = f"online-{rate:g}" + (f"-droq-utd{utd:g}" if droq else "")
    extra = [*DROQ, "--utd", str(utd)] if droq else ["--utd", str(utd)]
    s = _train(["--online", "--control-rate", str(rate), "--total-steps", "100000",
                "--set", f"train.max_wall_s={max_wall}", *extra], work / name,
               max_wall + 300)  # fmt: skip
    run = work / name
    on = s["online"]
    return {
        "mode": f"online, DroQ critics, UTD {utd:g}" if droq else f"online, UTD {utd:g}",
        "rate_hz": rate,
        **_solve_fields(s),
        **_tick_fields(on),
        "updates": on["updates"],
        "updates_per_s": on["updates_per_s"],
        "updates_per_env_step": on["updates_per_env_step"],
        "update_to_data_target": on["update_to_data_target"],
        "weight_swaps": on["weight_swaps"],
        "watchdog_trips": on["watchdog_trips"],
        "learner_phase_s": on.get("learner_phase_s"),
        "curve": _curve(run),
    }


def actor_only_row(rate: float, seconds: float, work: Path) -> dict:
    run = work / f"actor-{rate:g}"
    steps = int(rate * seconds)
    s = _train(["--online", "--control-rate", str(rate), "--total-steps", str(steps),
                "--set", f"{ALGO}.learning_starts=100000000", "--set", "train.eval_every=0",
                "--set", "train.eval_episodes=1"], run, seconds + 300)  # fmt: skip
    on = s["online"]
    return {
        "mode": "actor only (no learner)",
        "rate_hz": rate,
        **_tick_fields(on),
    }


def offline_row(work: Path) -> dict:
    run = work / "offline"
    s = _train(["--total-steps", "100000"], run, 1200)
    return {
        "mode": "offline (as fast as the env goes)",
        "rate_hz": None,
        **_solve_fields(s),
        "steps_per_s": s["steps_per_s"],
        "curve": _curve(run),
    }


def _learner(device: str, graphs: bool = False) -> str:
    if device.startswith("cuda"):
        step = ", its gradient step replayed from a CUDA graph" if graphs else ", eager"
        return f"learner on {device}{step} (the actor on the host, 1 torch thread)"
    return "learner on the CPU with 1 torch thread"


def _fmt(v, spec="{:,.0f}"):
    return "—" if v is None else spec.format(v)


def write(result: dict, out: Path) -> None:
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    rows = result["rows"]
    task = TASKS[result.get("algo", "sac")]
    threshold = result["threshold"]
    lines = [
        f"# Online learning: {task['env']}, real-time actor + concurrent "
        f"{result.get('algo', 'sac').upper()} learner ({result['tag']})",
        "",
        f"`{result['command']}`, {result['date']}, {result['machine']}. One seed per row "
        f"(seed 1), {_learner(result.get('device', 'cpu'), result.get('cuda_graphs', False))}; each online run capped at "
        f"{result['max_wall_s']:g} s. Threshold: eval ≥ {threshold:g} ({task['eval']}; the "
        "run stops after two in a row and a verdict on unseen seeds).",
        "",
        f"| mode | rate Hz | first eval ≥ {threshold:g} at (s) | env steps then | stopped as "
        "solved at (s) | final eval | ticks | deadline misses | tick p50 µs | tick p99 µs "
        "| tick max µs | updates/s | updates per env step |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        miss = r.get("deadline_misses")
        misses = "—" if miss is None else f"{miss} ({r['deadline_miss_fraction']:.3%})"
        lines.append(
            f"| {r['mode']} | {_fmt(r['rate_hz'], '{:g}')} | "
            f"{_fmt(r.get('wall_to_threshold_s'), '{:.0f}')} | "
            f"{_fmt(r.get('steps_to_threshold'))} | "
            f"{_fmt(r.get('wall_to_solved_stop_s'), '{:.0f}')} | "
            f"{_fmt(r.get('final_eval'), '{:.1f}')} | {_fmt(r.get('ticks'))} | {misses} | "
            f"{_fmt(r.get('tick_p50_us'))} | {_fmt(r.get('tick_p99_us'))} | "
            f"{_fmt(r.get('tick_max_us'))} | {_fmt(r.get('updates_per_s'), '{:.1f}')} | "
            f"{_fmt(r.get('updates_per_env_step'), '{:.2f}')} |"
        )
    phased = [r for r in rows if r.get("learner_phase_s")]
    if phased:
        names = list(phased[0]["learner_phase_s"])
        lines += [
            "",
            "Where the learner's wall time went, per online row (seconds of host time by phase"
            " of its loop; a phase that waits on the GPU carries that wait):",
            "",
            "| mode | rate Hz | " + " | ".join(n.replace("_", " ") for n in names) + " |",
            "|---|---|" + "---|" * len(names),
            *(f"| {r['mode']} | {r['rate_hz']:g} | "
              + " | ".join(f"{r['learner_phase_s'][n]:.1f}" for n in names) + " |"
              for r in phased),
        ]  # fmt: skip
    lines += ["", *result.get("notes", [])]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    try:
        fig, ax = pyplot().subplots(figsize=(7.5, 4))
        for r in rows:
            if r.get("curve"):
                label = f"{r['mode']}, {r['rate_hz']:g} Hz" if r["rate_hz"] else r["mode"]
                xs, ys = zip(*r["curve"], strict=True)
                ax.plot(xs, ys, marker="o", ms=3, label=label)
        ax.axhline(threshold, color="grey", ls="--", lw=1, label=f"threshold {threshold:g}")
        ax.set_xlabel("wall time (s)")
        ax.set_ylabel("evaluation return")
        algo = result.get("algo", "sac").upper()
        ax.set_title(f"{task['env']}, {algo}: evaluation return against wall time")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
        save_figure(fig, out.with_suffix(".png"))
    except Exception as exc:  # a plot must never lose the figures
        print(f"plot not written: {exc}", file=sys.stderr)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", choices=sorted(TASKS), default="sac",
                   help="sac (Pendulum-v1, the default) or dqn (CartPole-v1)")  # fmt: skip
    p.add_argument("--rates", default="20,50,100,200", help="control rates in Hz, comma list")
    p.add_argument("--max-wall", type=float, default=300.0, help="cap per online run (s)")
    p.add_argument("--actor-seconds", type=float, default=20.0, help="each actor-only run (s)")
    p.add_argument("--tag", default="cpu", help="machine tag in the output name")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="the learner's device")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="SAC on CUDA: replay the gradient step from a CUDA graph")  # fmt: skip
    p.add_argument("--no-actor-only", action="store_true", help="skip the actor-only rows")
    p.add_argument("--work", type=Path, default=Path("/tmp/bench_online"), help="run folders")
    p.add_argument("--no-offline", action="store_true", help="skip the offline baseline")
    p.add_argument(
        "--droq",
        metavar="HZ:UTD",
        action="append",
        default=[],
        help="also an online run with DroQ critics at this rate and update-to-data ratio",
    )
    args = p.parse_args()
    global ALGO, DEVICE
    ALGO, DEVICE = args.algo, args.device
    if DEVICE == "cuda" and args.tag == "cpu":
        p.error("--device cuda: name the machine with --tag (e.g. --tag h200), not cpu")
    if args.cuda_graphs and (ALGO != "sac" or not DEVICE.startswith("cuda")):
        p.error("--cuda-graphs: SAC with --device cuda only")
    GRAPHS[:] = ["--cuda-graphs"] if args.cuda_graphs else []
    if args.droq and ALGO != "sac":
        p.error("--droq: DroQ critics are SAC's; drop it with --algo dqn")
    rates = [float(r) for r in args.rates.split(",")]
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for rate in [] if args.no_actor_only else rates:
        print(f"actor only at {rate:g} Hz ...", flush=True)
        rows.append(actor_only_row(rate, args.actor_seconds, args.work))
    for rate in rates:
        print(f"online at {rate:g} Hz ...", flush=True)
        rows.append(online_row(rate, args.max_wall, args.work))
    for spec in args.droq:
        rate, _, utd = spec.partition(":")
        print(f"online at {rate} Hz, DroQ, UTD {utd} ...", flush=True)
        rows.append(online_row(float(rate), args.max_wall, args.work, float(utd), droq=True))
    if not args.no_offline:
        print("offline ...", flush=True)
        rows.append(offline_row(args.work))
    import torch

    result = {
        "tag": args.tag,
        "command": "python tools/bench_online.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, torch {torch.__version__}"
        + (f", {torch.cuda.get_device_name()}" if DEVICE.startswith("cuda") else ""),
        "max_wall_s": args.max_wall,
        "algo": ALGO,
        "device": DEVICE,
        "cuda_graphs": bool(GRAPHS),
        "env": TASKS[ALGO]["env"],
        "threshold": TASKS[ALGO]["threshold"],
        "rows": rows,
    }
    out = ROOT / "docs" / "benchmarks" / f"online_{args.tag}{TASKS[ALGO]['suffix']}"
    write(result, out)
    print(out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
