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
"""Per robot, a velocity task whose actor reads only ``ROBOT_REPORTS`` (``envs.mjlab.tasks``):
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
        """Build and check (``check``); a malformed section is a one-line ``RobotError``."""
        try:
            data = dict(data)
            data["observations"] = [ObservationTerm(**t) for t in data["observations"]]
            contract = cls(**data)
        except (KeyError, TypeError) as exc:
            raise RobotError(f"{source}: malformed deploy contract ({exc})") from None
        try:
            contract.check(source)
        except RobotError as exc:
            raise RobotError(f"{exc}; export the bundle again (`orin-rl export`)") from None
        return contract

    def check(self, source: str = "the deploy contract") -> None:
        """Every field's shape and range, before anything reads it: finite numbers; one value
        a joint in each per-joint list; gains and effort limits >= 0; every [low, high]
        ordered; each motor index one of the robot's motors, naming that joint, once; a
        positive period; each observation term as wide as its source (a joint term: one
        value a joint, where the contract maps them to a robot's motors); a range for each
        command term. One line naming the field where not."""
        _check_finite(asdict(self), source)
        _check_joints(self, source)
        _check_motors(self, source)
        _check_period(self, source)
        _check_observations(self, source)
        _check_commands(self, source)

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


SOURCE_DIMS = {"base_lin_vel": 3, "gyro": 3, "projected_gravity": 3}
"""The width of each fixed-size source; ``JOINT_SOURCES`` are one value a joint."""
JOINT_SOURCES = ("joint_pos_rel", "joint_vel_rel", "last_action")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(value: Any) -> str:
    return str(len(value)) if isinstance(value, list) else repr(value) + " as"


def _numbers(values: Any, where: str, length: int, minimum: float | None = None) -> None:
    """``values``: a list of ``length`` numbers, each >= ``minimum`` where given."""
    if not isinstance(values, list) or len(values) != length:
        raise RobotError(f"{where} has {_count(values)} values, {length} expected")
    for i, value in enumerate(values):
        if not _number(value):
            raise RobotError(f"{where}[{i}] is {value!r}, not a number")
        if minimum is not None and value < minimum:
            raise RobotError(f"{where}[{i}] is {value:g}, below {minimum:g}")


def _pair(value: Any, where: str) -> None:
    """``value``: [low, high], two numbers, low <= high."""
    if not (isinstance(value, list) and len(value) == 2 and all(map(_number, value))):
        raise RobotError(f"{where} is {value!r}, not [low, high]")
    if value[0] > value[1]:
        raise RobotError(f"{where} is [{value[0]:g}, {value[1]:g}]: its low is above its high")


def _check_joints(c: DeployContract, where: str) -> None:
    names = c.joint_names
    if not (isinstance(names, list) and names and all(isinstance(j, str) for j in names)):
        raise RobotError(f"{where}: joint_names must be a list of joint names, got {names!r}")
    if len(set(names)) != len(names):
        twice = next(j for j in names if names.count(j) > 1)
        raise RobotError(f"{where}: joint {twice!r} is in joint_names twice")
    n = len(names)
    for name in ("default_joint_pos", "action_scale", "action_offset"):
        _numbers(getattr(c, name), f"{where}: {name}", n)
    for name in ("stiffness", "damping"):  # a negative gain drives the joint away
        _numbers(getattr(c, name), f"{where}: {name}", n, minimum=0.0)
    if c.effort_limit:
        _numbers(c.effort_limit, f"{where}: effort_limit", n, minimum=0.0)
    for name in ("joint_pos_limits", "action_clip"):
        pairs = getattr(c, name)
        if not pairs:
            continue
        if not isinstance(pairs, list) or len(pairs) != n:
            raise RobotError(f"{where}: {name} has {_count(pairs)} values, {n} expected")
        for i, pair in enumerate(pairs):
            _pair(pair, f"{where}: {name}[{i}] ({names[i]})")


def _check_motors(c: DeployContract, where: str) -> None:
    """Each policy joint's motor: an index of the robot's motors that names that joint, each
    motor once (an index past the motors ended in a traceback)."""
    from orin_rl.robot.robots import ROBOTS

    index = c.motor_index
    if index is None:
        return
    if not isinstance(index, list) or len(index) != c.num_joints:
        raise RobotError(f"{where}: motor_index has {_count(index)} values, "
                         f"{c.num_joints} expected")  # fmt: skip
    spec = ROBOTS.get(c.robot) if isinstance(c.robot, str) else None
    count = len(spec.motors) if spec else None
    first: dict[int, int] = {}
    for i, motor in enumerate(index):
        joint = c.joint_names[i]
        valid = isinstance(motor, int) and not isinstance(motor, bool) and motor >= 0
        if not valid or (count is not None and motor >= count):
            within = f": {spec.name} has motors 0 to {count - 1}" if spec else ""
            raise RobotError(f"{where}: motor_index[{i}] ({joint}) is {motor!r}, not a "
                             f"motor{within}")  # fmt: skip
        if motor in first:
            raise RobotError(f"{where}: motor_index[{i}] ({joint}) is motor {motor}, as is "
                             f"motor_index[{first[motor]}]")  # fmt: skip
        first[motor] = i
        if spec is not None and spec.motors[motor] != joint:
            raise RobotError(f"{where}: motor_index[{i}] puts {joint} on motor {motor}, which "
                             f"is {spec.motors[motor]} on {spec.name}")  # fmt: skip


def _check_period(c: DeployContract, where: str) -> None:
    if not (_number(c.step_dt) and c.step_dt > 0):
        raise RobotError(f"{where}: step_dt must be a positive period, got {c.step_dt!r}")
    if c.physics_dt is not None and not (_number(c.physics_dt) and c.physics_dt > 0):
        raise RobotError(f"{where}: physics_dt must be a positive step, got {c.physics_dt!r}")
    decimation = c.decimation
    if decimation is not None and not (_number(decimation) and int(decimation) == decimation
                                       and decimation >= 1):  # fmt: skip
        raise RobotError(f"{where}: decimation must be a positive integer, got {decimation!r}")
    if (
        c.physics_dt is not None
        and decimation is not None
        and not math.isclose(c.physics_dt * decimation, c.step_dt, rel_tol=1e-6)
    ):
        raise RobotError(f"{where}: step_dt {c.step_dt:g} is not physics_dt {c.physics_dt:g} "
                         f"x decimation {decimation:g}")  # fmt: skip


def _check_observations(c: DeployContract, where: str) -> None:
    if not isinstance(c.observations, list) or not c.observations:
        raise RobotError(f"{where}: observations must list the policy's input terms")
    terms = c.commands.get("terms") if isinstance(c.commands, dict) else None
    for term in c.observations:
        at = f"{where}: observation term {term.name!r}"
        if not (isinstance(term.dim, int) and not isinstance(term.dim, bool) and term.dim >= 1):
            raise RobotError(f"{at}: dim {term.dim!r} is not a positive integer")
        history = term.history_length
        if not (isinstance(history, int) and not isinstance(history, bool) and history >= 0):
            raise RobotError(f"{at}: history_length {history!r} is not an integer >= 0")
        want = SOURCE_DIMS.get(term.source)
        if term.source in JOINT_SOURCES and c.motor_index is not None:
            want = c.num_joints  # a robot's joints (an arm's task may observe more than it acts)
        elif term.source == "command" and terms:
            want = len(terms)
        if want is not None and term.dim != want:
            raise RobotError(f"{at} ({term.source}) has dim {term.dim}; its source gives {want}")
        if term.scale is not None:
            scale = term.scale if isinstance(term.scale, list) else [term.scale]
            _numbers(scale, f"{at}: scale", term.dim if len(scale) != 1 else 1)
        if term.clip is not None:
            _pair(term.clip, f"{at}: clip")
        if term.robot_reports != (term.source in ROBOT_REPORTS):
            raise RobotError(f"{where}: term {term.name!r} says robot_reports "
                             f"{term.robot_reports}, but its source is "
                             f"{term.source!r}")  # fmt: skip


def _check_commands(c: DeployContract, where: str) -> None:
    """A [low, high] range for each command term (and any other range given)."""
    if not isinstance(c.commands, dict):
        raise RobotError(f"{where}: commands is {c.commands!r}, not a mapping")
    terms, ranges = c.commands.get("terms", []), c.commands.get("ranges", {})
    if not isinstance(terms, list) or not isinstance(ranges, dict):
        raise RobotError(f"{where}: commands needs a list of terms and a mapping of ranges")
    for term in terms:
        if term not in ranges:
            raise RobotError(f"{where}: commands.ranges has no range for {term!r}")
    for name, value in ranges.items():
        _pair(value, f"{where}: commands.ranges.{name}")


def _check_finite(value: Any, where: str, path: str = "") -> None:
    """Every number in ``value`` finite; one line naming the first that is not (its ``path``
    in the section)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise RobotError(f"{where}: {path} is {value}, not a finite number (policy.json must "
                         "be JSON)")  # fmt: skip
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, where, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _check_finite(v, where, f"{path}[{i}]")
