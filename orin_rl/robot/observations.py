"""The policy's input from a robot's state, as the task's observation manager computes it.

mjlab's (and Isaac Lab's) observation manager computes each term, clips it, scales it, and
keeps ``history_length`` frames of it (oldest first; the first frame after a reset fills every
slot); the group is the terms concatenated in order. ``ObservationBuilder`` does the same from
what a robot reports (``RobotState``), in numpy, torch-free; ``tests/robot`` holds it equal to
the task's ``actor`` group on an mjlab world.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from orin_rl.robot import RobotError
from orin_rl.robot.contract import DeployContract


@dataclass
class RobotState:
    """What a robot reports in one period (policy joint order)."""

    quaternion: np.ndarray
    """(4,) base orientation in the world, w, x, y, z (Unitree's and MuJoCo's order)."""
    gyro: np.ndarray
    """(3,) angular velocity in the base frame (rad/s)."""
    joint_pos: np.ndarray
    """(n,) joint positions (rad), policy order."""
    joint_vel: np.ndarray
    """(n,) joint velocities (rad/s), policy order."""
    base_lin_vel: np.ndarray | None = None
    """(3,) linear velocity in the base frame (m/s): a state estimator's, where there is one."""


def projected_gravity(quaternion: np.ndarray) -> np.ndarray:
    """Gravity's direction (0, 0, -1) in the frame of orientation ``quaternion`` (w, x, y, z):
    Rᵀ·(0, 0, −1), the negated third row of the rotation matrix."""
    w, x, y, z = np.asarray(quaternion, dtype=np.float64) / np.linalg.norm(quaternion)
    return -np.array([2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)])


def world_to_body(quaternion: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``vector`` (world frame) in the frame of orientation ``quaternion`` (w, x, y, z): Rᵀ·v."""
    w, x, y, z = np.asarray(quaternion, dtype=np.float64) / np.linalg.norm(quaternion)
    rotation = np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )
    return rotation.T @ np.asarray(vector, dtype=np.float64)


def tilt(quaternion: np.ndarray) -> float:
    """Angle (rad) between the base's up axis and the world's: acos(−g_z)."""
    return float(np.arccos(np.clip(-projected_gravity(quaternion)[2], -1.0, 1.0)))


# What a run measures (never a policy input): the base's motion in the frames a velocity
# command means, as Isaac Lab's tracking terms read them: x, y in the heading frame (the base's
# yaw alone, so a pitched or rolled base still reads its ground speed), z rate in the world.


def heading(quaternion: np.ndarray) -> float:
    """The base's yaw (rad) from orientation ``quaternion`` (w, x, y, z): the world angle of
    its x axis projected on the ground."""
    w, x, y, z = np.asarray(quaternion, dtype=np.float64) / np.linalg.norm(quaternion)
    return float(np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)))


def heading_velocity(quaternion: np.ndarray, velocity_w: np.ndarray) -> np.ndarray:
    """(forward, lateral) of the world-frame ``velocity_w`` in the base's heading frame:
    the world xy rotated by −yaw."""
    yaw = heading(quaternion)
    c, s = np.cos(yaw), np.sin(yaw)
    vx, vy = float(velocity_w[0]), float(velocity_w[1])
    return np.array([c * vx + s * vy, -s * vx + c * vy])


def yaw_rate(quaternion: np.ndarray, gyro: np.ndarray) -> float:
    """The world-frame z angular velocity (rad/s) from a body-frame gyro: (R·ω)_z, R the
    base's orientation (w, x, y, z); the third row of R dotted with ω."""
    w, x, y, z = np.asarray(quaternion, dtype=np.float64) / np.linalg.norm(quaternion)
    row = np.array([2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y)])
    return float(row @ np.asarray(gyro, dtype=np.float64))


class ObservationBuilder:
    """Builds the policy's input from a ``RobotState``, the command and the last action.

    Call ``reset()`` when an episode starts (the policy takes over), ``build`` each tick, and
    ``record_action`` with the policy's raw output after each inference."""

    def __init__(self, contract: DeployContract):
        unsupported = contract.unsupported_terms()
        if unsupported:
            raise RobotError(
                f"the policy reads {', '.join(unsupported)}, which a robot state does not "
                "provide: train with observations a robot has (IMU, joints, command)"
            )
        self.contract = contract
        self.default = np.asarray(contract.default_joint_pos, dtype=np.float64)
        n = contract.num_joints
        self.last_action = np.zeros(n, dtype=np.float64)
        self._terms = []
        for term in contract.observations:
            scale = None if term.scale is None else np.asarray(term.scale, dtype=np.float64)
            clip = None if term.clip is None else (float(term.clip[0]), float(term.clip[1]))
            self._terms.append((term, scale, clip))
        self._history: dict[str, np.ndarray | None] = {}
        self.reset()

    def reset(self) -> None:
        """A new episode: no history, last action zero."""
        self.last_action[:] = 0.0
        self._history = {t.name: None for t in self.contract.observations if t.history_length}

    def record_action(self, action: np.ndarray) -> None:
        """The policy's raw output this tick (the next ``last_action`` term)."""
        self.last_action[:] = np.asarray(action, dtype=np.float64).reshape(-1)

    def _value(self, source: str, state: RobotState, command: np.ndarray) -> np.ndarray:
        if source == "gyro":
            return np.asarray(state.gyro, dtype=np.float64)
        if source == "projected_gravity":
            return projected_gravity(state.quaternion)
        if source == "joint_pos_rel":
            return np.asarray(state.joint_pos, dtype=np.float64) - self.default
        if source == "joint_vel_rel":
            return np.asarray(state.joint_vel, dtype=np.float64)
        if source == "last_action":
            return self.last_action
        if source == "command":
            return np.asarray(command, dtype=np.float64)
        if source == "base_lin_vel":
            if state.base_lin_vel is None:
                raise RobotError(
                    "the policy reads the base's linear velocity, which this robot state does "
                    "not carry: give the plant a velocity source (a state estimator)"
                )
            return np.asarray(state.base_lin_vel, dtype=np.float64)
        raise RobotError(f"unknown observation source {source!r}")

    def build(self, state: RobotState, command: np.ndarray) -> np.ndarray:
        """The policy's input, (obs_dim,) float32."""
        parts = []
        for term, scale, clip in self._terms:
            value = self._value(term.source, state, command)
            if value.shape != (term.dim,):
                raise RobotError(
                    f"observation term {term.name!r}: {value.shape[0]} values, the policy "
                    f"expects {term.dim}"
                )
            if clip is not None:
                value = np.clip(value, clip[0], clip[1])
            if scale is not None:
                value = value * scale
            if term.history_length:
                value = self._push(term.name, term.history_length, value)
            parts.append(value.reshape(-1))
        return np.concatenate(parts).astype(np.float32)

    def _push(self, name: str, length: int, value: np.ndarray) -> np.ndarray:
        """Append a frame (the first one after a reset fills every slot); oldest first."""
        history = self._history[name]
        if history is None:
            history = np.repeat(value[None], length, axis=0)
        else:
            history = np.concatenate([history[1:], value[None]])
        self._history[name] = history
        return history


def state_from_motors(
    quaternion: np.ndarray,
    gyro: np.ndarray,
    motor_q: np.ndarray,
    motor_dq: np.ndarray,
    motor_index: list[int] | np.ndarray,
    base_lin_vel: np.ndarray | None = None,
) -> RobotState:
    """A ``RobotState`` in policy order from what a robot reports in motor order (LowState's
    ``motor_state[i].q``/``dq``): joint ``j`` of the policy is motor ``motor_index[j]``."""
    index = np.asarray(motor_index, dtype=np.intp)
    return RobotState(
        quaternion=np.asarray(quaternion, dtype=np.float64),
        gyro=np.asarray(gyro, dtype=np.float64),
        joint_pos=np.asarray(motor_q, dtype=np.float64)[index],
        joint_vel=np.asarray(motor_dq, dtype=np.float64)[index],
        base_lin_vel=base_lin_vel,
    )
