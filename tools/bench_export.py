"""Benchmark the export pipeline: time, ONNX size and parity for CartPole, Pendulum and the
seed CNN policy (3 conv + 2 FC, 256×256 input, batch 128).

CartPole and Pendulum are trained briefly here (export cost does not depend on how good the
policy is) and exported through ``orin-rl export`` in fp32, fp16 and int8 Q/DQ. The CNN goes
through the same ONNX path (TorchScript exporter, onnxslim, checker) and is compared with
PyTorch through ONNX Runtime at batch 128; its ONNX files are kept for the runtime benchmark.

    python tools/bench_export.py   # writes docs/benchmarks/export_cpu.json and .md
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch
from bench_common import write_report

from orin_rl import config as C
from orin_rl.export.onnx import _to_onnx, export_bundle
from orin_rl.models.cnn import SeedCNNPolicy
from orin_rl.runners import train

ROOT = Path(__file__).resolve().parents[1]


def tiny_run(env_id: str, folder: Path) -> Path:
    cfg = C.apply_overrides(
        C.Config(),
        [
            f"env.env_id={env_id}",
            "env.num_envs=4",
            "ppo.num_steps=128",
            "train.total_steps=2048",
            "train.eval_episodes=2",
            "train.tensorboard=false",
            "ppo.normalize_obs=true",
        ],
    )
    train(cfg, folder, progress=False)
    return folder


def bench_policy(env_id: str, tmp: Path) -> list[dict]:
    run = tiny_run(env_id, tmp / env_id)
    rows = []
    for precision, kwargs in (("fp32", {}), ("fp16", {"fp16": True}), ("int8-qdq", {"int8": True})):
        out = tmp / f"{env_id}-{precision}"
        result = export_bundle(run, out, **kwargs)
        info = result.info
        if precision == "int8-qdq":
            variant = info.variants["int8-qdq"]
            parity, size = variant["parity"], (out / variant["onnx_file"]).stat().st_size
        else:
            parity, size = info.parity, result.onnx_bytes
        rows.append(
            {
                "model": env_id,
                "precision": precision,
                "export_time_s": round(result.export_time_s, 3),
                "onnx_kib": round(size / 1024, 1),
                "parity": parity,
            }
        )
    return rows


def bench_cnn(out_dir: Path, batch: int) -> list[dict]:
    torch.manual_seed(0)
    model = SeedCNNPolicy().eval()
    rows = []
    obs = np.random.default_rng(0).random((batch, *model.input_shape), dtype=np.float32)
    with torch.inference_mode():
        reference = model(torch.from_numpy(obs)).numpy()
    for precision in ("fp32", "fp16"):
        module = model if precision == "fp32" else _Half(model)
        start = time.perf_counter()
        onnx_model = _to_onnx(module, list(model.input_shape), "dynamic", 17, discrete=False)
        data = onnx_model.SerializeToString()
        session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
        got = session.run(None, {"obs": obs})[0]
        elapsed = time.perf_counter() - start
        path = out_dir / f"cnn_seed_{precision}.onnx"
        path.write_bytes(data)
        err = np.abs(got - reference)
        rows.append(
            {
                "model": "seed CNN (3 conv + 2 FC, 3×256×256)",
                "precision": precision,
                "export_time_s": round(elapsed, 3),
                "onnx_kib": round(len(data) / 1024, 1),
                "parity": {
                    "max_abs_error": float(err.max()),
                    "max_rel_error": float((err / np.maximum(1, np.abs(reference))).max()),
                    "batch": batch,
                },
            }
        )
    return rows


class _Half(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        import copy

        self.model = copy.deepcopy(model).half()

    def forward(self, obs):
        return self.model(obs.half()).float()


def markdown(result: dict) -> str:
    lines = [
        "# Export benchmark",
        "",
        f"Machine: {result['machine']}; torch {result['torch']}, onnxruntime {result['onnxruntime']}; "
        f"run {result['date']}; `{result['command']}`.",
        "Export time = the whole `export_bundle` (recording observations, export, onnxslim, checker, "
        "ONNX Runtime parity); for the CNN, export + checks + one ONNX Runtime batch of 128.",
        "",
        "| model | precision | export time (s) | ONNX size (KiB) | max abs error vs PyTorch | other |",
        "|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        p = r["parity"]
        other = ", ".join(
            f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in p.items()
            if k not in ("max_abs_error", "rtol", "recorded_observations", "random_observations")
        )
        lines.append(
            f"| {r['model']} | {r['precision']} | {r['export_time_s']:.2f} | {r['onnx_kib']:.1f} | "
            f"{p['max_abs_error']:.3g} | {other} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--models-dir", type=Path, default=ROOT / "engines" / "models")
    parser.add_argument("--cnn-batch", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(2)
    args.models_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        rows = bench_policy("CartPole-v1", Path(tmp)) + bench_policy("Pendulum-v1", Path(tmp))
    rows += bench_cnn(args.models_dir, args.cnn_batch)
    import onnxruntime

    result = {
        "benchmark": "export",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()} CPU",
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "command": "python tools/bench_export.py " + " ".join(sys.argv[1:]),
        "rows": rows,
    }
    text = markdown(result)
    write_report(args.out, "export_cpu", result, text)
    print(text)


if __name__ == "__main__":
    main()
