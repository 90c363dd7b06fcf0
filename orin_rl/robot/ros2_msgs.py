"""ROS 2's message types on the wire, declared with ``cyclonedds.idl``: no rclpy needed.

A ROS 2 node (any RMW on RTPS: Fast DDS, CycloneDDS) puts a message ``pkg/Type`` on DDS as
the type ``pkg::msg::dds_::Type_`` (final extensibility, XCDR1 little-endian, fields in the
``.msg`` file's order, ``string`` as a CDR string, ``T[]`` as a sequence, ``T[N]`` as an
array, ``byte`` as an octet) on the topic ``rt/<namespace>/<name>``. The classes below are
those types field for field, for the messages the robot path reads and writes:
``geometry_msgs/Twist`` (``cmd_vel``), ``sensor_msgs/JointState``, ``sensor_msgs/Imu``,
``nav_msgs/Odometry`` and ``diagnostic_msgs/DiagnosticArray``. ``tests/robot/test_ros2.py``
holds their serialised bytes equal to rclpy's own (``rclpy.serialization``).
``message_type`` makes such a type of a plain class of annotated fields (``unitree_msgs``'
types too: Unitree's IDL names its types as ROS 2 does).

Needs the ``robot`` extra (``cyclonedds``); import this module lazily.
"""

# No ``from __future__ import annotations``: cyclonedds reads these annotations as types.

import copy
import typing
from collections.abc import Callable
from dataclasses import MISSING, Field, dataclass, field
from functools import partial
from types import new_class

import cyclonedds.idl as idl
import cyclonedds.idl.annotations as annotate
import cyclonedds.idl.types as types


def _zero(hint: typing.Any) -> typing.Any:
    """A fresh zero of an IDL type: 0, 0.0, "", [], an array of zeros, a default struct."""
    base, *meta = typing.get_args(hint) or (hint,)
    if meta and isinstance(meta[0], types.array):
        return [_zero(meta[0].subtype) for _ in range(meta[0].length)]
    return [] if meta and isinstance(meta[0], types.sequence) else base()


def message_type(name: str) -> Callable[[type], type]:
    """A class decorator: the ROS 2 message ``pkg/Type`` (``name``) as the DDS type
    ``pkg::msg::dds_::Type_`` (final, sequential member ids), a dataclass of the decorated
    plain class's annotated fields, its bases' first, in order.

    A field without a default starts at its type's zero (``_zero``); the result is a new
    ``idl.IdlStruct`` class with the decorated class's name, module and docstring."""
    pkg, _, kind = name.partition("/")

    def build(spec: type) -> type:
        hints = typing.get_type_hints(spec, include_extras=True)  # its bases' first

        def body(ns: dict[str, typing.Any]) -> None:
            ns.update(
                __module__=spec.__module__, __qualname__=spec.__qualname__, __doc__=spec.__doc__
            )
            ns["__annotations__"].update(hints)
            for key, hint in hints.items():
                value = getattr(spec, key, MISSING)
                if isinstance(value, Field):  # a base's: each type that inherits it its own
                    value = copy.copy(value)
                elif value is MISSING:
                    zero = _zero(hint)
                    scalar = isinstance(zero, int | float | str)
                    value = zero if scalar else field(default_factory=partial(_zero, hint))
                ns[key] = value

        typename = f"{pkg}.msg.dds_.{kind}_"
        cls = new_class(spec.__name__, (idl.IdlStruct,), {"typename": typename}, body)
        return dataclass(annotate.final(annotate.autoid("sequential")(cls)))

    return build


@message_type("builtin_interfaces/Time")
class Time:
    """``builtin_interfaces/Time``: ROS time (the system clock by default) in s and ns."""

    sec: types.int32
    nanosec: types.uint32


@message_type("std_msgs/Header")
class Header:
    """``std_msgs/Header``: the stamp and the frame the data is in."""

    stamp: Time
    frame_id: str


@message_type("geometry_msgs/Vector3")
class Vector3:
    """``geometry_msgs/Vector3``."""

    x: types.float64
    y: types.float64
    z: types.float64


@message_type("geometry_msgs/Point")
class Point:
    """``geometry_msgs/Point``."""

    x: types.float64
    y: types.float64
    z: types.float64


@message_type("geometry_msgs/Quaternion")
class Quaternion:
    """``geometry_msgs/Quaternion``: x, y, z, w (ROS's order; Unitree's IMU gives w first)."""

    x: types.float64
    y: types.float64
    z: types.float64
    w: types.float64 = 1.0


@message_type("geometry_msgs/Twist")
class Twist:
    """``geometry_msgs/Twist``: what ``cmd_vel`` carries (m/s, rad/s, body frame)."""

    linear: Vector3
    angular: Vector3


@message_type("geometry_msgs/Pose")
class Pose:
    """``geometry_msgs/Pose``."""

    position: Point
    orientation: Quaternion


@message_type("geometry_msgs/PoseWithCovariance")
class PoseWithCovariance:
    """``geometry_msgs/PoseWithCovariance``: covariance row-major 6 × 6."""

    pose: Pose
    covariance: types.array[types.float64, 36]


@message_type("geometry_msgs/TwistWithCovariance")
class TwistWithCovariance:
    """``geometry_msgs/TwistWithCovariance``: covariance row-major 6 × 6."""

    twist: Twist
    covariance: types.array[types.float64, 36]


@message_type("sensor_msgs/JointState")
class JointState:
    """``sensor_msgs/JointState``: rad, rad/s, N·m, one entry a joint."""

    header: Header
    name: types.sequence[str]
    position: types.sequence[types.float64]
    velocity: types.sequence[types.float64]
    effort: types.sequence[types.float64]


@message_type("sensor_msgs/Imu")
class Imu:
    """``sensor_msgs/Imu``: a covariance's first element −1 says "not reported"."""

    header: Header
    orientation: Quaternion
    orientation_covariance: types.array[types.float64, 9]
    angular_velocity: Vector3
    angular_velocity_covariance: types.array[types.float64, 9]
    linear_acceleration: Vector3
    linear_acceleration_covariance: types.array[types.float64, 9]


@message_type("nav_msgs/Odometry")
class Odometry:
    """``nav_msgs/Odometry``: pose in ``header.frame_id``, twist in ``child_frame_id``."""

    header: Header
    child_frame_id: str
    pose: PoseWithCovariance
    twist: TwistWithCovariance


@message_type("diagnostic_msgs/KeyValue")
class KeyValue:
    """``diagnostic_msgs/KeyValue``."""

    key: str
    value: str


@message_type("diagnostic_msgs/DiagnosticStatus")
class DiagnosticStatus:
    """``diagnostic_msgs/DiagnosticStatus``: ``level`` OK 0, WARN 1, ERROR 2, STALE 3."""

    level: types.byte
    name: str
    message: str
    hardware_id: str
    values: types.sequence[KeyValue]


@message_type("diagnostic_msgs/DiagnosticArray")
class DiagnosticArray:
    """``diagnostic_msgs/DiagnosticArray``: what ``/diagnostics`` carries."""

    header: Header
    status: types.sequence[DiagnosticStatus]


OK, WARN, ERROR, STALE = 0, 1, 2, 3
"""``DiagnosticStatus.level``'s values."""


def topic(name: str, namespace: str = "") -> str:
    """The DDS topic of ROS 2 topic ``name`` in ``namespace``: ``rt/<namespace>/<name>``."""
    parts = [p for p in f"{namespace}/{name}".split("/") if p]
    return "rt/" + "/".join(parts)


def stamp(time_ns: int) -> Time:
    """A header stamp from nanoseconds (ROS time: ``time.time_ns()``, the system clock)."""
    return Time(sec=int(time_ns // 1_000_000_000), nanosec=int(time_ns % 1_000_000_000))
