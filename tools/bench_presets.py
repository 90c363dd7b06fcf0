"""Why Hopper-v5 did not learn without a preset: the preset against the dataclass defaults and
one change at a time, on gymnasium's CPU physics (16 envs, 1M steps, one seed each).

Each variant is one ``orin-rl train --env Hopper-v5`` (CPU learner) with periodic evaluation
(10 deterministic episodes every 20 iterations) and the trainer's final 10-episode verdict on
unseen seeds. Writes ``docs/benchmarks/hopper_presets_cpu.{json,md,png}``.

    python tools/bench_presets.py [--steps 1000000] [--variants A,B,...]

``--suite classic``: the Acrobot-v1 and Pendulum-v1 presets as they stand, seeds 1..N, each
run once as a user would; writes ``docs/benchmarks/classic_presets_cpu.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from bench_common import pyplot, save_figure  # noqa: E402

COMMON = ["--env", "Hopper-v5", "--num-envs", "16", "--device", "cpu", "--seed", "1",
          "--set", "train.eval_every=20", "--set", "train.eval_episodes=10"]  # fmt: skip
VARIANTS = {
    "A": ("dataclass defaults (--no-preset)", ["--no-preset"]),
    "B": ("the preset", []),
    "C": ("preset without reward normalisation", ["--set", "ppo.normalize_reward=false"]),
    "D": ("preset with value clipping", ["--set", "ppo.clip_value_loss=true"]),
    "E": (
        "defaults + the preset's 320 gradient steps an update (32 minibatches x 10 epochs)",
        ["--no-preset", "--set", "ppo.num_minibatches=32", "--set", "ppo.num_epochs=10"],
    ),
    "F": (
        "defaults + observation and reward normalisation, no value clipping (16 steps)",
        ["--no-preset", "--set", "ppo.normalize_obs=true", "--set", "ppo.normalize_reward=true",
         "--set", "ppo.clip_value_loss=false"],
    ),
}  # fmt: skip


CLASSIC = ("Acrobot-v1", "Pendulum-v1")


def run_classic(env_id: str, seed: int, workdir: Path) -> dict:
    """One ``orin-rl train --env ID --seed S`` with the preset as it stands: does it solve?"""
    run = workdir / f"{env_id}-{seed}"
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress", "--overwrite",
           "--env", env_id, "--device", "cpu", "--seed", str(seed), "--out", str(run)]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"env_id": env_id, "seed": seed, "error": proc.stderr[-2000:]}
    s = json.loads((run / "summary.json").read_text())
    return {
        "env_id": env_id,
        "seed": seed,
        "command": ["orin-rl", *cmd[4:]],
        "process_wall_s": time.perf_counter() - start,
        "solved": s["solved"],
        "threshold": s["solved_threshold"],
        "stop_reason": s["stop_reason"],
        "total_steps": s["total_steps"],
        "train_wall_s": s["wall_time_s"],
        "final_eval_mean": s["eval_return_mean"],
        "final_eval_std": s["eval_return_std"],
        "solved_at": s["solved_at"],
    }


def classic_markdown(result: dict) -> str:
    lines = [
        "# Classic-control presets on the CPU box: do they reach their thresholds?",
        "",
        f"CPU box ({result['machine']}); each run is `orin-rl train --env ID --device cpu "
        "--seed S` with the preset in `orin_rl/config/presets.py`: it stops once two periodic "
        "evaluations in a row and then the verdict evaluation (20 episodes on unseen seeds) "
        "reach the threshold, or at the preset's step cap. Command: `python tools/bench_presets.py "
        "--suite classic`.",
        "",
        "| env | threshold | solved runs | steps to stop (median) | final evaluations |",
        "|---|---|---|---|---|",
    ]
    for env_id in CLASSIC:
        rows = [r for r in result["rows"] if r["env_id"] == env_id and "error" not in r]
        if not rows:
            continue
        solved = sum(r["solved"] for r in rows)
        steps = statistics.median(r["total_steps"] for r in rows)
        finals = ", ".join(f"{r['final_eval_mean']:.1f}" for r in rows)
        lines.append(
            f"| {env_id} | {rows[0]['threshold']:g} | {solved}/{len(rows)} | {steps:,.0f} | {finals} |"
        )
    return "\n".join(lines) + "\n"


def run_variant(key: str, steps: int, workdir: Path) -> dict:
    from orin_rl.runners.logger import read_metrics

    label, extra = VARIANTS[key]
    run = workdir / f"hopper-{key}"
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress", "--overwrite",
           *COMMON, "--total-steps", str(steps), "--out", str(run), *extra]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"variant": key, "label": label, "error": proc.stderr[-2000:]}
    summary = json.loads((run / "summary.json").read_text())
    records = read_metrics(run / "metrics.jsonl")
    curve = [[r["global_step"], r["eval/return_mean"]] for r in records if "eval/return_mean" in r]
    config = (run / "config.yaml").read_text()
    return {
        "variant": key,
        "label": label,
        "command": ["orin-rl", *cmd[4:]],
        "process_wall_s": wall,
        "steps_per_s": summary["steps_per_s"],
        "final_eval_mean": summary["eval_return_mean"],
        "final_eval_std": summary["eval_return_std"],
        "best_periodic_eval": max((c[1] for c in curve), default=None),
        "first_step_at_1500": next((s for s, r in curve if r >= 1500), None),
        "curve": curve,
        "config": config,
    }


def _table_row(r: dict) -> str:
    """A variant's row of the Markdown table ("error" where its run failed)."""
    if "error" in r:
        return f"| {r['variant']} | {r['label']} | error | | | |"
    first = f"{r['first_step_at_1500']:,} steps" if r["first_step_at_1500"] else "never"
    best = r["best_periodic_eval"]
    return (
        f"| {r['variant']} | {r['label']} | {r['final_eval_mean']:.0f} ± {r['final_eval_std']:.0f} "
        f"| {'—' if best is None else f'{best:.0f}'} | {first} | {r['steps_per_s']:,.0f} |"
    )


def markdown(result: dict) -> str:
    lines = [
        "# Hopper-v5 on gymnasium's CPU physics: the preset against the defaults",
        "",
        f"CPU box ({result['machine']}), one seed per variant, {result['steps']:,} steps, 16 "
        "sync envs, CPU learner. Periodic evaluation: 10 deterministic episodes every 20 "
        "iterations; final: 10 episodes on unseen seeds. "
        f"Command: `python tools/bench_presets.py`.",
        "",
        "| variant | what | final eval | best periodic eval | first periodic eval ≥ 1,500 | steps/s |",
        "|---|---|---|---|---|---|",
        *map(_table_row, result["rows"]),
        "",
        "Periodic evaluations (steps: return):",
        "",
    ]
    for r in result["rows"]:
        if "curve" in r:
            pts = ", ".join(f"{s // 1000}k: {v:.0f}" for s, v in r["curve"][::3])
            lines.append(f"- {r['variant']}: {pts}")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> None:
    fig, ax = pyplot().subplots(figsize=(7, 4))
    for r in result["rows"]:
        if "curve" in r:
            ax.plot([c[0] for c in r["curve"]], [c[1] for c in r["curve"]],
                    label=f"{r['variant']}: {r['label']}", lw=1.4)  # fmt: skip
    ax.axhline(1500, ls="--", c="grey", lw=1)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("eval return (10 episodes)")
    ax.set_title("Hopper-v5, gymnasium CPU physics, 16 envs")
    ax.legend(fontsize=6.5, loc="upper left")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suite", choices=["hopper", "classic"], default="hopper")
    parser.add_argument("--seeds", type=int, default=5, help="classic: seeds 1..N per env")
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--workdir", type=Path, default=ROOT / "runs" / "bench-presets")
    parser.add_argument("--write", type=Path, default=ROOT / "docs/benchmarks/hopper_presets_cpu")
    args = parser.parse_args()
    if args.suite == "classic":
        rows = []
        for env_id in CLASSIC:
            for seed in range(1, args.seeds + 1):
                rows.append(run_classic(env_id, seed, args.workdir))
                print(json.dumps({k: v for k, v in rows[-1].items() if k != "command"}), flush=True)
        result = {"machine": f"{platform.node()}, Python {platform.python_version()}", "rows": rows}
        dest = ROOT / "docs/benchmarks/classic_presets_cpu"
        dest.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
        dest.with_suffix(".md").write_text(classic_markdown(result))
        return 0
    rows = []
    for key in args.variants.split(","):
        print(f"variant {key}: {VARIANTS[key][0]}", flush=True)
        rows.append(run_variant(key, args.steps, args.workdir))
        print(json.dumps({k: v for k, v in rows[-1].items() if k not in ("curve", "config")}))
    result = {"machine": f"{platform.node()}, Python {platform.python_version()}",
              "steps": args.steps, "rows": rows}  # fmt: skip
    args.write.parent.mkdir(parents=True, exist_ok=True)
    args.write.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.write.with_suffix(".md").write_text(markdown(result))
    plot(result, args.write.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
