"""The parts of the TensorRT path that need no TensorRT: calibration-cache keys, precision
rules of strongly typed builds, the int64 action contract, profile-range errors, the engine
inspector's placement summary, the version floor and the doctor's selftest plan."""

from __future__ import annotations

import json

import numpy as np
import pytest

from orin_rl import bundle
from orin_rl.bundle import EngineSidecar, PlatformInfo, TensorSpec
from orin_rl.export.recipes import load_recipe
from orin_rl.export.tensorrt import (
    BuildError,
    calibration_cache_path,
    placement_from_inspector,
    resolve_model,
    write_cache,
)
from orin_rl.runtime.tensorrt_engine import (
    ProfileError,
    TensorRTUnavailable,
    check_batch,
    check_version,
    widen_integers,
)


class TestCalibrationCache:
    def test_key_follows_the_model_and_the_data(self, tmp_path, rng):
        out = tmp_path / "engines" / "policy.engine"
        obs = rng.normal(size=(64, 4)).astype(np.float32)
        key = {"batch": 8, "kind": "entropy", "trt_version": "10.3.0"}
        first = calibration_cache_path(out, "a" * 64, obs, **key)
        assert first == calibration_cache_path(out, "a" * 64, obs.copy(), **key)
        assert first.parent == out.parent and first.name.startswith("policy.engine.")
        others = [
            calibration_cache_path(out, "b" * 64, obs, **key),  # a new policy
            calibration_cache_path(out, "a" * 64, obs + 1, **key),  # other observations
            calibration_cache_path(out, "a" * 64, obs, **{**key, "kind": "minmax"}),
            calibration_cache_path(out, "a" * 64, obs, **{**key, "trt_version": "10.7.0"}),
        ]
        assert len({first, *others}) == 5, "a changed model or data reused an old cache"

    def test_written_before_its_folder_exists(self, tmp_path):
        path = tmp_path / "not" / "yet" / "there.calib.cache"
        write_cache(path, b"scales")
        assert path.read_bytes() == b"scales"


@pytest.fixture(scope="module")
def typed_bundles(cartpole_norm_run, tmp_path_factory):
    """An fp16 bundle and an fp32 bundle with its int8 Q/DQ variant."""
    from orin_rl.export.onnx import export_bundle

    root = tmp_path_factory.mktemp("typed")
    export_bundle(cartpole_norm_run, root / "fp16", fp16=True, parity_observations=256)
    export_bundle(cartpole_norm_run, root / "int8", int8=True, parity_observations=256)
    return root


class TestStronglyTypedBuilds:
    """TensorRT 11 builds the precision the ONNX carries: never an fp32 engine named fp16."""

    def test_onnx_file_must_carry_the_precision_asked_for(self, typed_bundles):
        fp16_onnx = typed_bundles / "fp16" / "policy.onnx"
        qdq_onnx = typed_bundles / "int8" / "policy.int8.onnx"
        assert resolve_model(fp16_onnx, load_recipe(None, precision="fp16"), 11)[2] == "fp16"
        assert resolve_model(qdq_onnx, load_recipe(None, precision="int8"), 11)[2] == "int8-qdq"
        with pytest.raises(BuildError, match="carries fp16, not fp32"):
            resolve_model(fp16_onnx, load_recipe(None, precision="fp32"), 11)
        with pytest.raises(BuildError, match="carries int8-qdq, not fp16"):
            resolve_model(qdq_onnx, load_recipe(None, precision="fp16"), 11)

    def test_fp32_onnx_is_refused_for_fp16_on_11_only(self, cartpole_norm_run, tmp_path):
        from orin_rl.export.onnx import export_bundle

        export_bundle(cartpole_norm_run, tmp_path / "b", parity_observations=64)
        fp32_onnx = tmp_path / "b" / "policy.onnx"
        with pytest.raises(BuildError, match=r"carries fp32, not fp16.*--fp16"):
            resolve_model(fp32_onnx, load_recipe(None, precision="fp16"), 11)
        with pytest.raises(BuildError, match="carries fp32, not fp16"):  # the bundle too
            resolve_model(tmp_path / "b", load_recipe(None, precision="fp16"), 11)
        # TensorRT 10 sets the precision with builder flags: the fp32 ONNX is the source.
        assert resolve_model(fp32_onnx, load_recipe(None, precision="fp16"), 10)[2] == "fp32"

    def test_bundle_int8_uses_the_qdq_variant(self, typed_bundles):
        path, sha, precision = resolve_model(
            typed_bundles / "int8", load_recipe(None, precision="int8"), 11
        )
        assert path.name == "policy.int8.onnx" and precision == "int8-qdq"
        assert bundle.sha256_file(path) == sha


class TestActionContract:
    def test_int32_argmax_is_widened_to_int64(self):
        """TensorRT 8.6 types ArgMax INT32; every backend returns int64 actions."""
        got = widen_integers(np.array([0, 1, 2**31 - 1], np.int32))
        assert got.dtype == np.int64 and got.tolist() == [0, 1, 2**31 - 1]
        floats = np.zeros((2, 3), np.float32)
        assert widen_integers(floats) is floats
        ints = np.arange(3)
        assert widen_integers(ints) is ints

    def test_backend_spec_of_an_int32_engine_is_int64(self, tmp_path):
        from orin_rl.runtime.tensorrt_backend import TensorRTBackend

        engine = tmp_path / "p.engine"
        engine.write_bytes(b"x")
        sidecar = EngineSidecar(
            engine_sha256=bundle.sha256_file(engine),
            onnx_sha256="0" * 64,
            platform=PlatformInfo("8.6.2", "Orin", "8.7"),
            precision="fp16",
            dla_core=None,
            batch_profile=[1, 8, 64],
            inputs=[TensorSpec("obs", ["batch", 4], "float32")],
            outputs=[TensorSpec("action", ["batch"], "int32")],
        )
        bundle.sidecar_path(engine).write_text(sidecar.to_json())
        backend = TensorRTBackend(engine)  # reads the sidecar only: no TensorRT needed
        assert backend.output_spec[0].dtype == "int64"


class TestProfileRange:
    @pytest.mark.parametrize("batch", [1, 7, 64])
    def test_batches_inside_the_profile(self, batch):
        check_batch(batch, [1, 8, 64])

    @pytest.mark.parametrize(("batch", "rebuild"), [(7, "--batch 1,1,7"), (0, "--batch 0,1,1")])
    def test_outside_is_one_line_with_the_range(self, batch, rebuild):
        with pytest.raises(ProfileError) as err:
            check_batch(batch, [1, 1, 1])
        message = str(err.value)
        assert "\n" not in message and "(batch 1 to 1)" in message and rebuild in message

    def test_cli_reports_it_as_exit_2(self):
        from orin_rl.errors import OrinError

        assert issubclass(ProfileError, OrinError) and issubclass(ProfileError, ValueError)


class TestVersionFloor:
    @pytest.mark.parametrize("version", ["8.6.1", "8.6.2.3", "10.3.0", "11.4.1"])
    def test_supported(self, version):
        check_version(version)

    @pytest.mark.parametrize("version", ["8.5.2", "8.4.1", "7.1.3"])
    def test_too_old_names_jetpack_6(self, version):
        with pytest.raises(TensorRTUnavailable, match=f"TensorRT {version} is too old.*8.6"):
            check_version(version)


# Built by hand in the engine inspector's documented JSON shape (Layers with Name/LayerType);
# not recorded from a board: JETSON.md has no sample of a DLA engine's inspector output.
INSPECTOR_DLA = {
    "Layers": [
        {"Name": "obs to nvm", "LayerType": "Reformat"},
        {"Name": "{ForeignNode[/actor/0/Gemm.../actor/2/Relu]}", "LayerType": "DLA"},
        {"Name": "action from nvm", "LayerType": "Reformat"},
        {"Name": "action copy finish", "LayerType": "Reformat"},
        {"Name": "/ArgMax", "LayerType": "TopK"},
    ],
    "Bindings": ["obs", "action"],
}
INSPECTOR_GPU = {
    "Layers": [
        {"Name": "{ForeignNode[/actor/0/Gemm.../ArgMax]}", "LayerType": "Myelin"},
        {"Name": "/Cast", "LayerType": "Cast"},
    ],
    "Bindings": ["obs", "action"],
}


class TestPlacement:
    def test_dla_layers_transfers_and_gpu_fallback(self):
        counts, gpu = placement_from_inspector(json.dumps(INSPECTOR_DLA))
        assert counts == {"DLA": 1, "GPU": 1, "transfer": 3} and gpu == ["/ArgMax"]

    def test_myelin_region_is_gpu(self):
        counts, gpu = placement_from_inspector(json.dumps(INSPECTOR_GPU))
        assert counts["DLA"] == 0 and len(gpu) == 2

    def test_names_only_verbosity(self):
        counts, gpu = placement_from_inspector(json.dumps({"Layers": ["a", "b"]}))
        assert counts["GPU"] == 2 and gpu == ["a", "b"]


class TestSelftestPlan:
    """``doctor --selftest`` must never call an fp32 engine fp16 (TensorRT 11)."""

    def test_trt11_with_only_an_fp32_onnx_skips_the_other_precisions(self, tmp_path):
        from orin_rl.doctor import selftest_targets

        fp32 = tmp_path / "tiny.onnx"
        targets = selftest_targets(11, 2, {"fp32": fp32, "fp16": None, "int8": None})
        assert [t.label for t in targets] == [
            "fp32 on GPU",
            "fp16 on GPU",
            "int8 on GPU",
            "fp16 on DLA 0",
            "fp16 on DLA 1",
        ]
        assert targets[0].model == fp32 and not targets[0].skip
        for t in targets[1:]:
            assert t.model is None and t.skip.startswith("not applicable: TensorRT 11")

    def test_trt11_builds_each_precision_from_its_own_onnx(self, tmp_path):
        from orin_rl.doctor import selftest_targets

        models = {p: tmp_path / f"{p}.onnx" for p in ("fp32", "fp16", "int8")}
        targets = selftest_targets(11, 1, models)
        assert [(t.precision, t.model.name) for t in targets] == [
            ("fp32", "fp32.onnx"),
            ("fp16", "fp16.onnx"),
            ("int8", "int8.onnx"),
            ("fp16", "fp16.onnx"),
        ]

    def test_trt10_builds_every_row_from_fp32_with_flags(self, tmp_path):
        from orin_rl.doctor import selftest_targets

        fp32 = tmp_path / "tiny.onnx"
        targets = selftest_targets(10, 0, {"fp32": fp32, "fp16": None, "int8": None})
        assert [t.model for t in targets] == [fp32] * 3 and not any(t.skip for t in targets)

    @pytest.mark.parametrize(
        ("asked", "built", "error", "status"),
        [
            ("fp16", "fp16", 1e-3, "ok"),
            ("fp16", "fp32", 0.0, "warn"),  # an fp32 engine is not an fp16 pass
            ("int8", "int8-qdq", 0.05, "ok"),
            ("int8", "int8", 0.5, "warn"),  # beyond the bound
        ],
    )
    def test_row_is_ok_only_for_the_precision_asked_for(self, asked, built, error, status):
        from orin_rl.doctor import SelftestTarget, selftest_row

        row = selftest_row(SelftestTarget(asked, None, None), built, error)
        assert row.status == status
