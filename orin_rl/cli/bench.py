"""``orin-rl bench``: the inference backends timed on one model."""

from __future__ import annotations

import argparse
from pathlib import Path

from orin_rl.cli.common import _backend_options


def cmd_bench(args: argparse.Namespace) -> int:
    """``orin-rl bench``."""
    from orin_rl.runtime import bench, load

    batches = args.batch  # parser.py: a list of batch sizes >= 1
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    if args.model == "cnn-seed":
        backends = _cnn_seed_backends(names, args.device, args.threads)
        title = "seed CNN policy (3 conv + 2 FC, 3x256x256)"
    else:
        options = _backend_options(args, batch=batches[0])
        backends = {
            n: load(args.model, n, args.device, threads=args.threads, **options) for n in names
        }
        title = f"{args.model}"
    rows = bench.run_bench(backends, batches, args.iters)
    bench.write_results(rows, args.out, title)
    print(bench.markdown(rows, title))
    written = [args.out.with_suffix(ext) for ext in (".json", ".md", ".png")]  # write_results'
    print(f"wrote {', '.join(map(str, written))}")
    return 0


def _cnn_seed_backends(names: list[str], device: str, threads: int) -> dict:
    import tempfile

    import torch

    from orin_rl.bundle import BundleInfo
    from orin_rl.export.onnx import _specs, _to_onnx
    from orin_rl.models.cnn import SeedCNNPolicy
    from orin_rl.runtime.onnxruntime_backend import OnnxRuntimeBackend
    from orin_rl.runtime.torch_backend import TorchBackend

    torch.manual_seed(0)
    model = SeedCNNPolicy().eval()
    backends = {}
    if "onnxruntime" in names:
        onnx_model = _to_onnx(model, list(model.input_shape), "dynamic", 17, discrete=False)
        path = Path(tempfile.mkdtemp()) / "cnn_seed.onnx"
        path.write_bytes(onnx_model.SerializeToString())
        inputs, outputs = _specs(onnx_model)
        info = BundleInfo(
            path.name, "", 17, "fp32", inputs, outputs, {"kind": "continuous"}, None, 0.0
        )
        backends["onnxruntime"] = OnnxRuntimeBackend(path, info, device, threads)
    if "torch" in names:
        backends["torch"] = TorchBackend.from_module(
            model, list(model.input_shape), device, threads=threads
        )
    return backends
