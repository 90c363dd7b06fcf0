"""GPU-resident PPO against PureJaxRL, both run in this call on the same GPU
(``bench_train.py --suite gpu``), and on a CPU box the GPU-native envs against gymnasium.

Each of our rows is one ``orin-rl train`` process with PureJaxRL's CartPole hyper-parameters
(4 envs x 128 steps, 4 epochs x 4 minibatches, lr 2.5e-4 annealed, 64x64 tanh, clip 0.2,
ent 0.01, gamma 0.99, lambda 0.95, grad clip 0.5), on the fused kernels (``ppo.fused=auto``)
and on the general path (``ppo.fused=off``, CUDA graphs). Our process wall is the whole process:
interpreter start-up, imports, CUDA context, kernel compile / graph capture, training and the
final 20-episode evaluation on gymnasium's CartPole. ``ours_steps_per_s`` is the training loop's
rate from the run's summary (first-iteration compile included). A row's runs share kernel
caches that are empty at its start (Numba's, inductor's and Triton's, in fresh folders); the
first fused run and the first compiled run fill them (their walls are reported as cold-cache
walls), the later ones find them, as a machine's later runs do.

PureJaxRL (``../shared/peers/purejaxrl``, copied to ``.peers-purejaxrl``: its ppo.py unmodified
and a timing script) runs first, in its own process: compile and train timed apart.
"""

from __future__ import annotations

import glob
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
from bench_common import write_report
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

ROWS = {  # PureJaxRL's three settings (its bench.py rows of the same names)
    "single": ["--num-envs", "4", "--total-steps", "500000"],
    "envs4096": ["--num-envs", "4096", "--total-steps", str(4096 * 128 * 100)],
    "seeds512": ["--num-envs", "4", "--num-agents", "512", "--total-steps", "500000"],
}
GPU_GRAPHS = ["--env-backend", "gpu", "--cuda-graphs"]
PATHS = {
    "fused": [*GPU_GRAPHS, "--set", "ppo.fused=auto"],
    "general": [*GPU_GRAPHS, "--set", "ppo.fused=off"],
}
# float32 matmuls on the tensor cores (train.matmul=tf32): what JAX's default precision
# gives PureJaxRL on these GPUs (jax-ml/jax#18934); only torch's update has matmuls
TF32 = ["--set", "train.matmul=tf32"]
PATHS["fused-tf32"] = [*PATHS["fused"], *TF32]
# the fused rollout, torch's update compiled (ppo.compile_update) on the tensor cores
PATHS["fused-compile-tf32"] = [*PATHS["fused"], "--set", "ppo.compile_update=true", *TF32]
# the fused update's gradients by the gradient kernel (torch's update beyond its shapes: the
# default, ppo.fused_grads=kernel, until the GEMMs have run on a GPU) or by batched GEMMs
# (gemm_update; what ppo.fused_grads=auto picks on envs4096)
PATHS["fused-kernel"] = [*PATHS["fused"], "--set", "ppo.fused_grads=kernel"]
PATHS["fused-gemm"] = [*PATHS["fused"], "--set", "ppo.fused_grads=gemm"]
PATHS["fused-compile-tf32-pool"] = PATHS["fused-compile-tf32"]
PATH_ENV = {"fused-compile-tf32-pool": {"TORCHINDUCTOR_COMPILE_THREADS": str(os.cpu_count())}}
"""The same run with inductor's worker pool (ppo.compile_in_process turns it off by default)."""
PATH_ROWS = {
    "fused-compile-tf32": {"envs4096"},
    "fused-compile-tf32-pool": {"envs4096"},
    "fused-kernel": {"envs4096"},
    "fused-gemm": {"single", "seeds512", "envs4096"},
}
"""Paths run on some rows only: a compiled torch update replaces the fused update kernels
where they apply (minibatches up to fused.MAX_FUSED_MINIBATCH), so only envs4096 takes it;
``ppo.fused_grads=kernel`` (the default) is the gradient kernel on single and seeds512 and
torch's update on envs4096; ``fused-gemm`` runs the batched GEMMs on every row (``auto``'s
choice on envs4096)."""


def run_row(args: list[str], device: str, workdir: Path, seed: int = 1,
            env: dict | None = None) -> dict:  # fmt: skip
    """One ``orin-rl train`` process; its summary plus the process wall time."""
    out = workdir / f"run-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--env", "CartPole-v1",
           "--device", device, "--seed", str(seed), "--out", str(out), "--no-progress", *args]  # fmt: skip
    for override in PUREJAXRL_PPO:
        cmd += ["--set", override]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-3:], "process_wall_s": wall}
    s = json.loads((out / "summary.json").read_text())
    agents = s.get("num_agents") or 1  # steps count every agent's environment steps
    startup = s.get("startup") or {}
    after_loop = None  # the final evaluation, checkpoint, summary, plots and exit
    loop_rate = None  # after the first iteration (compile, warm-up, capture): PureJaxRL's
    # train_s leaves its compile out the same way
    if startup.get("total_s") is not None:
        before_loop = startup["total_s"] - startup["first_iteration_s"]
        after_loop = round(wall - before_loop - s["wall_time_s"], 3)
        loop_s = s["wall_time_s"] - startup["first_iteration_s"]
        if s.get("iterations", 0) > 1 and loop_s > 0:
            per_iteration = s["total_steps"] * agents / s["iterations"]
            loop_rate = round(per_iteration * (s["iterations"] - 1) / loop_s)
    return {
        "to_first_iteration_s": startup.get("total_s"),
        "startup": startup,
        "after_loop_s": after_loop,
        "process_wall_s": round(wall, 3),
        "train_time_s": s["wall_time_s"],
        "total_steps": s["total_steps"] * agents,
        "steps_per_s": round(s["steps_per_s"] * agents),
        "loop_steps_per_s": loop_rate,
        "final_eval_mean": s["eval_return_mean"],
        "fused": s.get("fused"),
        "fused_grads": s.get("fused_grads"),
        "cuda_graphs": s["cuda_graphs"],
        "agents_solved": (
            sum(a["eval_return_mean"] >= 475 for a in s["agents"]) if s.get("agents") else None
        ),
    }


def run_purejaxrl(peer_dir: Path, rows: list[str]) -> dict[str, dict]:
    """PureJaxRL's bench.py in its own process (gymnax from its whl/); one JSON line per row."""
    if not (peer_dir / "bench.py").exists():
        print(f"PureJaxRL not found in {peer_dir}: copy ../shared/peers/purejaxrl there")
        return {}
    site = tempfile.mkdtemp(prefix="pjx-")
    wheels = glob.glob(str(peer_dir / "whl" / "*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--upgrade", "--target", site, *wheels], check=True)  # fmt: skip
    env = {**os.environ, "PYTHONPATH": site}  # the machine's own JAX and numpy
    proc = subprocess.run([sys.executable, str(peer_dir / "bench.py"), "--rows", ",".join(rows)],
                          env=env, capture_output=True, text=True)  # fmt: skip
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            out[r["run"]] = r
    if proc.returncode != 0:
        print("PureJaxRL failed:", proc.stderr[-2000:])
    return out


JAX_MATMUL_CHECK = """
import json, numpy as np, jax, jax.numpy as jnp
rng = np.random.default_rng(0)
a, b = rng.standard_normal((512, 64)), rng.standard_normal((64, 64))
exact = a @ b
def err(precision):
    got = np.asarray(jnp.dot(jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32),
                             precision=precision), np.float64)
    return float(np.abs(got - exact).max() / np.abs(exact).max())
print(json.dumps({"device": str(jax.devices()[0]), "default_precision_rel_err": err(None),
                  "highest_precision_rel_err": err("highest")}))
"""
"""How JAX multiplies float32 matrices on this GPU by default: the relative error of its
default-precision and HIGHEST-precision dot against float64 (TF32 keeps a 10-bit mantissa:
errors near 1e-3 against float32's 1e-6)."""


def jax_matmul_precision() -> dict:
    proc = subprocess.run([sys.executable, "-c", JAX_MATMUL_CHECK], capture_output=True,
                          text=True)  # fmt: skip
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": proc.stderr[-300:]}


def gpu_suite(rows: list[str], paths: list[str], device: str, peer_dir: Path,
              on_row=None) -> dict:  # fmt: skip
    """PureJaxRL, then our rows; ``on_row(results so far)`` after each row (a run cut short
    by a time limit keeps the rows it finished)."""
    peer = run_purejaxrl(peer_dir, rows)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for row in tqdm(rows, desc="rows"):
            ours = {}
            # Kernel caches of this row's runs, empty at its start: Numba's, inductor's, Triton's
            cache = {**os.environ, **{k: tempfile.mkdtemp(dir=tmp) for k in (
                "NUMBA_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}}  # fmt: skip
            compiled_once = False
            for p in paths:
                if p in PATH_ROWS and row not in PATH_ROWS[p]:
                    continue
                env = {**cache, **PATH_ENV.get(p, {})}
                if p == "fused":  # first with an empty kernel cache (compile), then with it
                    ours["fused_cold_cache"] = run_row(ROWS[row] + PATHS[p], device, Path(tmp),
                                                       env=env)  # fmt: skip
                    # The second process still paid seconds in its first iteration on the H200
                    # (docs/benchmarks/startup_h200.json), the third did not: both are kept.
                    ours["fused_second_run"] = run_row(ROWS[row] + PATHS[p], device, Path(tmp),
                                                       env=env)  # fmt: skip
                elif "compile" in p and not compiled_once:  # inductor's cache empty: compiles
                    ours[f"{p}_cold_cache"] = run_row(ROWS[row] + PATHS[p], device, Path(tmp),
                                                      env=env)  # fmt: skip
                    compiled_once = True
                ours[p] = run_row(ROWS[row] + PATHS[p], device, Path(tmp), env=env)
            main = ours.get("fused") or next(iter(ours.values()))
            pj = peer.get(row, {})
            r = {
                "row": row,
                "ours_path": main.get("fused") or "general",
                "ours_steps_per_s": main.get("steps_per_s"),
                "purejaxrl_steps_per_s": pj.get("steps_per_s"),
                "ours_process_wall_s": main.get("process_wall_s"),
                "ours_process_wall_cold_cache_s": ours.get("fused_cold_cache", {}).get(
                    "process_wall_s"
                ),
                "ours_process_wall_second_run_s": ours.get("fused_second_run", {}).get(
                    "process_wall_s"
                ),
                "purejaxrl_compile_s": pj.get("compile_s"),
                "purejaxrl_train_s": pj.get("train_s"),
                "ours_final_eval": main.get("final_eval_mean"),
                "purejaxrl_final_return": pj.get("final_mean_training_return"),
                "runs": ours,
            }
            if r["ours_steps_per_s"] and r["purejaxrl_steps_per_s"]:
                r["steps_per_s_ratio"] = round(
                    r["ours_steps_per_s"] / r["purejaxrl_steps_per_s"], 3
                )
                total = r["purejaxrl_compile_s"] + r["purejaxrl_train_s"]
                r["wall_vs_purejaxrl_compile_plus_train"] = round(
                    r["ours_process_wall_s"] / total, 3
                )
            # Other rates against PureJaxRL's: (key prefix, our run, its rate); "loop" rates
            # leave out the first iteration, as PureJaxRL's train_s leaves out its compile.
            for prefix, run, key in (
                ("tf32", "fused-tf32", "steps_per_s"),
                ("loop", None, "loop_steps_per_s"),
                ("compile_tf32", "fused-compile-tf32", "steps_per_s"),
                ("compile_tf32_loop", "fused-compile-tf32", "loop_steps_per_s"),
                ("grads_kernel_loop", "fused-kernel", "loop_steps_per_s"),
                ("grads_gemm_loop", "fused-gemm", "loop_steps_per_s"),
            ):
                value = (ours.get(run, {}) if run else main).get(key)
                if value and r["purejaxrl_steps_per_s"]:
                    r[f"ours_{prefix}_steps_per_s"] = value
                    r[f"{prefix}_steps_per_s_ratio"] = round(value / r["purejaxrl_steps_per_s"], 3)
            if "general" in ours and ours["general"].get("steps_per_s") and main.get("steps_per_s"):
                r["fused_vs_general_steps_per_s"] = round(
                    main["steps_per_s"] / ours["general"]["steps_per_s"], 2
                )
            if row == "seeds512" and main.get("process_wall_s"):
                r["agents_per_minute"] = round(512 * 60 / main["process_wall_s"], 1)
                if pj:
                    r["purejaxrl_agents_per_minute"] = round(
                        512 * 60 / (pj["compile_s"] + pj["train_s"]), 1
                    )
            results.append(r)
            if on_row is not None:
                on_row({"rows": results, "purejaxrl": peer})
    return {"rows": results, "purejaxrl": peer, "jax_matmul": jax_matmul_precision()}


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
        lines += ["PureJaxRL ran in the same call on the same GPU (its own process, compile and "
                  "train timed apart). Ours: one `orin-rl train` process per row.", "",
                  "Our fused rows ran three times: first with an empty kernel cache (the "
                  "kernels compile), then twice with the cache that run filled; the table's "
                  "wall and rate are the third run's (a machine's later runs), the first and "
                  "second walls are beside them (the second still paid seconds in its first "
                  "iteration: `startup_h200.md`).", "",
                  "| row | our path | ours steps/s (first iteration in) | PureJaxRL steps/s | ratio | "
                  "our process wall s | cold cache wall s / second run s | "
                  "PureJaxRL compile + train s | "
                  "ours final eval | PureJaxRL final return | general path steps/s | "
                  "fused / general |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in result["rows"]:
            gen = r["runs"].get("general", {})
            comp = (f"{r['purejaxrl_compile_s']} + {r['purejaxrl_train_s']}"
                    if r["purejaxrl_compile_s"] is not None else "not run")  # fmt: skip
            ratio = r.get("steps_per_s_ratio")
            fg = r.get("fused_vs_general_steps_per_s")
            lines.append(
                f"| {r['row']} | {r['ours_path']} | {_n(r['ours_steps_per_s'])} | "
                f"{_n(r['purejaxrl_steps_per_s'])} | {f'{ratio:.2f}×' if ratio else '—'} | "
                f"{r['ours_process_wall_s']} | {r.get('ours_process_wall_cold_cache_s') or '—'}"
                f" / {r.get('ours_process_wall_second_run_s') or '—'} | "
                f"{comp} | {r['ours_final_eval']} | "
                f"{r['purejaxrl_final_return']} | {_n(gen.get('steps_per_s'))} | "
                f"{f'{fg:.2f}×' if fg else '—'} |"
            )
        lines += ["", "Where our process wall goes (s; summary.json `startup`, the process's "
                  "start to the end of the first iteration, and what follows the loop: the "
                  "final evaluation, checkpoint, summary, plots, exit):", "",
                  "| row | run | to first iteration | of it: process start (imports) | build | "
                  "first iteration | loop after it | its steps/s | after the loop | "
                  "process wall |", "|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for r in result["rows"]:
            for name, x in r["runs"].items():
                st = x.get("startup") or {}
                if not st:
                    continue
                loop = round(x["train_time_s"] - st["first_iteration_s"], 3)
                lines.append(f"| {r['row']} | {name} | {st['total_s']} | "
                             f"{st['process_start_s']} | {st['build_s']} | "
                             f"{st['first_iteration_s']} | {loop} | "
                             f"{_n(x.get('loop_steps_per_s'))} | {x['after_loop_s']} | "
                             f"{x['process_wall_s']} |")  # fmt: skip
        jm = result.get("jax_matmul") or {}
        if "default_precision_rel_err" in jm:
            lines += ["", f"JAX's float32 dot on {jm['device']}, relative error against "
                      f"float64: default precision {jm['default_precision_rel_err']:.1e}, "
                      f"HIGHEST {jm['highest_precision_rel_err']:.1e}."]  # fmt: skip
        for prefix, intro in RATE_LINES:
            lines += _rate_line(result["rows"], prefix, intro)
        for r in result["rows"]:
            if "agents_per_minute" in r:
                lines += ["", f"Agents trained per minute (seeds512, whole process): ours "
                          f"{r['agents_per_minute']}, PureJaxRL "
                          f"{r.get('purejaxrl_agents_per_minute', '—')} (compile + train)."]  # fmt: skip
        errors = [(r["row"], p, x["error"]) for r in result["rows"] for p, x in r["runs"].items()
                  if "error" in x]  # fmt: skip
        for row, path, err in errors:
            lines.append(f"- {row} / {path} failed: {err}")
        lines.append("")
    else:
        s = result["summary"]
        lines += ["| env backend | solved | median time to solve s | median steps/s |",
                  "|---|---|---|---|"]  # fmt: skip
        for k in ("gym", "gpu"):
            lines.append(f"| {k} | {s[k]['solved_runs']} | {s[k]['median_time_to_solve_s']} | "
                         f"{s[k]['median_steps_per_s']:,} |")  # fmt: skip
        lines += ["", f"steps/s ratio gpu / gym: {result['steps_per_s_ratio_gpu_vs_gym']:.2f}×"]
    return "\n".join(lines) + "\n"


RATE_LINES = (
    ("loop", "Rates without the first iteration (ours: the loop after it, kernel compile, "
     "warm-up and capture left out; PureJaxRL's train_s leaves its compile out)"),
    ("compile_tf32", "With `ppo.compile_update=true train.matmul=tf32` (torch's update "
     "compiled, TF32 matmuls), whole loop"),
    ("compile_tf32_loop", "The same after its first iteration"),
    ("tf32", "With `train.matmul=tf32` (JAX's default precision on Ampere and later GPUs is "
     "TF32, jax-ml/jax#18934)"),
)  # fmt: skip


def _rate_line(rows: list[dict], prefix: str, intro: str) -> list[str]:
    """One sentence: each row's ``ours_<prefix>_steps_per_s`` and its ratio to PureJaxRL."""
    have = [r for r in rows if f"ours_{prefix}_steps_per_s" in r]
    if not have:
        return []
    rates = ", ".join(f"{r['row']} {_n(r[f'ours_{prefix}_steps_per_s'])} steps/s "
                      f"({r[f'{prefix}_steps_per_s_ratio']:.2f}× PureJaxRL)" for r in have)  # fmt: skip
    return ["", f"{intro}: {rates}"]


def _n(value) -> str:
    return f"{value:,}" if isinstance(value, (int, float)) else "—"


def main(args) -> None:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    unknown = [p for p in args.paths.split(",") if p not in PATHS]
    unknown += [r for r in args.rows.split(",") if r not in ROWS]
    if unknown:
        raise SystemExit(f"unknown --rows/--paths {unknown}: rows {sorted(ROWS)}, "
                         f"paths {sorted(PATHS)}")  # fmt: skip
    if device == "cuda":
        rows = args.rows.split(",")
        name = args.name if args.name != "train_cpu" else "vs_purejaxrl_h200"
        partial = args.out / f"{name}.partial.json"
        args.out.mkdir(parents=True, exist_ok=True)
        result = gpu_suite(rows, args.paths.split(","), device, args.peer_dir,
                           on_row=lambda r: partial.write_text(json.dumps(r, indent=2) + "\n"))  # fmt: skip
        partial.unlink(missing_ok=True)
        gpu = torch.cuda.get_device_name(0)
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
        pycache_prefix=os.environ.get("PYTHONPYCACHEPREFIX"),
    )
    text = markdown(result)
    write_report(args.out, name, result, text)
    print(text)
