"""Inference benchmark: every backend and mode on the same inputs, one process, one run.

1. Batch-1 MLP policy (17 → 64 → 64 → 6, tanh, continuous actions) round trip, host input →
   action on the host, per backend and mode, p50 and p99: ONNX Runtime (our backend's
   ``infer`` with validation, and a bare ``session.run`` on the same session options), PyTorch
   eager (CPU, and CUDA where present) and PyTorch CUDA graph, plain numpy.
2. The seed CNN policy (3 conv + 2 FC, 3×256×256) at batch 1 and 128 for every backend here.
3. ``orin-rl run`` in a subprocess where torch cannot be imported: peak resident memory.
4. With ``--loop-steps N``: ``orin-rl run`` at ``--loop-rate`` Hz for N iterations on a CartPole
   bundle, deadline misses and latency percentiles.

    python tools/bench_infer.py --name infer_cpu                       # CPU box
    python tools/bench_infer.py --name infer_h200 --loop-steps 100000  # GPU machine
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from bench_common import call_times_ns, write_report

from orin_rl.bundle import BundleInfo
from orin_rl.export.onnx import _specs, _to_onnx
from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models.cnn import SeedCNNPolicy
from orin_rl.models.deploy import DeterministicPolicy
from orin_rl.runtime.base import RuntimeBackendError
from orin_rl.runtime.bench import time_backend
from orin_rl.runtime.onnxruntime_backend import CUDA_EP, EpSettings, OnnxRuntimeBackend
from orin_rl.runtime.torch_backend import TorchBackend

ROOT = Path(__file__).resolve().parents[1]


def stats(samples_ns: np.ndarray) -> dict[str, float]:
    us = samples_ns / 1e3
    return {
        "p50_us": float(np.percentile(us, 50)),
        "p99_us": float(np.percentile(us, 99)),
        "mean_us": float(us.mean()),
    }


def time_fn(fn, iters: int) -> dict[str, float]:
    return stats(call_times_ns(fn, iters, warmup=max(50, iters // 20)))


def time_pair(fn_a, fn_b, iters: int) -> tuple[dict[str, float], dict[str, float]]:
    """Time two functions call by call in alternation."""
    for _ in range(max(50, iters // 20)):
        fn_a()
        fn_b()
    a, b = np.empty(iters), np.empty(iters)
    for i in range(iters):
        t0 = time.perf_counter_ns()
        fn_a()
        t1 = time.perf_counter_ns()
        fn_b()
        t2 = time.perf_counter_ns()
        a[i], b[i] = t1 - t0, t2 - t1
    return stats(a), stats(b)


def onnx_backend(module, obs_shape, tmp: Path, name: str, threads: int = 1,
                 **gpu) -> OnnxRuntimeBackend:  # fmt: skip
    """``gpu``: device, providers and ep for OnnxRuntimeBackend (default: the CPU EP)."""
    model = _to_onnx(module, obs_shape, "dynamic", 17, discrete=False)
    path = tmp / f"{name}.onnx"
    path.write_bytes(model.SerializeToString())
    inputs, outputs = _specs(model)
    info = BundleInfo(path.name, "", 17, "fp32", inputs, outputs, {"kind": "continuous"}, None, 0.0)
    return OnnxRuntimeBackend(path, info, gpu.pop("device", "cpu"), threads, **gpu)


def cuda_ep_rows(module, tmp: Path, obs: np.ndarray, iters: int) -> list[dict]:
    """ONNX Runtime's CUDA EP through our backend (device-bound I/O), plain and with its CUDA
    graph, each checked against the CPU EP's action on the same input."""
    import onnxruntime as ort

    if CUDA_EP not in ort.get_available_providers():
        return [{"backend": "onnxruntime", "mode": "CUDA EP", "skipped":
                 f"onnxruntime {ort.__version__} has no CUDA EP here (onnxruntime-gpu)"}]  # fmt: skip
    with onnx_backend(module, [17], tmp, "mlp") as cpu:
        expected = cpu.infer(obs)
    rows = []
    for graph in (False, True):
        mode = "CUDA EP, device I/O binding" + (" + CUDA graph" if graph else "")
        backend = onnx_backend(module, [17], tmp, "mlp", device="cuda", providers=["cuda"],
                               ep=EpSettings(cuda_graph=graph))  # fmt: skip
        try:
            backend.activate()
        except RuntimeBackendError as exc:  # the provider's libraries did not load
            rows.append({"backend": "onnxruntime", "mode": mode, "skipped": str(exc)[:300]})
            continue
        with backend:
            diff = float(np.abs(backend.infer(obs) - expected).max())
            rows.append({"backend": "onnxruntime", "mode": mode,
                         **time_fn(lambda b=backend: b.infer(obs), iters),
                         "max_abs_diff_vs_cpu_ep": diff})  # fmt: skip
            if not graph:  # ORT's own host-array path on the same CUDA session, for contrast
                sess, name = backend.session, backend._input
                rows.append({"backend": "onnxruntime", "mode": "CUDA EP, bare session.run "
                             "(host arrays)", **time_fn(lambda s=sess, n=name: s.run(None, {n: obs}),
                                                       iters)})  # fmt: skip
    return rows


def bench_mlp(iters: int, tmp: Path, cuda: bool) -> list[dict]:
    torch.manual_seed(0)
    spec = PolicySpec([17], "continuous", 6, action_low=[-1.0] * 6, action_high=[1.0] * 6)
    module = DeterministicPolicy(ActorCritic(spec)).eval()
    obs = np.random.default_rng(0).standard_normal((1, 17)).astype(np.float32)
    rows = []
    weights = [
        (lin.weight.detach().cpu().numpy().T.copy(), lin.bias.detach().cpu().numpy().copy())
        for lin in module.actor
        if isinstance(lin, torch.nn.Linear)
    ]
    ort_backend = onnx_backend(module, [17], tmp, "mlp")
    with ort_backend:
        session = ort_backend.session
        # Interleaved, so clock, cache and frequency drift hit both the same way.
        ours, bare = time_pair(
            lambda: ort_backend.infer(obs), lambda: session.run(["action"], {"obs": obs}), iters
        )
        rows.append({"backend": "onnxruntime", "mode": "CPU, orin_rl infer (validated)", **ours})
        rows.append({"backend": "onnxruntime", "mode": "CPU, bare session.run", **bare})
    torch.set_num_threads(1)
    with TorchBackend.from_module(module, [17], "cpu") as b:
        rows.append(
            {"backend": "torch", "mode": "CPU eager", **time_fn(lambda: b.infer(obs), iters)}
        )
    if cuda:
        rows += cuda_ep_rows(module, tmp, obs, iters)
        with TorchBackend.from_module(module, [17], "cuda") as b:
            rows.append(
                {"backend": "torch", "mode": "CUDA eager", **time_fn(lambda: b.infer(obs), iters)}
            )
        for zero_copy, mode in ((False, "CUDA graph, copies in the graph"),
                                (True, "CUDA graph, mapped host I/O (zero-copy)")):  # fmt: skip
            with TorchBackend.from_module(
                module, [17], "cuda", cuda_graph=True, batch=1, zero_copy=zero_copy
            ) as b:
                rows.append(
                    {"backend": "torch", "mode": mode, **time_fn(lambda: b.infer(obs), iters)}
                )
                entry = b._graphs.get(1)

                def replay(entry=entry):
                    entry.graph.replay()
                    torch.cuda.current_stream().synchronize()

                rows.append({"backend": "reference", "mode": f"{mode}: bare replay + synchronize",
                             **time_fn(replay, iters)})  # fmt: skip
        rows.append(
            {
                "backend": "reference",
                "mode": "bare torch.cuda.synchronize()",
                **time_fn(torch.cuda.synchronize, iters),
            }
        )

    def numpy_mlp():
        x = obs
        for i, (w, b) in enumerate(weights):
            x = x @ w + b
            if i < len(weights) - 1:
                x = np.tanh(x)
        return np.clip(x, -1.0, 1.0)

    rows.append({"backend": "numpy", "mode": "CPU, plain matmuls", **time_fn(numpy_mlp, iters)})
    return rows


def graph_profile(replays: int = 500) -> list[dict]:
    """Where a batch-1 CUDA-graph round trip goes: torch.profiler (CUPTI) over ``replays``
    calls of the MLP backend, per mode: the GPU operations each replay runs (kernels and
    copies, with their device time) and the host-side CUDA API calls."""
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    spec = PolicySpec([17], "continuous", 6, action_low=[-1.0] * 6, action_high=[1.0] * 6)
    module = DeterministicPolicy(ActorCritic(spec)).eval()
    obs = np.random.default_rng(1).standard_normal((1, 17)).astype(np.float32)
    out = []
    for zero_copy in (False, True):
        with TorchBackend.from_module(
            module, [17], "cuda", cuda_graph=True, batch=1, zero_copy=zero_copy
        ) as b:
            for _ in range(200):
                b.infer(obs)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(replays):
                    b.infer(obs)
        gpu, host = [], []
        for ev in prof.key_averages():
            device_us = getattr(ev, "self_device_time_total", None)
            if device_us is None:
                device_us = getattr(ev, "self_cuda_time_total", 0.0)
            if device_us > 0:
                gpu.append({"name": ev.key[:120], "per_replay": ev.count / replays,
                            "device_us_each": device_us / ev.count})  # fmt: skip
            elif ev.key.startswith("cuda") and ev.count >= replays:
                host.append({"name": ev.key, "per_replay": ev.count / replays,
                             "host_us_each": ev.cpu_time_total / ev.count})  # fmt: skip
        gpu.sort(key=lambda g: -g["per_replay"] * g["device_us_each"])
        out.append({
            "mode": "mapped host I/O (zero-copy)" if zero_copy else "copies in the graph",
            "replays": replays,
            "gpu_ops_per_replay": sum(g["per_replay"] for g in gpu),
            "device_us_per_replay": sum(g["per_replay"] * g["device_us_each"] for g in gpu),
            "gpu_ops": gpu,
            "host_calls": host,
        })  # fmt: skip
    return out


def bench_cnn(iters: int, tmp: Path, cuda: bool, threads: int) -> list[dict]:
    torch.manual_seed(0)
    model = SeedCNNPolicy().eval()
    backends = {
        "onnxruntime (CPU)": onnx_backend(model, list(model.input_shape), tmp, "cnn", threads)
    }
    torch.set_num_threads(threads)
    backends["torch CPU eager"] = TorchBackend.from_module(
        model, list(model.input_shape), "cpu", threads=threads
    )
    if cuda:
        backends["torch CUDA eager"] = TorchBackend.from_module(
            model, list(model.input_shape), "cuda"
        )
        for batch in (1, 128):
            backends[f"torch CUDA graph (batch {batch})"] = TorchBackend.from_module(
                model, list(model.input_shape), "cuda", cuda_graph=True, batch=batch
            )
    skipped = []
    if cuda:  # ONNX Runtime's CUDA EP (onnxruntime-gpu), device-bound I/O, plain and graphed
        import onnxruntime as ort

        for graph, name in ((False, "onnxruntime CUDA EP, device I/O binding"),
                            (True, "onnxruntime CUDA EP + CUDA graph (batch 1)")):  # fmt: skip
            if CUDA_EP not in ort.get_available_providers():
                skipped.append({"backend": name, "skipped": f"onnxruntime {ort.__version__} "
                                "has no CUDA EP here (onnxruntime-gpu)"})  # fmt: skip
                continue
            backend = onnx_backend(model, list(model.input_shape), tmp, "cnn", device="cuda",
                                   providers=["cuda"], ep=EpSettings(cuda_graph=graph))  # fmt: skip
            try:
                backend.activate()
            except RuntimeBackendError as exc:  # the provider's libraries did not load
                skipped.append({"backend": name, "skipped": str(exc)[:300]})
                continue
            backends[name] = backend
    rows = []
    for name, backend in backends.items():
        with backend:
            for batch in (1, 128):
                if "graph (batch" in name and f"batch {batch})" not in name:
                    continue
                n = iters if batch == 1 else max(5, iters // 20)
                if "CPU" in name and batch == 128:
                    n = 5
                r = time_backend(backend, batch, n)
                rows.append({"backend": name, **r, "fps": r["throughput_per_s"]})
    return rows + skipped


def torch_free_rss(bundle_dir: Path, python: str = sys.executable) -> dict:
    """Peak RSS (MiB) of a torch-free ``orin-rl run`` on ``bundle_dir`` and the resident memory
    on the way (tools/bench_deploy_rss.py measures it, and where it goes). ``python``: the
    interpreter (a deploy venv's, which has no torch to block: tools/aarch64_check.py)."""
    from bench_deploy_rss import run_rss

    rss = run_rss(bundle_dir, python)
    if "error" in rss:
        return rss
    return {"peak_rss_mb": rss["peak_mib"], "rss_mb_after": rss["rss_mib_after"],
            "imported": rss["imported"]}  # fmt: skip


def cartpole_bundle(tmp: Path) -> Path:
    from orin_rl import config as C
    from orin_rl.export.onnx import export_bundle
    from orin_rl.runners import train

    run = tmp / "cartpole"
    train(
        C.apply_overrides(
            C.Config(),
            [
                "env.num_envs=8",
                "ppo.num_steps=32",
                "ppo.num_epochs=10",
                "ppo.num_minibatches=1",
                "ppo.learning_rate=1e-3",
                "ppo.gamma=0.98",
                "ppo.gae_lambda=0.8",
                "train.total_steps=40960",
                "train.device=cpu",
                "train.tensorboard=false",
            ],
        ),
        run,
        progress=False,
    )
    export_bundle(run, run / "bundle")
    return run / "bundle"


def loop_run(bundle_dir: Path, rate: float, steps: int, tmp: Path, rt: list[str]) -> dict:
    """``orin-rl run`` on the bundle; ``rt``: its real-time options (--fifo, --cpu, --mlock)."""
    report = tmp / "loop.json"
    cmd = [
        sys.executable,
        "-m",
        "orin_rl.cli",
        "-q",
        "run",
        "--model",
        str(bundle_dir),
        "--backend",
        "onnxruntime",
        "--rate",
        str(rate),
        "--steps",
        str(steps),
        "--report",
        str(report),
        "--histogram",
        str(tmp / "loop.png"),
        *rt,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=steps / rate * 3 + 120)
    if proc.returncode != 0:
        return {"error": proc.stderr[-300:]}
    data = json.loads(report.read_text())
    return {
        k: data[k]
        for k in (
            "backend",
            "rate_hz",
            "iterations",
            "latency_us",
            "jitter_us",
            "deadline_misses",
            "overruns",
            "rt_settings",
        )
    } | {
        "episodes": len(data["episode_returns"]),
        "mean_return": float(np.mean(data["episode_returns"])) if data["episode_returns"] else None,
    }


def markdown(r: dict) -> str:
    lines = [
        f"# Inference benchmark: {r['machine']}",
        "",
        f"Run {r['date']}, torch {r['torch']}, onnxruntime {r['onnxruntime']}. `{r['command']}`.",
        "",
        "## Batch-1 MLP policy (17→64→64→6), host input → action on the host",
        "",
        "| backend | mode | p50 (µs) | p99 (µs) | p50 vs PyTorch eager (same device) |",
        "|---|---|---|---|---|",
    ]
    eager = {
        row["mode"].split()[0]: row["p50_us"]
        for row in r["mlp"]
        if row["backend"] == "torch" and "eager" in row["mode"]
    }
    for row in r["mlp"]:
        if "skipped" in row:
            lines.append(f"| {row['backend']} | {row['mode']} | not run: {row['skipped']} | | |")
            continue
        dev = "CUDA" if "CUDA" in row["mode"] or "cuda" in row["mode"] else "CPU"
        base = eager.get(dev)
        ratio = f"{row['p50_us'] / base:.2f}×" if base else "—"
        lines.append(
            f"| {row['backend']} | {row['mode']} | {row['p50_us']:.1f} | {row['p99_us']:.1f} | {ratio} |"
        )
    ours = next(x for x in r["mlp"] if "orin_rl infer" in x["mode"])
    bare = next(x for x in r["mlp"] if "bare session.run" in x["mode"])
    lines += [
        "",
        f"Our ONNX Runtime backend's `infer` against a bare `session.run` in the same run: "
        f"**{ours['p50_us'] / bare['p50_us']:.2f}×** at p50, {ours['p99_us'] / bare['p99_us']:.2f}× at p99.",
        "",
        "## Seed CNN policy (3 conv + 2 FC, 3×256×256)",
        "",
        "| backend | batch | mean (ms) | p50 (ms) | p99 (ms) | FPS |",
        "|---|---|---|---|---|---|",
    ]
    for row in r["cnn"]:
        if "skipped" in row:
            lines.append(f"| {row['backend']} | — | not run: {row['skipped']} | | | |")
            continue
        lines.append(
            f"| {row['backend']} | {row['batch']} | {row['mean_us'] / 1e3:.2f} | {row['p50_us'] / 1e3:.2f} | {row['p99_us'] / 1e3:.2f} | {row['fps']:,.0f} |"
        )
    lines += (
        []
        if not r["torch_free"]
        else [
            "",
            f"torch-free `orin-rl run` (torch and numba blocked): peak RSS **{r['torch_free'].get('peak_rss_mb', float('nan')):.0f} MiB**"
            + (
                " (resident after each step: "
                + ", ".join(f"{k} {v:.0f}" for k, v in r["torch_free"]["rss_mb_after"].items())
                + " MiB)."
                if r["torch_free"].get("rss_mb_after")
                else "."
            ),
        ]
    )
    for gp in r.get("graph_profile", []):
        if "error" in gp:
            lines += ["", f"CUDA graph profile: failed: {gp['error']}"]
            continue
        lines += [
            "",
            f"### Where a CUDA-graph round trip goes ({gp['mode']}; torch.profiler over "
            f"{gp['replays']} calls)",
            "",
            f"{gp['gpu_ops_per_replay']:.0f} GPU operations per replay, "
            f"{gp['device_us_per_replay']:.1f} µs of device time in all.",
            "",
            "| GPU operation | per replay | device µs each |",
            "|---|---|---|",
            *(f"| `{g['name'][:70]}` | {g['per_replay']:.0f} | {g['device_us_each']:.2f} |"
              for g in gp["gpu_ops"]),
            "",
            "| host CUDA call | per replay | host µs each (profiled) |",
            "|---|---|---|",
            *(f"| `{h['name']}` | {h['per_replay']:.0f} | {h['host_us_each']:.1f} |"
              for h in gp["host_calls"]),
        ]  # fmt: skip
    if r.get("loop"):
        lp = r["loop"]
        if "error" in lp:
            lines.append(f"Control loop: failed: {lp['error']}")
        else:
            lat = lp["latency_us"]
            lines.append(
                f"Control loop `orin-rl run --rate {lp['rate_hz']:g}` on CartPole ({lp['backend']}): {lp['iterations']:,} iterations, "
                f"**{lp['deadline_misses']} deadline misses**, {lp['overruns']} overruns; latency p50 {lat['p50']:.1f} µs, "
                f"p99 {lat['p99']:.1f}, p99.9 {lat['p999']:.1f}, max {lat['max']:.1f}; period jitter std {lp['jitter_us']['std']:.1f} µs; "
                f"{lp['episodes']} episodes, mean return {lp['mean_return']}. Real-time "
                f"settings: {', '.join(f'{k} {v}' for k, v in lp.get('rt_settings', {}).items()) or 'none'}."
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    import onnxruntime

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="infer_cpu")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--iters", type=int, default=5000)
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for the CNN")
    parser.add_argument("--loop-rate", type=float, default=1000.0)
    parser.add_argument("--loop-steps", type=int, default=0)
    parser.add_argument("--loop-fifo", type=int, metavar="PRIO", help="the loop at SCHED_FIFO")
    parser.add_argument("--loop-cpu", type=int, help="pin the loop to this CPU")
    parser.add_argument("--loop-mlock", action="store_true", help="lock the loop's memory")
    parser.add_argument(
        "--tables-only",
        action="store_true",
        help="the MLP and CNN tables only (no torch-free RSS, no loop)",
    )
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        result = {
            "benchmark": "inference",
            "date": time.strftime("%Y-%m-%d"),
            "machine": torch.cuda.get_device_name(0) if cuda else f"{platform.machine()} CPU",
            "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__,
            "command": "python tools/bench_infer.py " + " ".join(sys.argv[1:]),
            "mlp": bench_mlp(args.iters, tmp, cuda),
            "cnn": bench_cnn(max(20, args.iters // 50), tmp, cuda, args.threads),
        }
        if cuda:
            try:
                result["graph_profile"] = graph_profile()
            except Exception as exc:  # a profiler failure must not lose the timings
                result["graph_profile"] = [{"error": f"{type(exc).__name__}: {exc}"}]
        bundle_dir = None if args.tables_only else cartpole_bundle(tmp)
        result["torch_free"] = {} if bundle_dir is None else torch_free_rss(bundle_dir)
        if args.loop_steps and bundle_dir is not None:
            rt = [*(["--fifo", str(args.loop_fifo)] if args.loop_fifo is not None else []),
                  *(["--cpu", str(args.loop_cpu)] if args.loop_cpu is not None else []),
                  *(["--mlock"] if args.loop_mlock else [])]  # fmt: skip
            result["loop"] = loop_run(bundle_dir, args.loop_rate, args.loop_steps, tmp, rt)
            if (tmp / "loop.png").exists():
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / f"{args.name}_loop.png").write_bytes((tmp / "loop.png").read_bytes())
    text = markdown(result)
    write_report(args.out, args.name, result, text)
    print(text)


if __name__ == "__main__":
    main()
