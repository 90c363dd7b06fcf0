"""The deploy contract of an mjlab task, read from the task's own objects at full precision.

mjlab's exporter (``mjlab.rl.exporter_utils.get_base_metadata``) gives the joints, gains,
default pose, observation terms and action scale; the rest (the action offset and clip, effort
and position limits, the control period, the command ranges, where each observation term comes
from on a robot, the hardware motor order) is read here from the action term, the MuJoCo
model, the command term and the observation manager.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from orin_rl.robot.contract import DeployContract, ObservationTerm
from orin_rl.robot.robots import match_robot

_FUNC_SOURCES = {
    "projected_gravity": "projected_gravity",
    "joint_pos_rel": "joint_pos_rel",
    "joint_vel_rel": "joint_vel_rel",
    "last_action": "last_action",
    "generated_commands": "command",
}
"""mjlab observation functions a robot state provides, by function name."""


def _floats(value: Any, n: int | None = None) -> list[float] | None:
    """A tensor, number or list as a list of Python floats (broadcast to ``n``)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().double().numpy()
    array = np.asarray(value, dtype=np.float64).reshape(-1)
    if n is not None and array.size == 1:
        array = np.repeat(array, n)
    return [float(x) for x in array]


def _source(env: Any, cfg: Any) -> str:
    """Where a term comes from on a robot; ``unsupported:<func>`` where nowhere."""
    import mujoco

    name = getattr(cfg.func, "__name__", str(cfg.func))
    if name in _FUNC_SOURCES:
        return _FUNC_SOURCES[name]
    if name == "builtin_sensor":
        sensor = env.sim.mj_model.sensor(cfg.params["sensor_name"])
        kind = int(sensor.type[0] if hasattr(sensor.type, "__len__") else sensor.type)
        if kind == mujoco.mjtSensor.mjSENS_GYRO:
            return "gyro"
        if kind == mujoco.mjtSensor.mjSENS_VELOCIMETER:
            return "base_lin_vel"
    return f"unsupported:{name}"


def _observations(env: Any, group: str) -> list[ObservationTerm]:
    manager = env.observation_manager
    terms = []
    names = manager.active_terms[group]
    dims = manager.group_obs_term_dim[group]
    for name, dim in zip(names, dims, strict=True):
        cfg = manager.get_term_cfg(group, name)
        width = int(np.prod(dim))
        if cfg.history_length > 0:
            width //= cfg.history_length  # the manager's width counts every frame
        terms.append(
            ObservationTerm(
                name=name,
                source=_source(env, cfg),
                dim=width,
                scale=_floats(cfg.scale, width),
                clip=_floats(cfg.clip),
                history_length=int(cfg.history_length),
            )
        )
    return terms


def _commands(env: Any) -> dict[str, Any]:
    """The first command term: its name, its elements' names and ranges."""
    manager = env.command_manager
    if not manager.active_terms:
        return {}
    name = manager.active_terms[0]
    cfg = manager.get_term(name).cfg
    ranges = getattr(cfg, "ranges", None)
    out: dict[str, Any] = {"name": name}
    if ranges is not None and all(hasattr(ranges, k) for k in ("lin_vel_x", "ang_vel_z")):
        terms = ["lin_vel_x", "lin_vel_y", "ang_vel_z"]
        out["terms"] = terms
        out["ranges"] = {k: _floats(getattr(ranges, k)) for k in terms}
        heading = getattr(ranges, "heading", None)
        if heading is not None:
            out["ranges"]["heading"] = _floats(heading)
        out["heading_command"] = bool(getattr(cfg, "heading_command", False))
    return out


def _joint_limits(env: Any, joints: list[str]) -> tuple[list, list]:
    """Per policy joint: |τ| limit of its actuator and the joint's range (the MuJoCo model)."""
    model = env.sim.mj_model
    effort, limits = [], []
    for joint in joints:
        jid = model.joint(joint_name(model, joint)).id
        actuators = [a for a in range(model.nu) if model.actuator_trnid[a, 0] == jid]
        force = model.actuator_forcerange[actuators[0]] if actuators else [0.0, 0.0]
        effort.append(float(max(abs(force[0]), abs(force[1]))))
        limits.append(_floats(model.jnt_range[jid]))
    return effort, limits


def joint_name(model: Any, joint: str) -> str:
    """The MuJoCo model's name of the robot's ``joint`` (mjlab prefixes the entity name)."""
    for candidate in (f"robot/{joint}", joint):
        try:
            model.joint(candidate)
            return candidate
        except KeyError:
            continue
    raise KeyError(joint)


def deploy_contract(env: Any, env_id: str = "", run_path: str = "") -> DeployContract | None:
    """The contract of mjlab env ``env`` (a ``ManagerBasedRlEnv``) for its actor group; None
    for a task with no robot driven by joint positions (``Mjlab-Cartpole-Balance``: no robot
    reads a wire for it)."""
    import mjlab
    import mujoco
    from mjlab.rl.exporter_utils import get_base_metadata

    if "robot" not in env.scene.entities or "joint_pos" not in env.action_manager.active_terms:
        return None
    meta = get_base_metadata(env, run_path)
    robot = env.scene["robot"]
    term = env.action_manager.get_term("joint_pos")
    joints = list(term._target_names)
    n = len(joints)
    index = {j: i for i, j in enumerate(meta["joint_names"])}
    stiffness = [float(meta["joint_stiffness"][index[j]]) for j in joints]
    damping = [float(meta["joint_damping"][index[j]]) for j in joints]
    default = _floats(robot.data.default_joint_pos[0, term._target_ids])
    scale = term._scale[0] if isinstance(term._scale, torch.Tensor) else term._scale
    offset = term._offset[0] if isinstance(term._offset, torch.Tensor) else term._offset
    clip = getattr(term.cfg, "clip", None)
    effort, limits = _joint_limits(env, joints)
    matched = match_robot(joints)
    physics_dt = float(env.cfg.sim.mujoco.timestep)
    return DeployContract(
        joint_names=joints,
        default_joint_pos=default,
        action_scale=_floats(scale, n),
        action_offset=_floats(offset, n),
        action_clip=None if not clip else [_floats(clip.get(j)) for j in joints],
        stiffness=stiffness,
        damping=damping,
        step_dt=physics_dt * int(env.cfg.decimation),
        physics_dt=physics_dt,
        decimation=int(env.cfg.decimation),
        observations=_observations(env, "actor"),
        effort_limit=effort,
        joint_pos_limits=limits,
        commands=_commands(env),
        robot=matched[0].name if matched else None,
        motor_index=matched[1] if matched else None,
        source=f"mjlab task {env_id}".strip(),
        precision={"full": True},
        versions={
            "mjlab": getattr(mjlab, "__version__", "") or _version("mjlab"),
            "mujoco": mujoco.__version__,
        },
    )


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return ""
