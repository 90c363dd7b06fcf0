"""The G1 plant over DDS on loopback (``lo``), against a robot stand-in on the same wire:
stand-up, policy ticks, and the latched stops (a tilted robot, a non-finite action, a slow
policy, a silent robot); the twin's stand-up and a killed twin are in test_deploy_readme.py
(one twin serves both). Each test bounds its time and its domain id is its own."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

from tests.robot.conftest import StandIn, linear_bundle, require_dds, run_g1

require_dds()

from orin_rl.robot.contract import DeployContract  # noqa: E402
from orin_rl.robot.safety import Mode, SafetyConfig  # noqa: E402
from orin_rl.robot.unitree import UnitreePlant  # noqa: E402
from orin_rl.runtime.loop import ControlLoop, LoopConfig  # noqa: E402


@pytest.fixture
def contract(g1_contract):
    return DeployContract.from_dict(g1_contract)


def _loop(plant, infer, ticks):
    cfg = LoopConfig(rate_hz=50.0, iterations=ticks)
    return ControlLoop(plant.sensor, infer, plant.actuate, cfg, should_stop=plant.should_stop).run()


def test_a_tilted_robot_is_never_stood_up(contract):
    """Tilted 1.2 rad: the start-up orientation check stops it in passive (damping only was
    ever sent) and says why, as a safety stop (mutation: no check before the stand-up: it
    starts standing). ``start`` froze the heap out of the collector, ``close`` thaws it
    (mutation: no ``gc.unfreeze``: the heap stays frozen for the caller's life)."""
    robot = StandIn(21, contract, tilt=1.2)
    robot.start()
    plant = UnitreePlant(contract, domain=21, interface="lo")
    frozen_before = gc.get_freeze_count()
    try:
        plant.start(wait_s=5.0)
        assert plant.machine.safety_stop and "tilt 1.20 rad" in plant.machine.safety_stop
        assert gc.get_freeze_count() > frozen_before
    finally:
        plant.close()
        robot.running = False
    assert gc.get_freeze_count() == frozen_before
    assert robot.kp_seen and max(robot.kp_seen) == 0.0
    assert [(t["from"], t["to"]) for t in plant.machine.transitions] == [("passive", "stopped")]


def test_a_network_interface_that_is_not_there_is_one_line(tmp_path, g1_contract):
    """``--dds-interface`` naming no interface: CycloneDDS's exception became a traceback, and
    CycloneDDS printed its own line before ours (mutations: the RobotError wrapping removed;
    no interface check before CycloneDDS: its raw line comes back)."""
    bundle = linear_bundle(tmp_path / "bundle", g1_contract)
    proc = run_g1(bundle, 25, "--steps", "5", interface="nosuchif0")
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [x for x in proc.stderr.splitlines() if x.startswith("orin-rl run:")]
    assert len(lines) == 1 and "nosuchif0" in lines[0] and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == lines, proc.stderr


def test_a_slow_policy_and_a_silent_robot_are_stopped(contract):
    """Stood up and driven; a policy taking 45 ms of a 20 ms period is stopped (late tick);
    a second run whose robot goes silent is stopped by the watchdog (mutations: neither
    late-tick check, the tick's own nor the command thread's; no watchdog in the command
    thread: each fails it)."""
    robot = StandIn(22, contract)
    robot.start()
    zero = np.zeros((1, contract.num_joints), np.float32)
    try:
        # late ticks at 5 periods (100 ms; a loaded box's hiccups stay under it), the slow
        # policy's 300 ms well over it
        wide = SafetyConfig(stand_s=0.2, late_factor=5.0)
        plant = UnitreePlant(contract, domain=22, interface="lo", safety=wide)
        plant.start(wait_s=5.0)
        assert plant.machine.mode is Mode.POLICY
        calls = []

        def slow_from_the_eleventh(obs):
            calls.append(1)
            if len(calls) > 10:
                time.sleep(0.3)
            return zero

        result = _loop(plant, slow_from_the_eleventh, 30)
        plant.close()
        stop = plant.machine.transitions[2]
        assert stop["to"] == "stopped" and "tick" in stop["cause"], plant.machine.transitions
        assert stop["tick"] >= 10 and result.iterations < 30  # on time until it was slow

        plant = UnitreePlant(contract, domain=22, interface="lo", safety=wide)
        plant.start(wait_s=5.0)
        robot.publishing = False
        result = _loop(plant, lambda obs: zero, 50)
        plant.close()
        assert result.iterations < 50
        assert "silent" in plant.machine.transitions[-1]["cause"], plant.machine.transitions
    finally:
        robot.running = False


def test_a_non_finite_model_output_stops_the_robot(g1_contract, tmp_path):
    """``orin-rl run --plant``'s path: a model whose output is NaN (ONNX Runtime's backend
    replaces it with the safe action and counts it): the robot stops at the first tick
    (mutation: the infer wrapper not told the robot)."""
    from orin_rl.runtime.robot_run import run_on_robot

    contract = DeployContract.from_dict(g1_contract)
    bundle = linear_bundle(tmp_path / "bundle", g1_contract, bias=[np.nan] * 29)
    robot = StandIn(23, contract)
    robot.start()
    try:
        report = run_on_robot(bundle, "onnxruntime", "unitree-g1", 100, domain=23,
                              interface="lo", safety={"stand_s": 0.2})  # fmt: skip
    finally:
        robot.running = False
    assert report["ticks"] <= 2, report["ticks"]
    assert report["transitions"][-1]["cause"].startswith("non-finite"), [
        t["cause"] for t in report["transitions"]
    ]


def _rotation(roll: float, pitch: float, yaw: float) -> tuple[np.ndarray, np.ndarray]:
    """R = Rz(yaw)·Ry(pitch)·Rx(roll) and its quaternion (w, x, y, z) = qz ⊗ qy ⊗ qx."""
    cr, sr, cp, sp, cy, sy = (f(a) for a in (roll, pitch, yaw) for f in (np.cos, np.sin))
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    hr, hp, hy = roll / 2, pitch / 2, yaw / 2
    quat = np.array([
        np.cos(hr) * np.cos(hp) * np.cos(hy) + np.sin(hr) * np.sin(hp) * np.sin(hy),
        np.sin(hr) * np.cos(hp) * np.cos(hy) - np.cos(hr) * np.sin(hp) * np.sin(hy),
        np.cos(hr) * np.sin(hp) * np.cos(hy) + np.sin(hr) * np.cos(hp) * np.sin(hy),
        np.cos(hr) * np.cos(hp) * np.sin(hy) - np.sin(hr) * np.sin(hp) * np.cos(hy),
    ])  # fmt: skip
    return rz @ ry @ rx, quat


def test_the_plant_measures_yaw_rate_from_the_imu_and_velocity_where_published(real_contract):
    """A policy without ``base_lin_vel`` (``Orin-Velocity-Flat-Unitree-G1-Real``) on a robot
    rolled 0.2, pitched 0.3, headed 0.7 rad, turning at 0.3 rad/s about the world's z (its gyro
    reads that in its own frame) and moving 0.4 m/s forward, 0.1 left in its heading frame
    (0.05 up), commanded (0.5, 0, 0.5). Where ``rt/sportmodestate`` is published (a twin) the
    report has the forward and lateral velocity from it, the yaw rate from the IMU, and both
    tracking errors (hypot(0.1, 0.1) and 0.2); where it is not (a G1 in low-level mode) it says
    so (no velocity source, velocity None) and still has the yaw rate. The policy's input is
    the same 96 values either way; a sportmodestate that falls silent is no longer measured
    (mutations: the gyro's own z as the yaw rate: 0.300 → 0.298; the sportmodestate read only
    for a policy that reads base_lin_vel, as before: no velocity; its last value kept for ever:
    the silent source still reads 0.4)."""
    from orin_rl.robot.unitree import CommandSource

    contract = DeployContract.from_dict(real_contract)
    assert not any(t.source == "base_lin_vel" for t in contract.observations)
    rotation, quat = _rotation(0.2, 0.3, 0.7)
    omega_w = np.array([0.05, -0.02, 0.3])
    heading = _rotation(0.0, 0.0, 0.7)[0]
    velocity_w = heading @ np.array([0.4, 0.1, 0.05])
    reports, inputs, status = {}, {}, {}
    zero = np.zeros((1, contract.num_joints), np.float32)
    for domain, sport in ((47, True), (48, False)):
        robot = StandIn(domain, contract, sport=sport)
        robot.quat, robot.gyro, robot.velocity = quat, rotation.T @ omega_w, velocity_w
        robot.start()
        plant = UnitreePlant(contract, domain=domain, interface="lo",
                             command=CommandSource(value=np.array([0.5, 0.0, 0.5])),
                             safety=SafetyConfig(stand_s=0.2, late_factor=5.0))  # fmt: skip
        try:
            plant.start(wait_s=5.0)
            assert plant.machine.mode is Mode.POLICY, plant.machine.transitions
            result = _loop(plant, lambda obs: zero, 20)
            assert result.iterations == 20
            inputs[sport] = plant.sensor()
            status[sport] = plant.status()
            if sport:  # the source falls silent: its last value is no longer measured
                robot.sport_layout = None
                time.sleep(0.3)  # > silence_s (0.1 s)
                assert plant.status()["velocity"] is None
                assert plant.status()["yaw_rate"] == pytest.approx(0.3, abs=1e-5)
        finally:
            plant.close()
            robot.running = False
        reports[sport] = plant.report()
    for sport, report in reports.items():
        assert report["yaw_rate_source"] == "imu"
        assert report["yaw_rate"] == pytest.approx(0.3, abs=1e-5), report
        assert report["tracking_error_yaw"] == pytest.approx(0.2, abs=1e-5), report
        assert status[sport]["yaw_rate"] == pytest.approx(0.3, abs=1e-5)
    seen = reports[True]
    assert seen["velocity_source"] == "rt/sportmodestate"
    assert seen["forward_velocity"] == pytest.approx(0.4, abs=1e-5), seen
    assert seen["lateral_velocity"] == pytest.approx(0.1, abs=1e-5), seen
    assert seen["tracking_error_xy"] == pytest.approx(np.hypot(0.1, 0.1), abs=1e-5), seen
    assert status[True]["velocity"] == pytest.approx([0.4, 0.1], abs=1e-5)
    unseen = reports[False]
    assert unseen["velocity_source"] is None and status[False]["velocity"] is None
    assert unseen["forward_velocity"] is None and unseen["tracking_error_xy"] is None
    assert inputs[True].shape == (1, 96)
    np.testing.assert_array_equal(inputs[True], inputs[False])


def test_the_summary_names_the_velocity_source_and_the_imus_yaw_rate():
    """The run's summary lines: the xy error with its source, or the words saying there is
    none (a G1 in low-level mode), and the yaw error and rate from the IMU either way."""
    from orin_rl.cli.run import NO_VELOCITY, measured_text, tracking_text

    report = {"velocity_source": "rt/sportmodestate", "tracking_error_xy": 0.1414,
              "tracking_error_yaw": 0.2, "forward_velocity": 0.4, "lateral_velocity": 0.1,
              "yaw_rate": 0.3}  # fmt: skip
    assert tracking_text(report) == "xy 0.141 m/s (rt/sportmodestate), yaw 0.200 rad/s (IMU)"
    assert measured_text(report) == (
        "forward 0.400 m/s, lateral 0.100 m/s (rt/sportmodestate); yaw rate 0.300 rad/s (IMU)"
    )
    none = {**report, "velocity_source": None, "tracking_error_xy": None,
            "forward_velocity": None, "lateral_velocity": None}  # fmt: skip
    assert tracking_text(none) == f"xy - ({NO_VELOCITY}), yaw 0.200 rad/s (IMU)"
    assert measured_text(none) == "velocity -; yaw rate 0.300 rad/s (IMU)"
