"""GPU-resident PPO against PureJaxRL's published CartPole-v1 figures (``bench_train.py --suite
gpu``), and on a CPU box the GPU-native envs against the gymnasium path.

Each row is one ``orin-rl train`` process with PureJaxRL's CartPole hyper-parameters (4 envs x
128 steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed, 64x64 tanh, clip 0.2, ent 0.01,
gamma 0.99, lambda 0.95, grad clip 0.5). Wall time is the whole process: interpreter start-up,
imports, CUDA context, graph capture / compile, training, and the final 20-episode evaluation
(on gymnasium's CartPole, not on our env). PureJaxRL's figures were measured on this H200
kind by the issue's author (they are quoted, not re-run here: JAX and PureJaxRL are not part of
this project's environment).
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]

PUREJAXRL_PPO = [
    "ppo.num_steps=128",
    "ppo.num_epochs=4",
    "ppo.num_minibatches=4",
    "ppo.learning_rate=2.5e-4",
    "ppo.anneal_lr=true",
    "ppo.hidden_sizes=[64,64]",
    "ppo.activation=tanh",
    "ppo.clip_coef=0.2",
    "ppo.ent_coef=0.01",
    "ppo.vf_coef=0.5",
    "ppo.gamma=0.99",
    "ppo.gae_lambda=0.95",
    "ppo.max_grad_norm=0.5",
    "train.eval_every=0",
    "train.stop_at_threshold=false",
    "train.checkpoint_every=1000000",
    "train.log_every=10",
    "train.tensorboard=false",
]

# Quoted from the issue (PureJaxRL on the H200 kind); CleanRL ppo.py likewise.
REFERENCE = {
    "1 agent, 4 envs, 5e5 steps": {"wall_s": 9.2 + 5.6, "steps_per_s": 89_700, "final": 500},
    "1 agent, 4096 envs x 128 x 100 updates": {"wall_s": 1.44, "steps_per_s": 36_400_000},
    "512 agents x 4 envs x 5e5 steps": {"wall_s": 10.5, "steps_per_s": 24_300_000, "final": 489},
}
CLEANRL_STEPS_PER_S = 1_600

GPU_ROWS = [
    # (row label, reference key, orin-rl train arguments)
    ("1 agent, 4 envs: graphs fp32", "1 agent, 4 envs, 5e5 steps",
     ["--num-envs", "4", "--total-steps", "500000", "--env-backend", "gpu", "--cuda-graphs"]),
    ("1 agent, 4 envs: graphs bf16", "1 agent, 4 envs, 5e5 steps",
     ["--num-envs", "4", "--total-steps", "500000", "--env-backend", "gpu", "--cuda-graphs",
      "--precision", "bf16"]),
    ("1 agent, 4 envs: graphs fp32 + torch.compile", "1 agent, 4 envs, 5e5 steps",
     ["--num-envs", "4", "--total-steps", "500000", "--env-backend", "gpu", "--cuda-graphs",
      "--compile"]),
    ("1 agent, 4 envs: eager fp32, 5e4 steps (a tenth)", None,
     ["--num-envs", "4", "--total-steps", "50000", "--env-backend", "gpu"]),
    ("1 agent, 4096 envs: graphs fp32", "1 agent, 4096 envs x 128 x 100 updates",
     ["--num-envs", "4096", "--total-steps", str(4096 * 128 * 100), "--env-backend", "gpu",
      "--cuda-graphs"]),
    ("1 agent, 4096 envs: eager fp32", "1 agent, 4096 envs x 128 x 100 updates",
     ["--num-envs", "4096", "--total-steps", str(4096 * 128 * 100), "--env-backend", "gpu"]),
    ("512 agents x 4 envs x 5e5 steps: graphs fp32", "512 agents x 4 envs x 5e5 steps",
     ["--num-envs", "4", "--num-agents", "512", "--total-steps", "500000", "--env-backend",
      "gpu", "--cuda-graphs"]),
    ("CPU envs (gymnasium), GPU learner, 4 envs, 5e4 steps", None,
     ["--num-envs", "4", "--total-steps", "50000", "--env-backend", "gym"]),
]  # fmt: skip


def run_row(args: list[str], device: str, workdir: Path, seed: int = 1) -> dict:
    """One ``orin-rl train`` process; its summary plus the process wall time."""
    out = workdir / f"run-{time.monotonic_ns()}"
    cmd = [
        sys.executable,
        "-m",
        "orin_rl.cli",
        "-q",
        "train",
        "--env",
        "CartPole-v1",
        "--device",
        device,
        "--seed",
        str(seed),
        "--out",
        str(out),
        "--no-progress",
        *args,
    ]
    for override in PUREJAXRL_PPO:
        cmd += ["--set", override]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)  # fmt: skip
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:], "process_wall_s": wall}
    s = json.loads((out / "summary.json").read_text())
    agents = s.get("num_agents") or 1  # steps count every agent's environment steps
    return {
        "process_wall_s": round(wall, 3),
        "train_time_s": s["wall_time_s"],
        "total_steps": s["total_steps"] * agents,
        "steps_per_s": round(s["total_steps"] * agents / wall),
        "train_steps_per_s": round(s["steps_per_s"] * agents),
        "final_eval_mean": s["eval_return_mean"],
        "cuda_graphs": s["cuda_graphs"],
        "per_agent": s.get("agents"),
    }


def gpu_suite(rows: list, device: str) -> dict:
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, ref, args in tqdm(rows, desc="rows"):
            r = run_row(args, device, Path(tmp))
            r.update(label=label, reference=ref, args=args)
            if ref and "process_wall_s" in r and "error" not in r:
                r["wall_ratio_vs_purejaxrl"] = r["process_wall_s"] / REFERENCE[ref]["wall_s"]
            results.append(r)
    return {"rows": results, "reference": REFERENCE, "cleanrl_steps_per_s": CLEANRL_STEPS_PER_S}


def cpu_suite(seeds: int) -> dict:
    """CPU box: CartPole preset to the solved threshold, GPU-native envs vs gymnasium."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in tqdm(range(1, seeds + 1), desc="seeds"):
            for backend in ("gym", "gpu"):  # interleaved: machine noise hits both
                out = Path(tmp) / f"{backend}-{seed}"
                cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--env",
                       "CartPole-v1", "--device", "cpu", "--seed", str(seed), "--env-backend",
                       backend, "--out", str(out), "--no-progress"]  # fmt: skip
                start = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                wall = time.perf_counter() - start
                s = json.loads((out / "summary.json").read_text())
                runs.append({
                    "backend": backend, "seed": seed, "process_wall_s": round(wall, 3),
                    "time_to_solve_s": (s["solved_at"] or {}).get("time_s"),
                    "steps_per_s": round(s["steps_per_s"]),
                    "final_eval_mean": s["eval_return_mean"],
                })  # fmt: skip
    summary = {}
    for backend in ("gym", "gpu"):
        mine = [r for r in runs if r["backend"] == backend]
        solved = [r["time_to_solve_s"] for r in mine if r["time_to_solve_s"] is not None]
        summary[backend] = {
            "solved_runs": len(solved),
            "median_time_to_solve_s": statistics.median(solved) if solved else None,
            "median_steps_per_s": statistics.median(r["steps_per_s"] for r in mine),
        }
    g, c = summary["gpu"]["median_steps_per_s"], summary["gym"]["median_steps_per_s"]
    return {"runs": runs, "summary": summary, "steps_per_s_ratio_gpu_vs_gym": g / c}


def markdown(result: dict) -> str:
    lines = [f"# PPO CartPole-v1, GPU-native path ({result['machine']})", "",
             f"`{result['command']}`, {result['date']}, torch {result['torch']}.", ""]  # fmt: skip
    if "rows" in result:
        lines += ["| run | wall s (process) | steps/s (process) | steps/s (training loop) | "
                  "final eval | PureJaxRL wall s (quoted from issue 4, not run here) | "
                  "our process wall / PureJaxRL's |",
                  "|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in result["rows"]:
            ref = REFERENCE.get(r["reference"] or "", {})
            if "error" in r:
                lines.append(f"| {r['label']} | failed: {r['error']} | | | | | |")
                continue
            ratio = r.get("wall_ratio_vs_purejaxrl")
            lines.append(
                f"| {r['label']} | {r['process_wall_s']:.1f} | {r['steps_per_s']:,} | "
                f"{r['train_steps_per_s']:,} | "
                f"{r['final_eval_mean']} | {round(ref['wall_s'], 2) if ref else '—'} | "
                f"{f'{ratio:.2f}×' if ratio else '—'} |"
            )
        lines += ["", "The last column divides our whole process's wall time (start-up, CUDA "
                  "and Numba initialisation, capture and the final evaluation included) by "
                  "PureJaxRL's quoted figure, which was not run here and excludes JAX's compile "
                  "time: unlike quantities, so read it as an upper bound on how much slower we "
                  "are, not as a measured ratio.", "",
                  f"CleanRL ppo.py on this machine kind (quoted from issue 4, not run here): "
                  f"{result['cleanrl_steps_per_s']:,} steps/s.", ""]  # fmt: skip
    else:
        s = result["summary"]
        lines += ["| env backend | solved | median time to solve s | median steps/s |",
                  "|---|---|---|---|"]  # fmt: skip
        for k in ("gym", "gpu"):
            lines.append(f"| {k} | {s[k]['solved_runs']} | {s[k]['median_time_to_solve_s']} | "
                         f"{s[k]['median_steps_per_s']:,} |")  # fmt: skip
        lines += ["", f"steps/s ratio gpu / gym: {result['steps_per_s_ratio_gpu_vs_gym']:.2f}×"]
    return "\n".join(lines) + "\n"


def main(args) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        result = gpu_suite(GPU_ROWS, device)
        gpu = torch.cuda.get_device_name(0)
        name = args.name if args.name != "train_cpu" else "train_h200"
    else:
        result = cpu_suite(args.seeds)
        gpu = "no GPU"
        name = args.name if args.name != "train_cpu" else "train_gpu_envs_cpu"
    result.update(
        benchmark="ppo_cartpole_gpu_native",
        date=time.strftime("%Y-%m-%d"),
        machine=f"{gpu}; {platform.machine()}, {os.cpu_count()} CPUs",
        torch=torch.__version__,
        command="python tools/bench_train.py " + " ".join(sys.argv[1:]),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / f"{name}.md").write_text(markdown(result))
    print(markdown(result))
