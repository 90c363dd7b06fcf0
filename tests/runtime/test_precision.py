"""``orin-rl run --precision int8`` / ``--model policy.int8.onnx``: the bundle's Q/DQ model on
ONNX Runtime's CPU provider (a real int8 export, made here)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import onnxruntime as ort
import pytest

from orin_rl import cli
from orin_rl.bundle import BundleError
from orin_rl.export.onnx import export_bundle
from orin_rl.runtime import RuntimeBackendError, load


@pytest.fixture(scope="module")
def int8_bundle(tiny_run, tmp_path_factory):
    """Pendulum (continuous: int8 actions differ from fp32 ones, so the file is told apart)."""
    out = tmp_path_factory.mktemp("int8") / "bundle"
    export_bundle(tiny_run("Pendulum-v1"), out, int8=True, parity_observations=256)
    return out


def _session_actions(path, obs):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["action"], {"obs": obs})[0]


@pytest.mark.parametrize("how", ["precision", "onnx-path"])
def test_int8_model_is_the_one_that_runs(int8_bundle, rng, how):
    obs = np.load(int8_bundle / "calibration.npz")["obs"][:64]
    int8 = _session_actions(int8_bundle / "policy.int8.onnx", obs)
    fp32 = _session_actions(int8_bundle / "policy.onnx", obs)
    assert not np.array_equal(int8, fp32)  # the two models can be told apart
    if how == "precision":
        backend = load(int8_bundle, precision="int8")
    else:
        backend = load(int8_bundle / "policy.int8.onnx")
    with backend:
        np.testing.assert_array_equal(backend.infer(obs), int8)
        assert backend.describe()["precision"] == "int8-qdq"
    with load(int8_bundle, precision="fp32") as fp32_backend:
        np.testing.assert_array_equal(fp32_backend.infer(obs), fp32)


def test_run_cli_with_int8(int8_bundle, tmp_path, capsys):
    report = tmp_path / "run.json"
    argv = ["-q", "run", "--model", str(int8_bundle), "--precision", "int8", "--rate", "0"]
    assert cli.main([*argv, "--steps", "300", "--report", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["backend"] == "onnxruntime" and data["precision"] == "int8-qdq"
    assert data["iterations"] == 300 and data["non_finite_events"] == 0
    assert "int8-qdq" in capsys.readouterr().out


def test_int8_file_is_hash_checked(int8_bundle, tmp_path):
    copy = tmp_path / "bundle"
    shutil.copytree(int8_bundle, copy)
    path = copy / "policy.int8.onnx"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(BundleError, match="sha256 differs"):
        load(copy, precision="int8")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--precision", "int8"], "no int8 model (it has fp32): orin-rl export RUN_DIR --int8"),
        (["--precision", "fp16"], "no fp16 model"),
        (["--precision", "int8", "--backend", "torch"], "not torch"),
        (["--model", "{bundle}/other.onnx"], "other.onnx is not a model of this bundle"),
        (["--model", "{tmp}/lonely.onnx"], "runs from its bundle folder"),
    ],
)
def test_bad_precision_is_one_line_exit_2(tiny_run, tmp_path, capsys, argv, message):
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny_run("Pendulum-v1") / "bundle", bundle)  # exported without --int8
    (bundle / "other.onnx").write_bytes(b"")
    (tmp_path / "lonely.onnx").write_bytes(b"")
    argv = [a.format(bundle=bundle, tmp=tmp_path) for a in argv]
    model = [] if "--model" in argv else ["--model", str(bundle)]
    assert cli.main(["-q", "run", *model, *argv, "--steps", "10"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_python_api_takes_the_precision(int8_bundle):
    import orin_rl

    obs = np.load(int8_bundle / "calibration.npz")["obs"][:8]
    with orin_rl.load_policy(int8_bundle, precision="int8") as policy:
        got = policy.act(obs.astype(np.float64))
    np.testing.assert_array_equal(got, _session_actions(int8_bundle / "policy.int8.onnx", obs))
    with pytest.raises(RuntimeBackendError, match="not torch"):
        load(int8_bundle, "torch", precision="int8")
