"""Unitree SDK2's message types on the wire, from Unitree's IDL, with ``cyclonedds.idl``.

Field for field, type for type and in order, Unitree's ``idl/unitree_hg`` (G1, H1-2: LowCmd_,
LowState_ with 35 motor slots) and the ``unitree_go`` SportModeState_ that Unitree's MuJoCo
bridge publishes beside them (the base's position and world-frame velocity). The type names
are Unitree's (``unitree_hg.msg.dds_.LowCmd_``, on the wire ``unitree_hg::msg::dds_::LowCmd_``),
so a robot, Unitree's SDK and this module read each other's messages: ``tests/robot`` holds
their serialised bytes equal to those of Unitree's IDL-generated Python types.

Needs the ``robot`` extra (``cyclonedds``); import this module lazily.
"""

# No ``from __future__ import annotations``: cyclonedds reads these annotations as types.

from dataclasses import dataclass, field

import cyclonedds.idl as idl
import cyclonedds.idl.annotations as annotate
import cyclonedds.idl.types as types

HG_MOTORS = 35
"""Motor slots of a ``unitree_hg`` message."""


def _zeros(n: int) -> list:
    return field(default_factory=lambda: [0] * n)


def _fzeros(n: int) -> list:
    return field(default_factory=lambda: [0.0] * n)


@dataclass
@annotate.final
@annotate.autoid("sequential")
class HgMotorCmd(idl.IdlStruct, typename="unitree_hg.msg.dds_.MotorCmd_"):
    """One motor's command: ``mode`` 1 enables it; τ = tau + kp·(q − q̂) + kd·(dq − dq̂)."""

    mode: types.uint8 = 0
    q: types.float32 = 0.0
    dq: types.float32 = 0.0
    tau: types.float32 = 0.0
    kp: types.float32 = 0.0
    kd: types.float32 = 0.0
    reserve: types.uint32 = 0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class HgLowCmd(idl.IdlStruct, typename="unitree_hg.msg.dds_.LowCmd_"):
    """``rt/lowcmd`` of a G1: ``crc`` is Unitree's CRC of the rest (``crc.hg_lowcmd_crc``)."""

    mode_pr: types.uint8 = 0
    mode_machine: types.uint8 = 0
    motor_cmd: types.array[HgMotorCmd, HG_MOTORS] = field(
        default_factory=lambda: [HgMotorCmd() for _ in range(HG_MOTORS)]
    )
    reserve: types.array[types.uint32, 4] = _zeros(4)
    crc: types.uint32 = 0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class HgImuState(idl.IdlStruct, typename="unitree_hg.msg.dds_.IMUState_"):
    """The IMU: quaternion w, x, y, z; gyroscope (rad/s) and accelerometer in its frame."""

    quaternion: types.array[types.float32, 4] = field(default_factory=lambda: [1.0, 0, 0, 0])
    gyroscope: types.array[types.float32, 3] = _fzeros(3)
    accelerometer: types.array[types.float32, 3] = _fzeros(3)
    rpy: types.array[types.float32, 3] = _fzeros(3)
    temperature: types.int16 = 0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class HgMotorState(idl.IdlStruct, typename="unitree_hg.msg.dds_.MotorState_"):
    """One motor's state."""

    mode: types.uint8 = 0
    q: types.float32 = 0.0
    dq: types.float32 = 0.0
    ddq: types.float32 = 0.0
    tau_est: types.float32 = 0.0
    temperature: types.array[types.int16, 2] = _zeros(2)
    vol: types.float32 = 0.0
    sensor: types.array[types.uint32, 2] = _zeros(2)
    motorstate: types.uint32 = 0
    reserve: types.array[types.uint32, 4] = _zeros(4)


@dataclass
@annotate.final
@annotate.autoid("sequential")
class HgLowState(idl.IdlStruct, typename="unitree_hg.msg.dds_.LowState_"):
    """``rt/lowstate`` of a G1 (``mode_machine`` 0 from a simulator)."""

    version: types.array[types.uint32, 2] = _zeros(2)
    mode_pr: types.uint8 = 0
    mode_machine: types.uint8 = 0
    tick: types.uint32 = 0
    imu_state: HgImuState = field(default_factory=HgImuState)
    motor_state: types.array[HgMotorState, HG_MOTORS] = field(
        default_factory=lambda: [HgMotorState() for _ in range(HG_MOTORS)]
    )
    wireless_remote: types.array[types.uint8, 40] = _zeros(40)
    reserve: types.array[types.uint32, 4] = _zeros(4)
    crc: types.uint32 = 0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class GoImuState(idl.IdlStruct, typename="unitree_go.msg.dds_.IMUState_"):
    quaternion: types.array[types.float32, 4] = field(default_factory=lambda: [1.0, 0, 0, 0])
    gyroscope: types.array[types.float32, 3] = _fzeros(3)
    accelerometer: types.array[types.float32, 3] = _fzeros(3)
    rpy: types.array[types.float32, 3] = _fzeros(3)
    temperature: types.uint8 = 0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class GoTimeSpec(idl.IdlStruct, typename="unitree_go.msg.dds_.TimeSpec_"):
    sec: types.int32 = 0
    nanosec: types.uint32 = 0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class GoPathPoint(idl.IdlStruct, typename="unitree_go.msg.dds_.PathPoint_"):
    t_from_start: types.float32 = 0.0
    x: types.float32 = 0.0
    y: types.float32 = 0.0
    yaw: types.float32 = 0.0
    vx: types.float32 = 0.0
    vy: types.float32 = 0.0
    vyaw: types.float32 = 0.0


@dataclass
@annotate.final
@annotate.autoid("sequential")
class GoSportModeState(idl.IdlStruct, typename="unitree_go.msg.dds_.SportModeState_"):
    """``rt/sportmodestate``: ``position`` and ``velocity`` of the IMU point, world frame (as
    Unitree's MuJoCo bridge fills them; on a robot, its motion service's estimate)."""

    stamp: GoTimeSpec = field(default_factory=GoTimeSpec)
    error_code: types.uint32 = 0
    imu_state: GoImuState = field(default_factory=GoImuState)
    mode: types.uint8 = 0
    progress: types.float32 = 0.0
    gait_type: types.uint8 = 0
    foot_raise_height: types.float32 = 0.0
    position: types.array[types.float32, 3] = _fzeros(3)
    body_height: types.float32 = 0.0
    velocity: types.array[types.float32, 3] = _fzeros(3)
    yaw_speed: types.float32 = 0.0
    range_obstacle: types.array[types.float32, 4] = _fzeros(4)
    foot_force: types.array[types.int16, 4] = _zeros(4)
    foot_position_body: types.array[types.float32, 12] = _fzeros(12)
    foot_speed_body: types.array[types.float32, 12] = _fzeros(12)
    path_point: types.array[GoPathPoint, 10] = field(
        default_factory=lambda: [GoPathPoint() for _ in range(10)]
    )


LOWCMD = "rt/lowcmd"
LOWSTATE = "rt/lowstate"
SPORTSTATE = "rt/sportmodestate"
"""Unitree SDK2's topics."""
