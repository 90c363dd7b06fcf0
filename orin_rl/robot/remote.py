"""The robot's remote: Unitree's ``wireless_remote`` bytes → buttons, sticks, a command.

A Unitree robot forwards its handheld remote inside ``LowState_.wireless_remote``: 40 bytes of
``xRockerBtnDataStruct``: ``head[2]``, a 16-bit little-endian button field (bit 0 upward: R1,
L1, start, select, R2, L2, F1, F2, A, B, X, Y, up, right, down, left), then little-endian
float32 ``lx`` (byte 4), ``rx`` (8), ``ry`` (12), ``L2`` (16), ``ly`` (20), sticks in [-1, 1],
and 16 idle bytes.

Buttons move the safety machine as Unitree's G1 deploy does (``unitree_rl_lab``'s
``deploy/robots/g1_29dof/config/config.yaml``): ``L2 + up`` stands the robot up, ``R1 + X``
hands it to the policy, ``L2 + B`` stops it (damping, latched). Sticks give the velocity
command as Unitree's ``deploy_real.py`` reads them (forward = ``ly``, left = −``lx``, turn =
−``rx``), with a deadzone, scaled into the contract's command ranges.

``RemoteScript``: a file of timed stick and button values that the twin publishes in place of
a hand on the remote (sim-to-sim).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from orin_rl.robot import RobotError

BUTTONS = ("R1", "L1", "start", "select", "R2", "L2", "F1", "F2", "A", "B", "X", "Y", "up",
           "right", "down", "left")  # fmt: skip
"""The button field's bits, bit 0 first."""
SIZE = 40
"""Bytes of ``wireless_remote``."""
COMBOS = {"stand": "L2+up", "policy": "R1+X", "stop": "L2+B"}
"""Button combinations (held together) and the transition each asks for."""
STICKS = ("lx", "rx", "ry", "l2", "ly")
"""The floats after the buttons, in byte order (offsets 4, 8, 12, 16, 20)."""


def combo_mask(combo: str) -> int:
    """The button bits of ``'L2+up'``; an unknown name is a one-line error."""
    mask = 0
    for name in combo.split("+"):
        name = name.strip()
        if name not in BUTTONS:
            raise RobotError(
                f"remote button {name!r} in {combo!r}: buttons are {', '.join(BUTTONS)}"
            )
        mask |= 1 << BUTTONS.index(name)
    return mask


@dataclass(frozen=True)
class RemoteState:
    """One decoded ``wireless_remote``."""

    buttons: int = 0
    lx: float = 0.0
    rx: float = 0.0
    ry: float = 0.0
    l2: float = 0.0
    ly: float = 0.0

    def held(self, combo: str) -> bool:
        """Every button of ``combo`` is down."""
        mask = combo_mask(combo)
        return self.buttons & mask == mask

    def pressed(self) -> list[str]:
        """The names of the buttons down."""
        return [name for i, name in enumerate(BUTTONS) if self.buttons >> i & 1]


def decode(raw: bytes | bytearray | np.ndarray) -> RemoteState:
    """``wireless_remote``'s 40 bytes → buttons and sticks (module docstring)."""
    data = bytes(np.asarray(raw, dtype=np.uint8)) if isinstance(raw, np.ndarray) else bytes(raw)
    if len(data) != SIZE:
        raise RobotError(f"wireless_remote has {len(data)} bytes, not {SIZE}")
    (buttons,) = struct.unpack_from("<H", data, 2)
    sticks = struct.unpack_from("<5f", data, 4)
    return RemoteState(buttons, *(float(v) for v in sticks))


def encode(state: RemoteState) -> bytes:
    """The 40 bytes a robot would forward for ``state`` (``decode``'s inverse)."""
    sticks = [getattr(state, s) for s in STICKS]
    return struct.pack("<2xH5f16x", state.buttons, *sticks)


def stick_to_range(value: float, low: float, high: float, deadzone: float) -> float:
    """A stick in [-1, 1] → [low, high]: zero inside the deadzone, full deflection at the
    range's end on its side (forward → ``high``, back → ``low``)."""
    magnitude = (abs(value) - deadzone) / (1.0 - deadzone)
    s = float(np.sign(value) * np.clip(magnitude, 0.0, 1.0))
    if low <= 0.0 <= high:
        return s * high if s > 0 else -s * low
    return low + (s + 1.0) / 2.0 * (high - low)  # a range without zero: the stick spans it


def range_to_stick(value: float, low: float, high: float, deadzone: float) -> float:
    """``stick_to_range``'s inverse: the stick in [-1, 1] that gives ``value``; a value outside
    [low, high] is a one-line error naming the range."""
    if not low <= value <= high:
        raise RobotError(f"{value:g} is outside the command range [{low:g}, {high:g}]: no stick "
                         "gives it")  # fmt: skip
    if low <= 0.0 <= high:  # forward → high, back → low
        s = value / high if value > 0 else (-value / low if value < 0 else 0.0)
    else:
        s = 2.0 * (value - low) / (high - low) - 1.0
    return float(np.sign(s) * (deadzone + abs(s) * (1.0 - deadzone))) if s else 0.0


def clamp(command: np.ndarray, ranges: list[list[float]]) -> np.ndarray:
    """The command clipped into the contract's ranges (unchanged where there are none)."""
    if not ranges:
        return command
    low, high = np.asarray(ranges, dtype=np.float64).T
    return np.clip(command, low, high)


@dataclass
class StickCommand:
    """The velocity command from the sticks: (lin_vel_x, lin_vel_y, ang_vel_z) = (ly, −lx,
    −rx) mapped into the contract's ``ranges`` with ``deadzone``."""

    ranges: list[list[float]]
    deadzone: float = 0.1

    def __post_init__(self) -> None:
        if len(self.ranges) != 3:
            raise RobotError(
                f"the remote's sticks give 3 commands (forward, left, turn); the policy takes "
                f"{len(self.ranges)}: use --command with a fixed value"
            )
        if not 0.0 <= self.deadzone < 1.0:
            raise RobotError(f"stick deadzone {self.deadzone} must be in [0, 1)")

    def of(self, state: RemoteState) -> np.ndarray:
        """The command for the sticks of ``state``, inside the ranges."""
        axes = (state.ly, -state.lx, -state.rx)
        return np.array([stick_to_range(a, lo, hi, self.deadzone)
                         for a, (lo, hi) in zip(axes, self.ranges, strict=True)])  # fmt: skip

    def sticks_for(self, command: list[float] | np.ndarray) -> dict[str, float]:
        """``of``'s inverse: the sticks (``ly``, ``lx``, ``rx``) that give ``command``
        (forward, left, turn left); one line where a value is outside its range."""
        ly, left, turn = (range_to_stick(float(c), lo, hi, self.deadzone)
                          for c, (lo, hi) in zip(command, self.ranges, strict=True))  # fmt: skip
        return {"ly": ly, "lx": -left or 0.0, "rx": -turn or 0.0}  # no -0.0


@dataclass(frozen=True)
class ScriptStep:
    """From ``t`` seconds on (until the next step): these buttons held, these sticks."""

    t: float
    state: RemoteState


class RemoteScript:
    """Timed stick and button values (a JSON list of ``{"t": 1.0, "buttons": "L2+up",
    "ly": 0.5}``; a field left out is 0 or no button), read by the twin."""

    def __init__(self, steps: list[ScriptStep]):
        self.steps = sorted(steps, key=lambda s: s.t)

    @classmethod
    def load(cls, path: str | Path) -> RemoteScript:
        """Read and check a script file; a malformed one is a one-line error."""
        try:
            items = json.loads(Path(path).read_text())
            steps = [cls._step(item) for item in items]
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
            raise RobotError(
                f"remote script {path}: {exc}; write a JSON list like "
                '[{"t": 0.5, "buttons": "L2+up"}, {"t": 5, "ly": 0.5}]'
            ) from None
        return cls(steps)

    @staticmethod
    def _step(item: dict) -> ScriptStep:
        unknown = set(item) - {"t", "buttons", *STICKS}
        if unknown:
            raise ValueError(f"unknown keys {sorted(unknown)}")
        sticks = {s: float(np.clip(float(item.get(s, 0.0)), -1.0, 1.0)) for s in STICKS}
        buttons = combo_mask(item["buttons"]) if item.get("buttons") else 0
        return ScriptStep(float(item["t"]), RemoteState(buttons, **sticks))

    def at(self, t: float) -> RemoteState:
        """The remote at ``t`` seconds into the script (idle before the first step)."""
        state = RemoteState()
        for step in self.steps:
            if step.t > t:
                break
            state = step.state
        return state
