"""Export to a verified ONNX bundle: parity with PyTorch through ONNX Runtime."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from orin_rl import bundle
from orin_rl.checkpoint import load_policy
from orin_rl.export.onnx import (
    DeterministicPolicy,
    ExportError,
    _io_layers,
    export_bundle,
    random_observations,
)

RUNS = ["cartpole_run", "cartpole_norm_run", "pendulum_run", "pendulum_norm_run",
        "pendulum_rsl_norm_run"]  # fmt: skip


def torch_actions(run_dir, obs: np.ndarray) -> np.ndarray:
    policy, _, _ = load_policy(run_dir)
    with torch.inference_mode():
        action = policy.act_deterministic(policy.normalize(torch.from_numpy(obs)))
    if policy.discrete:
        return action.numpy()
    low, high = np.array(policy.spec.action_low), np.array(policy.spec.action_high)
    return np.clip(action.numpy(), low, high)


@pytest.mark.parametrize("run", RUNS)
def test_bundle_matches_the_pytorch_policy(request, tmp_path, rng, run):
    run_dir = request.getfixturevalue(run)
    result = export_bundle(run_dir, tmp_path / "b", parity_observations=256)
    info, onnx_path = bundle.load_bundle(tmp_path / "b")
    assert info.parity_max_abs_error <= 1e-5 * 10 and info.parity["rtol"] == 1e-5
    model = onnx.load(onnx_path)
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["obs"]
    # Independent check on fresh observations: ONNX Runtime vs the PyTorch policy object
    # (normaliser applied by the policy itself, not by the export wrapper).
    obs = rng.normal(scale=2.0, size=(300, *info.inputs[0].shape[1:])).astype(np.float32)
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run(["action"], {"obs": obs})[0]
    expected = torch_actions(run_dir, obs)
    if info.action_space["kind"] == "discrete":
        logits = session.run(["logits"], {"obs": obs})[0]
        top2 = np.sort(logits, axis=1)
        clear = (top2[:, -1] - top2[:, -2]) > 1e-4  # ties may break either way
        np.testing.assert_array_equal(got[clear], expected[clear])
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    assert (info.normalizer is not None) == ("norm" in run)
    if "rsl" in run:  # rsl_rl's formula, the actor's own statistics, no clip
        assert info.normalizer["formula"] == "(x - mean) / (std + eps)"
        assert info.normalizer["clip"] == float("inf") and info.normalizer["eps"] == 1e-2
    assert result.onnx_bytes == onnx_path.stat().st_size
    assert os.stat(onnx_path).st_mode & 0o077 == 0


def test_fixed_batch(cartpole_run, tmp_path):
    export_bundle(cartpole_run, tmp_path / "b", batch=4, parity_observations=64)
    info, _ = bundle.load_bundle(tmp_path / "b")
    assert info.inputs[0].shape == [4, 4]


@pytest.mark.parametrize("run", ["cartpole_norm_run", "pendulum_norm_run"])
def test_fp16_within_its_tolerance(request, tmp_path, run):
    info = export_bundle(
        request.getfixturevalue(run), tmp_path / "b", fp16=True, parity_observations=256
    ).info
    model = onnx.load(tmp_path / "b" / "policy.onnx")
    types = {i.data_type for i in model.graph.initializer}
    assert onnx.TensorProto.FLOAT16 in types, "weights must be fp16"
    assert info.precision == "fp16" and 0 < info.parity["max_rel_error"] <= 2e-2


@pytest.mark.parametrize("run", ["cartpole_norm_run", "pendulum_norm_run"])
def test_int8_qdq_within_its_tolerance(request, tmp_path, run):
    info = export_bundle(
        request.getfixturevalue(run), tmp_path / "b", int8=True, parity_observations=512
    ).info
    variant = info.variants["int8-qdq"]
    model = onnx.load(tmp_path / "b" / variant["onnx_file"])
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    # TensorRT's parser takes symmetric quantisation only: every Q/DQ zero point is 0.
    initializers = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    zero_points = [
        initializers[n.input[2]]
        for n in model.graph.node
        if n.op_type in ("QuantizeLinear", "DequantizeLinear") and len(n.input) > 2
    ]
    assert zero_points and all((z == 0).all() for z in zero_points)
    parity = variant["parity"]
    if info.action_space["kind"] == "discrete":
        assert parity["decisive_agreement"] >= 0.95 and 0 <= parity["action_agreement"] <= 1
    else:
        assert parity["max_range_error"] <= 0.10
    assert bundle.sha256_file(tmp_path / "b" / variant["onnx_file"]) == variant["onnx_sha256"]


def test_io_layers_kept_in_float(cartpole_run, tmp_path):
    export_bundle(cartpole_run, tmp_path / "b", parity_observations=64)
    model_bytes = (tmp_path / "b" / "policy.onnx").read_bytes()
    kept = _io_layers(model_bytes)
    gemms = [
        n.name
        for n in onnx.load_from_string(model_bytes).graph.node
        if n.op_type in ("Gemm", "MatMul")
    ]
    assert len(gemms) == 3 and kept == sorted([gemms[0], gemms[-1]])


def test_parity_failure_is_an_error(cartpole_run, tmp_path, monkeypatch):
    """A wrapper that differs from the policy must fail the export, not write a bundle."""
    original = DeterministicPolicy.forward

    def skewed(self, obs):
        out = original(self, obs)
        return (out[0], out[1] + 1e-3) if isinstance(out, tuple) else out + 1e-3

    calls = {"n": 0}

    def first_call_skewed(self, obs):
        calls["n"] += 1
        return skewed(self, obs) if calls["n"] == 1 else original(self, obs)

    monkeypatch.setattr(DeterministicPolicy, "forward", first_call_skewed)
    with pytest.raises(ExportError, match="disagrees with PyTorch"):
        export_bundle(cartpole_run, tmp_path / "b", parity_observations=64)
    assert not (tmp_path / "b" / "policy.json").exists()


def test_random_observations_cover_beyond_recorded(rng):
    recorded = rng.normal(size=(100, 3)).astype(np.float32)
    extra = random_observations(recorded, 1000, 0)
    assert extra.shape == (1000, 3) and np.abs(extra).max() > np.abs(recorded).max()


def test_policy_json_round_trip(cartpole_run, tmp_path):
    export_bundle(cartpole_run, tmp_path / "b", parity_observations=64)
    data = json.loads((tmp_path / "b" / "policy.json").read_text())
    assert data["bundle_sha256"] == bundle.content_sha256(data)  # the export signs it
    info = bundle.BundleInfo.from_dict(data)
    assert json.loads(info.to_json()) == data


def test_ir_version_is_the_oldest_that_carries_the_opset(cartpole_run, tmp_path):
    from orin_rl.export.onnx import ir_version_for

    export_bundle(cartpole_run, tmp_path / "b", parity_observations=64)
    assert onnx.load(tmp_path / "b" / "policy.onnx").ir_version == 8
    assert (ir_version_for(17, 11), ir_version_for(20, 11), ir_version_for(21, 11)) == (8, 9, 11)


class TestInt8Acceptance:
    """The int8 rule can fail: near-ties do not count, but with (almost) no decisive
    observations a flip where fp32's preference exceeds twice the logit error does."""

    @staticmethod
    def _q_values(rng, n, gap_scale):
        q = 100.0 + rng.normal(0.0, gap_scale, size=(n, 2))  # DQN-like: |Q| ~ 100
        return [q.argmax(-1), q]

    def test_flips_the_logit_error_cannot_explain_fail(self, rng):
        from orin_rl.export.onnx import compare, int8_acceptable

        ref = self._q_values(rng, 1000, 1.0)  # gaps ~1, far below 5% of |Q| = 5
        flip = rng.random(1000) < 0.31
        cand = [np.where(flip, 1 - ref[0], ref[0]), ref[1]]
        errors = compare(ref, cand, True, None)
        assert errors["decisive_fraction"] < 0.5
        ok, rule = int8_acceptable(errors, True)
        assert not ok and "cannot flip" in rule  # the logits equal fp32's: no flip is rounding

    def test_decisive_observations_decide_when_they_are_most(self, rng):
        from orin_rl.export.onnx import compare, int8_acceptable

        ref = self._q_values(rng, 1000, 50.0)  # wide gaps: most observations decisive
        gap = np.abs(ref[1][:, 0] - ref[1][:, 1])
        flip = gap < np.quantile(gap, 0.08)  # only near-ties flip
        cand = [np.where(flip, 1 - ref[0], ref[0]), ref[1]]
        errors = compare(ref, cand, True, None)
        assert errors["decisive_fraction"] >= 0.5 and errors["action_agreement"] < 0.95
        ok, rule = int8_acceptable(errors, True)
        assert ok and "decisive" in rule
