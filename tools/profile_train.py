"""Where a PPO iteration's time goes on the GPU: kernels and time per phase, general path
against the fused kernels, on PureJaxRL's CartPole settings (torch.profiler + CUDA events).

For each row (single: 4 envs; envs4096; seeds512: 512 agents x 4 envs) and path:
- general, eager: one iteration under torch.profiler, phase by phase (rollout = the env steps
  with the policy and the buffer writes; gae; update = the minibatch gradient steps), counting
  the GPU kernels (memcpy/memset included) and summing their device time; and the wall time of
  each phase with a synchronize at its end (median of 5 iterations);
- general, CUDA graph: the replayed iteration's time (CUDA events, median of 20);
- fused: one iteration under torch.profiler (every kernel and its device time) and the
  iteration time (CUDA events, median of 20).

    python tools/profile_train.py            # on a CUDA machine; writes docs/benchmarks/profile_<gpu>.{json,md}
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from bench_common import record_head, write_report  # noqa: E402
from bench_train_gpu import PUREJAXRL_PPO  # noqa: E402

from orin_rl import config as config_mod  # noqa: E402
from orin_rl.algorithms import fused  # noqa: E402
from orin_rl.config import Config  # noqa: E402
from orin_rl.runners.on_policy import OnPolicyRunner  # noqa: E402

ROWS = {"single": (4, 1), "envs4096": (4096, 1), "seeds512": (4, 512)}


def make_trainer(num_envs: int, agents: int, fused: str, graphs: bool, tmp: Path,
                 overrides: list[str] = ()) -> OnPolicyRunner:  # fmt: skip
    cfg = config_mod.apply_overrides(Config(), PUREJAXRL_PPO)
    for key, value in {
        "env.env_id": "CartPole-v1", "env.backend": "gpu", "env.num_envs": num_envs,
        "train.num_agents": agents, "train.device": "cuda", "train.cuda_graphs": graphs,
        "train.total_steps": 10**9, "ppo.fused": fused,
    }.items():  # fmt: skip
        config_mod.set_value(cfg, key, value)
    cfg = config_mod.apply_overrides(cfg, list(overrides))  # --set, last: they win
    return OnPolicyRunner(cfg, tmp / f"run-{time.monotonic_ns()}", progress=False)


def gpu_ops(prof) -> list:
    return [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def profiled(fn) -> tuple[int, float, dict[str, float]]:
    """(GPU ops, their device time in ms, device ms per kernel name) of one call of ``fn``."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    ops = gpu_ops(prof)
    per_name: dict[str, float] = {}
    for e in ops:
        per_name[e.name] = per_name.get(e.name, 0.0) + e.device_time / 1e3
    return len(ops), sum(e.device_time for e in ops) / 1e3, per_name


def timed_ms(fn, repeats: int) -> float:
    """Median wall ms of ``fn`` between CUDA events."""
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def general_phases(t: OnPolicyRunner) -> dict:
    algo, env = t.algo, t.env
    state = {"obs": env.reset(seed=0)}

    def rollout():
        obs = state["obs"]
        for _ in range(t.rollout_steps):
            step = env.step(algo.act(obs))
            algo.process_env_step(step)
            obs = step.obs
        state["obs"] = obs

    def gae():
        algo.compute_returns(state["obs"])

    def update():
        algo.update()

    phases = {"rollout": rollout, "gae": gae, "update": update}
    for _ in range(2):  # warm-up: Numba compile, cuBLAS, optimizer state
        for fn in phases.values():
            fn()
    out = {}
    walls: dict[str, list[float]] = {k: [] for k in phases}
    for _ in range(5):
        for name, fn in phases.items():
            torch.cuda.synchronize()
            start = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            walls[name].append((time.perf_counter() - start) * 1e3)
    for name, fn in phases.items():
        n, device_ms, _ = profiled(fn)
        out[name] = {"gpu_ops": n, "gpu_ms": round(device_ms, 3),
                     "wall_ms": round(statistics.median(walls[name]), 3)}  # fmt: skip
    out["iteration_wall_ms"] = round(sum(v["wall_ms"] for v in out.values()), 3)
    return out


def graph_iteration_ms(t: OnPolicyRunner) -> float:
    obs = t.env.reset(seed=0)
    obs, _ = t._iterate(obs)  # eager warm-up, then capture
    assert t._graph is not None, "the iteration was not captured"

    def replay():
        t._iterate(obs)

    replay()
    return round(timed_ms(replay, 20), 3)


def fused_iteration(t: OnPolicyRunner, top_n: int = 6) -> dict:
    assert t.fused is not None, "the fused path did not apply"
    t.env.reset(seed=0)
    start = time.perf_counter()
    for _ in range(2):
        t._iterate(None)  # compile (and capture, with torch's update in a graph)
    torch.cuda.synchronize()
    first_two_s = time.perf_counter() - start
    n, device_ms, per_name = profiled(lambda: t._iterate(None))
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[:top_n]
    return {
        "first_two_iterations_s": round(first_two_s, 3),  # kernel compile, warm-up, capture
        "path": t._fused_path(),
        "cuda_graph": t._graph is not None,
        "gpu_ops": n,
        "gpu_ms": round(device_ms, 3),
        "iteration_ms": round(timed_ms(lambda: t._iterate(None), 20), 3),
        "top_kernels_ms": {name[:80]: round(ms, 3) for name, ms in top},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="single,envs4096,seeds512")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--name", default="profile_h200")
    parser.add_argument("--paths", default="general,fused",
                        help="general: the torch path eager and in a graph; fused: the kernels")  # fmt: skip
    parser.add_argument("--max-fused-minibatch", type=int, default=None,
                        help="fused: take the gradient kernel up to this many samples per "
                             f"agent (default {fused.MAX_FUSED_MINIBATCH}); beyond it the batched "
                             "GEMMs, or torch's update with --set ppo.fused_grads=kernel")  # fmt: skip
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="config override for every trainer, e.g. "
                        "ppo.compile_update=true or train.matmul=tf32 (repeatable)")  # fmt: skip
    parser.add_argument("--top", type=int, default=6, help="kernels listed per fused row")
    args = parser.parse_args()
    if args.max_fused_minibatch:
        fused.MAX_FUSED_MINIBATCH = args.max_fused_minibatch
    if not torch.cuda.is_available():
        sys.exit("profile_train.py: needs a CUDA GPU")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        for row in args.rows.split(","):
            envs, agents = ROWS[row]
            steps = envs * agents * 128
            r: dict = {"steps_per_iteration": steps}
            paths = args.paths.split(",")
            if "general" in paths:
                r["general_eager"] = general_phases(
                    make_trainer(envs, agents, "off", False, tmp, args.overrides)
                )
                r["general_graph_iteration_ms"] = graph_iteration_ms(
                    make_trainer(envs, agents, "off", True, tmp, args.overrides)
                )
                r["general_graph_steps_per_s"] = round(
                    steps / r["general_graph_iteration_ms"] * 1e3
                )
            if "fused" in paths:
                r["fused"] = fused_iteration(
                    make_trainer(envs, agents, "auto", True, tmp, args.overrides), args.top
                )
                r["fused_steps_per_s"] = round(steps / r["fused"]["iteration_ms"] * 1e3)
            rows[row] = r
            print(row, json.dumps(r), flush=True)
    machine = f"{torch.cuda.get_device_name(0)}; {platform.machine()}"
    result = {
        **record_head("ppo_iteration_profile", machine, "profile_train.py", torch.__version__),
        "overrides": args.overrides,
        "rows": rows,
    }
    text = markdown(result)
    write_report(args.out, args.name, result, text)
    print(text)


def markdown(result: dict) -> str:
    lines = [f"# Where a PPO iteration's time goes ({result['machine']})", "",
             f"`{result['command']}`, {result['date']}, torch {result['torch']}. PureJaxRL's "
             "CartPole settings (128 steps, 4 epochs x 4 minibatches, 64x64 tanh).", ""]  # fmt: skip
    rows = result["rows"]
    if all("general_eager" in r for r in rows.values()):
        lines += ["General path, eager, one iteration phase by phase (GPU ops counted by "
                  "torch.profiler, their summed device time, and the phase's wall time):", "",
                  "| row | phase | GPU ops | GPU busy ms | wall ms |", "|---|---|---|---|---|"]  # fmt: skip
        for row, r in rows.items():
            for phase in ("rollout", "gae", "update"):
                p = r["general_eager"][phase]
                lines.append(
                    f"| {row} | {phase} | {p['gpu_ops']:,} | {p['gpu_ms']} | {p['wall_ms']} |"
                )
        lines.append("")
    lines += ["Whole iterations (ms; CUDA events, median of 20):", "",
              "| row | general eager | general CUDA graph | fused (path) | fused GPU ops "
              "| fused / graph speed-up |", "|---|---|---|---|---|---|"]  # fmt: skip
    for row, r in rows.items():
        f = r.get("fused")
        graph = r.get("general_graph_iteration_ms")
        eager = r.get("general_eager", {}).get("iteration_wall_ms", "—")
        fused_cell = (f"{f['iteration_ms']} ({f['path']}{', graph' if f['cuda_graph'] else ''})"
                      if f else "—")  # fmt: skip
        ratio = f"{graph / f['iteration_ms']:.1f}×" if f and graph else "—"
        lines.append(f"| {row} | {eager} | {graph or '—'} | {fused_cell} | "
                     f"{f['gpu_ops'] if f else '—'} | {ratio} |")  # fmt: skip
    lines += ["", "Fused iteration, the kernels that take the most device time (ms):", ""]
    for row, r in rows.items():
        if "fused" not in r:
            continue
        tops = ", ".join(f"`{k}` {v}" for k, v in r["fused"]["top_kernels_ms"].items())
        lines.append(f"- {row}: {tops}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
