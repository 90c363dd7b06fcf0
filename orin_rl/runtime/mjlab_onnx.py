"""mjlab's own exported policy (``<run>.onnx`` in each mjlab run folder) read as a bundle.

mjlab's runner writes the actor (rsl_rl's ``as_onnx``: observation normaliser and MLP, the
Gaussian's mean out) with the task's deploy facts as ONNX metadata (``joint_names``,
``action_scale``, ``observation_names``, ...). ``open_export`` checks such a file (one float
input of the actor group's width, one output of the action's); ``write_bundle`` runs it through
ONNX Runtime beside ONNX's reference evaluator and writes a bundle: ``policy.onnx`` (the file,
unchanged) + ``policy.json``. ``orin-rl run``, ``bench`` and ``build`` take a bare file too:
``runtime.locate`` imports it once into a cache folder (``cached_bundle``), without a task, so
with unbounded actions and random parity observations. Checking the file against its task
(``orin-rl export FILE.onnx --env TASK``) needs mjlab: ``orin_rl.export.mjlab_onnx``.

Runtime side, as reading another stack's ONNX is: numpy here, ``onnx`` and ``onnxruntime``
imported when used, no torch.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.bundle import BundleError, BundleInfo, TensorSpec, sha256_file, write_private

log = logging.getLogger(__name__)

MJLAB_KEYS = ("joint_names", "observation_names", "action_scale")
"""Metadata every mjlab policy export carries (``mjlab.rl.exporter_utils.get_base_metadata``)."""
PARITY_ATOL = 1e-4
"""ONNX Runtime against ONNX's reference evaluator, float32 MLP maths."""


@dataclass
class Imported:
    """What an import wrote."""

    bundle_dir: Path
    info: BundleInfo
    metadata: dict[str, str]


@dataclass
class MjlabExport:
    """An mjlab policy export, checked by ``open_export``."""

    path: Path
    metadata: dict[str, str]
    """The file's metadata (key -> value strings)."""
    inputs: list[TensorSpec]
    """One (batch, observation) float32 input."""
    outputs: list[TensorSpec]
    """The action first."""

    @property
    def obs_dim(self) -> int:
        return int(self.inputs[0].shape[1])

    @property
    def action_dim(self) -> int:
        return int(self.outputs[0].shape[-1])


def read_metadata(path: str | Path) -> dict[str, str]:
    """The ONNX file's metadata (key -> value strings), via ONNX Runtime (no onnx needed)."""
    import onnxruntime as ort

    try:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own kinds for a bad file
        raise BundleError(f"{path}: ONNX Runtime cannot load it ({exc})") from None
    return dict(session.get_modelmeta().custom_metadata_map)


def is_mjlab_export(path: str | Path) -> bool:
    """Whether ``path`` is an ONNX file with mjlab's export metadata."""
    try:
        return all(k in read_metadata(path) for k in MJLAB_KEYS)
    except BundleError:  # not a model ONNX Runtime can load
        return False


def csv_floats(value: str) -> list[float]:
    """mjlab's metadata numbers (``"0.5,0.25"``) as floats."""
    return [float(x) for x in value.split(",") if x]


def _tensor_specs(session: Any) -> tuple[list[TensorSpec], list[TensorSpec]]:
    def spec(arg: Any) -> TensorSpec:
        if arg.type != "tensor(float)":
            raise BundleError(f"{arg.name}: {arg.type}; an mjlab policy takes and gives float32")
        shape = [d if isinstance(d, int) else "batch" for d in arg.shape]
        return TensorSpec(arg.name, shape, "float32")

    inputs = [spec(a) for a in session.get_inputs()]
    outputs = [spec(a) for a in session.get_outputs()]
    if len(inputs) != 1 or not outputs or len(inputs[0].shape) != 2 or not outputs[0].shape:
        raise BundleError(
            "an mjlab policy has one (batch, observation) input and an action output; this "
            f"file has inputs {[i.name for i in inputs]} and outputs {[o.name for o in outputs]}"
        )
    return inputs, outputs


def open_export(path: str | Path) -> MjlabExport:
    """Check that ``path`` is mjlab's policy export: its metadata, one float input of fixed
    width, a float action output of fixed width. Raises BundleError saying what differs."""
    import onnxruntime as ort

    path = Path(path)
    if not path.is_file():
        raise BundleError(f"{path}: no such file")
    metadata = read_metadata(path)
    missing = [k for k in MJLAB_KEYS if k not in metadata]
    if missing:
        raise BundleError(
            f"{path}: not an mjlab policy export (no {', '.join(missing)} metadata); a run "
            "folder of orin-rl train exports with `orin-rl export RUN_DIR`"
        )
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    inputs, outputs = _tensor_specs(session)
    if not isinstance(inputs[0].shape[1], int) or not isinstance(outputs[0].shape[-1], int):
        raise BundleError(f"{path}: the observation and action widths must be fixed")
    return MjlabExport(path, metadata, inputs, outputs)


def _parity(model_path: Path, name: str, obs: np.ndarray) -> dict[str, Any]:
    """ONNX Runtime against ONNX's reference evaluator, one observation at a time."""
    import onnx
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    reference = ReferenceEvaluator(onnx.load(str(model_path)))
    worst = 0.0
    for row in obs:
        x = row[None]
        got = session.run(None, {name: x})[0]
        want = reference.run(None, {name: x})[0]
        if not np.all(np.isfinite(got)):
            raise BundleError(f"{model_path}: non-finite actions from ONNX Runtime")
        worst = max(worst, float(np.max(np.abs(got - want))))
    if worst > PARITY_ATOL:
        raise BundleError(
            f"{model_path}: ONNX Runtime and ONNX's reference evaluator differ by {worst:.3g}"
        )
    return {"max_abs_error": worst, "reference": "onnx.reference.ReferenceEvaluator",
            "observations": len(obs), "atol": PARITY_ATOL}  # fmt: skip


def write_bundle(
    export: MjlabExport,
    out: str | Path,
    obs: np.ndarray,
    bounds: tuple[list[float], list[float]] | None = None,
    env_id: str | None = None,
    deploy: dict[str, Any] | None = None,
) -> Imported:
    """Write ``export`` as a bundle into ``out`` after its parity check on ``obs``
    (observations, one a row).

    ``bounds``: the action's (low, high), unbounded (±inf) if None; ``env_id``: the task it
    was checked against, if any; ``deploy``: that task's deploy contract."""
    import onnx
    import onnxruntime as ort

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "policy.onnx"
    write_private(target, export.path.read_bytes())
    try:
        parity = _parity(target, export.inputs[0].name, obs)
    except BundleError:
        target.unlink(missing_ok=True)  # no half-made bundle left behind
        raise
    model = onnx.load(str(target), load_external_data=False)
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    n = export.action_dim
    low, high = bounds if bounds is not None else ([-np.inf] * n, [np.inf] * n)
    info = BundleInfo(
        onnx_file=target.name,
        onnx_sha256=sha256_file(target),
        opset=int(opset),
        precision="fp32",
        inputs=export.inputs,
        outputs=export.outputs[:1],
        action_space={"kind": "continuous", "shape": [n], "low": low, "high": high},
        normalizer=None,  # rsl_rl's normaliser is inside mjlab's graph
        parity_max_abs_error=parity["max_abs_error"],
        parity={**parity, "source": f"mjlab export {export.path.name}", "task_checked": env_id},
        env_id=env_id,
        deploy=deploy or {},
        producer={
            "mjlab_run": export.metadata.get("run_path", ""),
            "imported_from": str(export.path.resolve()),
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
        },
    )
    write_private(out / "policy.json", info.to_json())
    return Imported(out, info, export.metadata)


def import_without_task(path: str | Path, out: str | Path, samples: int = 64) -> Imported:
    """mjlab's policy export ``path`` as a bundle in ``out``, its task unknown: unbounded
    actions, parity on ``samples`` random observations."""
    export = open_export(path)
    obs = np.random.default_rng(0).normal(size=(samples, export.obs_dim)).astype(np.float32)
    return write_bundle(export, out, obs)


def cached_bundle(path: str | Path) -> Path:
    """A bundle for mjlab export ``path`` in the user's cache (made once per file content):
    what ``runtime.locate`` hands run, bench and build for a bare mjlab ``.onnx``."""
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orin_rl"
    folder = root / "mjlab_imports" / digest
    policy = folder / "policy.json"
    if policy.is_file() and '"bundle_sha256"' not in policy.read_text():
        shutil.rmtree(folder, ignore_errors=True)  # imported before the bundle's hash: again
    if not (folder / "policy.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=digest + ".", dir=folder.parent))
        try:
            import_without_task(path, staging)
            staging.rename(folder)  # atomic; another process may have been first
            log.info("%s: mjlab policy export, imported as the bundle %s", path, folder)
        except OSError:
            if not (folder / "policy.json").is_file():
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder
