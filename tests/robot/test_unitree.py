"""The G1 plant over DDS on loopback (``lo``), against a robot stand-in on the same wire:
stand-up, policy ticks, and the latched stops (a tilted robot, a non-finite action, a slow
policy, a silent robot); the twin's stand-up and a killed twin are in test_deploy_readme.py
(one twin serves both). Each test bounds its time and its domain id is its own."""

from __future__ import annotations

import gc
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.robot.conftest import StandIn, linear_bundle, require_dds

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
    proc = subprocess.run(
        [sys.executable, "-m", "orin_rl.cli", "-q", "run", "--model", str(bundle), "--plant",
         "unitree-g1", "--dds-domain", "25", "--dds-interface", "nosuchif0", "--steps", "5"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
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
