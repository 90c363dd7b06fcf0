"""The CNN policy on the robot side: exported with its uint8 input and x / 255 in the graph,
matching the torch policy (fp32, fp16 and int8 by their rules), run torch-free."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from orin_rl import bundle
from orin_rl import config as C
from orin_rl.checkpoint import load_policy
from orin_rl.export.onnx import export_bundle
from orin_rl.runners import train
from tests.conftest import require_pixels

require_pixels("minatar", "MinAtar is in the pixels extra")


@pytest.fixture(scope="module")
def minatar_run(tmp_path_factory):
    """A few PPO iterations on MinAtar Breakout's (4, 10, 10) uint8 frames (small encoder)."""
    out = tmp_path_factory.mktemp("minatar") / "run"
    cfg = C.Config()
    values = {
        "env.env_id": "MinAtar/Breakout-v1", "env.wrappers": ["orin_rl.envs.images:minatar"],
        "env.num_envs": 4, "ppo.num_steps": 32, "ppo.num_minibatches": 2,
        "ppo.hidden_sizes": [], "train.total_steps": 256, "train.eval_episodes": 1,
        "train.tensorboard": False, "train.eval_every": 0,
    }  # fmt: skip
    for key, value in values.items():
        C.set_value(cfg, key, value)
    train(cfg, out, progress=False)
    return out


@pytest.fixture(scope="module")
def minatar_bundle(minatar_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("minatar-bundle") / "b"
    export_bundle(minatar_run, out, int8=True, parity_observations=512)
    return out


def test_onnx_takes_uint8_frames_and_matches_torch(minatar_run, minatar_bundle):
    """Input ``obs`` is uint8 (C, H, W); on fresh frames over the whole 0-255 range ONNX
    Runtime's logits are the torch policy's to 1e-5 (the scaling is inside the graph)."""
    info, onnx_path = bundle.load_bundle(minatar_bundle)
    model = onnx.load(onnx_path)
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    assert info.inputs[0].dtype == "uint8" and info.inputs[0].shape[1:] == [4, 10, 10]
    assert info.normalizer["formula"] == "x / 255" and info.parity["max_rel_error"] <= 1e-5
    frames = np.random.default_rng(3).integers(0, 256, (200, 4, 10, 10), dtype=np.uint8)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"obs": frames})[0]
    policy, _, _ = load_policy(minatar_run)
    with torch.inference_mode():
        expected = policy.actor(torch.from_numpy(frames)).numpy()  # fp32 torch, uint8 in
    np.testing.assert_allclose(logits, expected, rtol=1e-5, atol=1e-5)


def test_int8_calibrated_on_recorded_frames(minatar_bundle):
    """The int8 variant is calibrated on the frames the policy met (uint8, MinAtar's 0/255),
    and passes the export's int8 rule against fp32."""
    info, _ = bundle.load_bundle(minatar_bundle)
    calibration = np.load(minatar_bundle / "calibration.npz")["obs"]
    assert calibration.dtype == np.uint8 and calibration.shape == (512, 4, 10, 10)
    assert set(np.unique(calibration).tolist()) == {0, 255}
    variant = info.variants["int8-qdq"]
    q = onnx.load(minatar_bundle / variant["onnx_file"])
    assert q.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8
    convs = [n for n in q.graph.node if n.op_type == "Conv"]
    dq_inputs = {o for n in q.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    # a layer in int8 takes its weights through a DequantizeLinear; a float one as they are
    assert convs and all(c.input[1] in dq_inputs for c in convs), "the conv is int8"
    dense = [n for n in q.graph.node if n.op_type in ("Gemm", "MatMul")]
    assert dense[0].input[1] in dq_inputs, "the encoder's dense layer is int8"
    assert dense[-1].input[1] not in dq_inputs, "the output layer stays float"
    assert "action agreement" in variant["parity"]["rule"]


def test_fp16_within_its_tolerance(minatar_run, tmp_path):
    info = export_bundle(minatar_run, tmp_path / "b", fp16=True, parity_observations=256).info
    assert info.inputs[0].dtype == "uint8" and 0 < info.parity["max_rel_error"] <= 2e-2


def test_run_and_bench_without_torch(minatar_bundle, tmp_path):
    """`orin-rl run` (the MinAtar env as plant, frames uint8) and `orin-rl bench` at batch 1 on
    ONNX Runtime, with torch and numba unimportable."""
    report, prefix = tmp_path / "report.json", tmp_path / "bench"
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None
        sys.modules["numba"] = None
        from orin_rl.cli import main
        rc = main(["-q", "run", "--model", r"{minatar_bundle}", "--backend", "onnxruntime",
                   "--rate", "0", "--steps", "200", "--report", r"{report}"])
        rc = rc or main(["-q", "bench", "--model", r"{minatar_bundle}", "--backends",
                         "onnxruntime", "--batch", "1", "--iters", "50", "--out", r"{prefix}"])
        sys.exit(rc)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(report.read_text())
    assert data["backend"] == "onnxruntime" and data["iterations"] == 200
    timed = json.loads(prefix.with_suffix(".json").read_text())
    assert "onnxruntime" in json.dumps(timed)
