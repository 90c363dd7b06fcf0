"""Shared pieces of the robot tests: the G1 task's deploy contract (read once), and a bundle
whose policy is a fixed linear map (zero: the default pose) carrying that contract."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

G1 = "Mjlab-Velocity-Flat-Unitree-G1"


def require_mjlab() -> None:
    if os.environ.get("ORIN_RL_REQUIRE_MJLAB") != "1":
        pytest.importorskip("mjlab", reason="needs the mjlab extra: pip install -e '.[mjlab]'")


def require_dds() -> None:
    if os.environ.get("ORIN_RL_REQUIRE_ROBOT") != "1":
        pytest.importorskip("cyclonedds", reason="needs the robot extra: pip install '.[robot]'")


@pytest.fixture(scope="session")
def g1_contract() -> dict:
    """``policy.json``'s ``deploy`` for the G1 velocity task (its training configuration)."""
    require_mjlab()
    from orin_rl.envs.base import EnvOptions
    from orin_rl.envs.mjlab import MjlabVecEnv

    vec = MjlabVecEnv(G1, 1, "cpu", EnvOptions(seed=0))
    try:
        return vec.deploy_contract()
    finally:
        vec.close()


def linear_bundle(folder: Path, contract: dict, weight: float = 0.0, bias=None) -> Path:
    """A bundle whose policy is action = weight · obs[:n] + bias (ONNX Runtime runs it)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from orin_rl.bundle import BundleInfo, TensorSpec, sha256_file

    n_obs = sum(t["dim"] * max(1, t["history_length"]) for t in contract["observations"])
    n_act = len(contract["joint_names"])
    w = np.zeros((n_obs, n_act), np.float32)
    w[np.arange(n_act), np.arange(n_act)] = weight
    b = np.zeros(n_act, np.float32) if bias is None else np.asarray(bias, np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["obs", "W", "B"], ["action"])],
        "linear",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, n_obs])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, [1, n_act])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "policy.onnx")
    info = BundleInfo(
        onnx_file="policy.onnx",
        onnx_sha256=sha256_file(folder / "policy.onnx"),
        opset=17,
        precision="fp32",
        inputs=[TensorSpec("obs", [1, n_obs], "float32")],
        outputs=[TensorSpec("action", [1, n_act], "float32")],
        action_space={
            "kind": "continuous",
            "shape": [n_act],
            "low": [float("-inf")] * n_act,
            "high": [float("inf")] * n_act,
        },
        normalizer=None,
        parity_max_abs_error=0.0,
        env_id=G1,
        deploy=contract,
    )
    (folder / "policy.json").write_text(info.to_json())
    return folder
