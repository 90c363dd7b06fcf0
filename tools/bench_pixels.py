"""Benchmark: orin_rl PPO against Stable-Baselines3 PPO on a small pixel task (MinAtar), the same
frames, network and settings, 3 seeds, on this machine.

For each seed both trainers run in their own process (interleaved, so machine noise hits both)
for the same number of env steps: orin_rl with its MinAtar preset (``orin-rl train``), SB3 with
``tools/peers/sb3_ppo_pixels.py`` (orin_rl's encoder as its features extractor, one for the
actor and one for the critic, the preset's PPO settings). Reported per trainer: its training
loop's env steps per second, and the return of its final policy over the same evaluation
episodes (deterministic actions, seeds 10,000 + i, played by one evaluator for both).

    python tools/bench_pixels.py --seeds 1,2,3 --total-steps 250000
    # writes docs/benchmarks/pixels_cpu_2core.json and .md
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
from train_bench_common import machine_line  # noqa: E402

MAX_EPISODE_STEPS = 10_000
"""An evaluation episode is cut here (MinAtar sets no time limit)."""


def _env(env_id: str):
    from orin_rl.config.presets import PRESETS
    from orin_rl.envs.factory import make_env

    return make_env(env_id, {"wrappers": PRESETS[env_id]["env.wrappers"]})


def evaluate(predict, env_id: str, episodes: int) -> list[float]:
    """Returns of ``episodes`` deterministic episodes, seeds 10,000 + i."""
    env, returns = _env(env_id), []
    for i in range(episodes):
        obs, _ = env.reset(seed=10_000 + i)
        total, steps, done = 0.0, 0, False
        while not done and steps < MAX_EPISODE_STEPS:
            action = predict(obs)
            obs, reward, term, trunc, _ = env.step(int(action))
            total, steps, done = total + float(reward), steps + 1, term or trunc
        returns.append(total)
    env.close()
    return returns


def _preset(env_id: str) -> dict:
    """The preset both trainers took (orin_rl's as is; the SB3 peer reads the same dict)."""
    from orin_rl.config.presets import PRESETS

    return dict(PRESETS[env_id])


def run_ours(env_id: str, seed: int, total: int, workdir: Path) -> tuple[dict, Path]:
    out = workdir / f"ours-{seed}"
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--env", env_id, "--device",
           "cpu", "--seed", str(seed), "--total-steps", str(total), "--out", str(out),
           "--no-progress", "--set", "train.eval_every=0"]  # fmt: skip
    subprocess.run(
        cmd, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    s = json.loads((out / "summary.json").read_text())
    return {"total_steps": s["total_steps"], "steps_per_s": s["steps_per_s"]}, out


def run_peer(env_id: str, seed: int, total: int, workdir: Path) -> tuple[dict, Path]:
    out = workdir / f"sb3-{seed}.zip"
    cmd = [sys.executable, str(ROOT / "tools" / "peers" / "sb3_ppo_pixels.py"), "--env", env_id,
           "--seed", str(seed), "--total-steps", str(total), "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, check=True, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    s = json.loads(proc.stdout.strip().splitlines()[-1])
    return {"total_steps": s["total_steps"], "steps_per_s": s["steps_per_s"]}, out


def predictor(trainer: str, path: Path):
    """obs -> action of a trained policy, deterministic."""
    if trainer == "orin_rl":
        from orin_rl.policy import load_policy

        policy = load_policy(path, backend="torch")
    else:
        from stable_baselines3 import PPO

        policy = PPO.load(path, device="cpu")
    return lambda obs: policy.predict(np.asarray(obs), deterministic=True)[0]


def markdown(result: dict) -> str:
    s, ours, peer = result["summary"], result["summary"]["orin_rl"], result["summary"]["sb3"]
    lines = [
        f"# Pixels on the CPU box: orin_rl PPO vs Stable-Baselines3 PPO ({result['env_id']})",
        "",
        f"{result['machine']}; {result['date']}; {len(result['seeds'])} seeds, "
        f"{result['total_steps']:,} env steps each; evaluation: {result['eval_episodes']} "
        "deterministic episodes (seeds 10,000 + i), one evaluator for both.",
        "",
        "Same frames (`orin_rl.envs.images.minatar`: (4, 10, 10) uint8), same network "
        "(`ImageEncoder('small')` for the actor and for the critic, linear heads on its 128 "
        "features), same PPO settings (the MinAtar preset: 16 envs x 128 steps, 4 epochs x 4 "
        "minibatches, lr 5e-4 annealed, clip 0.2 on policy and value, entropy 0.01). orin_rl "
        "stores the frames uint8 (the encoder scales them); SB3's rollout buffer stores float32. "
        "Advantages normalised per minibatch in both (the preset's "
        "ppo.normalize_advantage_per_minibatch, since 2026-12-05's third session; orin_rl "
        "normalised the whole rollout's before). One difference left in PPO itself: SB3's "
        "value clipping takes the clipped loss alone (orin_rl's, PureJaxRL's and CleanRL's, "
        "the larger of clipped and unclipped). Threads: orin_rl's "
        "train.torch_threads=1; SB3 the peer's --threads (1 since 2026-12-05's second session; "
        "the first record of this file ran it with torch's default, 2, on a 2-core box shared "
        "with other work).",
        "",
        "| seed | orin_rl return | SB3 return | orin_rl steps/s | SB3 steps/s |",
        "|---:|---:|---:|---:|---:|",
    ]
    for row in result["runs"]:
        lines.append(f"| {row['seed']} | {row['orin_rl']['eval_mean']:.2f} | "
                     f"{row['sb3']['eval_mean']:.2f} | {row['orin_rl']['steps_per_s']:,.0f} | "
                     f"{row['sb3']['steps_per_s']:,.0f} |")  # fmt: skip
    lines += [
        f"| **mean** | **{ours['eval_mean']:.2f}** | **{peer['eval_mean']:.2f}** | "
        f"**{ours['steps_per_s']:,.0f}** | **{peer['steps_per_s']:,.0f}** |",
        "",
        f"Return ratio (orin_rl / SB3, means of the seeds): {s['return_ratio']:.2f} "
        f"(target >= 0.9); speed ratio: {s['speed_ratio']:.2f} (target >= 1).",
        "",
        f"Command: `{result['command']}`",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="MinAtar/Breakout-v1")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--total-steps", type=int, default=250_000)
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/pixels_cpu_2core")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in seeds:
            row: dict = {"seed": seed}
            for trainer, run in (("orin_rl", run_ours), ("sb3", run_peer)):
                start = time.perf_counter()
                stats, path = run(args.env, seed, args.total_steps, Path(tmp))
                stats["process_wall_s"] = round(time.perf_counter() - start, 1)
                returns = evaluate(predictor(trainer, path), args.env, args.eval_episodes)
                stats["eval_mean"] = statistics.fmean(returns)
                stats["eval_returns"] = returns
                row[trainer] = stats
                print(seed, trainer, {k: v for k, v in stats.items() if k != "eval_returns"},
                      flush=True)  # fmt: skip
            runs.append(row)
    summary = {
        trainer: {key: statistics.fmean(r[trainer][key] for r in runs)
                  for key in ("eval_mean", "steps_per_s")}
        for trainer in ("orin_rl", "sb3")
    }  # fmt: skip
    summary["return_ratio"] = summary["orin_rl"]["eval_mean"] / max(
        summary["sb3"]["eval_mean"], 1e-9
    )
    summary["speed_ratio"] = summary["orin_rl"]["steps_per_s"] / summary["sb3"]["steps_per_s"]
    result = {
        "benchmark": "pixels: orin_rl PPO vs SB3 PPO, same frames, network and settings",
        "date": date.today().isoformat(),
        "machine": machine_line(),
        "env_id": args.env,
        "seeds": seeds,
        "total_steps": args.total_steps,
        "eval_episodes": args.eval_episodes,
        "preset": _preset(args.env),
        "command": "python tools/bench_pixels.py " + " ".join(sys.argv[1:]),
        "summary": summary,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    args.out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
