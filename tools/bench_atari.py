"""Benchmark: orin_rl's PPO against CleanRL's ``ppo_atari_envpool`` on envpool's Atari, same call.

Both trainers step the same envpool games (8 envs, envpool's default preprocessing, a lost life
ends a training episode, clipped rewards), with the same network (the Nature CNN, one encoder,
two heads) and CleanRL's hyperparameters (orin_rl's ``Pong-v5`` preset of ``--env-backend
envpool``); the peer is CleanRL's script itself (``tools/peers/cleanrl_ppo_atari_envpool.py``,
changed only for envpool 1.2.7's gymnasium API). Every run of both trainers starts at once, each
process on its own set of CPU cores (its affinity), all sharing the one GPU, and each stops at the
same wall (``--wall``): the same resources for both, so the steps/s compare.

- steps/s: a run's environment steps over its loop's wall (CleanRL's own ``SPS``; orin_rl's
  ``steps_per_s`` of metrics.jsonl, both from the loop's start);
- return at equal steps: at S, the smallest final step count of all the runs, each run's mean
  score of the last 100 games finished by S (CleanRL's printed ``episodic_return``s; orin_rl's
  ``charts/episode_return_mean``, the same window, at its iteration nearest S).

    python tools/bench_atari.py launch --out OUT --wall 840 --seeds 1,2   # starts, returns
    python tools/bench_atari.py wait --out OUT --until 590                  # waits for them
    python tools/bench_atari.py report --out OUT --name atari_h100          # JSON + Markdown
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PEER = ROOT / "tools" / "peers" / "cleanrl_ppo_atari_envpool.py"
WINDOW = 100
"""Games behind a mean return (orin_rl's episode window)."""


def _cores(index: int, runs: int) -> list[int]:
    n = os.cpu_count() or 1
    per = max(1, n // runs)
    return list(range(index * per, index * per + per))


def commands(env_id: str, seed: int, wall: float, out: Path, python: str) -> dict[str, list[str]]:
    """Each trainer's command line for one seed."""
    ours = [python, "-m", "orin_rl.cli", "train", "--env", env_id, "--env-backend", "envpool",
            "--device", "cuda", "--cuda-graphs", "--seed", str(seed),
            "--out", str(out / f"ours_s{seed}"),
            "--set", f"train.max_wall_s={wall}", "--set", "train.eval_every=0",
            "--set", "train.eval_episodes=8", "--set", "train.tensorboard=false"]  # fmt: skip
    peer = ["timeout", "--signal=INT", str(int(wall)), python, "-u", str(PEER), "--env-id", env_id,
            "--seed", str(seed), "--total-timesteps", "10000000"]  # fmt: skip
    return {"ours": ours, "cleanrl": peer}


def launch(args: argparse.Namespace) -> None:
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = [(who, s) for s in seeds for who in ("ours", "cleanrl")]
    meta = {"env_id": args.env, "seeds": seeds, "wall_s": args.wall, "cpus": os.cpu_count(),
            "runs": {}}  # fmt: skip
    for i, (who, seed) in enumerate(runs):
        cmd = commands(args.env, seed, args.wall, out, sys.executable)[who]
        cores = _cores(i, len(runs))
        cwd = out / f"{who}_s{seed}_cwd"
        cwd.mkdir(exist_ok=True)
        log = open(out / f"{who}_s{seed}.log", "w")  # noqa: SIM115 (the child keeps it)
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True,  # outlives the caller
                                preexec_fn=lambda c=cores: os.sched_setaffinity(0, c))  # fmt: skip
        span = f"{cores[0]}-{cores[-1]}"
        meta["runs"][f"{who}_s{seed}"] = {"pid": proc.pid, "cores": span, "command": cmd,
                                          "started": time.time()}  # fmt: skip
        print(f"started {who} seed {seed} on cores {span}: pid {proc.pid}")
    (out / "launch.json").write_text(json.dumps(meta, indent=2))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return (
        Path(f"/proc/{pid}").exists()
        and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    )


def wait(args: argparse.Namespace) -> None:
    meta = json.loads((args.out / "launch.json").read_text())
    began = time.time()
    while time.time() - began < args.until:
        alive = [k for k, r in meta["runs"].items() if _alive(r["pid"])]
        if not alive:
            break
        time.sleep(10)
    for key in meta["runs"]:
        tail = (args.out / f"{key}.log").read_text(errors="replace").splitlines()[-2:]
        print(key, "|", " / ".join(tail)[-200:])


def peer_run(log: str) -> dict:
    """CleanRL's printed games (step, score) and its last SPS."""
    games = [(int(m[1]), float(m[2])) for m in
             re.finditer(r"global_step=(\d+), episodic_return=\[?(-?[\d.]+)", log)]  # fmt: skip
    sps = [int(m[1]) for m in re.finditer(r"SPS: (\d+)", log)]
    iterations = len(sps)
    return {"games": games, "steps_per_s": sps[-1] if sps else None,
            "final_step": iterations * 8 * 128}  # fmt: skip


def ours_run(folder: Path) -> dict:
    records = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()
               if line.strip()]  # fmt: skip
    train = [r for r in records if "steps_per_s" in r]
    return {
        "records": train,
        "steps_per_s": train[-1]["steps_per_s"] if train else None,
        "final_step": train[-1]["global_step"] if train else 0,
    }


def return_at(run: dict, who: str, step: int) -> float | None:
    if who == "cleanrl":
        scores = [score for s, score in run["games"] if s <= step][-WINDOW:]
        return statistics.fmean(scores) if scores else None
    rows = [r for r in run["records"] if "charts/episode_return_mean" in r]
    if not rows:
        return None
    near = min(rows, key=lambda r: abs(r["global_step"] - step))
    return near["charts/episode_return_mean"]


def report(args: argparse.Namespace) -> None:
    import torch

    meta = json.loads((args.out / "launch.json").read_text())
    runs: dict[str, dict] = {}
    for key in meta["runs"]:
        who, seed = key.split("_s")
        if who == "cleanrl":
            runs[key] = peer_run((args.out / f"{key}.log").read_text(errors="replace"))
        else:
            folder = args.out / f"ours_s{seed}"
            runs[key] = ours_run(folder) if (folder / "metrics.jsonl").exists() else \
                {"records": [], "steps_per_s": None, "final_step": 0}  # fmt: skip
    finals = [r["final_step"] for r in runs.values() if r["final_step"]]
    equal = min(finals) if finals else 0
    rows = []
    for seed in meta["seeds"]:
        o, c = runs[f"ours_s{seed}"], runs[f"cleanrl_s{seed}"]
        ro, rc = return_at(o, "ours", equal), return_at(c, "cleanrl", equal)
        rows.append({
            "seed": seed,
            "ours_steps_per_s": o["steps_per_s"], "cleanrl_steps_per_s": c["steps_per_s"],
            "steps_per_s_ratio": (o["steps_per_s"] / c["steps_per_s"]
                                  if o["steps_per_s"] and c["steps_per_s"] else None),
            "ours_final_step": o["final_step"], "cleanrl_final_step": c["final_step"],
            "ours_return_at_equal_steps": ro, "cleanrl_return_at_equal_steps": rc,
            "cleanrl_games": len(c["games"]),
            "ours_summary": _summary(args.out / f"ours_s{seed}"),
        })  # fmt: skip
    ratios = [r["steps_per_s_ratio"] for r in rows if r["steps_per_s_ratio"]]

    def mean_of(key: str) -> float | None:
        values = [r[key] for r in rows if r[key] is not None]
        return statistics.fmean(values) if len(values) == len(rows) else None

    result = {
        "benchmark": "atari_envpool_ppo",
        "date": args.date or time.strftime("%Y-%m-%d"),
        "machine": args.machine or _gpu_name(torch),
        "note": args.note,
        "cpus": meta.get("cpus") or _cpus_of(meta),
        "env_id": meta["env_id"],
        "wall_s": meta["wall_s"],
        "equal_steps": equal,
        "window_games": WINDOW,
        "peer": "CleanRL ppo_atari_envpool.py @ fe8d8a0 (tools/peers/cleanrl_ppo_atari_envpool.py)",
        "commands": {k: r["command"] for k, r in meta["runs"].items()},
        "cores": {k: r["cores"] for k, r in meta["runs"].items()},
        "rows": rows,
        "steps_per_s_ratio_mean": statistics.fmean(ratios) if ratios else None,
        "ours_return_at_equal_steps_mean": mean_of("ours_return_at_equal_steps"),
        "cleanrl_return_at_equal_steps_mean": mean_of("cleanrl_return_at_equal_steps"),
        "curves": {
            k: (
                r["games"]
                if "games" in r
                else [(x["global_step"], x.get("charts/episode_return_mean")) for x in r["records"]]
            )
            for k, r in runs.items()
        },
    }
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / f"{args.name}.md").write_text(markdown(result))
    _plot(result, args.out / f"{args.name}.png")
    print(markdown(result))


def _cpus_of(meta: dict) -> int:
    """The launching machine's CPUs, from the cores its runs were given (a launch.json written
    before ``cpus`` was recorded)."""
    return 1 + max(int(r["cores"].split("-")[-1]) for r in meta["runs"].values())


def _gpu_name(torch) -> str:
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else platform.machine()


def _summary(folder: Path) -> dict | None:
    path = folder / "summary.json"
    if not path.exists():
        return None
    s = json.loads(path.read_text())
    keep = ("stop_reason", "total_steps", "train_wall_s", "eval_return_mean", "eval_return_std",
            "startup")  # fmt: skip
    return {k: s[k] for k in keep if k in s}


def _fmt(x, spec=",.0f") -> str:
    return "—" if x is None else format(x, spec)


def markdown(r: dict) -> str:
    lines = [
        f"# Atari on envpool: orin_rl PPO against CleanRL's ppo_atari_envpool ({r['machine']})",
        "",
        f"Run {r['date']}, {r['env_id']}, every run at once for {r['wall_s']:.0f} s, each on its "
        f"own cores ({r['cpus']} CPUs), one GPU shared. Peer: {r['peer']}. "
        "`python tools/bench_atari.py launch/wait/report` (its docstring says how each figure "
        "is made).",
        "",
        f"Return at equal steps: the mean score of the last {r['window_games']} games finished "
        f"by step {r['equal_steps']:,} (the smallest final step of all runs).",
        "",
        "| seed | orin_rl steps/s | CleanRL steps/s | ratio | orin_rl steps | CleanRL steps "
        "| orin_rl return | CleanRL return |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in r["rows"]:
        lines.append(
            f"| {row['seed']} | {_fmt(row['ours_steps_per_s'])} | {_fmt(row['cleanrl_steps_per_s'])} "
            f"| {_fmt(row['steps_per_s_ratio'], '.2f')}× | {row['ours_final_step']:,} "
            f"| {row['cleanrl_final_step']:,} | {_fmt(row['ours_return_at_equal_steps'], '.1f')} "
            f"| {_fmt(row['cleanrl_return_at_equal_steps'], '.1f')} |"
        )
    lines += [
        "",
        f"Mean steps/s ratio (orin_rl / CleanRL): **{_fmt(r['steps_per_s_ratio_mean'], '.2f')}×**. "
        f"Mean return at step {r['equal_steps']:,} over the seeds: orin_rl "
        f"{_fmt(r['ours_return_at_equal_steps_mean'], '.2f')}, CleanRL "
        f"{_fmt(r['cleanrl_return_at_equal_steps_mean'], '.2f')}.",
        "",
    ]
    for row in r["rows"]:
        s = row.get("ours_summary") or {}
        if "eval_return_mean" in s:
            lines.append(
                f"- orin_rl seed {row['seed']}: stopped by {s.get('stop_reason')} at "
                f"{s.get('total_steps', 0):,} steps; final deterministic evaluation (whole games, "
                f"unclipped) {s['eval_return_mean']:.1f} ± {s['eval_return_std']:.1f}; process "
                f"start to first iteration {s.get('startup', {}).get('total_s', float('nan')):.1f} s."
            )
    if r.get("note"):
        lines += ["", r["note"]]
    lines.append("")
    return "\n".join(lines)


def _plot(r: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for key, points in r["curves"].items():
        pts = [(s, v) for s, v in points if v is not None]
        if key.startswith("cleanrl"):  # rolling mean of the last WINDOW games, as ours
            scores = [v for _, v in pts]
            pts = [(s, statistics.fmean(scores[max(0, i - WINDOW + 1): i + 1]))
                   for i, (s, _) in enumerate(pts)]  # fmt: skip
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=key)
    ax.set_xlabel("environment steps")
    ax.set_ylabel(f"mean score, last {WINDOW} games")
    ax.set_title(f"{r['env_id']}: orin_rl vs CleanRL (envpool)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    p = sub.add_parser("launch")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--env", default="Pong-v5")
    p.add_argument("--seeds", default="1,2")
    p.add_argument("--wall", type=float, default=840.0)
    p = sub.add_parser("wait")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--until", type=float, default=580.0)
    p = sub.add_parser("report")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--name", default="atari_h100")
    p.add_argument("--machine", help="the GPU's name (default: torch's name of GPU 0)")
    p.add_argument("--date", help="the run's date (default: today)")
    p.add_argument("--note", default="", help="a line for the Markdown (how the call ran)")
    args = parser.parse_args()
    {"launch": launch, "wait": wait, "report": report}[args.verb](args)


if __name__ == "__main__":
    main()
