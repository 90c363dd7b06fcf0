"""The safety state machine around a policy on a robot.

    PASSIVE ──start──► STAND ──(stand_s, pose reached)──► POLICY
       ▲                 │                                  │
       └─────────────── STOPPED ◄── any stop condition ─────┘   (latched: damping until restart)

PASSIVE and STOPPED command damping only (kp 0, kd ``damping_kd``: the motors brake, nothing
drives them). STAND interpolates the joint targets linearly from the pose at ``start`` to the
contract's default pose over ``stand_s`` seconds with the contract's gains. POLICY commands
``offset + scale · action`` with the contract's gains. Every target is clamped so that
|target − q| ≤ τmax / kp (the PD torque never asks for more than the joint's effort limit).

A stop latches: tilt over ``tilt_limit`` (rad, from the IMU), a joint outside its limits by more
than ``joint_margin``, the robot's state silent for ``silence_s``, a non-finite action, a policy
tick later than ``late_factor`` periods. Each transition is recorded with its tick, time and
cause (``transitions``), for the run report.

Pure numpy and threading; the plant calls it from its command thread and its policy tick.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from orin_rl.robot import RobotError
from orin_rl.robot.contract import DeployContract
from orin_rl.robot.observations import tilt


class Mode(str, enum.Enum):
    PASSIVE = "passive"
    STAND = "stand"
    POLICY = "policy"
    STOPPED = "stopped"


@dataclass
class SafetyConfig:
    """Limits and timings of the state machine (module docstring)."""

    stand_s: float = 2.0
    """Interpolation from the start pose to the default pose (Unitree: 2 s)."""
    stand_tolerance: float = 0.2
    """Largest |q − default| (rad) at which the stand counts as reached."""
    stand_gain_scale: float = 2.0
    """The stand-up's kp and kd: the contract's times this (Unitree's FixStand uses ~2.5× the
    G1 policy's stiffness: a pose held against gravity before the policy balances it)."""
    damping_kd: float = 3.0
    """kd of every motor in PASSIVE and STOPPED (Unitree's passive state: 3)."""
    tilt_limit: float = 1.0
    """Stop above this tilt (rad) of the base (Unitree's deploy: 1.0)."""
    joint_margin: float = 0.1
    """Stop when a joint is this far (rad) beyond its limits."""
    silence_s: float = 0.1
    """Stop when no robot state came for this long (the watchdog)."""
    late_factor: float = 1.5
    """Stop when a policy tick comes later than this many periods after the previous one."""

    def check(self) -> None:
        """Refuse a limit that would switch its check off (or could never be met)."""
        for name, low, high, why in LIMITS:
            value = getattr(self, name)
            if not low < value <= high:
                raise RobotError(
                    f"{name.replace('_', '-')} {value:g} is outside ({low:g}, {high:g}]: {why}"
                )


LIMITS = (
    ("tilt_limit", 0.0, 1.2, "past 1.2 rad a G1 is already falling (Unitree's deploy: 1.0)"),
    ("joint_margin", -1e-9, 0.5, "beyond 0.5 rad past its limit a joint is broken or misread"),
    ("silence_s", 0.0, 0.5, "a robot silent for 0.5 s is not being controlled"),
    ("late_factor", 1.0, 5.0, "a policy 5 periods late no longer balances the robot"),
    ("stand_s", 0.0, 30.0, "the stand-up interpolates over at most 30 s"),
    ("stand_tolerance", 0.0, 0.5, "a pose 0.5 rad from the default is not standing"),
)
"""(field, exclusive low, inclusive high, why): the range in which each check still works."""


@dataclass
class Command:
    """What the motors get now (policy joint order)."""

    q: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    mode: Mode


class SafetyMachine:
    """PASSIVE → STAND → POLICY with latched stops (module docstring); thread-safe."""

    def __init__(self, contract: DeployContract, config: SafetyConfig | None = None,
                 clock=time.monotonic):  # fmt: skip
        self.contract = contract
        self.cfg = config or SafetyConfig()
        self.cfg.check()
        self.clock = clock
        n = contract.num_joints
        self.default = np.asarray(contract.default_joint_pos, dtype=np.float64)
        self.kp = np.asarray(contract.stiffness, dtype=np.float64)
        self.kd = np.asarray(contract.damping, dtype=np.float64)
        self.scale = np.asarray(contract.action_scale, dtype=np.float64)
        self.offset = np.asarray(contract.action_offset, dtype=np.float64)
        clip = contract.action_clip
        self.clip = None if not clip else np.asarray(clip, dtype=np.float64)
        effort = np.asarray(contract.effort_limit or [np.inf] * n, dtype=np.float64)
        self.max_error = np.where(self.kp > 0, effort / np.maximum(self.kp, 1e-9), np.inf)
        limits = contract.joint_pos_limits or [[-np.inf, np.inf]] * n
        self.limits = np.asarray(limits, dtype=np.float64)
        self.mode = Mode.PASSIVE
        self.transitions: list[dict[str, Any]] = []
        self.tick = 0
        self._lock = threading.Lock()
        self._t0 = clock()
        self._stand_from: np.ndarray | None = None
        self._stand_start = 0.0
        self._targets = self.default.copy()
        self._last_tick_time: float | None = None

    # ------------------------------------------------------------------ transitions
    def _go(self, mode: Mode, cause: str, safety: bool = False) -> None:
        self.transitions.append({
            "tick": self.tick,
            "time_s": round(self.clock() - self._t0, 6),
            "from": self.mode.value,
            "to": mode.value,
            "cause": cause,
            "safety": safety,
        })  # fmt: skip
        self.mode = mode

    def start(self, q: np.ndarray, cause: str = "start") -> None:
        """PASSIVE → STAND from pose ``q`` (the operator's start, ``cause`` in the record)."""
        with self._lock:
            if self.mode is not Mode.PASSIVE:
                return
            self._stand_from = np.asarray(q, dtype=np.float64).copy()
            self._stand_start = self.clock()
            self._go(Mode.STAND, cause)

    def stop(self, cause: str, safety: bool = True) -> None:
        """Latch to damping (STOPPED), whatever the mode; the first cause is kept.
        ``safety`` False: the operator's stop (the remote, the run's end, a signal)."""
        with self._lock:
            if self.mode is not Mode.STOPPED:
                self._go(Mode.STOPPED, cause, safety)

    @property
    def safety_stop(self) -> str | None:
        """The cause of a safety stop, or None (running, or stopped by the operator)."""
        last = self.transitions[-1] if self.transitions else None
        return last["cause"] if last and last["to"] == "stopped" and last["safety"] else None

    @property
    def stopped(self) -> bool:
        return self.mode is Mode.STOPPED

    def stand_done(self, q: np.ndarray, cause: str = "stand reached") -> bool:
        """STAND → POLICY once the interpolation is over and the pose is reached (``cause``:
        what asked for the policy, recorded with the transition)."""
        with self._lock:
            if self.mode is not Mode.STAND:
                return self.mode is Mode.POLICY
            over = self.clock() - self._stand_start >= self.cfg.stand_s
            error = float(np.max(np.abs(np.asarray(q) - self.default)))
            if over and error <= self.cfg.stand_tolerance:
                self._targets = self.default.copy()
                self._go(Mode.POLICY, f"{cause} (max |q - default| {error:.3f} rad)")
                return True
            return False

    # ------------------------------------------------------------------ checks
    def check_state(self, quaternion: np.ndarray, q: np.ndarray) -> None:
        """Tilt and joint limits, every time a robot state is read."""
        if self.stopped:
            return
        angle = tilt(quaternion)
        if angle > self.cfg.tilt_limit:
            self.stop(f"tilt {angle:.2f} rad > {self.cfg.tilt_limit:g}")
            return
        if self.mode is Mode.PASSIVE:
            return  # a limp robot's joints may rest anywhere; they are checked once driven
        below = q < self.limits[:, 0] - self.cfg.joint_margin
        above = q > self.limits[:, 1] + self.cfg.joint_margin
        if below.any() or above.any():
            j = int(np.flatnonzero(below | above)[0])
            name = self.contract.joint_names[j]
            self.stop(f"joint {name} at {q[j]:.3f} rad, outside [{self.limits[j, 0]:.3f}, "
                      f"{self.limits[j, 1]:.3f}]")  # fmt: skip

    def check_silence(self, since_state_s: float) -> None:
        """The watchdog: the robot's state has not come for ``since_state_s``."""
        if (
            not self.stopped
            and self.mode is not Mode.PASSIVE
            and since_state_s > self.cfg.silence_s
        ):
            self.stop(f"robot state silent for {since_state_s * 1e3:.0f} ms")

    def check_policy(self) -> None:
        """The command thread's watch on the policy: no tick for ``late_factor`` periods."""
        last = self._last_tick_time
        if self.mode is Mode.POLICY and last is not None:
            gap = self.clock() - last
            if gap > self.cfg.late_factor * self.contract.step_dt:
                self.stop(f"no policy tick for {gap * 1e3:.1f} ms "
                          f"(period {self.contract.step_dt * 1e3:.0f} ms)")  # fmt: skip

    def policy_tick(self, action: np.ndarray) -> None:
        """A policy tick's action (raw output): the new targets, or a stop (non-finite,
        late)."""
        now = self.clock()
        period = self.contract.step_dt
        late = self._last_tick_time is not None and now - self._last_tick_time > (
            self.cfg.late_factor * period
        )
        gap = 0.0 if self._last_tick_time is None else now - self._last_tick_time
        self._last_tick_time = now
        self.tick += 1
        if self.mode is not Mode.POLICY:
            return
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        if not np.all(np.isfinite(action)):
            self.stop("non-finite action")
            return
        if late:
            self.stop(f"policy tick {gap * 1e3:.1f} ms after the previous one "
                      f"(period {period * 1e3:.0f} ms)")  # fmt: skip
            return
        if self.clip is not None:
            action = np.clip(action, self.clip[:, 0], self.clip[:, 1])
        with self._lock:
            self._targets = self.offset + self.scale * action

    # ------------------------------------------------------------------ the motors' command
    def command(self, q: np.ndarray) -> Command:
        """What to send now, given the measured joint positions ``q`` (policy order)."""
        n = self.contract.num_joints
        with self._lock:
            mode = self.mode
            if mode in (Mode.PASSIVE, Mode.STOPPED):
                return Command(np.asarray(q, dtype=np.float64).copy(), np.zeros(n),
                               np.full(n, self.cfg.damping_kd), mode)  # fmt: skip
            if mode is Mode.STAND:
                alpha = min(1.0, (self.clock() - self._stand_start) / max(self.cfg.stand_s, 1e-9))
                target = (1 - alpha) * self._stand_from + alpha * self.default
                scale = self.cfg.stand_gain_scale
            else:
                target = self._targets
                scale = 1.0
        # |target − q| ≤ τmax / kp: the PD never asks for more than the effort limit
        reach = self.max_error / scale
        target = np.clip(target, q - reach, q + reach)
        return Command(target, self.kp * scale, self.kd * scale, mode)

    def report(self) -> dict[str, Any]:
        """The run report's part: the mode now and every transition."""
        return {"safety_mode": self.mode.value, "safety_stop": self.safety_stop,
                "transitions": list(self.transitions)}  # fmt: skip
