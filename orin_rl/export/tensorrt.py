"""ONNX bundle → TensorRT engine + sidecar, for TensorRT 8.6 (JetPack 6.0), 10.x (JetPack
6.1/6.2, 7.0/7.1) and 11.x (JetPack 7.2+). 8.6 is the oldest supported (tensorrt_engine.py).

NOT RUN on any machine of this project: no full TensorRT builder installs on them (GPU.md).
Written against the documented API (JETSON.md); the tests that need it are marked
``tensorrt``; ``orin-rl doctor --selftest`` is the first run on a board.

API generations handled here:
- 8.6: explicit-batch flag needed; precision flags; INT8 calibrators.
- 10.x: explicit batch implied; calibrators deprecated from 10.1 (still used when the ONNX has
  no Q/DQ); a Q/DQ ONNX builds as explicit quantisation.
- 11.x: no precision flags nor calibrators: networks are STRONGLY_TYPED, so fp16 comes from an
  fp16 ONNX and int8 from a Q/DQ ONNX (the bundle's variants); a build whose ONNX does not
  carry the precision asked for is refused rather than silently built as fp32.

After the build the engine inspector (``get_engine_information(LayerInformationFormat.JSON)``)
says where each layer landed: its JSON is saved beside the engine (``*.engine.layers.json``)
and, for DLA builds, summarised in the sidecar.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.bundle import (
    BundleError,
    EngineSidecar,
    TensorSpec,
    load_bundle,
    sha256_file,
    sidecar_path,
    write_private,
)
from orin_rl.errors import OrinError
from orin_rl.export.recipes import BuildRecipe
from orin_rl.runtime.tensorrt_engine import (
    TensorRTEngine,
    contract_dtype,
    import_pycuda,
    import_tensorrt,
    platform_info,
    runtime_settings,
    trt_major,
)

log = logging.getLogger(__name__)


class BuildError(OrinError, RuntimeError):
    """TensorRT refused to parse or build the model."""


def onnx_precision(path: Path) -> str:
    """``fp32``, ``fp16`` or ``int8-qdq``: the precision an ONNX file carries (Q/DQ nodes;
    fp16 initializers)."""
    try:
        import onnx
    except ImportError:
        raise BuildError(
            "reading an .onnx file's precision needs onnx: pip install 'orin-rl[export]'"
        ) from None
    model = onnx.load(str(path), load_external_data=False)
    ops = {node.op_type for node in model.graph.node}
    if ops & {"QuantizeLinear", "DequantizeLinear"}:
        return "int8-qdq"
    if any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer):
        return "fp16"
    return "fp32"


def check_strongly_typed(requested: str, carried: str, source: Path) -> None:
    """TensorRT 11 builds the precision the ONNX carries: refuse any other request."""
    if {"int8": "int8-qdq"}.get(requested, requested) == carried:
        return
    hint = {
        "fp16": "export with --fp16 (orin-rl export RUN --fp16)",
        "int8": "export with --int8 and build the bundle (it holds the Q/DQ model)",
        "fp32": f"build with --precision {carried.split('-')[0]}",
    }[requested]
    raise BuildError(
        f"{source}: TensorRT 11 is strongly typed and this ONNX carries {carried}, not "
        f"{requested}: {hint}"
    )


def resolve_model(source: str | Path, recipe: BuildRecipe, major: int) -> tuple[Path, str, str]:
    """The ONNX file to build from, its sha256 and the precision it carries.

    On TensorRT 11 (strongly typed) int8 must come from the bundle's Q/DQ variant and fp16
    from an fp16 bundle; an .onnx file must carry the precision asked for.
    """
    source = Path(source)
    if source.suffix == ".onnx":
        carried = onnx_precision(source) if major >= 11 else "fp32"
        if major >= 11:
            check_strongly_typed(recipe.precision, carried, source)
        return source, sha256_file(source), carried
    info, onnx_path = load_bundle(source)
    if major >= 11:
        if recipe.precision == "int8":
            variant = info.variants.get("int8-qdq")
            if variant is None:
                raise BuildError(
                    "TensorRT 11 builds int8 only from a Q/DQ model: orin-rl export RUN --int8"
                )
            path = onnx_path.parent / variant["onnx_file"]
            return path, variant["onnx_sha256"], "int8-qdq"
        check_strongly_typed(recipe.precision, info.precision, onnx_path)
    return onnx_path, info.onnx_sha256, info.precision


def load_calibration(recipe: BuildRecipe, bundle_dir: Path | None) -> np.ndarray:
    """Observations for int8 calibration: ``recipe.calib`` (npz, bundle or run folder) or the
    bundle's calibration.npz."""
    candidates = []
    if recipe.calib:
        calib = Path(recipe.calib)
        candidates = (
            [calib]
            if calib.suffix == ".npz"
            else [calib / "calibration.npz", calib / "bundle" / "calibration.npz"]
        )
    elif bundle_dir is not None:
        candidates = [bundle_dir / "calibration.npz"]
    for path in candidates:
        if path.is_file():
            with np.load(path, allow_pickle=False) as data:
                if "obs" not in data:
                    raise BuildError(f"{path}: calibration file has no 'obs' array")
                return np.ascontiguousarray(data["obs"], dtype=np.float32)
    raise BuildError("int8 needs calibration observations: --calib RUN_DIR|BUNDLE|FILE.npz")


def calibration_cache_path(
    out: Path, onnx_sha256: str, observations: np.ndarray, batch: int, kind: str, trt_version: str
) -> Path:
    """Where the int8 calibration cache of this model + data + calibrator lives.

    Keyed on the ONNX's hash, the calibration data, the batch, the calibrator and the TensorRT
    version: a new policy (or new observations) never reuses another one's scales.
    """
    digest = hashlib.sha256()
    for part in (onnx_sha256, str(batch), kind, trt_version, str(observations.shape)):
        digest.update(part.encode() + b"|")
    digest.update(np.ascontiguousarray(observations).tobytes())
    return out.with_name(f"{out.name}.{digest.hexdigest()[:16]}.calib.cache")


def write_cache(path: Path, data: bytes) -> None:
    """Write a cache file, creating its folder first (the build writes it before the engine)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_private(path, bytes(data))


def make_calibrator(trt, observations: np.ndarray, batch: int, kind: str, cache: Path):
    """An IInt8EntropyCalibrator2 / IInt8MinMaxCalibrator fed from ``observations``."""
    cuda = import_pycuda()
    base = trt.IInt8EntropyCalibrator2 if kind == "entropy" else trt.IInt8MinMaxCalibrator

    class Calibrator(base):
        def __init__(self):
            base.__init__(self)
            self.batches = [
                observations[i : i + batch] for i in range(0, len(observations) - batch + 1, batch)
            ]
            self.index = 0
            self.device = cuda.mem_alloc(max(1, observations[:batch].nbytes))

        def get_batch_size(self):
            return batch

        def get_batch(self, names):
            if self.index >= len(self.batches):
                return None
            cuda.memcpy_htod(self.device, np.ascontiguousarray(self.batches[self.index]))
            self.index += 1
            return [int(self.device)]

        def read_calibration_cache(self):
            return cache.read_bytes() if cache.is_file() else None

        def write_calibration_cache(self, data):
            write_cache(cache, data)

        def free(self):
            self.device.free()

    return Calibrator()


def _network_flags(trt, major: int) -> int:
    flags = 0
    if major < 10:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    if major >= 11:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    return flags


def _configure_precision(trt, major, config, recipe, model_precision, calibrator_factory):
    if major >= 11:
        return  # strongly typed: the ONNX carries the precision
    if recipe.precision in ("fp16", "int8"):
        config.set_flag(trt.BuilderFlag.FP16)
    if recipe.precision == "int8":
        config.set_flag(trt.BuilderFlag.INT8)
        if model_precision != "int8-qdq":  # implicit quantisation needs a calibrator
            config.int8_calibrator = calibrator_factory()


def _configure_dla(trt, builder, config, recipe) -> None:
    if recipe.dla_core is None:
        return
    cores = builder.num_DLA_cores
    if cores == 0:
        raise BuildError("this GPU has no DLA (Orin Nano has none usable); drop --dla")
    if recipe.dla_core >= cores:
        raise BuildError(f"--dla {recipe.dla_core}: this board has {cores} DLA core(s)")
    config.default_device_type = trt.DeviceType.DLA
    config.DLA_core = recipe.dla_core
    if recipe.gpu_fallback:
        config.set_flag(trt.BuilderFlag.GPU_FALLBACK)


def _profile(builder, network, recipe):
    profile = builder.create_optimization_profile()
    for i in range(network.num_inputs):
        tensor = network.get_input(i)
        rest = list(tensor.shape)[1:]
        mn, opt, mx = recipe.batch
        profile.set_shape(tensor.name, (mn, *rest), (opt, *rest), (mx, *rest))
    return profile


# Names TensorRT gives the layers that move tensors between GPU and DLA memory.
_TRANSFER_SUFFIXES = (" to nvm", " from nvm", " copy finish")


def placement_from_inspector(info_json: str) -> tuple[dict[str, int], list[str]]:
    """Per-device layer counts and the GPU layers, from the engine inspector's JSON.

    The inspector (``ProfilingVerbosity.DETAILED``) lists the built engine's layers as
    ``{"Layers": [{"Name": ..., "LayerType": ...}, ...]}``. A DLA subgraph is one layer of
    ``LayerType`` "DLA", or a ``{ForeignNode[...]}`` layer that is not a GPU Myelin region;
    the reformats that move tensors to and from DLA memory are counted as ``transfer``. Not
    yet checked against an engine from a board (JETSON.md has no sample): the full JSON is
    saved beside the engine so the classification can be read against it.
    """
    layers = json.loads(info_json).get("Layers", [])
    counts = {"DLA": 0, "GPU": 0, "transfer": 0}
    gpu: list[str] = []
    for layer in layers:
        if isinstance(layer, str):  # LAYER_NAMES_ONLY verbosity: no type to go on
            layer = {"Name": layer}
        name = str(layer.get("Name", ""))
        kind = str(layer.get("LayerType", ""))
        if kind.upper() == "DLA" or (
            name.startswith("{ForeignNode[") and kind.lower() not in ("myelin", "kgen")
        ):
            counts["DLA"] += 1
        elif name.endswith(_TRANSFER_SUFFIXES):
            counts["transfer"] += 1
        else:
            counts["GPU"] += 1
            gpu.append(name)
    return counts, gpu


def inspect_engine(trt, logger, serialized, recipe: BuildRecipe) -> str:
    """The engine inspector's JSON for a just-built engine (deserialised as the runtime will)."""
    runtime = trt.Runtime(logger)
    for key, value in runtime_settings(recipe.version_compatible, recipe.dla_core).items():
        setattr(runtime, key, value)
    engine = runtime.deserialize_cuda_engine(serialized)
    if engine is None:
        raise BuildError("TensorRT built the engine but cannot deserialise it (see the log)")
    inspector = engine.create_engine_inspector()
    text = inspector.get_engine_information(trt.LayerInformationFormat.JSON)
    del inspector, engine, runtime  # in dependency order
    return text


def build_engine(source: str | Path, out: str | Path, recipe: BuildRecipe) -> EngineSidecar:
    """Build ``source`` (bundle folder, policy.json or .onnx) into ``out`` + its sidecar."""
    trt = import_tensorrt()
    major = trt_major(trt)
    here = platform_info(trt)
    model_path, model_sha, model_precision = resolve_model(source, recipe, major)
    bundle_dir = model_path.parent if (model_path.parent / "policy.json").is_file() else None
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(_network_flags(trt, major))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(model_path.read_bytes()):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise BuildError(f"{model_path}: TensorRT could not parse the ONNX: {errors}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, recipe.workspace_mb << 20)
    config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED
    calib_obs: np.ndarray | None = None
    made: list[Any] = []
    out = Path(out)

    def calibrator():
        nonlocal calib_obs
        calib_obs = load_calibration(recipe, bundle_dir)
        batch, kind = recipe.batch[1], recipe.int8_calibrator
        cache = calibration_cache_path(out, model_sha, calib_obs, batch, kind, trt.__version__)
        made.append(make_calibrator(trt, calib_obs, batch, kind, cache))
        return made[-1]

    _configure_precision(trt, major, config, recipe, model_precision, calibrator)
    _configure_dla(trt, builder, config, recipe)
    if recipe.version_compatible:
        config.set_flag(trt.BuilderFlag.VERSION_COMPATIBLE)
    config.add_optimization_profile(_profile(builder, network, recipe))
    cache_path = Path(recipe.timing_cache) if recipe.timing_cache else None
    cache_bytes = cache_path.read_bytes() if cache_path and cache_path.is_file() else b""
    timing_cache = config.create_timing_cache(cache_bytes)
    config.set_timing_cache(timing_cache, ignore_mismatch=False)
    serialized = builder.build_serialized_network(network, config)
    for calib in made:
        calib.free()
    if serialized is None:
        raise BuildError("TensorRT failed to build the engine (see the log above)")
    out.parent.mkdir(parents=True, exist_ok=True)
    write_private(out, bytes(serialized))
    if cache_path:
        write_cache(cache_path, config.get_timing_cache().serialize())
    layers_json = inspect_engine(trt, logger, serialized, recipe)
    write_private(out.with_name(out.name + ".layers.json"), layers_json)
    placement, fallback = ({}, [])
    if recipe.dla_core is not None:
        placement, fallback = placement_from_inspector(layers_json)
        if fallback:
            log.warning(
                "%d layer(s) run on the GPU, not DLA %d: %s",
                len(fallback),
                recipe.dla_core,
                ", ".join(fallback),
            )
    sidecar = EngineSidecar(
        engine_sha256=sha256_file(out),
        onnx_sha256=model_sha,
        platform=here,
        precision=model_precision if major >= 11 else recipe.precision,
        dla_core=recipe.dla_core,
        batch_profile=list(recipe.batch),
        version_compatible=recipe.version_compatible,
        layer_placement=placement,
        gpu_fallback_layers=fallback,
        inputs=[_tensor_spec(trt, network.get_input(i)) for i in range(network.num_inputs)],
        outputs=[_tensor_spec(trt, network.get_output(i)) for i in range(network.num_outputs)],
    )
    if recipe.precision == "int8":
        sidecar.int8_accuracy = int8_accuracy(out, model_path, recipe, bundle_dir, calib_obs)
    write_private(sidecar_path(out), sidecar.to_json())
    return sidecar


def _tensor_spec(trt, tensor) -> TensorSpec:
    shape = [d if d >= 0 else "batch" for d in tensor.shape]
    # The contract's dtype: TensorRT 8.6 types ArgMax INT32, the backend widens it to int64.
    return TensorSpec(tensor.name, shape, contract_dtype(str(np.dtype(trt.nptype(tensor.dtype)))))


def int8_accuracy(
    engine: Path,
    onnx_path: Path,
    recipe: BuildRecipe,
    bundle_dir: Path | None,
    obs: np.ndarray | None,
) -> dict[str, float]:
    """Agreement of the int8 engine with the fp32 model (ONNX Runtime, CPU) on the calibration
    observations, in chunks of the profile's max batch."""
    import onnxruntime as ort

    obs = load_calibration(recipe, bundle_dir) if obs is None else obs
    fp32_path = onnx_path.with_name("policy.onnx") if bundle_dir else onnx_path
    session = ort.InferenceSession(str(fp32_path), providers=["CPUExecutionProvider"])
    reference = session.run(None, {"obs": obs})
    mn, _, mx = recipe.batch
    usable = len(obs) // mx * mx if len(obs) >= mx else len(obs) // mn * mn
    obs, reference = obs[:usable], [r[:usable] for r in reference]
    with TensorRTEngine.from_file(
        engine,
        batch=min(mx, usable),
        version_compatible=recipe.version_compatible,
        dla_core=recipe.dla_core,
    ) as runner:
        chunks = [runner.run({"obs": obs[i : i + mx]}) for i in range(0, usable, mx)]
    outputs = {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}
    action = outputs["action"]
    if action.dtype.kind in "iu":
        return {"action_agreement": float((action.reshape(-1) == reference[0].reshape(-1)).mean())}
    return {"max_abs_error": float(np.abs(action - reference[0]).max())}


def describe(sidecar: EngineSidecar) -> str:
    """One JSON blob of the sidecar for the CLI."""
    data: dict[str, Any] = asdict(sidecar)
    return json.dumps(data, indent=2)


__all__ = ["BuildError", "BundleError", "build_engine", "describe", "platform_info"]
