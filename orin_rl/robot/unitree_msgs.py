"""Unitree SDK2's message types on the wire, from Unitree's IDL, with ``cyclonedds.idl``.

Field for field, type for type and in order, Unitree's ``idl/unitree_hg`` (G1, H1-2: LowCmd_,
LowState_ with 35 motor slots) and the ``unitree_go`` SportModeState_ that Unitree's MuJoCo
bridge publishes beside them (the base's position and world-frame velocity). The type names
are Unitree's (``unitree_hg.msg.dds_.LowCmd_``, on the wire ``unitree_hg::msg::dds_::LowCmd_``),
so a robot, Unitree's SDK and this module read each other's messages: ``tests/robot`` holds
their serialised bytes equal to those of Unitree's IDL-generated Python types. Each type is a
``ros2_msgs.message_type`` (a field without a default starts at zero).

Needs the ``robot`` extra (``cyclonedds``); import this module lazily.
"""

# No ``from __future__ import annotations``: cyclonedds reads these annotations as types.

from dataclasses import field

import cyclonedds.idl.types as types

from orin_rl.robot.ros2_msgs import message_type

HG_MOTORS = 35
"""Motor slots of a ``unitree_hg`` message."""


@message_type("unitree_hg/MotorCmd")
class HgMotorCmd:
    """One motor's command: ``mode`` 1 enables it; τ = tau + kp·(q − q̂) + kd·(dq − dq̂)."""

    mode: types.uint8
    q: types.float32
    dq: types.float32
    tau: types.float32
    kp: types.float32
    kd: types.float32
    reserve: types.uint32


@message_type("unitree_hg/LowCmd")
class HgLowCmd:
    """``rt/lowcmd`` of a G1: ``crc`` is Unitree's CRC of the rest (``crc.hg_lowcmd_crc``)."""

    mode_pr: types.uint8
    mode_machine: types.uint8
    motor_cmd: types.array[HgMotorCmd, HG_MOTORS]
    reserve: types.array[types.uint32, 4]
    crc: types.uint32


class _ImuState:
    """The fields ``unitree_hg``'s and ``unitree_go``'s IMUState_ share (then ``temperature``,
    an int16 in one, a uint8 in the other)."""

    quaternion: types.array[types.float32, 4] = field(default_factory=lambda: [1.0, 0, 0, 0])
    gyroscope: types.array[types.float32, 3]
    accelerometer: types.array[types.float32, 3]
    rpy: types.array[types.float32, 3]


@message_type("unitree_hg/IMUState")
class HgImuState(_ImuState):
    """The IMU: quaternion w, x, y, z; gyroscope (rad/s) and accelerometer in its frame."""

    temperature: types.int16


@message_type("unitree_hg/MotorState")
class HgMotorState:
    """One motor's state."""

    mode: types.uint8
    q: types.float32
    dq: types.float32
    ddq: types.float32
    tau_est: types.float32
    temperature: types.array[types.int16, 2]
    vol: types.float32
    sensor: types.array[types.uint32, 2]
    motorstate: types.uint32
    reserve: types.array[types.uint32, 4]


@message_type("unitree_hg/LowState")
class HgLowState:
    """``rt/lowstate`` of a G1 (``mode_machine`` 0 from a simulator)."""

    version: types.array[types.uint32, 2]
    mode_pr: types.uint8
    mode_machine: types.uint8
    tick: types.uint32
    imu_state: HgImuState
    motor_state: types.array[HgMotorState, HG_MOTORS]
    wireless_remote: types.array[types.uint8, 40]
    reserve: types.array[types.uint32, 4]
    crc: types.uint32


@message_type("unitree_go/IMUState")
class GoImuState(_ImuState):
    temperature: types.uint8


@message_type("unitree_go/TimeSpec")
class GoTimeSpec:
    sec: types.int32
    nanosec: types.uint32


@message_type("unitree_go/PathPoint")
class GoPathPoint:
    t_from_start: types.float32
    x: types.float32
    y: types.float32
    yaw: types.float32
    vx: types.float32
    vy: types.float32
    vyaw: types.float32


@message_type("unitree_go/SportModeState")
class GoSportModeState:
    """``rt/sportmodestate``: ``position`` and ``velocity`` of the IMU point, world frame (as
    Unitree's MuJoCo bridge fills them; on a robot, its motion service's estimate)."""

    stamp: GoTimeSpec
    error_code: types.uint32
    imu_state: GoImuState
    mode: types.uint8
    progress: types.float32
    gait_type: types.uint8
    foot_raise_height: types.float32
    position: types.array[types.float32, 3]
    body_height: types.float32
    velocity: types.array[types.float32, 3]
    yaw_speed: types.float32
    range_obstacle: types.array[types.float32, 4]
    foot_force: types.array[types.int16, 4]
    foot_position_body: types.array[types.float32, 12]
    foot_speed_body: types.array[types.float32, 12]
    path_point: types.array[GoPathPoint, 10]


LOWCMD = "rt/lowcmd"
LOWSTATE = "rt/lowstate"
SPORTSTATE = "rt/sportmodestate"
"""Unitree SDK2's topics."""
