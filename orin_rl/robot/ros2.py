"""A ROS 2 interface on plain CycloneDDS: ``cmd_vel`` in; ``joint_states``, ``imu`` and
``diagnostics`` out. No rclpy at run time (it has no aarch64 wheel): ROS 2 nodes speak RTPS,
and these are ROS 2's own types and topic names on it (``ros2_msgs``).

- ``CmdVelCommand``: a ``geometry_msgs/Twist`` as the policy's command, clamped to the
  contract's ranges, and zero once ``cmd_vel`` has been silent for ``timeout_s`` (a teleop that
  dies must not leave the robot walking) or before its first message.
- ``Ros2CmdVel``: that, reading ``rt/<ns>/cmd_vel`` (best effort, keep last 10: it matches
  reliable and best-effort publishers alike); the plant calls ``at(t)`` each policy tick.
- ``Ros2Publisher``: a thread publishing ``joint_states`` and ``imu`` at ``state_hz`` (QoS
  ``sensor_data``: best effort, keep last 5) and ``diagnostics`` at ``diagnostics_hz`` (ROS's
  default QoS: reliable, keep last 10), stamped with ROS time (the system clock).
- ``TickStats``: the control loop's latency and deadline misses, live, for ``diagnostics``.
- ``Ros2Bridge``: all of it around a ``UnitreePlant`` (what ``orin-rl run --command ros2``
  wires in).

Torch-free; needs the ``robot`` extra (cyclonedds).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from orin_rl.robot import RobotError, require_cyclonedds

log = logging.getLogger(__name__)

TWIST_FIELDS = {
    "lin_vel_x": ("linear", "x"),
    "lin_vel_y": ("linear", "y"),
    "lin_vel_z": ("linear", "z"),
    "ang_vel_x": ("angular", "x"),
    "ang_vel_y": ("angular", "y"),
    "ang_vel_z": ("angular", "z"),
}
"""Which field of a Twist drives each command term of the contract."""

STATE_HZ = 50.0
"""Default rate of ``joint_states`` and ``imu`` (the G1 policy's rate)."""
DIAGNOSTICS_HZ = 1.0
"""Default rate of ``diagnostics`` (ROS's diagnostic_updater publishes at 1 Hz)."""
CMD_VEL_TIMEOUT_S = 0.5
"""Default silence after which the command is zero."""


def qos(profile: str) -> Any:
    """ROS 2's QoS ``profile``: 'default' (reliable, keep last 10) or 'sensor_data' (best
    effort, keep last 5), both volatile; 'cmd_vel' is this module's reader (best effort, keep
    last 10: a best-effort reader matches reliable and best-effort writers)."""
    from cyclonedds.core import Policy, Qos
    from cyclonedds.util import duration

    volatile = Policy.Durability.Volatile
    if profile == "default":
        reliable = Policy.Reliability.Reliable(duration(milliseconds=100))
        return Qos(reliable, Policy.History.KeepLast(10), volatile)
    if profile == "sensor_data":
        return Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(5), volatile)
    if profile == "cmd_vel":
        return Qos(Policy.Reliability.BestEffort, Policy.History.KeepLast(10), volatile)
    raise ValueError(f"unknown QoS profile {profile!r}")


def ros_domain(default: int = 0) -> int:
    """ROS 2's domain id: ``ROS_DOMAIN_ID`` where set, else ``default`` (ROS's own: 0)."""
    import os

    text = os.environ.get("ROS_DOMAIN_ID", "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise RobotError(f"ROS_DOMAIN_ID={text!r} is not a number: set it to 0-232") from None


# ---------------------------------------------------------------------- the command


class CmdVelCommand:
    """``cmd_vel`` as the policy's command (module docstring): no DDS, an explicit clock."""

    def __init__(self, terms: Sequence[str], ranges: Sequence[Sequence[float]],
                 timeout_s: float = CMD_VEL_TIMEOUT_S):  # fmt: skip
        unknown = [t for t in terms if t not in TWIST_FIELDS]
        if unknown or not terms:
            raise RobotError(
                f"cmd_vel cannot drive the policy's command terms {list(terms)}: it carries "
                f"{', '.join(TWIST_FIELDS)}; give the command with --command VX,VY,WZ instead"
            )
        if len(ranges) != len(terms):
            raise RobotError(
                f"the contract has {len(ranges)} command ranges for {len(terms)} terms: "
                "export the bundle again"
            )
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.terms = list(terms)
        self.low, self.high = np.asarray(ranges, dtype=np.float64).reshape(-1, 2).T
        self.timeout_s = timeout_s
        self.fields = [TWIST_FIELDS[t] for t in self.terms]
        self.zero = np.zeros(len(self.terms))
        self._value = self.zero
        self._received: float | None = None
        self.messages = 0
        self.rejected = 0

    def update(self, twist: Any, now: float) -> None:
        """A Twist received at ``now``: its terms clamped to the ranges (a non-finite one is
        dropped: it keeps neither its value nor the command alive)."""
        value = np.array([getattr(getattr(twist, part), axis) for part, axis in self.fields],
                         dtype=np.float64)  # fmt: skip
        if not np.all(np.isfinite(value)):
            if not self.rejected:
                log.warning("cmd_vel: a non-finite Twist was dropped (%s)", value)
            self.rejected += 1
            return
        self._value = np.clip(value, self.low, self.high)
        self._received = now
        self.messages += 1

    def age(self, now: float) -> float | None:
        """Seconds since the last accepted Twist, or None before the first."""
        return None if self._received is None else now - self._received

    def latest(self, now: float) -> np.ndarray:
        """The command at ``now``: the last Twist clamped, or zero when silent (term order)."""
        age = self.age(now)
        if age is None or age > self.timeout_s:
            return self.zero
        return self._value


class Ros2CmdVel(CmdVelCommand):
    """``CmdVelCommand`` reading ROS 2's ``cmd_vel`` over DDS (module docstring)."""

    def __init__(self, participant: Any, terms: Sequence[str], ranges: Sequence[Sequence[float]],
                 timeout_s: float = CMD_VEL_TIMEOUT_S, namespace: str = "",
                 topic: str = "cmd_vel", clock: Callable[[], float] = time.monotonic):  # fmt: skip
        super().__init__(terms, ranges, timeout_s)
        from cyclonedds.sub import DataReader
        from cyclonedds.topic import Topic

        from orin_rl.robot import ros2_msgs as msgs

        self.topic_name = msgs.topic(topic, namespace)
        self._twist = msgs.Twist
        self._topic = Topic(participant, self.topic_name, msgs.Twist)
        self.reader = DataReader(participant, self._topic, qos=qos("cmd_vel"))
        self.clock = clock

    @classmethod
    def from_contract(cls, participant: Any, contract: Any, **kwargs: Any) -> Ros2CmdVel:
        """For a deploy contract's command terms and ranges."""
        return cls(participant, contract.commands.get("terms", []), contract.command_ranges(),
                   **kwargs)  # fmt: skip

    def poll(self, now: float) -> int:
        """Take the Twists that arrived (stamped ``now``); how many there were."""
        samples = [s for s in self.reader.take(N=10) if isinstance(s, self._twist)]
        for twist in samples:
            self.update(twist, now)
        return len(samples)

    def latest(self, now: float | None = None) -> np.ndarray:
        """Poll ``cmd_vel``, then the command at ``now`` (default: this source's clock)."""
        now = self.clock() if now is None else now
        self.poll(now)
        return super().latest(now)

    def at(self, t: float) -> np.ndarray:
        """The plant's command-source call (``t`` since the start is unused: the timeout runs
        on this source's own clock)."""
        return self.latest()


# ---------------------------------------------------------------------- the loop's statistics


class TickStats:
    """The control loop's sensor → actuate latency over its last ``window`` ticks and its
    deadline misses, readable live from another thread (``runtime.loop`` reports them only at
    the end)."""

    def __init__(self, period_s: float, window: int = 1000,
                 clock: Callable[[], int] = time.monotonic_ns):  # fmt: skip
        self.period_ns = int(period_s * 1e9)
        self.latency_ns = np.zeros(window, dtype=np.int64)
        self.ticks = 0
        self.deadline_misses = 0
        self.clock = clock
        self._start = 0

    def wrap(self, sensor: Callable[[], Any], actuate: Callable[[Any], None]
             ) -> tuple[Callable[[], Any], Callable[[Any], None]]:  # fmt: skip
        """``sensor`` and ``actuate`` that time each tick between them."""

        def timed_sensor() -> Any:
            self._start = self.clock()
            return sensor()

        def timed_actuate(action: Any) -> None:
            actuate(action)
            self.record(self.clock() - self._start)

        return timed_sensor, timed_actuate

    def record(self, latency_ns: int) -> None:
        """One tick's latency."""
        self.latency_ns[self.ticks % len(self.latency_ns)] = latency_ns
        self.ticks += 1
        if latency_ns > self.period_ns:
            self.deadline_misses += 1

    def summary(self) -> dict[str, float]:
        """Ticks, deadline misses and the window's latency percentiles (µs)."""
        n = min(self.ticks, len(self.latency_ns))
        out = {"ticks": self.ticks, "deadline_misses": self.deadline_misses}
        if n:
            us = self.latency_ns[:n] / 1e3
            p50, p90, p99 = np.percentile(us, [50, 90, 99])
            out.update(latency_p50_us=p50, latency_p90_us=p90, latency_p99_us=p99,
                       latency_max_us=float(us.max()))  # fmt: skip
        return out


# ---------------------------------------------------------------------- publishing


@dataclass
class RobotSnapshot:
    """What ``joint_states`` and ``imu`` carry, in the contract's joint order."""

    q: np.ndarray
    dq: np.ndarray
    quaternion_wxyz: np.ndarray
    gyroscope: np.ndarray
    effort: np.ndarray | None = None
    accelerometer: np.ndarray | None = None


@dataclass
class RunStatus:
    """What ``diagnostics`` carries: a level (``ros2_msgs.OK`` …), one line, key-values."""

    level: int
    message: str
    values: dict[str, Any]


class Ros2Publisher:
    """``joint_states`` + ``imu`` at ``state_hz`` and ``diagnostics`` at ``diagnostics_hz``
    from callables, on its own thread (module docstring)."""

    def __init__(self, participant: Any, joint_names: Sequence[str],
                 snapshot: Callable[[], RobotSnapshot | None], status: Callable[[], RunStatus],
                 namespace: str = "", state_hz: float = STATE_HZ,
                 diagnostics_hz: float = DIAGNOSTICS_HZ, name: str = "orin_rl",
                 hardware_id: str = "", imu_frame: str = "imu_in_pelvis",
                 clock_ns: Callable[[], int] = time.time_ns):  # fmt: skip
        from cyclonedds.pub import DataWriter
        from cyclonedds.topic import Topic

        from orin_rl.robot import ros2_msgs as msgs

        self.msgs = msgs
        self.joint_names = list(joint_names)
        self.snapshot, self.status = snapshot, status
        self.state_hz, self.diagnostics_hz = state_hz, diagnostics_hz
        self.name, self.hardware_id, self.imu_frame = name, hardware_id, imu_frame
        self.clock_ns = clock_ns
        self.topics = {
            "joint_states": (msgs.JointState, "sensor_data"),
            "imu": (msgs.Imu, "sensor_data"),
            "diagnostics": (msgs.DiagnosticArray, "default"),
        }
        self.writers = {}
        for key, (cls, profile) in self.topics.items():
            ns = "" if key == "diagnostics" else namespace  # /diagnostics is global in ROS
            topic = Topic(participant, msgs.topic(key, ns), cls)
            self.writers[key] = DataWriter(participant, topic, qos=qos(profile))
        self.counts = {key: 0 for key in self.topics}
        self._running = False
        self._thread: threading.Thread | None = None

    def publish_state(self, snap: RobotSnapshot, time_ns: int) -> None:
        """One ``joint_states`` and one ``imu`` message stamped ``time_ns`` (ROS time)."""
        m = self.msgs
        header = m.Header(stamp=m.stamp(time_ns))
        effort = [] if snap.effort is None else [float(x) for x in snap.effort]
        self.writers["joint_states"].write(m.JointState(
            header=header, name=self.joint_names, position=[float(x) for x in snap.q],
            velocity=[float(x) for x in snap.dq], effort=effort))  # fmt: skip
        w, x, y, z = (float(v) for v in snap.quaternion_wxyz)
        acc = m.Vector3(0.0, 0.0, 0.0)
        acc_cov = [-1.0] + [0.0] * 8  # −1: not reported (sensor_msgs/Imu's convention)
        if snap.accelerometer is not None:
            acc, acc_cov = m.Vector3(*(float(v) for v in snap.accelerometer)), [0.0] * 9
        self.writers["imu"].write(m.Imu(
            header=m.Header(stamp=header.stamp, frame_id=self.imu_frame),
            orientation=m.Quaternion(x, y, z, w),
            angular_velocity=m.Vector3(*(float(v) for v in snap.gyroscope)),
            linear_acceleration=acc, linear_acceleration_covariance=acc_cov))  # fmt: skip
        self.counts["joint_states"] += 1
        self.counts["imu"] += 1

    def publish_diagnostics(self, status: RunStatus, time_ns: int) -> None:
        """One ``diagnostics`` message stamped ``time_ns``."""
        m = self.msgs
        values = [m.KeyValue(str(k), _text(v)) for k, v in status.values.items()]
        self.writers["diagnostics"].write(m.DiagnosticArray(
            header=m.Header(stamp=m.stamp(time_ns)),
            status=[m.DiagnosticStatus(level=status.level, name=self.name,
                                       message=status.message, hardware_id=self.hardware_id,
                                       values=values)]))  # fmt: skip
        self.counts["diagnostics"] += 1

    def _loop(self) -> None:
        period = 1.0 / self.state_hz
        every = max(1, round(self.state_hz / self.diagnostics_hz))
        next_time, n = time.monotonic(), 0
        while self._running:
            try:
                snap = self.snapshot()
                if snap is not None:
                    self.publish_state(snap, self.clock_ns())
                if n % every == 0:
                    self.publish_diagnostics(self.status(), self.clock_ns())
            except Exception:  # ROS 2 is for watching: never take the run down with it
                log.exception("ROS 2 publishing failed; it stops, the run goes on")
                return
            n += 1
            next_time += period
            delay = next_time - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_time = time.monotonic()

    def start(self) -> None:
        """Publish on a daemon thread until ``close``."""
        self._running = True
        self._thread = threading.Thread(target=self._loop, name="ros2-publish", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop the thread (the last diagnostics says how the run ended)."""
        if self._running:
            self._running = False
            if self._thread is not None:
                self._thread.join(timeout=2.0)
            try:
                self.publish_diagnostics(self.status(), self.clock_ns())
            except Exception:
                log.exception("the last ROS 2 diagnostics could not be published")


def _text(value: Any) -> str:
    if isinstance(value, float | np.floating):
        return f"{float(value):.6g}"
    if isinstance(value, np.ndarray | list | tuple):
        return ",".join(_text(v) for v in value)
    return str(value)


# ---------------------------------------------------------------------- around a plant


class Ros2Bridge:
    """ROS 2 around a ``UnitreePlant``: ``cmd_vel`` as its command (optional) and the
    publisher fed from its state, safety machine and the loop's ``TickStats``."""

    def __init__(self, contract: Any, domain: int | None = None, interface: str | None = None,
                 namespace: str = "", cmd_vel: bool = True,
                 timeout_s: float = CMD_VEL_TIMEOUT_S, state_hz: float = STATE_HZ,
                 diagnostics_hz: float = DIAGNOSTICS_HZ):  # fmt: skip
        require_cyclonedds()
        from orin_rl.robot.wire import FAST_DDS_VENDOR, participant

        self.contract = contract
        self.domain = ros_domain() if domain is None else domain
        self.namespace = namespace
        self.participant = participant(self.domain, interface, FAST_DDS_VENDOR)
        self.command = (
            Ros2CmdVel.from_contract(
                self.participant, contract, timeout_s=timeout_s, namespace=namespace
            )
            if cmd_vel
            else None
        )
        self.stats = TickStats(contract.step_dt)
        self.state_hz, self.diagnostics_hz = state_hz, diagnostics_hz
        self.plant: Any = None
        self.publisher: Ros2Publisher | None = None
        self.description = {"ros2_domain": self.domain, "ros2_namespace": namespace or "/",
                            "ros2_cmd_vel": cmd_vel, "ros2_state_hz": state_hz,
                            "ros2_diagnostics_hz": diagnostics_hz}  # fmt: skip

    def attach(self, plant: Any) -> None:
        """Publish ``plant``'s state (a ``UnitreePlant``) from ``start`` on."""
        self.plant = plant
        self.publisher = Ros2Publisher(
            self.participant, self.contract.joint_names, self.snapshot, self.status,
            namespace=self.namespace, state_hz=self.state_hz,
            diagnostics_hz=self.diagnostics_hz, name=f"orin_rl: {plant.spec.name} policy",
            hardware_id=plant.spec.name)  # fmt: skip

    def wrap(self, sensor: Callable[[], Any], actuate: Callable[[Any], None]
             ) -> tuple[Callable[[], Any], Callable[[Any], None]]:  # fmt: skip
        """The loop's callbacks, timed for ``diagnostics``."""
        return self.stats.wrap(sensor, actuate)

    def snapshot(self) -> RobotSnapshot | None:
        """The plant's newest state in the contract's joint order (None before the first)."""
        plant = self.plant
        with plant._lock:
            state = plant._state
        if state is None:
            return None
        index = plant.motor_index
        return RobotSnapshot(
            q=state["motor_state[].q"][index], dq=state["motor_state[].dq"][index],
            quaternion_wxyz=state["imu_state.quaternion"],
            gyroscope=state["imu_state.gyroscope"])  # fmt: skip

    def status(self) -> RunStatus:
        """The safety machine's mode, the loop's statistics and the command's state."""
        from orin_rl.robot import ros2_msgs as msgs
        from orin_rl.robot.safety import Mode

        machine = self.plant.machine
        mode = machine.mode
        values: dict[str, Any] = {"mode": mode.value, **self.stats.summary()}
        message = f"safety: {mode.value}"
        level = msgs.OK
        if mode is Mode.STOPPED:
            cause = next((t["cause"] for t in reversed(machine.transitions)
                          if t["to"] == Mode.STOPPED.value), "")  # fmt: skip
            level = msgs.OK if cause == "run ended" else msgs.ERROR
            message += f" ({cause})" if cause else ""
            values["stop_cause"] = cause
        if self.command is not None:
            now = self.command.clock()
            age = self.command.age(now)
            # the pure read: the control loop's thread alone polls the reader
            values["cmd_vel"] = CmdVelCommand.latest(self.command, now)
            values["cmd_vel_age_s"] = "never" if age is None else age
            if age is None or age > self.command.timeout_s:
                message += "; cmd_vel silent: command zero"
                level = max(level, msgs.WARN) if mode is Mode.POLICY else level
        return RunStatus(level, message, values)

    def start(self) -> None:
        """Start publishing (after ``attach``)."""
        if self.publisher is None:
            raise RobotError("Ros2Bridge.start before attach(plant): attach the plant first")
        self.publisher.start()

    def close(self) -> None:
        """Stop publishing and leave the domain."""
        if self.publisher is not None:
            self.publisher.close()
        self.participant = None

    def __enter__(self) -> Ros2Bridge:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
