"""ROS 2's message types on the wire, declared with ``cyclonedds.idl``: no rclpy needed.

A ROS 2 node (any RMW on RTPS: Fast DDS, CycloneDDS) puts a message ``pkg/Type`` on DDS as
the type ``pkg::msg::dds_::Type_`` (final extensibility, XCDR1 little-endian, fields in the
``.msg`` file's order, ``string`` as a CDR string, ``T[]`` as a sequence, ``T[N]`` as an
array, ``byte`` as an octet) on the topic ``rt/<namespace>/<name>``. The classes below are
those types field for field, for the messages the robot path reads and writes:
``geometry_msgs/Twist`` (``cmd_vel``), ``sensor_msgs/JointState``, ``sensor_msgs/Imu``,
``nav_msgs/Odometry`` and ``diagnostic_msgs/DiagnosticArray``. ``tests/robot/test_ros2.py``
holds their serialised bytes equal to rclpy's own (``rclpy.serialization``).

Needs the ``robot`` extra (``cyclonedds``); import this module lazily.
"""

# No ``from __future__ import annotations``: cyclonedds reads these annotations as types.

from dataclasses import dataclass, field

import cyclonedds.idl as idl
import cyclonedds.idl.annotations as annotate
import cyclonedds.idl.types as types


def _fzeros(n: int) -> list:
    return field(default_factory=lambda: [0.0] * n)


@dataclass
@annotate.final
@annotate.autoid("sequential")
class Time(idl.IdlStruct, typename="builtin_interfaces.msg.dds_.Time_"):
    """``builtin_interfaces/Time``: ROS time (the system clock by default) in s and ns."""

    sec: types.int32 = 0
    nanosec: types.uint32 = 0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class Header(idl.IdlStruct, typename="std_msgs.msg.dds_.Header_"):
    """``std_msgs/Header``: the stamp and the frame the data is in."""

    stamp: Time = field(default_factory=Time)
    frame_id: str = ""


@dataclass
@annotate.final
@annotate.autoid("sequential")
class Vector3(idl.IdlStruct, typename="geometry_msgs.msg.dds_.Vector3_"):
    """``geometry_msgs/Vector3``."""

    x: types.float64 = 0.0
    y: types.float64 = 0.0
    z: types.float64 = 0.0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class Point(idl.IdlStruct, typename="geometry_msgs.msg.dds_.Point_"):
    """``geometry_msgs/Point``."""

    x: types.float64 = 0.0
    y: types.float64 = 0.0
    z: types.float64 = 0.0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class Quaternion(idl.IdlStruct, typename="geometry_msgs.msg.dds_.Quaternion_"):
    """``geometry_msgs/Quaternion``: x, y, z, w (ROS's order; Unitree's IMU gives w first)."""

    x: types.float64 = 0.0
    y: types.float64 = 0.0
    z: types.float64 = 0.0
    w: types.float64 = 1.0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class Twist(idl.IdlStruct, typename="geometry_msgs.msg.dds_.Twist_"):
    """``geometry_msgs/Twist``: what ``cmd_vel`` carries (m/s, rad/s, body frame)."""

    linear: Vector3 = field(default_factory=Vector3)
    angular: Vector3 = field(default_factory=Vector3)


@dataclass
@annotate.final
@annotate.autoid("sequential")
class Pose(idl.IdlStruct, typename="geometry_msgs.msg.dds_.Pose_"):
    """``geometry_msgs/Pose``."""

    position: Point = field(default_factory=Point)
    orientation: Quaternion = field(default_factory=Quaternion)


@dataclass
@annotate.final
@annotate.autoid("sequential")
class PoseWithCovariance(idl.IdlStruct, typename="geometry_msgs.msg.dds_.PoseWithCovariance_"):
    """``geometry_msgs/PoseWithCovariance``: covariance row-major 6 × 6."""

    pose: Pose = field(default_factory=Pose)
    covariance: types.array[types.float64, 36] = _fzeros(36)


@dataclass
@annotate.final
@annotate.autoid("sequential")
class TwistWithCovariance(idl.IdlStruct,
                          typename="geometry_msgs.msg.dds_.TwistWithCovariance_"):  # fmt: skip
    """``geometry_msgs/TwistWithCovariance``: covariance row-major 6 × 6."""

    twist: Twist = field(default_factory=Twist)
    covariance: types.array[types.float64, 36] = _fzeros(36)


@dataclass
@annotate.final
@annotate.autoid("sequential")
class JointState(idl.IdlStruct, typename="sensor_msgs.msg.dds_.JointState_"):
    """``sensor_msgs/JointState``: rad, rad/s, N·m, one entry a joint."""

    header: Header = field(default_factory=Header)
    name: types.sequence[str] = field(default_factory=list)
    position: types.sequence[types.float64] = field(default_factory=list)
    velocity: types.sequence[types.float64] = field(default_factory=list)
    effort: types.sequence[types.float64] = field(default_factory=list)


@dataclass
@annotate.final
@annotate.autoid("sequential")
class Imu(idl.IdlStruct, typename="sensor_msgs.msg.dds_.Imu_"):
    """``sensor_msgs/Imu``: a covariance's first element −1 says "not reported"."""

    header: Header = field(default_factory=Header)
    orientation: Quaternion = field(default_factory=Quaternion)
    orientation_covariance: types.array[types.float64, 9] = _fzeros(9)
    angular_velocity: Vector3 = field(default_factory=Vector3)
    angular_velocity_covariance: types.array[types.float64, 9] = _fzeros(9)
    linear_acceleration: Vector3 = field(default_factory=Vector3)
    linear_acceleration_covariance: types.array[types.float64, 9] = _fzeros(9)


@dataclass
@annotate.final
@annotate.autoid("sequential")
class Odometry(idl.IdlStruct, typename="nav_msgs.msg.dds_.Odometry_"):
    """``nav_msgs/Odometry``: pose in ``header.frame_id``, twist in ``child_frame_id``."""

    header: Header = field(default_factory=Header)
    child_frame_id: str = ""
    pose: PoseWithCovariance = field(default_factory=PoseWithCovariance)
    twist: TwistWithCovariance = field(default_factory=TwistWithCovariance)


@dataclass
@annotate.final
@annotate.autoid("sequential")
class KeyValue(idl.IdlStruct, typename="diagnostic_msgs.msg.dds_.KeyValue_"):
    """``diagnostic_msgs/KeyValue``."""

    key: str = ""
    value: str = ""


@dataclass
@annotate.final
@annotate.autoid("sequential")
class DiagnosticStatus(idl.IdlStruct, typename="diagnostic_msgs.msg.dds_.DiagnosticStatus_"):
    """``diagnostic_msgs/DiagnosticStatus``: ``level`` OK 0, WARN 1, ERROR 2, STALE 3."""

    level: types.byte = 0
    name: str = ""
    message: str = ""
    hardware_id: str = ""
    values: types.sequence[KeyValue] = field(default_factory=list)


@dataclass
@annotate.final
@annotate.autoid("sequential")
class DiagnosticArray(idl.IdlStruct, typename="diagnostic_msgs.msg.dds_.DiagnosticArray_"):
    """``diagnostic_msgs/DiagnosticArray``: what ``/diagnostics`` carries."""

    header: Header = field(default_factory=Header)
    status: types.sequence[DiagnosticStatus] = field(default_factory=list)


OK, WARN, ERROR, STALE = 0, 1, 2, 3
"""``DiagnosticStatus.level``'s values."""


def topic(name: str, namespace: str = "") -> str:
    """The DDS topic of ROS 2 topic ``name`` in ``namespace``: ``rt/<namespace>/<name>``."""
    parts = [p for p in f"{namespace}/{name}".split("/") if p]
    return "rt/" + "/".join(parts)


def stamp(time_ns: int) -> Time:
    """A header stamp from nanoseconds (ROS time: ``time.time_ns()``, the system clock)."""
    return Time(sec=int(time_ns // 1_000_000_000), nanosec=int(time_ns % 1_000_000_000))
