"""Bundle and sidecar files, recipes, ONNX Runtime provider configs, `build` without TensorRT."""

from __future__ import annotations

import importlib.util
import json
import math
import os

import pytest

from orin_rl import bundle, cli
from orin_rl.bundle import BundleError, EngineSidecar, PlatformInfo
from orin_rl.export.recipes import RecipeError, load_recipe, ort_providers

HAS_TRT = importlib.util.find_spec("tensorrt") is not None
ORIN_TRT10 = PlatformInfo("10.3.0", "Orin", "8.7")


def make_engine(tmp_path, platform=ORIN_TRT10, version_compatible=False, content=b"engine-bytes"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    engine = tmp_path / "policy.engine"
    engine.write_bytes(content)
    sidecar = EngineSidecar(
        engine_sha256=bundle.sha256_file(engine),
        onnx_sha256="0" * 64,
        platform=platform,
        precision="fp16",
        dla_core=None,
        batch_profile=[1, 1, 1],
        version_compatible=version_compatible,
    )
    bundle.sidecar_path(engine).write_text(sidecar.to_json())
    return engine


class TestSidecarCheck:
    def test_matching_platform_is_accepted(self, tmp_path):
        assert bundle.check_engine(make_engine(tmp_path), ORIN_TRT10).precision == "fp16"

    @pytest.mark.parametrize(
        ("here", "message"),
        [
            (
                PlatformInfo("10.3.0", "NVIDIA H200", "9.0"),
                "built for Orin \\(sm_87\\); this is NVIDIA H200 \\(sm_90\\)",
            ),
            (
                PlatformInfo("8.6.2", "Orin", "8.7"),
                "built with TensorRT 10.3.0 for sm_87; this is TensorRT 8.6.2",
            ),
            (PlatformInfo("10.7.0", "Orin", "8.7"), "TensorRT 10.3.0"),
        ],
    )
    def test_each_mismatch_is_refused_with_rebuild_advice(self, tmp_path, here, message):
        with pytest.raises(BundleError, match=message) as err:
            bundle.check_engine(make_engine(tmp_path), here)
        assert "orin-rl build" in str(err.value)

    @pytest.mark.parametrize(
        ("built", "here", "loads"),
        [
            ("10.3.0", "10.7.0", True),  # a later minor of the same major
            ("10.3.0", "11.4.1", True),  # 10 → 11 (TensorRT 11.4.1 support matrix)
            ("8.6.2", "10.3.0", True),  # 8 → 10
            ("8.6.2", "11.4.1", False),  # two jumps: not in the matrix
            ("10.3.0", "10.1.0", False),  # never backwards
            ("11.4.1", "10.3.0", False),
        ],
    )
    def test_version_compatible_engines_load_across_the_supported_versions(
        self, tmp_path, built, here, loads
    ):
        compatible = make_engine(
            tmp_path, PlatformInfo(built, "Orin", "8.7"), version_compatible=True
        )
        here_info = PlatformInfo(here, "Orin", "8.7")
        if loads:
            assert bundle.check_engine(compatible, here_info).version_compatible
        else:
            with pytest.raises(BundleError, match=f"built with TensorRT {built}"):
                bundle.check_engine(compatible, here_info)
        # Without the flag, only the exact version loads.
        plain = make_engine(tmp_path / "plain", PlatformInfo(built, "Orin", "8.7"))
        with pytest.raises(BundleError, match="rebuild it here"):
            bundle.check_engine(plain, here_info)

    def test_loading_settings_follow_the_sidecar(self):
        """A version-compatible engine embeds its lean runtime: TensorRT runs it only with
        engine_host_code_allowed; a DLA engine needs the runtime's DLA core set."""
        from orin_rl.runtime.tensorrt_engine import runtime_settings

        assert runtime_settings(False, None) == {}
        assert runtime_settings(True, None) == {"engine_host_code_allowed": True}
        assert runtime_settings(False, 1) == {"DLA_core": 1}

    def test_changed_engine_bytes_are_refused_before_deserialising(self, tmp_path):
        engine = make_engine(tmp_path)
        engine.write_bytes(b"engine-byte")  # truncated copy
        with pytest.raises(BundleError, match="sha256 differs"):
            bundle.check_engine(engine, ORIN_TRT10)

    @pytest.mark.parametrize(
        "content",
        ["", "{", '{"format": "other"}', "\x00\x01garbage", '{"format": "orin_rl.engine/1"}'],
    )
    def test_bad_sidecar_files(self, tmp_path, content):
        engine = make_engine(tmp_path)
        bundle.sidecar_path(engine).write_text(content)
        with pytest.raises(BundleError):
            bundle.check_engine(engine, ORIN_TRT10)

    def test_missing_sidecar(self, tmp_path):
        engine = tmp_path / "x.engine"
        engine.write_bytes(b"x")
        with pytest.raises(BundleError, match="no engine sidecar"):
            bundle.check_engine(engine, ORIN_TRT10)


class TestBundleFiles:
    def test_onnx_path_cannot_escape_the_bundle(self, cartpole_run, tmp_path):
        from orin_rl.export.onnx import export_bundle

        export_bundle(cartpole_run, tmp_path / "b", parity_observations=64)
        path = tmp_path / "b" / "policy.json"
        data = json.loads(path.read_text())
        for evil in ("../../etc/passwd", "/etc/passwd"):
            data["onnx_file"] = evil
            path.write_text(json.dumps(data))
            with pytest.raises(BundleError, match="leaves the bundle folder"):
                bundle.load_bundle(tmp_path / "b")

    def test_truncated_onnx_is_refused(self, cartpole_run, tmp_path):
        from orin_rl.export.onnx import export_bundle

        export_bundle(cartpole_run, tmp_path / "b", parity_observations=64)
        onnx_file = tmp_path / "b" / "policy.onnx"
        onnx_file.write_bytes(onnx_file.read_bytes()[:100])
        with pytest.raises(BundleError, match="sha256 differs"):
            bundle.load_bundle(tmp_path / "b")

    @pytest.mark.parametrize("content", ["", "not json", "[]", '{"format": "orin_rl.bundle/1"}'])
    def test_bad_policy_json(self, tmp_path, content):
        (tmp_path / "policy.json").write_text(content)
        with pytest.raises(BundleError):
            bundle.load_bundle(tmp_path)

    def test_private_write(self, tmp_path):
        bundle.write_private(tmp_path / "m.onnx", b"abc")
        assert os.stat(tmp_path / "m.onnx").st_mode & 0o777 == 0o600


def _tiny_bundle(folder):
    """A bundle whose model is a few bytes (load_bundle hashes the ONNX, it does not parse it)
    and whose contract is one gain."""
    folder.mkdir(parents=True)
    (folder / "policy.onnx").write_bytes(b"onnx-bytes")
    info = bundle.BundleInfo(
        onnx_file="policy.onnx",
        onnx_sha256=bundle.sha256_file(folder / "policy.onnx"),
        opset=17,
        precision="fp32",
        inputs=[bundle.TensorSpec("obs", [1, 3], "float32")],
        outputs=[bundle.TensorSpec("action", [1, 1], "float32")],
        action_space={"kind": "continuous", "shape": [1], "low": [-1.0], "high": [1.0]},
        normalizer=None,
        parity_max_abs_error=0.0,
        deploy={"stiffness": [40.0]},
    )
    (folder / "policy.json").write_text(info.to_json())
    return folder


class TestBundleHash:
    """policy.json and the model it names are one unit (issue 67, item 2): ``bundle_sha256``
    covers everything else in policy.json (the deploy contract, the model's sha256), written
    with it and checked at every load; a bundle from before it loads with one warning."""

    def test_an_edit_of_policy_json_is_refused_at_every_load(self, tmp_path):
        """A changed stiffness ran (mutation: load_bundle without ``check_content``: the
        edited bundle loads)."""
        folder = _tiny_bundle(tmp_path / "b")
        data = json.loads((folder / "policy.json").read_text())
        assert data["bundle_sha256"] == bundle.content_sha256(data)
        bundle.load_bundle(folder)
        data["deploy"]["stiffness"][0] = 80.0
        (folder / "policy.json").write_text(json.dumps(data))
        for verify_hash in (True, False):  # the contract's readers skip the model's hash only
            with pytest.raises(BundleError, match=r"policy\.json: changed since it was exported"):
                bundle.load_bundle(folder, verify_hash=verify_hash)

    def test_a_bundle_from_before_the_hash_loads_with_one_warning(self, tmp_path, caplog):
        """Accepted, with one warning a process naming the command that adds the hash
        (mutations: refused; warned at every load)."""
        folder = _tiny_bundle(tmp_path / "b")
        data = json.loads((folder / "policy.json").read_text())
        del data["bundle_sha256"]
        (folder / "policy.json").write_text(json.dumps(data))
        with caplog.at_level("WARNING", logger="orin_rl.bundle"):
            for _ in range(2):
                info, _ = bundle.load_bundle(folder)
        assert info.deploy == {"stiffness": [40.0]}
        warned = [r.getMessage() for r in caplog.records if "bundle_sha256" in r.getMessage()]
        assert len(warned) == 1 and "`orin-rl export RUN_DIR`" in warned[0], warned


def strict_json(text: str):
    """Parse as a robot's C++ or Go parser does: ``Infinity``/``NaN`` are not JSON."""

    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


class TestStrictJson:
    """policy.json is strict JSON (an unbounded action side is ``null``) and reads back with
    the infinities it was written with (mutations: ``allow_nan`` and ``Infinity`` written
    again; the reader leaving ``null`` as None)."""

    def test_an_unbounded_action_is_null_in_policy_json_and_inf_when_read(
        self, mjlab_style_onnx, tmp_path
    ):
        from orin_rl.export.mjlab_onnx import import_mjlab_onnx

        import_mjlab_onnx(mjlab_style_onnx, tmp_path / "b")  # no task: the bounds are ±inf
        space = strict_json((tmp_path / "b" / "policy.json").read_text())["action_space"]
        assert space["low"] == [None, None] and space["high"] == [None, None]
        info, _ = bundle.load_bundle(tmp_path / "b")
        assert info.action_space["low"] == [-math.inf, -math.inf]
        assert info.action_space["high"] == [math.inf, math.inf]

    def test_bounds_and_clip_round_trip(self):
        space = {"kind": "continuous", "shape": [2], "low": [-math.inf, -1.0],
                 "high": [2.0, math.inf]}  # fmt: skip
        info = bundle.BundleInfo(
            onnx_file="policy.onnx",
            onnx_sha256="0" * 64,
            opset=17,
            precision="fp32",
            inputs=[bundle.TensorSpec("obs", ["batch", 3], "float32")],
            outputs=[bundle.TensorSpec("action", ["batch", 2], "float32")],
            action_space=space,
            normalizer={"mean": [0.0] * 3, "var": [1.0] * 3, "eps": 1e-8, "clip": math.inf},
            parity_max_abs_error=0.0,
        )
        data = strict_json(info.to_json())
        assert data["action_space"]["low"] == [None, -1.0] and data["normalizer"]["clip"] is None
        assert bundle.BundleInfo.from_dict(data) == info

    def test_a_bundle_written_with_infinity_still_reads(self, mjlab_style_onnx, tmp_path):
        """Bundles from before the JSON was strict hold ``-Infinity``/``Infinity``."""
        from orin_rl.export.mjlab_onnx import import_mjlab_onnx

        import_mjlab_onnx(mjlab_style_onnx, tmp_path / "b")
        path = tmp_path / "b" / "policy.json"
        data = json.loads(path.read_text())
        # the hash is of the strict form: the same bounds as infinities keep it
        space = {**data["action_space"], "low": [-math.inf] * 2, "high": [math.inf] * 2}
        assert bundle.content_sha256({**data, "action_space": space}) == data["bundle_sha256"]
        del data["bundle_sha256"]  # such bundles came before the hash too
        data["action_space"].update(low=[-math.inf, -1.0], high=[math.inf, 1.0])
        path.write_text(json.dumps(data))  # Python's default: allow_nan=True
        assert "-Infinity" in path.read_text()
        info, _ = bundle.load_bundle(tmp_path / "b")
        assert info.action_space["low"] == [-math.inf, -1.0]
        assert info.action_space["high"] == [math.inf, 1.0]


class TestRecipes:
    @pytest.mark.parametrize("path", sorted(__import__("glob").glob("engines/*.yaml")))
    def test_shipped_recipes_validate(self, path):
        load_recipe(path)

    @pytest.mark.parametrize(
        ("text", "message"),
        [
            ("precison: fp16\n", "precison: unknown key"),
            ("precision: fp8\n", "precision: 'fp8' is not one of"),
            ("batch: [4, 2, 8]\n", "min <= opt <= max"),
            ("precision: fp16\ndla_core: 0\nbatch: [1, 4, 8]\n", "static shape"),
            ("dla_core: 0\nprecision: fp32\n", "fp16 or int8 only"),
            ("workspace_mb: '256'\n", "workspace_mb: wrong type"),
            ("- a\n", "mapping"),
        ],
    )
    def test_bad_recipes_name_the_key(self, tmp_path, text, message):
        path = tmp_path / "r.yaml"
        path.write_text(text)
        with pytest.raises(RecipeError, match=message):
            load_recipe(path)

    def test_flags_override_the_recipe(self):
        recipe = load_recipe("engines/gpu-fp16.yaml", precision="int8", batch=[1, 2, 4])
        assert recipe.precision == "int8" and recipe.batch == [1, 2, 4]

    def test_ort_providers_follow_the_recipe(self):
        recipe = load_recipe("engines/dla0-fp16.yaml")
        versions = {"ort": "1.20", "tensorrt": "10.3", "gpu": "Orin"}
        available = ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]
        providers = ort_providers(recipe, "ab" * 32, [4], versions, available)
        assert [p for p, _ in providers] == available
        trt = providers[0][1]
        assert trt["trt_fp16_enable"] and not trt["trt_int8_enable"]
        assert trt["trt_dla_enable"] and trt["trt_dla_core"] == 0
        assert trt["trt_profile_opt_shapes"] == "obs:1x4"
        other = ort_providers(recipe, "ab" * 32, [4], {**versions, "tensorrt": "10.7"}, available)
        assert other[0][1]["trt_engine_cache_path"] != trt["trt_engine_cache_path"], (
            "a TensorRT upgrade must not reuse cached engines"
        )
        assert ort_providers(recipe, "ab" * 32, [4], versions, ["CPUExecutionProvider"]) == [
            ("CPUExecutionProvider", {})
        ]


@pytest.mark.skipif(HAS_TRT, reason="TensorRT is installed here")
def test_build_without_tensorrt_is_one_line_exit_2(cartpole_run, tmp_path, capsys):
    from orin_rl.export.onnx import export_bundle

    export_bundle(cartpole_run, tmp_path / "b", parity_observations=64)
    code = cli.main(
        ["build", str(tmp_path / "b"), "--precision", "fp16", "--out", str(tmp_path / "e.engine")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "JetPack" in err
    assert not (tmp_path / "e.engine").exists()


@pytest.mark.tensorrt
@pytest.mark.skipif(
    not HAS_TRT, reason="needs TensorRT (JetPack); no machine of this project has it (GPU.md)"
)
@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
def test_build_and_run_each_precision(cartpole_norm_run, tmp_path, precision):
    """On a board: build, check the sidecar, run the engine against ONNX Runtime."""
    import numpy as np
    import onnxruntime as ort

    from orin_rl.export.onnx import export_bundle
    from orin_rl.export.tensorrt import build_engine, platform_info
    from orin_rl.runtime.tensorrt_engine import TensorRTEngine, import_tensorrt

    export_bundle(
        cartpole_norm_run, tmp_path / "b", fp16=precision == "fp16", int8=precision == "int8"
    )
    recipe = load_recipe(None, precision=precision, timing_cache=str(tmp_path / "timing.cache"))
    engine = tmp_path / f"{precision}.engine"
    sidecar = build_engine(tmp_path / "b", engine, recipe)
    bundle.check_engine(engine, platform_info(import_tensorrt()))
    obs = np.load(tmp_path / "b" / "calibration.npz")["obs"][:64]
    session = ort.InferenceSession(
        str(tmp_path / "b" / "policy.onnx"), providers=["CPUExecutionProvider"]
    )
    expected = session.run(["action"], {"obs": obs})[0]
    runner = TensorRTEngine.from_file(engine, batch=1)
    got = np.concatenate([runner.run({"obs": obs[i : i + 1]})["action"] for i in range(len(obs))])
    assert (got.reshape(-1) == expected.reshape(-1)).mean() >= (
        0.99 if precision != "int8" else 0.9
    )
    if precision == "int8":
        assert sidecar.int8_accuracy is not None
