"""mjlab's own exported policy checked against its task, then written as a bundle.

``import_mjlab_onnx`` (``orin-rl export FILE.onnx --env TASK``) checks mjlab's policy export
against the task it names (widths, the robot's joints, the action scale), takes the parity
observations from the task's play configuration and the deploy contract from the task itself
(full precision, where mjlab's metadata rounds to 3 decimals). Reading and writing the file is
runtime work (``orin_rl.runtime.mjlab_onnx``, re-exported here); the task check needs mjlab
(the ``mjlab`` extra).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.bundle import BundleError
from orin_rl.runtime.mjlab_onnx import (
    MJLAB_KEYS,
    PARITY_ATOL,
    Imported,
    cached_bundle,
    csv_floats,
    import_without_task,
    is_mjlab_export,
    open_export,
    read_metadata,
    write_bundle,
)

__all__ = [
    "MJLAB_KEYS",
    "PARITY_ATOL",
    "Imported",
    "cached_bundle",
    "import_mjlab_onnx",
    "is_mjlab_export",
    "read_metadata",
]


def _task_observations(env_id: str, n: int) -> tuple[np.ndarray, dict]:
    """``n`` actor-group observations of the task's play configuration (random actions), and
    what the task says about the policy's input and output (checked against the file)."""
    from orin_rl.envs.mjlab.play import MjlabGymEnv

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
            "deploy": env.vec.deploy_contract() or {},
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
    exported = csv_floats(metadata["action_scale"])
    if len(exported) == 1:
        exported = exported * action_dim
    if not np.allclose(exported, scale, atol=1.5e-3):  # mjlab writes 3 decimals
        raise BundleError(
            f"the policy's action scale {exported} is not {env_id}'s ({scale.round(3).tolist()})"
        )


def import_mjlab_onnx(
    path: str | Path, out: str | Path, env_id: str | None = None, samples: int = 64
) -> Imported:
    """Check mjlab's policy export ``path`` and write it as a bundle into ``out``.

    ``env_id``: the mjlab task it was trained on; its widths, joints and action scale are
    checked against the file, its play configuration gives the parity observations, and
    ``orin-rl run`` drives it by default. Without it, random observations and unbounded
    actions (``runtime.mjlab_onnx.import_without_task``)."""
    if env_id is None:
        return import_without_task(path, out, samples)
    export = open_export(path)
    obs, facts = _task_observations(env_id, samples)
    _check_against_task(env_id, export.metadata, facts, export.obs_dim, export.action_dim)
    deploy = _with_rounding(facts["deploy"], export.metadata)
    return write_bundle(export, out, obs, (facts["low"], facts["high"]), env_id, deploy)


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
        values = csv_floats(metadata[key])
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
