"""A robot's twin on the robot's own wire: ``orin-rl sim-robot --robot g1``.

A separate process steps MuJoCo (CPU) with the task's own robot model (mjlab's scene: the
same MJCF, armature, joint limits and actuator effort limits the policy was trained on) and
speaks Unitree SDK2 over DDS exactly as the robot does: it takes ``rt/lowcmd`` (dropping any
command whose CRC is wrong, as the robot's motor board does) and publishes ``rt/lowstate``
(IMU quaternion w, x, y, z and gyro of the pelvis IMU site, each motor's q, dq, τ) after every
physics step, 500 Hz at the default ``physics_dt`` of 2 ms, plus ``rt/sportmodestate`` (the
IMU point's position and world-frame velocity, as Unitree's MuJoCo bridge publishes it).

The PD torque τ = τff + kp·(q* − q) + kd·(dq* − dq) of the latest command is computed at every
physics step (MuJoCo's position actuators with the command's kp and kd, damping integrated
implicitly, the effort limit clamping it), not held between commands. ``mode`` 0 disables a
motor. Until ``hold_s`` after the first command with stiffness (the stand-up starting), a
spring holds the pelvis where it started, as a gantry holds a real humanoid; then the robot
stands on its own. A fall (pelvis below ``fall_height`` or tilted past 1 rad after the
release) is counted in the twin's report: in ``falls`` while the run drives the robot, in
``falls_after_end`` once the run has ended (a command of damping only after commands with
stiffness: the run's stop latched damping, whatever stopped it), when a robot that stood folds
under damping; each run's ``falls_s`` and ``falls_after_end_s`` say when. When the commands
stop for ``reset_after_s`` (the run that drove it ended: its end, a stop, a fall), the twin
puts the robot back in its start pose on the gantry, so every run finds it as the first one
did.

A ``Push`` (``--push AT_S,FORCE_N[,DURATION_S]``) perturbs the base as mjlab's ``push_robot``
event does in training (it adds up to ±0.5 m/s in x and in y to the base's velocity, every 1-3 s): a
world-frame force on the pelvis (``xfrc_applied``, at its centre of mass), lateral (the
robot's left at the push's start: its heading frame's +y; a negative force pushes right), for
``DURATION_S`` seconds (counted in physics steps, so the impulse F·Δt is exact), ``AT_S``
seconds after the run's first command (the remote script's clock). The report records each:
its time, force, duration, the impulse's Δv on the robot's mass (F·Δt / m, m from the model),
the base's (pelvis) and the centre of mass's velocity change along the push, and whether a
fall followed within ``FALL_WATCH_S`` (None: the run ended first).

The twin measures its own base for the run's report (``runs``): from each run's first
command, every ``series_every_s`` (0.02 s: the policy's 50 Hz; None: no series), the time on
the run's clock, the physics time, the pelvis's forward and lateral speed in its heading
frame, its yaw rate (world z), height and tilt: a tool computes the means over the windows
the remote commanded (``tools/g1_walk_twin.py``). ``sim-robot`` keeps it only with
``--report`` (every run's, ~40 MB an hour of runs).

The twin checks its network interface before it builds the model, and refuses to start where
another robot or twin already publishes ``rt/lowstate`` on its domain. A ``RemoteScript``
(``robot.remote``) plays a hand on the robot's remote: its timed buttons and sticks go out in
``wireless_remote``, timed from the first command of each run.

Needs MuJoCo and mjlab (the ``mjlab`` extra) and cyclonedds (``robot``).
"""

from __future__ import annotations

import json
import logging
import math
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.robot import RobotError, require_cyclonedds
from orin_rl.robot import remote as remote_mod
from orin_rl.robot.crc import MOTOR_FIELDS, hg_lowcmd_crc_of
from orin_rl.robot.observations import heading, heading_velocity, tilt, yaw_rate
from orin_rl.robot.remote import RemoteScript
from orin_rl.robot.robots import ROBOTS

log = logging.getLogger(__name__)

TASKS = {"unitree-g1": "Mjlab-Velocity-Flat-Unitree-G1"}
"""The mjlab task whose robot model each twin steps."""
CMD_FIELDS = tuple(f"motor_cmd[].{k}" for k in MOTOR_FIELDS)
FALL_WATCH_S = 3.0
"""A push is survived when no fall follows within this long of its start."""
FALL_KEYS = {
    True: ("falls", "fall_times_s", "falls_s"),
    False: ("falls_after_end", "falls_after_end_times_s", "falls_after_end_s"),
}
"""Where a fall is counted (the report's count and times, the run's times): while the run
drives the robot (True), or after its end (False)."""
SERIES = ("t", "sim_t", "forward", "lateral", "yaw_rate", "height", "tilt")
"""The base series' columns: run clock (s from the first command), physics time (s, same
origin), pelvis speed in its heading frame (m/s), world-z yaw rate (rad/s), pelvis height (m),
tilt (rad)."""


@dataclass(frozen=True)
class Push:
    """``force_n`` newtons on the pelvis, to the robot's left (its heading at the push's
    start; negative: right), for ``duration_s``, ``at_s`` after the run's first command."""

    at_s: float
    force_n: float
    duration_s: float = 0.15

    def __post_init__(self) -> None:
        finite = all(math.isfinite(v) for v in (self.at_s, self.force_n, self.duration_s))
        if not finite or self.at_s < 0 or not 0 < self.duration_s <= 1.0:
            raise RobotError(
                f"push {self.at_s:g},{self.force_n:g},{self.duration_s:g}: give AT_S >= 0 "
                "(seconds from the run's first command), FORCE_N (newtons, + left, - right) "
                "and DURATION_S in (0, 1], e.g. 30,110,0.15"
            )

    @classmethod
    def parse(cls, text: str) -> Push:
        """``'AT_S,FORCE_N[,DURATION_S]'`` (``--push``); one line where it is not."""
        try:
            values = [float(v) for v in text.split(",")]
        except ValueError:
            values = []
        if len(values) not in (2, 3):
            raise RobotError(
                f"push {text!r}: give AT_S,FORCE_N[,DURATION_S], e.g. 30,110,0.15 (110 N to "
                "the left for 0.15 s, 30 s after the run's first command)"
            )
        return cls(*values)


def build_model(task: str, physics_dt: float) -> Any:
    """The task's scene (robot and floor) as a MuJoCo model with the task's solver options."""
    import mujoco  # noqa: F401  (the extra's check)

    from orin_rl.envs.mjlab import import_mjlab

    registry = import_mjlab()
    cfg = registry.load_env_cfg(task, play=True)
    cfg.scene.num_envs = 1
    from mjlab.scene import Scene

    model = Scene(cfg.scene, device="cpu").compile()
    cfg.sim.mujoco.apply(model)
    model.opt.timestep = physics_dt
    return model


def _settle(record: dict[str, Any]) -> None:
    """A push's record without its working state (what the JSON report holds)."""
    for key in ("_steps", "_dir", "_v0"):
        record.pop(key, None)


class RobotTwin:
    """MuJoCo on Unitree's wire (module docstring)."""

    def __init__(self, robot: str = "unitree-g1", domain: int = 1, interface: str | None = "lo",
                 physics_dt: float = 0.002, hold_s: float = 2.5, tilt0: float = 0.0,
                 fall_height: float = 0.35, model: Any = None,
                 remote: RemoteScript | None = None, reset_after_s: float = 1.0,
                 pushes: list[Push] | tuple[Push, ...] = (),
                 series_every_s: float | None = 0.02):  # fmt: skip
        require_cyclonedds()
        if robot not in TASKS:
            raise RobotError(f"no twin for {robot!r}; twins: {', '.join(TASKS)}")
        self.spec = ROBOTS[robot]
        from orin_rl.robot import unitree_msgs as msgs
        from orin_rl.robot.wire import Endpoint, Layout, participant

        # the wire first: a wrong interface or a busy domain is said before the model's build
        self.participant = participant(domain, interface)
        probe = Endpoint(self.participant, msgs.LOWSTATE, msgs.HgLowState, "reader")
        probe_since = time.monotonic()
        self.m = model if model is not None else build_model(TASKS[robot], physics_dt)
        time.sleep(max(0.0, 0.5 - (time.monotonic() - probe_since)))  # discovery
        others = probe.matched_writers()
        if others:
            raise RobotError(
                f"rt/lowstate is already published on DDS domain {domain} ({others} "
                "publisher): another twin or a robot is there; stop it or pass another "
                "--dds-domain"
            )
        self.domain, self.tilt0, self.remote = domain, tilt0, remote
        self.hold_s, self.fall_height, self.reset_after_s = hold_s, fall_height, reset_after_s
        self.pushes, self.series_every_s = tuple(pushes), series_every_s
        self._index_model()
        self._t0: float | None = None  # the twin's clock: its first step (``run``: its start)
        self.report: dict[str, Any] = {"falls": 0, "fall_times_s": [], "falls_after_end": 0,
                                       "falls_after_end_times_s": [], "commands": 0,
                                       "bad_crc": 0, "states": 0, "resets": 0,
                                       "mass_kg": self.mass, "series_every_s": series_every_s,
                                       "series_columns": list(SERIES), "pushes": [],
                                       "runs": []}  # fmt: skip
        self.reset()
        self.cmd_layout = Layout(msgs.HgLowCmd)
        self.state_layout = Layout(msgs.HgLowState)
        self.sport_layout = Layout(msgs.GoSportModeState)
        self.cmd_in = Endpoint(self.participant, msgs.LOWCMD, msgs.HgLowCmd, "reader")
        self.state_out = Endpoint(self.participant, msgs.LOWSTATE, msgs.HgLowState, "writer")
        self.sport_out = Endpoint(self.participant, msgs.SPORTSTATE, msgs.GoSportModeState,
                                  "writer")  # fmt: skip
        self._running = False

    def reset(self) -> None:
        """The robot back in its start pose (tilted by ``tilt0``), limp, on its gantry; the
        remote's script from its start at the next command."""
        import mujoco

        for record in getattr(self, "_pushing", []):  # cut short by the run's end
            _settle(record)
        self.d = mujoco.MjData(self.m)
        if self.m.nkey:
            mujoco.mj_resetDataKeyframe(self.m, self.d, 0)
        if self.tilt0:  # a robot started tilted (tests of the plant's tilt stop)
            quat = np.array([np.cos(self.tilt0 / 2), np.sin(self.tilt0 / 2), 0.0, 0.0])
            mujoco.mju_mulQuat(self.d.qpos[3:7], self.d.qpos[3:7].copy(), quat)
        mujoco.mj_forward(self.m, self.d)
        act = self.act[self.used]
        self.m.actuator_gainprm[act, 0] = 0.0
        self.m.actuator_biasprm[act, 1:3] = 0.0
        self.tau_ff = np.zeros(self.m.nv)
        self._anchor = (self.d.qpos[:3].copy(), self.d.qpos[3:7].copy())
        self._released_at: float | None = None
        self._first_stiff: float | None = None
        self._first_command: float | None = None
        self._last_command: float | None = None
        self._ended: float | None = None  # the run's end: damping only after stiffness
        self._fallen = False
        self._run: dict[str, Any] | None = None  # this run's part of the report (``runs``)
        self._next_sample = 0.0
        self._pushing: list[dict[str, Any]] = []  # pushes under way: their records
        self._watching: list[dict[str, Any]] = []  # pushes whose fall watch is open
        self._pushes_due = list(self.pushes)

    def _index_model(self) -> None:
        import mujoco

        m, slots = self.m, self.spec.slots
        self.qadr = np.full(slots, -1)
        self.vadr = np.full(slots, -1)
        self.act = np.full(slots, -1)
        for motor, joint in enumerate(self.spec.motors):
            jid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_JOINT, f"robot/{joint}")
            if jid < 0:
                raise RobotError(f"the twin's model has no joint {joint}")
            self.qadr[motor], self.vadr[motor] = m.jnt_qposadr[jid], m.jnt_dofadr[jid]
            self.act[motor] = int(np.flatnonzero(m.actuator_trnid[:, 0] == jid)[0])
        self.used = np.flatnonzero(self.qadr >= 0)
        self.root = int(m.jnt_bodyid[0])  # the pelvis: the free joint's body
        self.mass = float(m.body_subtreemass[self.root])  # the whole robot
        self.site = m.site("robot/imu_in_pelvis").id
        self.gyro_adr = m.sensor_adr[m.sensor("robot/imu_ang_vel").id]
        self.acc_adr = m.sensor_adr[m.sensor("robot/imu_lin_acc").id]

    # ------------------------------------------------------------------ the wire
    def _apply(self, data: bytes, now: float) -> None:
        """A LowCmd_: checked (CRC), then the motors' PD set from it."""
        cmd = self.cmd_layout.decode(
            data, (*CMD_FIELDS, "mode_pr", "mode_machine", "reserve", "crc")
        )
        motors = {k: cmd[f"motor_cmd[].{k}"] for k in MOTOR_FIELDS}
        crc = hg_lowcmd_crc_of(cmd["mode_pr"], cmd["mode_machine"], motors, cmd["reserve"])
        if crc != int(cmd["crc"]):
            self.report["bad_crc"] += 1  # a corrupted command is not executed
            return
        self.report["commands"] += 1
        if self._first_command is None:
            self._first_command, self._run_sim_t0 = now, self.d.time
            self._run = {"first_command_s": round(now - self._t0, 3), "released_s": None,
                         "ended_s": None, "falls_s": [], "falls_after_end_s": [],
                         "base": {k: [] for k in SERIES}}  # fmt: skip
            self.report["runs"].append(self._run)
        self._last_command = now
        m, used, act = self.m, self.used, self.act[self.used]
        enabled = cmd["motor_cmd[].mode"][used] != 0
        kp = np.where(enabled, cmd["motor_cmd[].kp"][used], 0.0)
        kd = np.where(enabled, cmd["motor_cmd[].kd"][used], 0.0)
        m.actuator_gainprm[act, 0] = kp
        m.actuator_biasprm[act, 1] = -kp
        m.actuator_biasprm[act, 2] = -kd
        self.d.ctrl[act] = cmd["motor_cmd[].q"][used]
        ff = cmd["motor_cmd[].tau"][used] + kd * cmd["motor_cmd[].dq"][used]
        self.tau_ff[:] = 0.0
        self.tau_ff[self.vadr[used]] = np.where(enabled, ff, 0.0)
        self._driven(bool(np.any(kp > 0)), now)

    def _driven(self, stiff: bool, now: float) -> None:
        """The run's phase from its command: the first stiffness starts the stand-up (the
        gantry's clock); damping only after it is the run's end (its stop latched damping);
        stiffness again drives the robot again."""
        if stiff:
            if self._first_stiff is None:
                self._first_stiff = now
            self._ended = None
        elif self._first_stiff is not None and self._ended is None:
            self._ended = now
            if self._run is not None:
                self._run["ended_s"] = round(now - self._first_command, 3)
            self._watching.clear()  # a push watched past the run's end: fell stays None

    def _remote_bytes(self, now: float) -> np.ndarray:
        """``wireless_remote`` now: the script's, timed from this run's first command."""
        if self.remote is None or self._first_command is None:
            return np.zeros(remote_mod.SIZE, np.uint8)
        state = self.remote.at(now - self._first_command)
        return np.frombuffer(remote_mod.encode(state), np.uint8)

    def _publish(self, now: float) -> None:
        import mujoco

        d, used, slots = self.d, self.used, self.spec.slots
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, d.site_xmat[self.site])
        q, dq, tau = np.zeros(slots), np.zeros(slots), np.zeros(slots)
        q[used], dq[used] = d.qpos[self.qadr[used]], d.qvel[self.vadr[used]]
        tau[used] = d.actuator_force[self.act[used]]
        self.report["states"] += 1
        self.state_out.write(self.state_layout.encode({
            "tick": self.report["states"] & 0xFFFFFFFF,
            "imu_state.quaternion": quat,
            "imu_state.gyroscope": d.sensordata[self.gyro_adr:self.gyro_adr + 3],
            "imu_state.accelerometer": d.sensordata[self.acc_adr:self.acc_adr + 3],
            "motor_state[].mode": np.where(self.qadr >= 0, 1, 0),
            "motor_state[].q": q,
            "motor_state[].dq": dq,
            "motor_state[].tau_est": tau,
            "wireless_remote": self._remote_bytes(now),
        }))  # fmt: skip
        velocity = np.zeros(6)
        mujoco.mj_objectVelocity(self.m, d, mujoco.mjtObj.mjOBJ_SITE, self.site, velocity, 0)
        self.sport_out.write(self.sport_layout.encode({
            "position": d.site_xpos[self.site], "velocity": velocity[3:],
        }))  # fmt: skip

    # ------------------------------------------------------------------ physics
    def _gantry(self, now: float) -> np.ndarray:
        """The gantry's wrench on the pelvis (force, torque; world frame): a spring-damper on
        its pose until ``hold_s`` after the stand-up began, then nothing."""
        import mujoco

        d = self.d
        held = self._first_stiff is None or now - self._first_stiff < self.hold_s
        if not held:
            if self._released_at is None:
                self._released_at = now
                if self._run is not None:
                    self._run["released_s"] = round(now - self._first_command, 3)
            return np.zeros(6)
        pos, quat = self._anchor
        force = 10000.0 * (pos - d.qpos[:3]) - 1000.0 * d.qvel[:3]
        error = np.zeros(3)
        mujoco.mju_subQuat(error, quat, d.qpos[3:7])  # body-frame rotation to the anchor
        world, spin = np.zeros(3), np.zeros(3)
        mujoco.mju_rotVecQuat(world, error, d.qpos[3:7])
        mujoco.mju_rotVecQuat(spin, d.qvel[3:6], d.qpos[3:7])  # a free joint's ω is local
        return np.concatenate([force, 300.0 * world - 30.0 * spin])

    # ------------------------------------------------------------------ pushes
    def _velocities(self) -> tuple[np.ndarray, np.ndarray]:
        """The pelvis's and the robot's centre of mass's world velocity now (m/s)."""
        import mujoco

        mujoco.mj_forward(self.m, self.d)  # derived quantities of this state (not the last step's)
        mujoco.mj_subtreeVel(self.m, self.d)
        return self.d.qvel[:3].copy(), self.d.subtree_linvel[self.root].copy()

    def _push_force(self, now: float) -> np.ndarray:
        """The pushes' world force on the pelvis for this step; a push due starts here (its
        direction fixed from the robot's heading, the velocities before it recorded)."""
        force = np.zeros(3)
        if self._first_command is None:
            return force
        t = now - self._first_command
        for push in [p for p in self._pushes_due if t >= p.at_s]:
            self._pushes_due.remove(push)
            yaw = heading(self.d.qpos[3:7])
            left = np.array([-np.sin(yaw), np.cos(yaw), 0.0])  # heading frame's +y, in the world
            steps = max(1, round(push.duration_s / self.m.opt.timestep))
            base, com = self._velocities()
            record = {"run": len(self.report["runs"]) - 1, "at_s": round(t, 3),
                      "t_s": round(now - self._t0, 3), "force_n": push.force_n,
                      "duration_s": round(steps * self.m.opt.timestep, 6),
                      "direction": [round(float(v), 4) for v in left[:2]],
                      "on_gantry": self._released_at is None, "mass_kg": self.mass,
                      "expected_dv": push.force_n * steps * self.m.opt.timestep / self.mass,
                      "base_dv": None, "com_dv": None, "fell_within_s": FALL_WATCH_S,
                      "fell": True if self._fallen else None,  # down already: not survived
                      "_steps": steps, "_dir": left, "_v0": (base, com)}  # fmt: skip
            self.report["pushes"].append(record)
            self._pushing.append(record)
        for record in self._pushing:
            force += record["force_n"] * record["_dir"]
            record["_steps"] -= 1
        return force

    def _pushes_after_step(self, now: float) -> None:
        """Pushes whose last step has run: the velocity change along each; fall watches
        that have run their ``FALL_WATCH_S`` without a fall: survived."""
        for record in [r for r in self._pushing if r["_steps"] == 0]:
            self._pushing.remove(record)
            (base0, com0), (base1, com1) = record["_v0"], self._velocities()
            record["base_dv"] = float((base1 - base0) @ record["_dir"])
            record["com_dv"] = float((com1 - com0) @ record["_dir"])
            _settle(record)
            if record["fell"] is None and self._ended is None:  # (a fall answered it)
                self._watching.append(record)
        t = now - self._first_command if self._first_command is not None else 0.0
        for record in [r for r in self._watching if t - r["at_s"] >= FALL_WATCH_S]:
            record["fell"] = False
            self._watching.remove(record)

    def _check_fall(self, now: float) -> None:
        if self._released_at is None or self._fallen:
            return
        if self.d.qpos[2] < self.fall_height or tilt(self.d.qpos[3:7]) > 1.0:
            self._fallen = True
            driven = self._ended is None  # else: a robot folding under the end's damping
            count, times, in_run = FALL_KEYS[driven]
            self.report[count] += 1
            self.report[times].append(round(now - self._t0, 3))
            if self._run is not None:
                self._run[in_run].append(round(now - self._first_command, 3))
            if not driven:
                return
            for record in self._pushing + self._watching:  # a push under way or watched
                record["fell"] = True
            self._watching.clear()

    def _record(self, now: float) -> None:
        """The run's base series: a row every ``series_every_s`` of the run's clock."""
        if self._run is None or self.series_every_s is None:
            return
        t = now - self._first_command
        if t < self._next_sample - 1e-6:  # (a clock summing 2 ms steps rounds below)
            return
        self._next_sample += self.series_every_s
        if self._next_sample <= t:  # the twin fell behind: re-anchor rather than burst
            self._next_sample = t + self.series_every_s
        d, quat = self.d, self.d.qpos[3:7]
        forward, lateral = heading_velocity(quat, d.qvel[:3])
        row = (t, d.time - self._run_sim_t0, forward, lateral, yaw_rate(quat, d.qvel[3:6]),
               d.qpos[2], tilt(quat))  # fmt: skip
        for key, value in zip(SERIES, row, strict=True):
            self._run["base"][key].append(round(float(value), 4))

    def _maybe_reset(self, now: float) -> None:
        """The run that drove the robot has ended (no command for ``reset_after_s``)."""
        if self._last_command is not None and now - self._last_command > self.reset_after_s:
            self.reset()
            self.report["resets"] += 1
            log.info("the run ended: the robot is back in its start pose on the gantry")

    def step(self, now: float) -> None:
        """One physics step on the newest command (the gantry's and the pushes' forces on
        the pelvis), then the base's record and the state out."""
        import mujoco

        if self._t0 is None:
            self._t0 = now
        data = self.cmd_in.take_latest()
        if data is not None:
            self._apply(data, now)
        else:
            self._maybe_reset(now)
        wrench = self._gantry(now)
        wrench[:3] += self._push_force(now)
        self.d.xfrc_applied[self.root] = wrench
        self.d.qfrc_applied[:] = self.tau_ff
        mujoco.mj_step(self.m, self.d)
        self._pushes_after_step(now)
        self._check_fall(now)
        self._record(now)
        self._publish(now)

    def run(self, seconds: float | None = None, report: str | Path | None = None) -> dict:
        """Step in real time (accumulated deadlines) until ``seconds`` or SIGINT/SIGTERM."""
        self._running = True
        # The stop handlers live as long as the run: the caller's own come back when it ends.
        previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        for sig in previous:
            signal.signal(sig, lambda *_: setattr(self, "_running", False))
        period = self.m.opt.timestep
        self._t0 = next_time = time.monotonic()
        late = 0
        try:
            while self._running and (seconds is None or next_time - self._t0 < seconds):
                self.step(time.monotonic())
                next_time += period
                delay = next_time - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                elif delay < -period:
                    late += 1
                    next_time = time.monotonic()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self.report.update({"seconds": round(time.monotonic() - self._t0, 3),
                            "late_steps": late, "physics_dt": period})  # fmt: skip
        if report:
            Path(report).write_text(json.dumps(self.report, indent=2) + "\n")
        return self.report
