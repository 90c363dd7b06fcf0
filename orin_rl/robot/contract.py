"""The deploy contract: everything a robot needs to feed a policy and act on its output.

``policy.json``'s ``deploy`` section, at full precision: the joints in the policy's order and
the hardware motor each one is, the default pose, the action's scale, offset and clip, the
gains and effort limits, the control period, the commands with their ranges, and each
observation term (where on the robot it comes from, its width, scale, clip and history).
Written by ``orin-rl export`` from an mjlab run (the task's own objects) and by the import of
mjlab's ONNX (whose metadata is rounded to 3 decimals: ``precision`` says what was lost).

Pure Python (json-ready lists, no numpy): the robot's side reads it without torch.

What each observation ``source`` means on a robot (``observations.ObservationBuilder``):

================== ===========================================================================
``base_lin_vel``   the base's linear velocity in its own frame (a state estimator; not in
                   Unitree's LowState: the twin publishes it, a real robot needs an estimator)
                   **not reported by a real robot in low-level mode** (``ROBOT_REPORTS``)
``gyro``           the IMU's angular velocity (LowState ``imu_state.gyroscope``)
``projected_gravity`` gravity in the base frame, from the IMU quaternion (w, x, y, z)
``joint_pos_rel``  joint positions (policy order) minus the default pose
``joint_vel_rel``  joint velocities (policy order)
``last_action``    the policy's previous raw output
``command``        the operator's command (e.g. ``lin_vel_x, lin_vel_y, ang_vel_z``)
================== ===========================================================================
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from orin_rl.robot import RobotError

SOURCES = (
    "base_lin_vel",
    "gyro",
    "projected_gravity",
    "joint_pos_rel",
    "joint_vel_rel",
    "last_action",
    "command",
)
"""Observation sources a robot state provides (module docstring)."""
TWIN_ONLY = ("base_lin_vel",)
"""Sources only the twin (or a simulator) publishes: ``rt/sportmodestate``."""
ROBOT_REPORTS = tuple(source for source in SOURCES if source not in TWIN_ONLY)
"""Sources a real robot in low-level mode reports: ``rt/lowstate`` (IMU, motors), the
operator's command, the policy's own output. ``base_lin_vel`` is not one: with the motion
service released no ``rt/sportmodestate`` comes (the twin publishes it)."""
ROBOT_TASKS = {"unitree-g1": "Orin-Velocity-Flat-Unitree-G1-Real"}
"""Per robot, a velocity task whose actor reads only ``ROBOT_REPORTS`` (``envs.mjlab_tasks``):
what to train instead."""


@dataclass
class ObservationTerm:
    """One term of the policy's input, as the task's observation manager computes it."""

    name: str
    """The task's term name (``base_ang_vel``)."""
    source: str
    """Where it comes from on a robot (one of ``SOURCES``)."""
    dim: int
    """Width of one frame."""
    scale: list[float] | None = None
    """Multiplier after the clip (one per element, or None)."""
    clip: list[float] | None = None
    """[low, high] before the scale, or None."""
    history_length: int = 0
    """Frames kept (0: the current one only); oldest first in the input."""
    robot_reports: bool | None = None
    """Whether a real robot in low-level mode reports it (``source`` in ``ROBOT_REPORTS``);
    False: only the twin publishes it. Filled from ``source`` where absent (older bundles)."""

    def __post_init__(self) -> None:
        if self.robot_reports is None:
            self.robot_reports = self.source in ROBOT_REPORTS


@dataclass
class DeployContract:
    """``policy.json``'s ``deploy`` section (module docstring)."""

    joint_names: list[str]
    """Joints in the policy's order (its actions and joint observations)."""
    default_joint_pos: list[float]
    """The pose joint observations are relative to (rad), policy order."""
    action_scale: list[float]
    """target = offset + scale * action, per joint."""
    action_offset: list[float]
    """Per joint (rad): the default pose in mjlab's velocity tasks."""
    stiffness: list[float]
    """PD stiffness per joint (N·m/rad), as trained."""
    damping: list[float]
    """PD damping per joint (N·m·s/rad), as trained."""
    step_dt: float
    """Control period (s): physics dt × decimation."""
    observations: list[ObservationTerm]
    """The input's terms, in order."""
    action_clip: list[list[float]] | None = None
    """Per joint [low, high] of the raw action, or None (mjlab's velocity tasks do not clip)."""
    effort_limit: list[float] = field(default_factory=list)
    """Per joint |τ| limit (N·m): targets are clamped so |target − q| ≤ effort / stiffness."""
    joint_pos_limits: list[list[float]] = field(default_factory=list)
    """Per joint [low, high] (rad): outside them the safety machine stops."""
    physics_dt: float | None = None
    decimation: int | None = None
    commands: dict[str, Any] = field(default_factory=dict)
    """``{"name", "terms": [..], "ranges": {term: [low, high]}, "heading_command"}``."""
    robot: str | None = None
    """The robot kind the task models (``unitree-g1``), where known."""
    motor_index: list[int] | None = None
    """The hardware motor of each policy joint (policy index → motor index)."""
    source: str = ""
    """What the contract was made from."""
    precision: dict[str, Any] = field(default_factory=dict)
    """``{"full": true}``, or what was rounded and by how much."""
    versions: dict[str, str] = field(default_factory=dict)

    @property
    def num_joints(self) -> int:
        return len(self.joint_names)

    @property
    def obs_dim(self) -> int:
        """Width of the policy's input."""
        return sum(t.dim * max(1, t.history_length) for t in self.observations)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (finite numbers only: a strict parser on the robot reads it)."""
        data = asdict(self)
        _check_finite(data, "deploy")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "policy.json") -> DeployContract:
        """Build and check; a malformed section is a one-line ``RobotError``."""
        try:
            data = dict(data)
            data["observations"] = [ObservationTerm(**t) for t in data["observations"]]
            contract = cls(**data)
        except (KeyError, TypeError) as exc:
            raise RobotError(f"{source}: malformed deploy contract ({exc})") from None
        contract.check(source)
        return contract

    def check(self, source: str = "the deploy contract") -> None:
        """Lengths agree, numbers are finite, sources are known."""
        n = self.num_joints
        for name in ("default_joint_pos", "action_scale", "action_offset", "stiffness",
                     "damping"):  # fmt: skip
            if len(getattr(self, name)) != n:
                raise RobotError(f"{source}: {name} has {len(getattr(self, name))} values "
                                 f"for {n} joints")  # fmt: skip
        for name in ("effort_limit", "joint_pos_limits", "motor_index", "action_clip"):
            value = getattr(self, name)
            if value and len(value) != n:
                raise RobotError(f"{source}: {name} has {len(value)} values for {n} joints")
        for term in self.observations:
            if term.robot_reports != (term.source in ROBOT_REPORTS):
                raise RobotError(f"{source}: term {term.name!r} says robot_reports "
                                 f"{term.robot_reports}, but its source is {term.source!r}; "
                                 "export the bundle again")  # fmt: skip
        if not (self.step_dt > 0 and math.isfinite(self.step_dt)):
            raise RobotError(f"{source}: step_dt must be a positive period, got {self.step_dt}")
        _check_finite(asdict(self), source)

    def unsupported_terms(self) -> list[str]:
        """Observation terms a robot state does not provide (a height scan, ...)."""
        return [f"{t.name} ({t.source})" for t in self.observations if t.source not in SOURCES]

    def twin_only_terms(self) -> list[str]:
        """Terms a robot state carries only from the twin (``base_lin_vel``): a real robot in
        low-level mode does not report them."""
        return [t.name for t in self.observations if t.source in SOURCES and not t.robot_reports]

    def real_robot_refusal(self) -> str | None:
        """One line refusing this policy on a real robot (the terms it lacks, what to train),
        or None where the actor reads only what the robot reports."""
        terms = self.twin_only_terms()
        if not terms:
            return None
        robot = self.robot or "robot"
        task = ROBOT_TASKS.get(robot)
        remedy = "train a policy without it" + (f" (to walk: {task})" if task else "")
        twin = "; only the twin (`orin-rl sim-robot`) publishes it" if self.robot else ""
        return (
            f"the policy reads {', '.join(terms)}, which a real {robot} in low-level mode does "
            f"not report (no rt/sportmodestate): {remedy}{twin}"
        )

    def command_ranges(self) -> list[list[float]]:
        """[low, high] of each command element, in the command term's order."""
        ranges = self.commands.get("ranges", {})
        return [list(ranges[t]) for t in self.commands.get("terms", [])]


def _check_finite(value: Any, where: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise RobotError(f"{where}: {value} is not a finite number (policy.json must be JSON)")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{where}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check_finite(v, f"{where}[{i}]")
