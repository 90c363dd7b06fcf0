"""The twin (``orin-rl sim-robot``) as a user meets it (issue 51 item 4): its interface checked
before the model is built and in one line, a second twin on a domain refused, and the robot
back in its start pose once the run that drove it has ended (a fallen twin served no second
run). In-process on loopback DDS, one model built for the file's tests."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from tests.robot.conftest import require_dds, require_mjlab

require_dds()

from orin_rl.robot import RobotError  # noqa: E402
from orin_rl.robot.observations import tilt  # noqa: E402


def test_a_missing_interface_is_one_line_before_the_model_is_built(monkeypatch):
    """``--dds-interface`` naming no interface: CycloneDDS printed its own line and gave up
    after 17.7 s, after the model's build (mutations: the check after the build; no check:
    CycloneDDS's line comes back)."""
    from orin_rl.robot import twin as twin_mod

    def no_build(*_):
        raise AssertionError("the model was built before the interface was checked")

    monkeypatch.setattr(twin_mod, "build_model", no_build)
    with pytest.raises(RobotError, match=r"no network interface 'nosuchif0'.*lo"):
        twin_mod.RobotTwin("unitree-g1", domain=33, interface="nosuchif0")
    proc = subprocess.run(
        [sys.executable, "-m", "orin_rl.cli", "-q", "sim-robot", "--dds-domain", "33",
         "--dds-interface", "nosuchif0", "--seconds", "1"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert (
        proc.stderr.strip().splitlines()
        == [
            line
            for line in proc.stderr.splitlines()
            if line.startswith("orin-rl sim-robot: error:")
        ]
        and len(proc.stderr.strip().splitlines()) == 1
    ), proc.stderr


@pytest.fixture(scope="module")
def g1_model():
    """The G1 task's scene, built once for this file's twins."""
    require_mjlab()
    from orin_rl.robot.twin import TASKS, build_model

    return build_model(TASKS["unitree-g1"], 0.002)


def test_the_twin_resets_after_a_run_and_a_second_twin_is_refused(g1_model):
    """A run drives the twin (a damping command), the robot falls over (knocked to 1.5 rad);
    within 1 s of the last command it is left as it is (the run sees its fall), after that it
    is back upright in its start pose, limp, on the gantry; a second twin on the same domain
    is refused before it publishes (mutations: no reset; the publisher count removed)."""
    from orin_rl.robot import unitree_msgs as msgs
    from orin_rl.robot.twin import RobotTwin
    from orin_rl.robot.unitree import HgCodec
    from orin_rl.robot.wire import Endpoint, participant

    twin = RobotTwin("unitree-g1", domain=34, interface="lo", model=g1_model)
    start = twin.d.qpos.copy()
    writer = Endpoint(participant(34, "lo"), msgs.LOWCMD, msgs.HgLowCmd, "writer")
    damping = HgCodec().lowcmd(np.zeros(35), np.zeros(35), np.full(35, 3.0), np.ones(35), 0)
    deadline = time.monotonic() + 10.0
    t = 0.0
    while twin.report["commands"] == 0 and time.monotonic() < deadline:
        writer.write(damping)
        time.sleep(0.01)
        t += 0.01
        twin.step(t)
    assert twin.report["commands"] > 0
    twin.d.qpos[3:7] = [np.cos(0.75), np.sin(0.75), 0.0, 0.0]  # knocked over
    twin.step(t + 0.5)
    assert tilt(twin.d.qpos[3:7]) > 1.4 and twin.report["resets"] == 0
    twin.step(t + 2.0)
    assert twin.report["resets"] == 1 and tilt(twin.d.qpos[3:7]) < 0.01
    np.testing.assert_allclose(twin.d.qpos[:3], start[:3], atol=1e-3)
    with pytest.raises(RobotError, match="already published on DDS domain 34"):
        RobotTwin("unitree-g1", domain=34, interface="lo", model=twin.m)


def test_a_fall_after_the_runs_end_is_counted_apart(g1_model):
    """A long-running twin counted 6 falls for a policy that never fell: each run's end
    latches damping and the robot folds. A fall while the run drives the robot (stiffness)
    counts in ``falls``; once a command of damping only has come after stiffness (the run's
    end), the fold counts in ``falls_after_end``, each in its run's own list too (mutation: no
    end seen in the commands: the second fold counts as a fall). Stepped on a clock of its
    own, its commands handed over without DDS."""
    from orin_rl.robot.twin import RobotTwin
    from orin_rl.robot.unitree import HgCodec

    twin = RobotTwin("unitree-g1", domain=46, interface="lo", model=g1_model, hold_s=0.0)
    codec, ones = HgCodec(), np.ones(35)
    stiff = bytes(codec.lowcmd(np.zeros(35), 40.0 * ones, 2.0 * ones, ones, 0))
    damping = bytes(codec.lowcmd(np.zeros(35), np.zeros(35), 3.0 * ones, ones, 0))
    knocked = [np.cos(0.75), np.sin(0.75), 0.0, 0.0]  # rolled 1.5 rad
    t = 0.0
    for commands in ([stiff], [stiff, damping]):  # run 0 falls driven; run 1 after its end
        for command in commands:
            twin.cmd_in.take_latest = lambda command=command: command
            for _ in range(3):
                twin.step(t)
                t += 0.002
        twin.d.qpos[3:7] = knocked
        twin.step(t)
        twin.reset()  # (what 1 s without commands does)
    report = twin.report
    assert (report["falls"], report["falls_after_end"]) == (1, 1), report
    (run0, run1) = report["runs"]
    assert len(run0["falls_s"]) == 1 and run0["falls_after_end_s"] == [] and not run0["ended_s"]
    assert run1["falls_s"] == [] and len(run1["falls_after_end_s"]) == 1 and run1["ended_s"]


def test_a_tilted_twin_gives_the_safety_code_and_the_report(g1_model, g1_contract, tmp_path):
    """The twin started rolled 1.2 rad (1.31 read at the check here), stepping in real time; ``run``
    against it: the start-up check stops it before the stand-up, exit 3 with the summary and
    the report (it exited 2 with one line, no report: "not started: tilt ...") (mutation: the
    start-up check's stop raised again)."""
    import json
    import re
    import threading

    from orin_rl.robot.twin import RobotTwin
    from tests.robot.conftest import linear_bundle, run_g1

    twin = RobotTwin("unitree-g1", domain=37, interface="lo", model=g1_model, tilt0=1.2)
    running = True

    def step_in_real_time():
        period, next_time = g1_model.opt.timestep, time.monotonic()
        while running:
            twin.step(time.monotonic())
            next_time += period
            time.sleep(max(0.0, next_time - time.monotonic()))

    stepper = threading.Thread(target=step_in_real_time, daemon=True)
    stepper.start()
    bundle = linear_bundle(tmp_path / "bundle", g1_contract)
    report = tmp_path / "run.json"
    try:
        proc = run_g1(bundle, 37, "--wait-s", "30", "--report", str(report))
    finally:
        running = False
        stepper.join(timeout=5.0)
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    data = json.loads(report.read_text())
    assert data["end"] == "safety stop", data
    assert re.fullmatch(r"tilt 1\.\d\d rad > 1", data["safety_stop"]), data["safety_stop"]
    assert [(t["from"], t["to"]) for t in data["transitions"]] == [("passive", "stopped")]
    assert "end          safety stop" in proc.stdout, proc.stdout


def test_the_twins_run_gives_back_the_callers_signal_handlers(g1_model, tmp_path):
    """The twin stops on SIGINT/SIGTERM while it runs; after ``run`` returns, the handlers are
    the caller's again (they were left installed: a later Ctrl-C in the caller only set a dead
    twin's flag; mutation: the restore removed)."""
    import signal

    from orin_rl.robot.twin import RobotTwin

    def mine(*_):
        raise AssertionError("not called")

    before = {sig: signal.signal(sig, mine) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        twin = RobotTwin("unitree-g1", domain=36, interface="lo", model=g1_model)
        twin.run(seconds=0.02, report=tmp_path / "twin.json")
        assert signal.getsignal(signal.SIGINT) is mine and signal.getsignal(signal.SIGTERM) is mine
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_a_push_changes_the_robots_velocity_by_its_impulse_over_the_mass(g1_model, g1_contract):
    """``--push 1.5,110,0.15``: 110 N on the pelvis for 0.15 s, 1.5 s after the run's first
    command, to the robot's left (turned 0.8 rad: its heading frame's +y). Without gravity and
    contacts (the model's copy) nothing else moves the robot: the centre of mass's velocity
    changes by F·Δt / m = 0.495 m/s along the push, m the model's 33.3 kg; the pelvis's by
    more (0.71 with the policy's gains holding the pose, 0.59 with the stand's twice those: the
    pelvis is pushed, the limbs follow through the joints' springs); the base series sees the
    lateral speed; the report records the push, survived. Stepped on a clock of its own, not in
    real time (mutations: the force in the world's +y whatever the heading: the direction and
    the velocity change along it fail; the push never ending: no velocity change recorded)."""
    import copy

    import mujoco

    from orin_rl.robot.contract import DeployContract
    from orin_rl.robot.twin import Push, RobotTwin
    from orin_rl.robot.unitree import HgCodec

    model = copy.deepcopy(g1_model)
    model.opt.gravity[:] = 0.0
    model.opt.disableflags |= mujoco.mjtDisableBit.mjDSBL_CONTACT
    twin = RobotTwin("unitree-g1", domain=44, interface="lo", model=model, hold_s=0.0,
                     pushes=[Push(1.5, 110.0, 0.15)])  # fmt: skip
    yaw = 0.8
    twin.d.qpos[3:7] = [np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)]
    mujoco.mj_forward(twin.m, twin.d)
    # the default pose held stiffly (the contract's motor map and gains), every step
    contract = DeployContract.from_dict(g1_contract)
    q, kp, kd = np.zeros(35), np.zeros(35), np.zeros(35)
    index = np.asarray(contract.motor_index)
    q[index] = contract.default_joint_pos
    kp[index], kd[index] = np.asarray(contract.stiffness), np.asarray(contract.damping)
    command = bytes(HgCodec().lowcmd(q, kp, kd, np.ones(35), 0))
    twin.cmd_in.take_latest = lambda: command
    t = 0.0
    for _ in range(round(5.0 / 0.002)):
        twin.step(t)
        t += 0.002

    mass = mujoco.mj_getTotalmass(model)  # the world and the floor weigh nothing
    assert twin.mass == pytest.approx(mass) and 33.0 < mass < 34.0
    (push,) = twin.report["pushes"]
    expected = 110.0 * 0.15 / mass
    assert push["at_s"] == pytest.approx(1.5, abs=0.0021) and push["duration_s"] == 0.15
    assert push["expected_dv"] == pytest.approx(expected) and push["on_gantry"] is False
    assert push["direction"] == pytest.approx([-np.sin(yaw), np.cos(yaw)], abs=1e-3)
    assert push["com_dv"] == pytest.approx(expected, rel=0.01), push
    assert expected <= push["base_dv"] < 1.6 * expected, push
    assert push["fell"] is False and twin.report["falls"] == 0
    base = twin.report["runs"][0]["base"]
    t_s, lateral = np.asarray(base["t"]), np.asarray(base["lateral"])
    assert np.all(np.abs(lateral[t_s < 1.5]) < 1e-3)
    during = lateral[(t_s >= 1.5) & (t_s < 1.7)]  # the push ends at 1.65 s
    assert during.max() == pytest.approx(push["base_dv"], rel=0.1), during
    assert np.diff(t_s) == pytest.approx(0.02, abs=1e-6)  # a row every 20 ms


def test_the_push_flag_is_read_and_a_bad_one_is_one_line(capsys):
    """``--push AT_S,FORCE_N[,DURATION_S]``: the duration defaults to 0.15 s; a malformed one
    or a duration out of (0, 1] is one line naming the form, before anything is built."""
    from orin_rl.cli.app import main
    from orin_rl.robot.twin import Push

    assert Push.parse("30,-110") == Push(30.0, -110.0, 0.15)
    assert Push.parse("2,50,0.1") == Push(2.0, 50.0, 0.1)
    for bad in ("30", "x,110", "30,110,0", "30,110,2", "-1,110"):
        with pytest.raises(SystemExit) as exit_:
            main(["-q", "sim-robot", "--dds-domain", "45", f"--push={bad}", "--seconds", "1"])
        err = [x for x in capsys.readouterr().err.strip().splitlines() if "error:" in x]
        assert exit_.value.code == 2 and len(err) == 1 and "AT_S" in err[0], (bad, err)
