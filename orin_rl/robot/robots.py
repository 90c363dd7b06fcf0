"""The robots whose wire orin_rl speaks: motor order and message family (Unitree SDK2)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RobotSpec:
    """One robot kind on Unitree SDK2."""

    name: str
    """``unitree-g1``."""
    family: str
    """Message family: ``hg`` (G1, H1-2: 35 motor slots) or ``go`` (Go2, B2, H1: 20)."""
    motors: tuple[str, ...]
    """Joint names in the SDK's motor order (index = motor index)."""
    slots: int
    """Motor slots in LowCmd_/LowState_."""
    mode_machine: int
    """The robot type LowCmd_ carries (G1 29-DoF: 5; 0 from a simulator)."""


_LEG = ("hip_pitch", "hip_roll", "hip_yaw", "knee", "ankle_pitch", "ankle_roll")
_ARM = ("shoulder_pitch", "shoulder_roll", "shoulder_yaw", "elbow", "wrist_roll", "wrist_pitch",
        "wrist_yaw")  # fmt: skip

G1 = RobotSpec(
    name="unitree-g1",
    family="hg",
    motors=tuple(
        f"{j}_joint"
        for j in (
            *(f"{side}_{n}" for side in ("left", "right") for n in _LEG),
            "waist_yaw",
            "waist_roll",
            "waist_pitch",
            *(f"{side}_{n}" for side in ("left", "right") for n in _ARM),
        )
    ),
    slots=35,
    mode_machine=5,
)
"""Unitree G1 29-DoF: unitree_sdk2 ``robots/g1/defines.h`` order (= mjlab's g1.xml order)."""

ROBOTS = {G1.name: G1}


def match_robot(joint_names: list[str]) -> tuple[RobotSpec, list[int]] | None:
    """The robot whose motors carry all of ``joint_names``, and each joint's motor index."""
    for spec in ROBOTS.values():
        if set(joint_names) <= set(spec.motors):
            return spec, [spec.motors.index(j) for j in joint_names]
    return None
