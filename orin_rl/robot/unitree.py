"""A Unitree robot on its own wire (SDK2 over DDS) as the control loop's plant.

``orin-rl run --model BUNDLE --plant unitree-g1``: the plant subscribes ``rt/lowstate`` and
``rt/sportmodestate``, and a command thread publishes ``rt/lowcmd`` at 500 Hz on accumulated
deadlines, each command carrying Unitree's CRC, the contract's gains and the safety machine's
targets (``safety``). The control loop (``runtime.loop``) runs the policy at the contract's
period: ``sensor`` builds the policy's input from the newest state (``observations``),
``actuate`` hands the action to the safety machine. The robot's built-in motion service must
be released first (Unitree's app or ``MotionSwitcherClient.ReleaseMode()``); against
``orin-rl sim-robot`` there is none.

What the run measures is never a policy input it was not trained on: ``rt/sportmodestate``
(the base's world-frame velocity, which the twin and Unitree's MuJoCo bridge publish and a G1
in low-level mode does not) feeds ``base_lin_vel`` only to a policy whose contract reads it;
for every policy it gives the report's and the status line's forward and lateral velocity
(heading frame) and their tracking error, where it is published. The yaw rate comes from the
IMU on every robot: the gyro is body-frame, so it is rotated by the IMU's quaternion to the
world's z (``observations.yaw_rate``).

The robot's remote arrives in every state (``wireless_remote``, ``remote``): its stop
combination latches damping in any mode; with ``remote=True`` its combinations also stand the
robot up and start the policy, and its sticks give the command. Every command is clamped to
the contract's ranges. ``start`` refuses a domain with a second publisher of ``rt/lowstate``.

Torch-free; needs the ``robot`` extra (cyclonedds).
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from orin_rl.robot import RobotError, require_cyclonedds
from orin_rl.robot.contract import DeployContract
from orin_rl.robot.crc import hg_lowcmd_crc_of
from orin_rl.robot.observations import (
    ObservationBuilder,
    heading_velocity,
    state_from_motors,
    tilt,
    world_to_body,
    yaw_rate,
)
from orin_rl.robot.remote import COMBOS, RemoteState, StickCommand, clamp, decode
from orin_rl.robot.robots import ROBOTS, RobotSpec
from orin_rl.robot.safety import Mode, SafetyConfig, SafetyMachine

log = logging.getLogger(__name__)


class NoRobotError(RobotError):
    """No state came on ``rt/lowstate`` within the wait: nothing answered on the wire."""


STATE_FIELDS = (
    "mode_machine",
    "tick",
    "imu_state.quaternion",
    "imu_state.gyroscope",
    "motor_state[].q",
    "motor_state[].dq",
    "wireless_remote",
)


class HgCodec:
    """``unitree_hg`` LowCmd_ out (with its CRC), LowState_ and SportModeState_ in, as arrays."""

    def __init__(self) -> None:
        from orin_rl.robot import unitree_msgs as msgs
        from orin_rl.robot.wire import Layout

        self.msgs = msgs
        self.cmd_layout = Layout(msgs.HgLowCmd)
        self.state_layout = Layout(msgs.HgLowState)
        self.sport_layout = Layout(msgs.GoSportModeState)

    def lowcmd(self, q, kp, kd, mode, mode_machine: int, dq=0.0, tau=0.0) -> bytearray:
        """One LowCmd_'s CDR bytes for per-slot arrays (35,), ``crc`` filled in."""
        motors = {"mode": mode, "q": q, "dq": dq, "tau": tau, "kp": kp, "kd": kd}
        crc = hg_lowcmd_crc_of(0, mode_machine, motors)
        fields = {f"motor_cmd[].{k}": v for k, v in motors.items()}
        return self.cmd_layout.encode({"mode_machine": mode_machine, **fields, "crc": crc})

    def lowstate(self, data: bytes) -> dict[str, np.ndarray]:
        return self.state_layout.decode(data, STATE_FIELDS)

    def sport_velocity(self, data: bytes) -> np.ndarray:
        return self.sport_layout.decode(data, ("velocity",))["velocity"]


@dataclass
class CommandSource:
    """The operator's command: fixed, or resampled in the contract's ranges every
    ``every_s`` seconds from ``seed`` (as the task's command term samples them)."""

    value: np.ndarray | None = None
    ranges: list[list[float]] | None = None
    every_s: float = 5.0
    seed: int = 0

    def __post_init__(self) -> None:
        # a fixed command never imports numpy.random (the deploy image's memory)
        self._rng = None if self.value is not None else np.random.default_rng(self.seed)
        self._until = -1.0
        self._current = None if self.value is None else np.asarray(self.value, dtype=np.float64)

    def at(self, t: float) -> np.ndarray:
        if self.value is not None:
            return self._current
        if t >= self._until:
            low, high = np.asarray(self.ranges, dtype=np.float64).T
            self._current = self._rng.uniform(low, high)
            self._until = t + self.every_s
        return self._current


class UnitreePlant:
    """The robot (or its twin) on DDS, wrapped in the safety machine (module docstring)."""

    def __init__(
        self,
        contract: DeployContract,
        robot: str = "unitree-g1",
        domain: int = 0,
        interface: str | None = None,
        command: CommandSource | None = None,
        safety: SafetyConfig | None = None,
        rate_hz: float = 500.0,
        remote: bool = False,
    ):
        """``remote``: the remote's sticks give the command and its buttons stand the robot
        up and start the policy (``remote.COMBOS``); without it the plant stands up and starts
        at once. The remote's stop combination stops the robot either way."""
        require_cyclonedds()
        self.signalled: str | None = None
        """Set by a signal handler ('interrupted', 'terminated'): the waits and the control
        loop end at their next poll (``robot_run.signals_stop``)."""
        self.closing = False
        """The run is latching damping: signals wait (``robot_run.signals_stop``)."""
        self.spec: RobotSpec = _robot_spec(robot, contract)
        self.contract = contract
        self.motor_index = np.asarray(contract.motor_index, dtype=np.intp)
        self.builder = ObservationBuilder(contract)
        self.machine = SafetyMachine(contract, safety)
        self.needs_velocity = any(t.source == "base_lin_vel" for t in contract.observations)
        if command is None:
            n = len(contract.commands.get("terms", [])) or next(
                (t.dim for t in contract.observations if t.source == "command"), 0
            )
            command = CommandSource(value=np.zeros(n))
        self.command = command
        self.ranges = contract.command_ranges()
        self.sticks = StickCommand(self.ranges) if remote else None
        self.pad = RemoteState()
        self._asked: dict[str, bool] = {"stand": False, "policy": False}
        self.phase = ""
        self.rate_hz = rate_hz
        self.codec = HgCodec()
        from orin_rl.robot import unitree_msgs as msgs
        from orin_rl.robot.wire import Endpoint, participant

        self.participant = participant(domain, interface)
        self.state_in = Endpoint(self.participant, msgs.LOWSTATE, msgs.HgLowState, "reader")
        self.cmd_out = Endpoint(self.participant, msgs.LOWCMD, msgs.HgLowCmd, "writer")
        # read whenever published: the policy's base_lin_vel where it has one, the report's
        # measured velocity always
        self.sport_in = Endpoint(self.participant, msgs.SPORTSTATE, msgs.GoSportModeState,
                                 "reader")  # fmt: skip
        self._lock = threading.Lock()
        self._state: dict[str, np.ndarray] | None = None
        self._velocity_w: np.ndarray | None = None
        self._velocity_time = -float("inf")  # when rt/sportmodestate last arrived
        self._state_time = 0.0
        self._running = False
        self._thread: threading.Thread | None = None
        self._frozen = False  # start froze the heap out of collections; close thaws it
        self._t0 = time.monotonic()
        self.counts = {"states": 0, "commands": 0, "ticks": 0}
        self._command_range: tuple[np.ndarray, np.ndarray] | None = None
        self.tracking = Tracking(contract.commands.get("terms", []))
        self.description = {"plant": self.spec.name, "dds_domain": domain,
                            "dds_interface": interface or "default"}  # fmt: skip

    # ------------------------------------------------------------------ the command thread
    def _receive(self, now: float) -> None:
        data = self.state_in.take_latest()
        if data is not None:
            state = self.codec.lowstate(data)
            with self._lock:
                self._state, self._state_time = state, now
            self.counts["states"] += 1
            self._buttons(decode(state["wireless_remote"]))
        if self.sport_in is not None:
            sport = self.sport_in.take_latest()
            if sport is not None:
                velocity = self.codec.sport_velocity(sport).astype(np.float64)
                with self._lock:
                    self._velocity_w, self._velocity_time = velocity, now

    def _buttons(self, pad: RemoteState) -> None:
        """The remote's combinations: stop at any time; stand and policy where it drives."""
        self.pad = pad
        if pad.held(COMBOS["stop"]):
            self.machine.stop(f"remote stop ({COMBOS['stop']})", safety=False)
        elif self.sticks is not None:  # each combination counts in its own mode only
            step = {Mode.PASSIVE: "stand", Mode.STAND: "policy"}.get(self.machine.mode)
            if step is not None:
                self._asked[step] |= pad.held(COMBOS[step])

    def _send(self) -> None:
        with self._lock:
            state = self._state
        if state is None:
            return
        q_policy = state["motor_state[].q"].astype(np.float64)[self.motor_index]
        self.machine.check_state(state["imu_state.quaternion"], q_policy)
        cmd = self.machine.command(q_policy)
        slots = self.spec.slots
        q = np.zeros(slots, np.float32)
        kp, kd, mode = np.zeros(slots, np.float32), np.zeros(slots, np.float32), np.zeros(slots)
        q[self.motor_index], kp[self.motor_index], kd[self.motor_index] = cmd.q, cmd.kp, cmd.kd
        mode[self.motor_index] = 1  # enabled; PASSIVE and STOPPED: kp 0, damping only
        self.cmd_out.write(self.codec.lowcmd(q, kp, kd, mode, int(state["mode_machine"])))
        self.counts["commands"] += 1

    def _command_loop(self) -> None:
        period = 1.0 / self.rate_hz
        next_time = time.monotonic()
        while self._running:
            now = time.monotonic()
            try:
                self._receive(now)
                if self._state is not None:
                    self.machine.check_silence(now - self._state_time)
                self.machine.check_policy()
                self._send()
            except Exception as exc:  # the wire broke: stop the robot, say why (once)
                if not self.machine.stopped:
                    log.exception("the command thread failed")
                self.machine.stop(f"command thread: {type(exc).__name__}: {exc}")
            next_time += period  # accumulated deadlines: no drift from the work's time
            delay = next_time - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_time = time.monotonic()  # far behind: re-anchor rather than burst

    # ------------------------------------------------------------------ start and stop
    def start(self, wait_s: float = 60.0) -> None:
        """Wait for the robot's state, check it, then PASSIVE → STAND → POLICY (on the
        remote's combinations where it drives). Returns in POLICY, or STOPPED where a stop
        came first (the report says why). Raises ``NoRobotError`` when no robot answers
        within ``wait_s``, and ``RobotError`` where it refuses what answered (a second
        publisher, a term a real robot does not report); either way the plant is closed,
        its last transition naming why."""
        # The control loop collects garbage before its first tick: a full collection of a
        # large heap holds the GIL long enough (0.5 s seen with mjlab loaded) to starve the
        # command thread. Collect now, before any motor is driven, and freeze what survives
        # out of later collections (``close`` gives them back to the collector).
        gc.collect()
        gc.freeze()
        self._frozen = True
        self._running = True
        self._thread = threading.Thread(target=self._command_loop, name="lowcmd", daemon=True)
        self._thread.start()
        self._wait_for_robot(wait_s)
        if self.signalled is not None:
            return
        with self._lock:
            quat = self._state["imu_state.quaternion"]
        self.machine.check_state(quat, self._q())  # the start-up orientation check
        if self.machine.stopped:
            return
        cause = "start"
        if self.sticks is not None:
            self.phase = f"passive: {COMBOS['stand']} on the remote stands the robot up"
            if not self._wait_for("stand"):
                return
            cause = f"remote {COMBOS['stand']}"
        self.machine.start(self._q(), cause)
        self._stand_up()
        self.builder.reset()
        self._t0 = time.monotonic()

    def _wait_for_robot(self, wait_s: float) -> None:
        """The first state (and the base's velocity where the policy reads it); one
        publisher of ``rt/lowstate`` only."""
        deadline = time.monotonic() + wait_s
        where = (f"DDS domain {self.description['dds_domain']}, interface "
                 f"{self.description['dds_interface']}")  # fmt: skip
        self.phase = f"waiting up to {wait_s:g} s for the robot's state ({where})"
        self._wait_until(lambda: self._state is not None, deadline, wait_s, where)
        if self.signalled is not None:
            return
        check_reported(self)  # a real robot: refused a term it does not report, at once
        self._wait_until(
            lambda: not self.needs_velocity or self._velocity_w is not None, deadline, wait_s, where
        )
        time.sleep(0.2)  # discovery of any other publisher on the domain
        writers = self.state_in.matched_writers()
        if writers > 1:
            self.close(f"refused: {writers} publishers of rt/lowstate")
            raise RobotError(
                f"{writers} publishers of rt/lowstate on {where}: two robots or twins share "
                "it; stop the others or give each its own --dds-domain"
            )

    def _wait_until(self, ready: Any, deadline: float, wait_s: float, where: str) -> None:
        """Poll ``ready()`` until it holds; past ``deadline``, close and say what is missing."""
        while not ready():
            if self.signalled is not None:
                return
            if time.monotonic() > deadline:
                if self._state is None:
                    self.close(f"no robot: no state on rt/lowstate within {wait_s:g} s")
                    raise NoRobotError(self._silent_error(wait_s, where))
                self.close("refused: nothing publishes rt/sportmodestate (base_lin_vel)")
                raise RobotError(self._silent_error(wait_s, where))
            time.sleep(0.005)

    def _silent_error(self, wait_s: float, where: str) -> str:
        if self._state is None:
            return (
                f"no {self.spec.name} state on rt/lowstate ({where}) within {wait_s:g} s: is "
                "the robot, or `orin-rl sim-robot`, running on that domain and interface? (a "
                "twin builds its model first; --wait-s waits longer)"
            )
        return (
            "the policy reads the base's linear velocity (base_lin_vel) and nothing "
            "publishes it on rt/sportmodestate: the twin does; a real robot in "
            "low-level mode needs a state estimator, or a policy trained without it"
        )

    def _wait_for(self, step: str) -> bool:
        """Until the remote asks for ``step`` (True) or the robot stops (False)."""
        while not self._asked[step]:
            if self.machine.stopped or self.signalled is not None:
                return False
            time.sleep(0.005)
        return True

    def _stand_up(self) -> None:
        """STAND until the pose is reached (and, with the remote, its policy combination)."""
        deadline = time.monotonic() + self.machine.cfg.stand_s + 5.0
        cause = "stand reached"
        if self.sticks is not None:
            self.phase = f"stand: {COMBOS['policy']} on the remote starts the policy"
            if not self._wait_for("policy"):
                return
            deadline = time.monotonic() + self.machine.cfg.stand_s + 5.0
            cause = f"remote {COMBOS['policy']}"
        else:
            self.phase = "stand"
        while not self.machine.stand_done(self._q(), cause):
            if self.machine.stopped or self.signalled is not None:
                return
            if time.monotonic() > deadline:
                self.machine.stop("the stand-up did not reach the default pose")
                return
            time.sleep(0.005)
        self.phase = "policy"

    def _q(self) -> np.ndarray:
        with self._lock:
            state = self._state
        return state["motor_state[].q"].astype(np.float64)[self.motor_index]

    def close(self, cause: str = "run ended") -> None:
        """Latch damping (the operator's stop, ``cause``), keep sending it briefly, then
        leave the wire."""
        if self._running:
            if not self.machine.stopped:
                self.machine.stop(cause, safety=False)
            time.sleep(0.05)  # a few damping commands go out
            self._running = False
            if self._thread is not None:
                self._thread.join(timeout=1.0)
        if self._frozen:  # the run's heap is collectable again: a long-lived caller's memory
            gc.unfreeze()
            self._frozen = False
        self.participant = None

    def _measured_velocity(self) -> np.ndarray | None:
        """The world-frame base velocity for the report and the status line: None where
        ``rt/sportmodestate`` has been silent for the safety machine's ``silence_s`` (a source
        that stopped is not measuring; its last value is not the robot's motion now)."""
        with self._lock:
            velocity_w, since = self._velocity_w, time.monotonic() - self._velocity_time
        return velocity_w if since <= self.machine.cfg.silence_s else None

    # ------------------------------------------------------------------ the control loop's side
    def sensor(self) -> np.ndarray:
        """(1, obs_dim) from the newest state."""
        with self._lock:
            state, velocity_w = self._state, self._velocity_w
        quat = state["imu_state.quaternion"].astype(np.float64)
        gyro = state["imu_state.gyroscope"]
        # base_lin_vel only for a policy that reads it (its contract's term); measured for all
        velocity = None
        if self.needs_velocity and velocity_w is not None:
            velocity = world_to_body(quat, velocity_w)
        robot = state_from_motors(
            quat, gyro, state["motor_state[].q"], state["motor_state[].dq"], self.motor_index,
            velocity,
        )  # fmt: skip
        command = clamp(self._command(), self.ranges)
        if self.machine.mode is Mode.POLICY:
            self._track(command, quat, gyro, self._measured_velocity())
        return self.builder.build(robot, command)[None]

    def _track(self, command: np.ndarray, quat: np.ndarray, gyro: np.ndarray,
               velocity_w: np.ndarray | None) -> None:  # fmt: skip
        """The report's figures of a policy tick: the commands' range, the measured motion."""
        low, high = (command, command) if self._command_range is None else self._command_range
        self._command_range = (np.minimum(low, command), np.maximum(high, command))
        velocity = None if velocity_w is None else heading_velocity(quat, velocity_w)
        self.tracking.add(command, velocity, yaw_rate(quat, gyro))

    def _command(self) -> np.ndarray:
        if self.sticks is not None:
            return self.sticks.of(self.pad)
        return self.command.at(time.monotonic() - self._t0)

    def status(self) -> dict[str, Any]:
        """What the operator sees live: mode, phase, tick, command, measured velocity
        (forward, lateral; None without ``rt/sportmodestate``), yaw rate (IMU) and tilt."""
        with self._lock:
            state = self._state
        velocity_w = self._measured_velocity()
        out: dict[str, Any] = {"mode": self.machine.mode.value, "phase": self.phase,
                               "tick": self.counts["ticks"], "command": None,
                               "velocity": None, "yaw_rate": None, "tilt": None}  # fmt: skip
        if state is not None:
            quat = state["imu_state.quaternion"].astype(np.float64)
            out["tilt"] = tilt(quat)
            out["command"] = clamp(self._command(), self.ranges).tolist()
            out["yaw_rate"] = yaw_rate(quat, state["imu_state.gyroscope"])
            if velocity_w is not None:  # (forward, lateral), heading frame
                out["velocity"] = heading_velocity(quat, velocity_w).tolist()
        return out

    def actuate(self, action: np.ndarray) -> None:
        """The policy's raw action (1, n): to the safety machine, and the next last-action."""
        action = np.asarray(action, dtype=np.float64).reshape(-1)
        self.machine.policy_tick(action)
        self.builder.record_action(action)
        self.counts["ticks"] += 1

    def non_finite(self) -> None:
        """The backend replaced a non-finite output with its safe action: stop."""
        self.machine.stop("non-finite action (replaced by the backend)")

    def should_stop(self) -> bool:
        return self.machine.stopped or self.signalled is not None

    def report(self) -> dict[str, Any]:
        falls = sum(t["cause"].startswith("tilt") for t in self.machine.transitions)
        return {
            **self.description,
            "ticks": self.counts["ticks"],
            "falls": falls,
            **self.tracking.report(),
            "command_range": None  # [min, max] of each command over the policy's ticks
            if self._command_range is None
            else [r.tolist() for r in self._command_range],
            "state_messages": self.counts["states"],
            "command_messages": self.counts["commands"],
            **self.machine.report(),
        }


VELOCITY_SOURCE = "rt/sportmodestate"
"""Where the measured base velocity comes from (the report's ``velocity_source``)."""
YAW_RATE_SOURCE = "imu"
"""Where the measured yaw rate comes from: the IMU's gyro rotated to the world's z."""


class Tracking:
    """The policy ticks' measured motion against their command, as running sums: forward and
    lateral velocity (heading frame, from ``rt/sportmodestate`` where published), the yaw rate
    (IMU, world z), and the mean tracking errors |command_xy − v_xy| (m/s) and
    |command_wz − ω_z| (rad/s). The command's terms are found by name (``lin_vel_x``,
    ``lin_vel_y``, ``ang_vel_z``; by position 0, 1, 2 where the contract names none)."""

    def __init__(self, terms: list[str]):
        names = list(terms) or ["lin_vel_x", "lin_vel_y", "ang_vel_z"]
        self.xy = (names.index("lin_vel_x"), names.index("lin_vel_y")) if {
            "lin_vel_x", "lin_vel_y"} <= set(names) else None  # fmt: skip
        self.wz = names.index("ang_vel_z") if "ang_vel_z" in names else None
        self.ticks = self.velocity_ticks = 0
        self.sums = dict.fromkeys(("forward", "lateral", "yaw_rate", "error_xy", "error_yaw"), 0.0)

    def add(self, command: np.ndarray, velocity: np.ndarray | None, wz: float) -> None:
        """One tick: the command, (forward, lateral) or None, the world yaw rate."""
        self.ticks += 1
        self.sums["yaw_rate"] += wz
        if self.wz is not None and self.wz < len(command):
            self.sums["error_yaw"] += abs(float(command[self.wz]) - wz)
        if velocity is None:
            return
        self.velocity_ticks += 1
        self.sums["forward"] += float(velocity[0])
        self.sums["lateral"] += float(velocity[1])
        if self.xy is not None and max(self.xy) < len(command):
            error = np.hypot(command[self.xy[0]] - velocity[0], command[self.xy[1]] - velocity[1])
            self.sums["error_xy"] += float(error)

    def report(self) -> dict[str, Any]:
        """Means over the policy ticks (None where nothing was measured)."""

        def mean(key: str, n: int, usable: bool = True) -> float | None:
            return self.sums[key] / n if n and usable else None

        n, nv = self.ticks, self.velocity_ticks
        return {
            "velocity_source": VELOCITY_SOURCE if nv else None,
            "yaw_rate_source": YAW_RATE_SOURCE if n else None,
            "forward_velocity": mean("forward", nv),
            "lateral_velocity": mean("lateral", nv),
            "yaw_rate": mean("yaw_rate", n),
            "tracking_error_xy": mean("error_xy", nv, self.xy is not None),
            "tracking_error_yaw": mean("error_yaw", n, self.wz is not None),
        }


def check_reported(plant: UnitreePlant) -> None:
    """Before any stiffness: a real robot (LowState's ``mode_machine`` non-zero) is refused a
    policy that reads a term it does not report in low-level mode (``base_lin_vel``), in one
    line naming the term and the task to train; a simulator (``mode_machine`` 0: the twin,
    unitree_mujoco), which publishes it, runs it with a warning."""
    refusal = plant.contract.real_robot_refusal()
    if refusal is None:
        return
    with plant._lock:
        mode_machine = int(plant._state["mode_machine"])
    if mode_machine == 0:
        log.warning("%s; running it against a simulator (mode_machine 0)", refusal)
        return
    terms = ", ".join(plant.contract.twin_only_terms())
    plant.close(f"refused: a real {plant.spec.name} does not report {terms}")
    raise RobotError(f"{plant.spec.name} (mode_machine {mode_machine}): {refusal}")


def _robot_spec(robot: str, contract: DeployContract) -> RobotSpec:
    spec = ROBOTS.get(robot)
    if spec is None:
        raise RobotError(f"unknown robot {robot!r}; known: {', '.join(ROBOTS)}")
    if contract.robot != spec.name or contract.motor_index is None:
        raise RobotError(
            f"the policy was trained for {contract.robot or 'a robot orin_rl cannot map'}, not "
            f"{spec.name}: its joints {contract.joint_names[:3]}... are not {spec.name}'s motors"
        )
    return spec
