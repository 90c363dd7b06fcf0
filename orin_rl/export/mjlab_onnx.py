"""mjlab's own exported policy (``<run>.onnx`` in each mjlab run folder) as an orin_rl bundle.

mjlab's runner writes the actor (rsl_rl's ``as_onnx``: observation normaliser and MLP, the
Gaussian's mean out) with the task's deploy facts as ONNX metadata (``joint_names``,
``action_scale``, ``observation_names``, ...). ``import_mjlab_onnx`` checks such a file (one
float input of the actor group's width, one output of the action's; against the task's own
robot and action term when the task is named), runs it through ONNX Runtime beside ONNX's
reference evaluator on the task's observations (random ones without a task), and writes a
bundle: ``policy.onnx`` (the file, unchanged) + ``policy.json``. ``orin-rl run``, ``bench`` and
``build`` then take it as they take one of ours; they also take the file itself
(``runtime.locate`` imports it into a cache folder first).

Needs ``onnx`` and ``onnxruntime``; the task check needs mjlab (the ``mjlab`` extra).
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
    """What ``import_mjlab_onnx`` wrote."""

    bundle_dir: Path
    info: BundleInfo
    metadata: dict[str, str]


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


def _csv_floats(value: str) -> list[float]:
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


def _task_observations(env_id: str, n: int) -> tuple[np.ndarray, dict]:
    """``n`` actor-group observations of the task's play configuration (random actions), and
    what the task says about the policy's input and output (checked against the file)."""
    from orin_rl.envs.mjlab import MjlabGymEnv

    env = MjlabGymEnv(env_id)
    try:
        robot = env.vec.env.scene["robot"]
        term = env.vec.env.action_manager.get_term("joint_pos")
        scale = term._scale
        scale = scale[0].cpu().tolist() if hasattr(scale, "cpu") else scale
        facts = {
            "obs_dim": env.observation_space.shape[0],
            "action_dim": env.action_space.shape[0],
            "joint_names": list(robot.joint_names),
            "action_scale": scale,
            "low": env.action_space.low.tolist(),
            "high": env.action_space.high.tolist(),
            "deploy": env.vec.deploy_contract(),
        }
        obs, _ = env.reset(seed=0)
        rng = np.random.default_rng(0)
        rows = [obs]
        while len(rows) < n:
            action = rng.normal(0.0, 0.5, env.action_space.shape).astype(np.float32)
            obs, _, terminated, truncated, _ = env.step(action)
            rows.append(obs)
            if terminated or truncated:
                obs, _ = env.reset()
    finally:
        env.close()
    return np.stack(rows).astype(np.float32), facts


def _check_against_task(env_id: str, metadata: dict[str, str], facts: dict, obs_dim: int,
                        action_dim: int) -> None:  # fmt: skip
    """The file was exported from this task: the same widths, joints and action scale."""
    if (obs_dim, action_dim) != (facts["obs_dim"], facts["action_dim"]):
        raise BundleError(
            f"the policy maps {obs_dim} observations to {action_dim} actions; {env_id}'s actor "
            f"group has {facts['obs_dim']} and its action {facts['action_dim']}: not this task's"
        )
    joints = metadata["joint_names"].split(",")
    if joints != facts["joint_names"]:
        raise BundleError(f"the policy's joints {joints} are not {env_id}'s robot's")
    scale = np.broadcast_to(np.asarray(facts["action_scale"], float), (action_dim,))
    exported = _csv_floats(metadata["action_scale"])
    if len(exported) == 1:
        exported = exported * action_dim
    if not np.allclose(exported, scale, atol=1.5e-3):  # mjlab writes 3 decimals
        raise BundleError(
            f"the policy's action scale {exported} is not {env_id}'s ({scale.round(3).tolist()})"
        )


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


def import_mjlab_onnx(
    path: str | Path, out: str | Path, env_id: str | None = None, samples: int = 64
) -> Imported:
    """Check mjlab's policy export ``path`` and write it as a bundle into ``out``.

    ``env_id``: the mjlab task it was trained on; its widths, joints and action scale are
    checked against the file, its play configuration gives the parity observations, and
    ``orin-rl run`` drives it by default. Without it, random observations."""
    import onnx
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
    obs_dim, action_dim = inputs[0].shape[1], outputs[0].shape[-1]
    if not isinstance(obs_dim, int) or not isinstance(action_dim, int):
        raise BundleError(f"{path}: the observation and action widths must be fixed")
    inf = float("inf")
    low, high = [-inf] * action_dim, [inf] * action_dim
    deploy: dict[str, Any] = {}
    if env_id is not None:
        obs, facts = _task_observations(env_id, samples)
        _check_against_task(env_id, metadata, facts, obs_dim, action_dim)
        low, high = facts["low"], facts["high"]
        deploy = _with_rounding(facts["deploy"], metadata)
    else:
        obs = np.random.default_rng(0).normal(size=(samples, obs_dim)).astype(np.float32)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    target = out / "policy.onnx"
    write_private(target, path.read_bytes())
    try:
        parity = _parity(target, inputs[0].name, obs)
    except BundleError:
        target.unlink(missing_ok=True)  # no half-made bundle left behind
        raise
    model = onnx.load(str(target), load_external_data=False)
    opset = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=0)
    info = BundleInfo(
        onnx_file=target.name,
        onnx_sha256=sha256_file(target),
        opset=int(opset),
        precision="fp32",
        inputs=inputs,
        outputs=outputs[:1],
        action_space={"kind": "continuous", "shape": [action_dim], "low": low, "high": high},
        normalizer=None,  # rsl_rl's normaliser is inside mjlab's graph
        parity_max_abs_error=parity["max_abs_error"],
        parity={**parity, "source": f"mjlab export {path.name}", "task_checked": env_id},
        env_id=env_id,
        deploy=deploy,
        producer={
            "mjlab_run": metadata.get("run_path", ""),
            "imported_from": str(path.resolve()),
            "onnx": onnx.__version__,
            "onnxruntime": ort.__version__,
        },
    )
    write_private(out / "policy.json", info.to_json())
    return Imported(out, info, metadata)


ROUNDED = {  # metadata key -> the contract's field (joint order: the metadata's)
    "joint_stiffness": "stiffness",
    "joint_damping": "damping",
    "default_joint_pos": "default_joint_pos",
    "action_scale": "action_scale",
}


def _with_rounding(deploy: dict[str, Any], metadata: dict[str, str]) -> dict[str, Any]:
    """The task's contract (full precision), with what mjlab's metadata lost to its
    3-decimal CSV: the largest |metadata − task| of each rounded field."""
    lost = {}
    joints = metadata["joint_names"].split(",")
    for key, name in ROUNDED.items():
        if key not in metadata:
            continue
        task = dict(zip(deploy["joint_names"], deploy[name], strict=True))
        values = _csv_floats(metadata[key])
        if len(values) == 1:
            values = values * len(joints)
        lost[key] = max(abs(v - task[j]) for j, v in zip(joints, values, strict=True))
    deploy = dict(deploy)
    deploy["source"] = f"{deploy['source']} (mjlab's ONNX export checked against it)"
    deploy["precision"] = {
        "full": True,
        "note": "taken from the task itself: mjlab's metadata rounds to 3 decimals and has no "
        "control period, action offset, command ranges or hardware motor order",
        "metadata_max_rounding_error": lost,
    }
    return deploy


def cached_bundle(path: str | Path) -> Path:
    """A bundle for mjlab export ``path`` in the user's cache (made once per file content):
    what ``runtime.locate`` hands run, bench and build for a bare mjlab ``.onnx``."""
    digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orin_rl"
    folder = root / "mjlab_imports" / digest
    if not (folder / "policy.json").is_file():
        folder.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=digest + ".", dir=folder.parent))
        try:
            import_mjlab_onnx(path, staging)
            staging.rename(folder)  # atomic; another process may have been first
            log.info("%s: mjlab policy export, imported as the bundle %s", path, folder)
        except OSError:
            if not (folder / "policy.json").is_file():
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder
