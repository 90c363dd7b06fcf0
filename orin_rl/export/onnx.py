"""Run folder → verified ONNX deploy bundle (policy.onnx + policy.json).

The exported graph is the deterministic actor (argmax for discrete actions, the mean clipped to
the action bounds for continuous ones) with the observation normaliser folded in as graph ops,
so the robot feeds raw sensor values. Every export is checked (``onnx.checker``, shape
inference), simplified with onnxslim, and compared with the PyTorch policy through ONNX Runtime
on observations recorded by running the policy in its environment and on random ones: the
export fails when the error exceeds the tolerance of its precision.

Tolerances (elementwise, on the float output: logits for discrete, actions for continuous):
``|onnx - torch| <= rtol * max(1, |torch|)``.
- fp32: rtol 1e-5.
- fp16 (``--fp16``: fp16 weights and maths, fp32 input/output): rtol 2e-2.
- int8 Q/DQ (``--int8``, extra file ``policy.int8.onnx``): judged on the calibration
  observations and accepted when at least 95% of the decisive discrete actions (fp32's top
  logit ahead of the next by 5% of its size, or 0.05) agree with fp32 (of all actions, when
  fewer than half are decisive), or continuous actions stay within 10% of the action range;
  every figure and the rule applied go into policy.json.
"""

from __future__ import annotations

import io
import logging
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from orin_rl import __version__ as orin_rl_version
from orin_rl import envs
from orin_rl.bundle import BundleInfo, TensorSpec, sha256_file, write_private
from orin_rl.checkpoint import load_policy
from orin_rl.envs import backends as env_backends
from orin_rl.envs.factory import ENV_CONFIG_KEYS
from orin_rl.errors import OrinError
from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models.deploy import DeterministicPolicy
from orin_rl.obs_layout import ObsLayout

log = logging.getLogger(__name__)

RTOL = {"fp32": 1e-5, "fp16": 2e-2}
INT8_MIN_ACTION_AGREEMENT = 0.95
INT8_MIN_DECISIVE_FRACTION = 0.5
DECISIVE_MARGIN = 0.05
INT8_MAX_RANGE_ERROR = 0.10
EXPORT_HINT = "install the export extra: pip install 'orin-rl[export]'"


class ExportError(OrinError, ValueError):
    """The policy cannot be exported, or the exported model disagrees with PyTorch."""


def _require(module: str):
    try:
        return __import__(module)
    except ImportError:
        raise ExportError(f"{module} is not installed; {EXPORT_HINT}") from None


@dataclass
class ExportResult:
    """What ``export_bundle`` wrote."""

    bundle_dir: Path
    """The bundle folder."""
    info: BundleInfo
    """The contents of policy.json."""
    export_time_s: float
    """Wall time of the whole export, checks included."""
    onnx_bytes: int
    """Size of policy.onnx."""


def record_observations(
    policy: ActorCritic,
    env_id: str,
    count: int,
    seed: int,
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: list[Any] | None = None,
    facts: dict[str, Any] | None = None,
) -> np.ndarray:
    """Raw observations met by the deterministic policy in its environment (count, *obs_shape):
    float32, or uint8 for image frames (the exported input and the int8 calibration set).

    ``facts``, where given, receives the env's deploy contract (a robot task's; see
    ``orin_rl.robot.contract``) under ``"deploy"``."""
    num_envs = 8
    # mjlab's robot tasks step on the GPU where there is one (Warp's CPU kernels would compile
    # first); everything else on the CPU, where the policy is.
    device = "cpu"
    if torch.cuda.is_available() and env_backends.for_id(env_id, "gym") == "mjlab":
        device = "cuda"
    env = envs.make(
        env_id,
        num_envs,
        device,
        max_episode_steps=max_episode_steps,
        env_kwargs=env_kwargs,
        wrappers=wrappers,
    )
    rows: list[np.ndarray] = []
    try:
        if facts is not None and hasattr(env, "deploy_contract"):
            facts["deploy"] = env.deploy_contract()
        obs = env.reset(seed=seed)
        with torch.inference_mode():
            while len(rows) * num_envs < count:
                obs = obs.cpu()
                rows.append(obs.numpy().copy())
                obs = env.step(policy.act_deterministic(policy.normalize(obs))).obs
    finally:
        env.close()
    recorded = np.concatenate(rows)[:count]
    return recorded if recorded.dtype == np.uint8 else recorded.astype(np.float32)


def deploy_observations(spec: PolicySpec, recorded: np.ndarray) -> dict[str, np.ndarray]:
    """What the deployed model is fed, by input name, from the env's recorded observations:
    ``obs`` (the actor's group of a flat one), or a dict observation's actor keys (its rows
    unpacked: uint8 frames, float32 states)."""
    if spec.obs_layout is not None:
        parts = ObsLayout.from_spec(spec.obs_layout).unpack(recorded, spec.obs_groups["actor"])
        return {key: np.ascontiguousarray(value) for key, value in parts.items()}
    if spec.obs_groups is not None:  # the deployed policy reads the actor's group only
        recorded = recorded[:, slice(*spec.obs_groups["actor"])]
    return {"obs": recorded}


def deploy_inputs(spec: PolicySpec) -> list[tuple[str, list[int], str]]:
    """(name, shape of one observation, dtype) of each input of the deployed model."""
    if spec.obs_layout is None:
        return [("obs", spec.deploy_obs_shape, spec.obs_dtype)]
    parts = ObsLayout.from_spec(spec.obs_layout).parts
    return [(key, list(parts[key].shape), parts[key].dtype) for key in spec.obs_groups["actor"]]


def random_observations(recorded: np.ndarray, count: int, seed: int) -> np.ndarray:
    """Observations around and beyond the recorded ones: mean ± 3 std, Gaussian; for uint8
    frames, uniform pixels over the whole 0-255 range."""
    rng = np.random.default_rng(seed)
    if recorded.dtype == np.uint8:
        return rng.integers(0, 256, (count, *recorded.shape[1:]), dtype=np.uint8)
    mean, std = recorded.mean(0), recorded.std(0) + 1e-3
    return (mean + 3.0 * std * rng.standard_normal((count, *recorded.shape[1:]))).astype(np.float32)


def _torch_outputs(module: DeterministicPolicy, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    with torch.inference_mode():
        out = module(*(torch.from_numpy(value) for value in feeds.values()))
    out = out if isinstance(out, tuple) else (out,)
    return [o.numpy() for o in out]


def _session(model_bytes: bytes):
    ort = _require("onnxruntime")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def compare(
    reference: list[np.ndarray], candidate: list[np.ndarray], discrete: bool, spec: PolicySpec
) -> dict[str, float]:
    """Errors of ``candidate`` against ``reference`` outputs (action first)."""
    ref_f, cand_f = (reference[1], candidate[1]) if discrete else (reference[0], candidate[0])
    err = np.abs(cand_f.astype(np.float64) - ref_f.astype(np.float64))
    result = {
        "max_abs_error": float(err.max()),
        "max_rel_error": float((err / np.maximum(1.0, np.abs(ref_f))).max()),
    }
    if discrete:
        agree = reference[0] == candidate[0]
        result["action_agreement"] = float(agree.mean())
        # Decisive observations: the fp32 policy prefers its action by a margin; near-ties
        # flip with any rounding and say nothing about the model's accuracy.
        top2 = np.sort(ref_f, axis=-1)[..., -2:]
        decisive = (top2[..., 1] - top2[..., 0]) > DECISIVE_MARGIN * np.maximum(
            1.0, np.abs(top2[..., 1])
        )
        result["decisive_fraction"] = float(decisive.mean())
        result["decisive_agreement"] = float(agree[decisive].mean()) if decisive.any() else 1.0
        # Flips the measured logit error cannot explain: where fp32's preference exceeds
        # twice the row's largest logit error, no rounding of that size reverses it.
        robust = (top2[..., 1] - top2[..., 0]) > 2.0 * err.max(axis=-1)
        result["robust_agreement"] = float(agree[robust].mean()) if robust.any() else 1.0
    else:
        span = np.asarray(spec.action_high) - np.asarray(spec.action_low)
        span = np.where(np.isfinite(span) & (span > 0), span, 1.0)
        result["max_range_error"] = float((err / span).max())
    return result


def int8_acceptable(errors: dict[str, float], discrete: bool) -> tuple[bool, str]:
    """Whether an int8 variant's errors against fp32 pass, and the rule that judged them.

    Discrete: at least 95% agreement on the decisive observations, when they are at least half
    of the set. Otherwise (a policy near-indifferent on most observations, whose near-ties flip
    with any rounding) the logits within the decisive margin of fp32's, and at least 95%
    agreement where fp32's preference exceeds twice the measured logit error (a flip there is
    not rounding). Continuous: every action within 10% of the action range.
    """
    if not discrete:
        ok = errors["max_range_error"] <= INT8_MAX_RANGE_ERROR
        return ok, f"max action error {errors['max_range_error']:.3g} of the range (<= 0.1)"
    if errors["decisive_fraction"] >= INT8_MIN_DECISIVE_FRACTION:
        agreement = errors["decisive_agreement"]
        ok = agreement >= INT8_MIN_ACTION_AGREEMENT
        return ok, f"{agreement:.1%} action agreement on decisive observations (>= 95%)"
    agreement = errors["robust_agreement"]
    ok = errors["max_rel_error"] <= DECISIVE_MARGIN and agreement >= INT8_MIN_ACTION_AGREEMENT
    return ok, (
        f"{errors['decisive_fraction']:.1%} of observations decisive: logit error "
        f"{errors['max_rel_error']:.3g} (<= {DECISIVE_MARGIN:g}), {agreement:.1%} agreement "
        "where the error cannot flip the action (>= 95%)"
    )


def _to_onnx(
    module: nn.Module,
    obs_shape: list[int],
    batch: int | str,
    opset: int,
    discrete: bool,
    obs_dtype: str = "float32",
):
    """The traced, simplified and checked ONNX model of ``module``; its input ``obs`` has
    ``obs_dtype`` (uint8 frames: the encoder's cast and x / 255 are in the graph)."""
    return _to_onnx_inputs(module, [("obs", obs_shape, obs_dtype)], batch, opset, discrete)


def _to_onnx_inputs(
    module: nn.Module,
    inputs: list[tuple[str, list[int], str]],
    batch: int | str,
    opset: int,
    discrete: bool,
):
    """``_to_onnx`` with ``inputs`` (name, shape of one observation, dtype; ``deploy_inputs``):
    a dict observation's model takes one input per actor key."""
    onnx = _require("onnx")
    size = 1 if batch == "dynamic" else int(batch)
    example = tuple(
        torch.zeros((size, *shape), dtype=getattr(torch, dtype)) for _, shape, dtype in inputs
    )
    input_names = [name for name, _, _ in inputs]
    output_names = ["action", "logits"] if discrete else ["action"]
    dynamic = None
    if batch == "dynamic":
        dynamic = {name: {0: "batch"} for name in [*input_names, *output_names]}
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # The TorchScript exporter: deterministic graphs of plain ONNX ops that TensorRT
        # 8.6-11 parse, without the onnxscript dependency of the dynamo exporter.
        torch.onnx.export(
            module,
            example,
            buffer,
            dynamo=False,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic,
            opset_version=opset,
            do_constant_folding=True,
        )
    model = onnx.load_from_string(buffer.getvalue())
    model = _simplify(model)
    model.ir_version = ir_version_for(opset, model.ir_version)
    try:
        onnx.checker.check_model(model, full_check=True)
        model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    except Exception as exc:  # onnx raises checker/inference errors of several types
        raise ExportError(f"exported ONNX failed the checker: {exc}") from None
    return model


def ir_version_for(opset: int, current: int) -> int:
    """The oldest IR version that carries ``opset`` (IR 8 for opsets up to 18, 9 for 19-20):
    newer onnx packages stamp their own latest IR, which older ONNX Runtime and TensorRT
    parsers on a Jetson refuse although nothing in the graph needs it."""
    if opset <= 18:
        return min(current, 8)
    if opset <= 20:
        return min(current, 9)
    return current


def _simplify(model):
    """Constant folding and graph clean-up with onnxslim (pure Python, maintained, no native
    build: it installs on a Jetson's aarch64 Python where onnx-simplifier needs a compiler)."""
    onnxslim = _require("onnxslim")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return onnxslim.slim(model)


def _specs(model) -> tuple[list[TensorSpec], list[TensorSpec]]:
    from onnx import helper

    def spec(value) -> TensorSpec:
        t = value.type.tensor_type
        shape = [d.dim_param or d.dim_value for d in t.shape.dim]
        return TensorSpec(value.name, shape, str(helper.tensor_dtype_to_np_dtype(t.elem_type)))

    return [spec(v) for v in model.graph.input], [spec(v) for v in model.graph.output]


def _io_layers(model_bytes: bytes) -> list[str]:
    """Names of the matrix layers that read the observation or write an output."""
    import onnx

    graph = onnx.load_from_string(model_bytes).graph
    inputs = {i.name for i in graph.input}
    outputs = {o.name for o in graph.output}
    producers = {out: node for node in graph.node for out in node.output}
    matmuls = [n for n in graph.node if n.op_type in ("Gemm", "MatMul")]
    keep = [n.name for n in matmuls if inputs & set(n.input)]
    # The last matrix layer: walk back from each output through non-matrix nodes.
    for name in outputs:
        node = producers.get(name)
        while node is not None and node.op_type not in ("Gemm", "MatMul"):
            node = next((producers[i] for i in node.input if i in producers), None)
        if node is not None:
            keep.append(node.name)
    # First layers read the (normalised) observation through a few elementwise ops. An image
    # encoder's convolutions read the frames (pixels of one scale): they and its dense layer
    # quantise.
    convs = any(n.op_type == "Conv" for n in graph.node)
    if not any(inputs & set(n.input) for n in matmuls) and matmuls and not convs:
        keep.append(matmuls[0].name)
    return sorted(set(keep))


def quantize_int8(model_bytes: bytes, calibration: np.ndarray | dict[str, np.ndarray]) -> bytes:
    """Explicit quantisation: ONNX Runtime's static quantiser in Q/DQ format (per-channel
    weights, calibrated activation ranges, symmetric: every zero point 0) – the form TensorRT
    10.1+/11 builds as int8.

    The first and last matrix layers stay in float: a policy's observation mixes features of
    very different scales (a pole angle of 0.01 rad beside velocities of 3 m/s) and its outputs
    are compared with each other (argmax), so 8 bits there flips actions; the hidden layers are
    where the arithmetic is. ``calibration``: the ``obs`` input's rows, or each input's by name.
    """
    if isinstance(calibration, np.ndarray):
        calibration = {"obs": calibration}
    _require("onnxruntime")
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self, data: dict[str, np.ndarray]):
            self._batches = iter(_chunks(data, max(1, len(next(iter(data.values()))) // 64)))

        def get_next(self):
            return next(self._batches, None)

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        src.write_bytes(model_bytes)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_static(
                str(src),
                str(dst),
                Reader(calibration),
                quant_format=QuantFormat.QDQ,
                per_channel=True,
                activation_type=QuantType.QInt8,
                weight_type=QuantType.QInt8,
                nodes_to_exclude=_io_layers(model_bytes),
                # TensorRT's ONNX parser takes symmetric quantisation only (every zero point
                # 0); ONNX Runtime's default is asymmetric activations.
                extra_options={"ActivationSymmetric": True, "WeightSymmetric": True},
            )
        return dst.read_bytes()


def export_bundle(
    run_dir: str | Path,
    out_dir: str | Path | None = None,
    opset: int = 17,
    batch: int | str = "dynamic",
    fp16: bool = False,
    int8: bool = False,
    clip_actions: bool = True,
    parity_observations: int = 1024,
    seed: int = 0,
) -> ExportResult:
    """Export the policy of ``run_dir`` as a verified bundle in ``out_dir`` (default
    ``RUN_DIR/bundle``). See the module docstring for the checks and tolerances."""
    start = time.perf_counter()
    onnx = _require("onnx")
    ort = _require("onnxruntime")
    if batch != "dynamic" and (not isinstance(batch, int) or batch <= 0):
        raise ExportError(f"--batch must be 'dynamic' or a positive integer, got {batch!r}")
    run_dir = Path(run_dir)
    out = Path(out_dir) if out_dir is not None else run_dir / "bundle"
    policy, spec, cfg = load_policy(run_dir)
    env_cfg = cfg.get("env", {})
    env_id = env_cfg.get("env_id")
    discrete = spec.action_kind == "discrete"
    precision = "fp16" if fp16 else "fp32"

    # Observations the policy really meets, plus random ones around and beyond them.
    facts: dict[str, Any] = {}
    recorded = record_observations(
        policy,
        env_id,
        parity_observations,
        seed,
        env_cfg.get("max_episode_steps"),
        env_cfg.get("kwargs"),
        env_cfg.get("wrappers"),
        facts,
    )
    recorded_feeds = deploy_observations(spec, recorded)
    observations = {
        name: np.concatenate([value, random_observations(value, parity_observations, seed)])
        for name, value in recorded_feeds.items()
    }
    if batch != "dynamic":
        observations = {k: v[: len(v) // batch * batch] for k, v in observations.items()}

    module = DeterministicPolicy(policy, clip_actions, fp16=fp16).eval()
    model = _to_onnx_inputs(module, deploy_inputs(spec), batch, opset, discrete)
    model_bytes = model.SerializeToString()
    session = _session(model_bytes)
    reference = _torch_outputs(DeterministicPolicy(policy, clip_actions).eval(), observations)
    candidate = _run(session, observations, batch)
    errors = compare(reference, candidate, discrete, spec)
    rtol = RTOL[precision]
    if errors["max_rel_error"] > rtol:
        raise ExportError(
            f"ONNX Runtime disagrees with PyTorch: max error {errors['max_abs_error']:.3g} "
            f"(relative {errors['max_rel_error']:.3g} > {rtol:g} allowed for {precision})"
        )

    out.mkdir(parents=True, exist_ok=True)
    onnx_path = out / "policy.onnx"
    write_private(onnx_path, model_bytes)
    inputs, outputs = _specs(model)
    info = BundleInfo(
        onnx_file=onnx_path.name,
        onnx_sha256=sha256_file(onnx_path),
        opset=opset,
        precision=precision,
        inputs=inputs,
        outputs=outputs,
        action_space=_action_space(spec),
        normalizer=_normalizer(policy, spec),
        parity_max_abs_error=errors["max_abs_error"],
        parity={
            **errors,
            "rtol": rtol,
            "recorded_observations": len(recorded),
            "random_observations": len(next(iter(observations.values()))) - len(recorded),
        },
        env_id=env_id,
        env_config={k: env_cfg[k] for k in ENV_CONFIG_KEYS if env_cfg.get(k)},
        producer={
            "orin_rl": orin_rl_version,
            "torch": torch.__version__,
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
        },
        deploy=facts.get("deploy") or {},  # none for a task without a robot
    )
    np.savez_compressed(out / "calibration.npz", **recorded_feeds)  # by input name
    if int8:
        info.variants["int8-qdq"] = _int8_variant(
            model_bytes, recorded_feeds, reference, discrete, spec, out, batch
        )
    write_private(out / "policy.json", info.to_json())  # with its bundle_sha256: one unit
    elapsed = time.perf_counter() - start
    log.info("exported %s in %.1f s (parity max error %.2g)", out, elapsed, errors["max_abs_error"])
    return ExportResult(out, info, elapsed, onnx_path.stat().st_size)


def _int8_variant(model_bytes, recorded, reference, discrete, spec, out, batch):
    if batch != "dynamic":
        raise ExportError("--int8 needs --batch dynamic (the calibrator feeds batches of 64)")
    q_bytes = quantize_int8(model_bytes, recorded)
    # Judged on the calibration set (the observations the policy meets), as a user would;
    # the random observations beyond it saturate the calibrated ranges by construction.
    n = len(next(iter(recorded.values())))
    ref_recorded = [r[:n] for r in reference]
    q_errors = compare(ref_recorded, _run(_session(q_bytes), recorded, batch), discrete, spec)
    ok, rule = int8_acceptable(q_errors, discrete)
    q_errors["rule"] = rule
    if not ok:
        raise ExportError(
            f"int8 Q/DQ model is too far from fp32 ({rule}; {q_errors}); keep fp16, or "
            "calibrate on more representative observations"
        )
    path = out / "policy.int8.onnx"
    write_private(path, q_bytes)
    return {"onnx_file": path.name, "onnx_sha256": sha256_file(path), "parity": q_errors}


def _run(session, feeds: dict[str, np.ndarray], batch: int | str) -> list[np.ndarray]:
    """The model's outputs for ``feeds`` (by input name), in chunks of ``batch`` rows when the
    model's batch is fixed."""
    if batch == "dynamic":
        return session.run(None, feeds)
    rows = len(next(iter(feeds.values())))
    parts = [session.run(None, chunk) for chunk in _chunks(feeds, rows // batch)]
    return [np.concatenate(p) for p in zip(*parts, strict=True)]


def _chunks(feeds: dict[str, np.ndarray], count: int) -> list[dict[str, np.ndarray]]:
    """``feeds`` split along the batch into ``count`` chunks, each input alike."""
    split = {name: np.array_split(value, count) for name, value in feeds.items()}
    return [{name: split[name][i] for name in feeds} for i in range(count)]


def _action_space(spec: PolicySpec) -> dict[str, Any]:
    if spec.action_kind == "discrete":
        return {"kind": "discrete", "n": spec.action_dim}
    return {
        "kind": "continuous",
        "shape": [spec.action_dim],
        "low": spec.action_low,
        "high": spec.action_high,
    }


def _normalizer(policy: ActorCritic, spec: PolicySpec) -> dict[str, Any] | None:
    if spec.obs_layout is not None:  # each input's own: the vector keys', each frame's x / 255
        return {"folded_into_graph": True, "inputs": policy.actor[0].describe_inputs()}
    if spec.encoder is not None:  # the image encoder's own scaling, after the uint8 input
        return {"folded_into_graph": True, "formula": "x / 255", "input_dtype": spec.obs_dtype}
    return policy.normalization.describe()
