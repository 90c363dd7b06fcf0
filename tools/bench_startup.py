"""Start-up of a training process, phase by phase: from the process's start to the end of its
first iteration (summary.json ``startup``), then the loop and what follows it, on a "fresh"
machine and a warm one.

Fresh: empty caches for everything a machine's first run fills: Python's bytecode
(``PYTHONPYCACHEPREFIX`` in an empty folder, so no ``.pyc`` is found), Numba's kernel cache
(``NUMBA_CACHE_DIR``) and matplotlib's font cache (``MPLCONFIGDIR``). Warm: the same caches
again, as filled by the fresh run. The warm run also runs under ``python -X importtime``,
whose top-level imports break ``process_start_s`` down (importtime's own overhead included,
so those figures are upper bounds).

    python tools/bench_startup.py --name startup_h200            # CUDA: CartPole, fused kernels
    python tools/bench_startup.py --name startup_cpu --device cpu

With ``--tasks``, a new user's first run of each task (its real flags: GPU physics and CUDA
graphs on CUDA, ``orin_rl.cache_warm.train_command``) to the end of its first iteration:
``fresh_s`` with every cache empty (bytecode, Numba, fonts, Warp's kernels, inductor), then
with new empty caches ``orin-rl doctor --warm TASK`` (``warm_s``) and the run again
(``after_warm_s``). The fresh run goes first, as on a machine just started; the later runs
find the files in the OS page cache, which favours them by what reading does not cost.

    python tools/bench_startup.py --tasks Humanoid-v5 --name startup_tasks_h200
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

from bench_common import record_head, write_report  # noqa: E402
from bench_train_gpu import PUREJAXRL_PPO  # noqa: E402

PHASES = ("process_start_s", "envs_s", "build_s", "setup_s", "learn_setup_s",
          "first_iteration_s")  # fmt: skip


def train_cmd(device: str, out: Path, steps: int) -> list[str]:
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--env", "CartPole-v1",
           "--device", device, "--seed", "1", "--num-envs", "4", "--total-steps", str(steps),
           "--out", str(out), "--no-progress"]  # fmt: skip
    if device == "cuda":
        cmd += ["--env-backend", "gpu", "--cuda-graphs", "--set", "ppo.fused=auto"]
    for override in PUREJAXRL_PPO:
        cmd += ["--set", override]
    return cmd


def top_imports(text: str, n: int = 8) -> list[dict]:
    """The slowest top-level imports of a ``-X importtime`` log (cumulative seconds)."""
    rows = []
    for line in text.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|", 2)
        if name.startswith("  "):  # nested: its parent counts it
            continue
        try:
            rows.append({"module": name.strip(), "s": int(cumulative) / 1e6})
        except ValueError:  # the header line
            continue
    rows.sort(key=lambda r: -r["s"])
    return [{"module": r["module"], "s": round(r["s"], 3)} for r in rows[:n]]


def run_case(device: str, env: dict, tmp: Path, steps: int, importtime: bool) -> dict:
    out = tmp / f"run-{time.monotonic_ns()}"
    cmd = train_cmd(device, out, steps)
    if importtime:
        cmd.insert(1, "-Ximporttime")
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-3:], "process_wall_s": round(wall, 3)}
    s = json.loads((out / "summary.json").read_text())
    phases = s["startup"]
    before_loop = phases["total_s"] - phases["first_iteration_s"]
    r = {
        "process_wall_s": round(wall, 3),
        **{k: phases.get(k) for k in PHASES},
        "to_first_iteration_s": phases["total_s"],
        "loop_after_first_s": round(s["wall_time_s"] - phases["first_iteration_s"], 3),
        # the final evaluation, checkpoint, summary, plots and interpreter exit
        "after_loop_s": round(wall - before_loop - s["wall_time_s"], 3),
        "total_steps": s["total_steps"],
        "fused": s.get("fused"),
        "cuda_graphs": s.get("cuda_graphs"),
    }
    if importtime:
        r["top_imports_s"] = top_imports(proc.stderr)
    return r


def bare_imports(env: dict) -> dict:
    """Seconds for `python -c pass` and `import torch` (warm caches): the floor under
    process_start_s."""
    out = {}
    for name, code in (("python", "pass"), ("import_torch", "import torch")):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        out[f"{name}_s"] = round(time.perf_counter() - start, 3)
    return out


def markdown(r: dict) -> str:
    lines = [f"# Training start-up, phase by phase ({r['machine']})", "",
             f"`{r['command']}`, {r['date']}. CartPole-v1, 4 envs, PureJaxRL's settings "
             f"({r['device']}{', fused kernels, CUDA graphs' if r['device'] == 'cuda' else ''}), "
             f"{r['steps']:,} steps. Seconds; fresh = empty bytecode, kernel and font caches.",
             "", "| phase | " + " | ".join(r["cases"]) + " |",
             "|---|" + "---|" * len(r["cases"])]  # fmt: skip
    keys = [*PHASES, "to_first_iteration_s", "loop_after_first_s", "after_loop_s",
            "process_wall_s"]  # fmt: skip
    for k in keys:
        cells = [str(c.get(k, c.get("error", "—"))) for c in r["cases"].values()]
        label = f"**{k}**" if k in ("to_first_iteration_s", "process_wall_s") else k
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    warm = r["cases"].get("warm", {})
    if warm.get("top_imports_s"):
        lines += ["", "Warm run's slowest top-level imports (`-X importtime`, cumulative s): "
                  + ", ".join(f"`{i['module']}` {i['s']}" for i in warm["top_imports_s"])]  # fmt: skip
    lines += ["", f"For scale, warm: `python -c pass` {r['bare']['python_s']} s, "
              f"`import torch` {r['bare']['import_torch_s']} s."]  # fmt: skip
    for name, note in r.get("not_run", {}).items():
        lines += ["", f"Not run: {name}: {note}"]
    return "\n".join(lines) + "\n"


CACHE_VARS = ("PYTHONPYCACHEPREFIX", "NUMBA_CACHE_DIR", "MPLCONFIGDIR", "WARP_CACHE_PATH",
              "TORCHINDUCTOR_CACHE_DIR")  # fmt: skip


def empty_caches(tmp: Path) -> dict:
    """An environment whose every cache is a new empty folder."""
    caches = {name: tempfile.mkdtemp(dir=tmp) for name in CACHE_VARS}
    env = {**os.environ, **caches, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def first_iteration(task: str, device: str, env: dict, tmp: Path,
                    extra: tuple[str, ...] = ()) -> dict:  # fmt: skip
    """One run of ``task`` as ``doctor --warm`` runs it (and ``extra`` arguments): seconds to
    its first iteration's end."""
    from orin_rl.cache_warm import train_command

    out = tmp / f"run-{time.monotonic_ns()}"
    start = time.perf_counter()
    proc = subprocess.run([*train_command(task, device, out), *extra], capture_output=True,
                          text=True, env=env)  # fmt: skip
    wall = round(time.perf_counter() - start, 2)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-3:], "process_wall_s": wall}
    phases = json.loads((out / "summary.json").read_text())["startup"]
    return {"to_first_iteration_s": phases["total_s"], "process_wall_s": wall,
            **{k: phases.get(k) for k in PHASES}}  # fmt: skip


def task_rows(tasks: list[str], device: str, tmp: Path) -> list[dict]:
    rows = []
    for task in tasks:
        fresh = first_iteration(task, device, empty_caches(tmp), tmp)
        env = empty_caches(tmp)
        start = time.perf_counter()
        warm = subprocess.run([sys.executable, "-m", "orin_rl.cli", "doctor", "--warm", task,
                               "--device", device], capture_output=True, text=True, env=env)  # fmt: skip
        warm_s = round(time.perf_counter() - start, 2)
        # captured from the first reset (train.graph_warm_up=false, not yet the default) and
        # the same warm run with the default eager warm-up iteration before the capture: what
        # capturing from the first reset saves
        after = first_iteration(task, device, env, tmp, ("--set", "train.graph_warm_up=false"))
        old = first_iteration(task, device, env, tmp)
        rows.append({
            "task": task,
            "fresh_s": fresh.get("to_first_iteration_s"),
            "after_warm_s": after.get("to_first_iteration_s"),
            "after_warm_with_warm_up_iteration_s": old.get("to_first_iteration_s"),
            "warm_s": warm_s if warm.returncode == 0 else None,
            "warm_error": None if warm.returncode == 0 else warm.stdout[-500:],
            "fresh": fresh,
            "after_warm": after,
            "after_warm_with_warm_up_iteration": old,
        })  # fmt: skip
    return rows


def tasks_markdown(r: dict) -> str:
    lines = [f"# First iteration of a new user's first run ({r['machine']})", "",
             f"`{r['command']}`, {r['date']}, device {r['device']}. Seconds from the process's "
             "start to the end of its first iteration (summary.json `startup.total_s`).", "",
             "| task | fresh_s | warm_s (`doctor --warm`) | after_warm_s, captured from the first "
             "reset (`train.graph_warm_up=false`) | after warm, with the eager warm-up iteration "
             "(the default) |", "|---|---|---|---|---|"]  # fmt: skip
    for row in r["rows"]:
        lines.append(f"| {row['task']} | {row['fresh_s']} | {row['warm_s']} | "
                     f"{row['after_warm_s']} | {row.get('after_warm_with_warm_up_iteration_s')} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def _machine(torch) -> str:
    """The GPU (or "no GPU"), the architecture and the CPU count, for a result's ``machine``."""
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{gpu}; {platform.machine()}, {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=4 * 128 * 10)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--name", default="startup_h200")
    parser.add_argument("--tasks", help="comma-separated tasks: fresh vs after doctor --warm")
    args = parser.parse_args()
    if args.tasks:
        import torch

        with tempfile.TemporaryDirectory() as tmp_dir:
            rows = task_rows(args.tasks.split(","), args.device, Path(tmp_dir))
        result = {**record_head("first_iteration", _machine(torch), "bench_startup.py"),
                  "device": args.device, "rows": rows}  # fmt: skip
        text = tasks_markdown(result)
        write_report(args.out, args.name, result, text)
        print(text)
        return
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        caches = {name: tempfile.mkdtemp(dir=tmp) for name in
                  ("PYTHONPYCACHEPREFIX", "NUMBA_CACHE_DIR", "MPLCONFIGDIR")}  # fmt: skip
        env = {**os.environ, **caches, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # the fresh run writes what the warm one reads
        cases = {
            "fresh": run_case(args.device, env, tmp, args.steps, importtime=False),
            "warm": run_case(args.device, env, tmp, args.steps, importtime=True),
        }
        cases["warm again"] = run_case(args.device, env, tmp, args.steps, importtime=False)
        bare = bare_imports(env)
    import torch

    head = record_head("training_startup", _machine(torch), "bench_startup.py", torch.__version__)
    result = {
        **head,
        "device": args.device,
        "steps": args.steps,
        "cases": cases,
        "bare": bare,
        "not_run": {"Humanoid-v5 on GPU physics": "needs warp-lang and mujoco-warp on the "
                    "machine (staged in parts: ../shared/GPU.md); not staged for this run"},
    }  # fmt: skip
    text = markdown(result)
    write_report(args.out, args.name, result, text)
    print(text)


if __name__ == "__main__":
    main()
