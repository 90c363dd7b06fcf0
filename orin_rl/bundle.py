"""The deploy bundle (policy.onnx + policy.json) and the engine sidecar format.

Written by ``orin_rl.export``, read by ``orin_rl.runtime``. Pure Python + json (no torch, no
numpy), so a robot's deploy image can read it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from orin_rl.errors import OrinError

log = logging.getLogger(__name__)

BUNDLE_FORMAT = "orin_rl.bundle/1"
SIDECAR_FORMAT = "orin_rl.engine/1"
MAX_JSON_BYTES = 16 << 20
HASH_KEY = "bundle_sha256"
"""policy.json's key for the sha256 of the rest of it (``content_sha256``)."""


class BundleError(OrinError, ValueError):
    """A bundle or sidecar file is missing, malformed, or does not fit this platform."""


@dataclass
class TensorSpec:
    """A named model input or output."""

    name: str
    """Tensor name in the ONNX graph / engine."""
    shape: list[int | str]
    """Shape; a string marks a dynamic axis (``"batch"``)."""
    dtype: str
    """numpy dtype name (``float32``, ``int64``, ``float16``)."""


@dataclass
class BundleInfo:
    """Contents of policy.json."""

    onnx_file: str
    """ONNX file name, relative to the bundle folder."""
    onnx_sha256: str
    """sha256 of the ONNX file (checked before use)."""
    opset: int
    """ONNX opset."""
    precision: str
    """``fp32``, ``fp16`` or ``int8-qdq``."""
    inputs: list[TensorSpec]
    """Model inputs (one: the observation)."""
    outputs: list[TensorSpec]
    """Model outputs (``action`` first)."""
    action_space: dict[str, Any]
    """``{"kind": "discrete", "n": N}`` or ``{"kind": "continuous", "low": [..], "high": [..]}``;
    an unbounded side is ``-inf``/``inf`` here and ``null`` in policy.json."""
    normalizer: dict[str, Any] | None
    """How observations are normalised inside the graph (mean, var, eps, clip), or None; no
    clip is ``inf`` here and ``null`` in policy.json."""
    parity_max_abs_error: float
    """Largest |ONNX Runtime - PyTorch| over the parity observations."""
    parity: dict[str, Any] = field(default_factory=dict)
    """Details of the parity check (tolerance, observation counts, action agreement)."""
    env_id: str | None = None
    """Environment the policy was trained on."""
    env_config: dict[str, Any] = field(default_factory=dict)
    """How that environment was made in training: ``max_episode_steps``, ``kwargs`` (keyword
    arguments of ``gymnasium.make``) and ``wrappers`` (config ``env.wrappers``), where set;
    ``orin-rl eval`` / ``run`` make it the same way."""
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Other precisions of the same policy, e.g. ``{"int8-qdq": {"onnx_file", "onnx_sha256",
    "parity"}}``: the explicit-quantization model for TensorRT 10.1+/11."""
    producer: dict[str, str] = field(default_factory=dict)
    """Versions of the tools that wrote the bundle."""
    deploy: dict[str, Any] = field(default_factory=dict)
    """What a robot needs (``orin_rl.robot.contract.DeployContract``): joints and their
    motors, default pose, action scale/offset/clip, gains, period, observation terms; empty
    where the environment is not a robot task."""
    format: str = BUNDLE_FORMAT
    """Bundle format tag."""
    bundle_sha256: str | None = field(default=None, compare=False)
    """sha256 of the rest of policy.json (``content_sha256``): the deploy contract, the
    model's sha256 and every other field, so policy.json and the model it names are one unit;
    written by ``to_json``, checked by ``load_bundle``. None: a bundle from before it."""

    def to_json(self) -> str:
        """Serialise as policy.json text: strict JSON (an unbounded action is ``null``, not
        ``Infinity``, which a robot's C++ or Go parser rejects), with ``bundle_sha256`` of
        what it holds."""
        data = _unbounded_as_null(asdict(self))
        data.pop(HASH_KEY)
        data = json.loads(json.dumps(data, allow_nan=False))  # as a reader parses it
        data[HASH_KEY] = content_sha256(data)
        return json.dumps(data, indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "policy.json") -> BundleInfo:
        """Validate and build from parsed JSON."""
        if not isinstance(data, dict) or data.get("format") != BUNDLE_FORMAT:
            raise BundleError(f"{source}: not an orin_rl bundle (format {BUNDLE_FORMAT} expected)")
        try:
            data = dict(data)
            data["inputs"] = [TensorSpec(**t) for t in data["inputs"]]
            data["outputs"] = [TensorSpec(**t) for t in data["outputs"]]
            data["action_space"] = _null_bounds_as_inf(data["action_space"])
            if data.get("normalizer") and data["normalizer"].get("clip", 0) is None:
                data["normalizer"] = {**data["normalizer"], "clip": math.inf}
            info = cls(**data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BundleError(f"{source}: malformed bundle description ({exc})") from None
        if not info.inputs or not info.outputs:
            raise BundleError(f"{source}: a bundle needs one input and at least one output")
        return info


def _unbounded_as_null(value: Any) -> Any:
    """±inf → None, recursively (NaN stays, and ``allow_nan=False`` refuses it)."""
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return None
    if isinstance(value, dict):
        return {k: _unbounded_as_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_unbounded_as_null(v) for v in value]
    return value


def _null_bounds_as_inf(space: dict[str, Any]) -> dict[str, Any]:
    """An action space read from policy.json with its unbounded sides (``null``) back at
    ``-inf``/``inf``, as the policy was exported; bundles written as ``-Infinity``/``Infinity``
    (before the JSON was strict) parse to infinities already."""
    space = dict(space)
    for key, unbounded in (("low", -math.inf), ("high", math.inf)):
        if isinstance(space.get(key), list):
            space[key] = [unbounded if v is None else v for v in space[key]]
    return space


def content_sha256(data: dict[str, Any]) -> str:
    """sha256 of a parsed policy.json without its ``bundle_sha256``, in a canonical form:
    ±inf as ``null`` (what strict JSON holds), keys sorted, no whitespace
    (``json.dumps(..., sort_keys=True, separators=(",", ":"))``)."""
    body = {k: v for k, v in data.items() if k != HASH_KEY}
    text = json.dumps(_unbounded_as_null(body), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


_UNSIGNED_WARNED: set[Path] = set()
"""Bundles whose missing ``bundle_sha256`` was already warned of (once a process)."""


def check_content(data: dict[str, Any], folder: Path) -> None:
    """Refuse a policy.json whose content changed since it was written (its ``bundle_sha256``
    differs); accept one from before the hash existed with a warning (once a process)."""
    recorded = data.get(HASH_KEY)
    if recorded is None:
        if folder.resolve() not in _UNSIGNED_WARNED:
            _UNSIGNED_WARNED.add(folder.resolve())
            log.warning(
                "%s: policy.json has no %s (exported before it existed): its deploy contract "
                "and model are not checked as one; export it again to add it (`orin-rl export "
                "RUN_DIR`, or `orin-rl export FILE.onnx --env TASK`)",
                folder,
                HASH_KEY,
            )
        return
    if recorded != content_sha256(data):
        raise BundleError(
            f"{folder / 'policy.json'}: changed since it was exported ({HASH_KEY} differs: a "
            "field was edited, the deploy contract or the model's sha256 among them); export "
            "the bundle again (`orin-rl export RUN_DIR`) rather than editing it"
        )


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def read_json(path: str | Path, what: str) -> dict[str, Any]:
    """Parse a small JSON file with errors that name the file."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_JSON_BYTES:
            raise BundleError(f"{path}: {what} is larger than {MAX_JSON_BYTES >> 20} MiB")
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise BundleError(f"{path}: no {what} file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundleError(f"{path}: {what} is not valid JSON ({exc.__class__.__name__})") from None


def inside(folder: Path, name: str) -> Path:
    """``folder / name`` if it stays inside ``folder`` (no ``..``, absolute path or link out)."""
    candidate = (folder / name).resolve()
    if not candidate.is_relative_to(folder.resolve()):
        raise BundleError(f"{name}: path leaves the bundle folder {folder}")
    return candidate


PRECISIONS = {"fp32": "fp32", "fp16": "fp16", "int8": "int8-qdq", "int8-qdq": "int8-qdq"}
"""``--precision`` names → the bundle's precision / variant names."""


def select_model(
    info: BundleInfo, precision: str | None = None, onnx_file: str | None = None
) -> BundleInfo:
    """The description of the bundle's model in ``precision`` (``fp32``, ``fp16``, ``int8``) or
    file ``onnx_file`` (e.g. ``policy.int8.onnx``): the main model or one of its variants."""
    models = {info.precision: (info.onnx_file, info.onnx_sha256)}
    for name, variant in info.variants.items():
        models[name] = (variant["onnx_file"], variant["onnx_sha256"])
    if onnx_file is not None:
        chosen = next((k for k, (f, _) in models.items() if f == onnx_file), None)
        if chosen is None:
            raise BundleError(
                f"{onnx_file} is not a model of this bundle (policy.json lists "
                f"{', '.join(f for f, _ in models.values())})"
            )
    elif precision is None:
        return info
    else:
        chosen = PRECISIONS.get(precision)
        if chosen not in models:
            how = "--int8" if chosen == "int8-qdq" else f"--{precision} --out ANOTHER_DIR"
            raise BundleError(
                f"this bundle has no {precision} model (it has {', '.join(models)}): "
                f"orin-rl export RUN_DIR {how}"
            )
    name, sha = models[chosen]
    return replace(info, onnx_file=name, onnx_sha256=sha, precision=chosen)


def load_bundle(
    path: str | Path,
    verify_hash: bool = True,
    precision: str | None = None,
    onnx_file: str | None = None,
) -> tuple[BundleInfo, Path]:
    """Read a bundle folder (or its policy.json); return the description and the ONNX path.

    ``precision`` or ``onnx_file`` pick another of its models (``select_model``). The ONNX
    file must sit inside the bundle folder; policy.json must hold what was exported
    (``check_content``, always) and the ONNX file match its sha256 (``verify_hash``).
    """
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    data = read_json(folder / "policy.json", "bundle description")
    info = BundleInfo.from_dict(data, str(folder))
    info = select_model(info, precision, onnx_file)
    onnx_path = inside(folder, info.onnx_file)
    if not onnx_path.is_file():
        raise BundleError(f"{onnx_path}: the bundle's ONNX file is missing; export it again")
    check_content(data, folder)
    if verify_hash and sha256_file(onnx_path) != info.onnx_sha256:
        raise BundleError(
            f"{onnx_path}: sha256 differs from policy.json (file changed or truncated); "
            "export the bundle again"
        )
    return info, onnx_path


def write_private(path: Path, data: bytes | str) -> None:
    """Write a file readable by its owner only (models are private), atomically."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# ------------------------------------------------------------------ engine sidecar


@dataclass
class PlatformInfo:
    """What an engine depends on: the TensorRT version and the GPU it runs on."""

    tensorrt_version: str
    """e.g. ``10.3.0``."""
    gpu_name: str
    """e.g. ``Orin``."""
    compute_capability: str
    """e.g. ``8.7``."""


@dataclass
class EngineSidecar:
    """The JSON written beside every engine (``model.engine`` → ``model.engine.json``)."""

    engine_sha256: str
    """sha256 of the engine file: checked before deserialising (plugins in a foreign engine
    run code)."""
    onnx_sha256: str
    """sha256 of the ONNX the engine was built from."""
    platform: PlatformInfo
    """Where it was built."""
    precision: str
    """``fp32``, ``fp16``, ``int8`` (calibrated) or ``int8-qdq`` / strongly typed."""
    dla_core: int | None
    """DLA core, or None for the GPU."""
    batch_profile: list[int]
    """(min, opt, max) batch of the optimisation profile."""
    version_compatible: bool = False
    """Built with BuilderFlag.VERSION_COMPATIBLE: loads on a later TensorRT (same major, or
    8 → 10 and 10 → 11; see ``version_loads``) with ``runtime.engine_host_code_allowed``."""
    layer_placement: dict[str, int] = field(default_factory=dict)
    """Layers per device (``{"DLA": n, "GPU": m}``) when DLA was used."""
    gpu_fallback_layers: list[str] = field(default_factory=list)
    """Names of layers that fell back from the DLA to the GPU."""
    inputs: list[TensorSpec] = field(default_factory=list)
    """Engine inputs."""
    outputs: list[TensorSpec] = field(default_factory=list)
    """Engine outputs."""
    int8_accuracy: dict[str, float] | None = None
    """Agreement of the int8 engine with fp32 on the calibration set."""
    format: str = SIDECAR_FORMAT
    """Sidecar format tag."""

    def to_json(self) -> str:
        """Serialise the sidecar."""
        return json.dumps(asdict(self), indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str) -> EngineSidecar:
        """Validate and build from parsed JSON."""
        if not isinstance(data, dict) or data.get("format") != SIDECAR_FORMAT:
            raise BundleError(f"{source}: not an orin_rl engine sidecar")
        try:
            data = dict(data)
            data["platform"] = PlatformInfo(**data["platform"])
            data["inputs"] = [TensorSpec(**t) for t in data.get("inputs", [])]
            data["outputs"] = [TensorSpec(**t) for t in data.get("outputs", [])]
            return cls(**data)
        except (KeyError, TypeError) as exc:
            raise BundleError(f"{source}: malformed sidecar ({exc})") from None


def sidecar_path(engine: str | Path) -> Path:
    """The sidecar of an engine file."""
    engine = Path(engine)
    return engine.with_name(engine.name + ".json")


def load_sidecar(engine: str | Path) -> EngineSidecar:
    """Read an engine's sidecar."""
    path = sidecar_path(engine)
    return EngineSidecar.from_dict(read_json(path, "engine sidecar"), str(path))


def _major_minor(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".")[:2] if p.isdigit())


# Major-version jumps a VERSION_COMPATIBLE engine survives (TensorRT 11.4.1 support matrix,
# JETSON.md): 8.6 → 10.x and 10.x → 11.x. Within a major, any later minor loads it.
CROSS_MAJOR_LOADS = {(8, 10), (10, 11)}


def version_loads(built: str, here: str, version_compatible: bool) -> bool:
    """Whether an engine built with TensorRT ``built`` deserialises on TensorRT ``here``.

    A plain engine needs the same version; a version-compatible one (8.6+) also loads on a
    later minor of its major and across the major jumps in ``CROSS_MAJOR_LOADS``, never on an
    older TensorRT.
    """
    if built == here:
        return True
    b, h = _major_minor(built), _major_minor(here)
    if not version_compatible or len(b) < 2 or len(h) < 2 or b > h:
        return False
    return b[0] == h[0] or (b[0], h[0]) in CROSS_MAJOR_LOADS


def check_engine(engine: str | Path, here: PlatformInfo) -> EngineSidecar:
    """Refuse an engine that was not built for this platform or whose bytes changed.

    Raises BundleError with the reason and the command that rebuilds it.
    """
    engine = Path(engine)
    sidecar = load_sidecar(engine)
    if not engine.is_file():
        raise BundleError(f"{engine}: engine file is missing")
    rebuild = (
        f"rebuild it here: orin-rl build BUNDLE --precision {sidecar.precision} --out {engine}"
    )
    if sha256_file(engine) != sidecar.engine_sha256:
        raise BundleError(
            f"{engine}: sha256 differs from its sidecar (changed or truncated); {rebuild}"
        )
    built = sidecar.platform
    sm_built = "sm_" + built.compute_capability.replace(".", "")
    sm_here = "sm_" + here.compute_capability.replace(".", "")
    if built.compute_capability != here.compute_capability:
        raise BundleError(
            f"{engine}: built for {built.gpu_name} ({sm_built}); this is {here.gpu_name} "
            f"({sm_here}): {rebuild}"
        )
    if not version_loads(built.tensorrt_version, here.tensorrt_version, sidecar.version_compatible):
        raise BundleError(
            f"{engine}: built with TensorRT {built.tensorrt_version} for {sm_built}; this is "
            f"TensorRT {here.tensorrt_version} on {sm_here}: {rebuild}"
        )
    return sidecar
