"""A real robot in low-level mode reports no base linear velocity (no ``rt/sportmodestate``
once the motion service is released): the contract of ``Orin-Velocity-Flat-Unitree-G1-Real``
reads nothing a G1 lacks, mjlab's own G1 contract does, and ``orin-rl run --plant unitree-g1``
refuses such a policy on a real robot in one line (the twin, which publishes the velocity,
runs it with a warning). Issue 51, item 1."""

from __future__ import annotations

import logging

import pytest

from orin_rl.robot import RobotError
from orin_rl.robot.contract import DeployContract
from tests.robot.conftest import REAL_G1, StandIn, linear_bundle, require_dds, run_g1


def test_the_real_g1_contract_reads_only_what_a_g1_reports_and_mjlabs_g1_does_not(
    real_contract, g1_contract
):
    """Every term of the new task's actor has a source a real G1 reports, so the policy
    needs no ``rt/sportmodestate``; mjlab's G1 reads ``base_lin_vel``, refused on a real
    robot in one line naming the term and the task to train (mutation: ``base_lin_vel`` in
    ``ROBOT_REPORTS``: mjlab's G1 passes as a real robot's policy)."""
    real = DeployContract.from_dict(real_contract)
    assert real.robot == "unitree-g1" and real.obs_dim == 96
    assert [t.source for t in real.observations] == [
        "gyro", "projected_gravity", "joint_pos_rel", "joint_vel_rel", "last_action", "command",
    ]  # fmt: skip
    assert all(t["robot_reports"] is True for t in real_contract["observations"])  # policy.json
    assert real.twin_only_terms() == [] and real.real_robot_refusal() is None
    assert not any(t.source == "base_lin_vel" for t in real.observations)

    mjlab_g1 = DeployContract.from_dict(g1_contract)
    assert mjlab_g1.twin_only_terms() == ["base_lin_vel"]
    assert [t["robot_reports"] for t in g1_contract["observations"]][:2] == [False, True]
    refusal = mjlab_g1.real_robot_refusal()
    assert "base_lin_vel" in refusal and REAL_G1 in refusal and "\n" not in refusal


def test_policy_json_without_the_flag_is_read_and_a_wrong_flag_is_refused(g1_contract):
    """A bundle exported before the flag existed gets it from the source; one that claims a
    real robot reports ``base_lin_vel`` is refused (mutation: ``check`` without the flag's
    consistency: the claim passes)."""
    old = {**g1_contract, "observations": [dict(t) for t in g1_contract["observations"]]}
    for term in old["observations"]:
        del term["robot_reports"]
    assert DeployContract.from_dict(old).twin_only_terms() == ["base_lin_vel"]
    old["observations"][0]["robot_reports"] = True
    with pytest.raises(RobotError, match=r"'base_lin_vel' says robot_reports True"):
        DeployContract.from_dict(old)


def test_run_refuses_mjlabs_g1_on_a_real_g1_in_one_line(g1_contract, tmp_path):
    """``orin-rl run --plant unitree-g1`` against a real G1 (``mode_machine`` 5, no
    ``rt/sportmodestate``) with mjlab's G1 policy: one line naming ``base_lin_vel`` and the
    task to train, exit 2, no stiffness ever sent (mutation: no ``check_reported`` call in
    the start-up: the plant waited out its 5 s for a velocity and said "a state estimator, or
    a policy trained without it", naming no task). The report is written, ``end``
    "refused" (it was not, and the last line printed said "passive -> stopped: run ended";
    mutation: the error raised from inside the run, before the report)."""
    import json

    require_dds()
    contract = DeployContract.from_dict(g1_contract)
    bundle = linear_bundle(tmp_path / "bundle", g1_contract)
    report = tmp_path / "run.json"
    robot = StandIn(40, contract, mode_machine=5, sport=False)
    robot.start()
    try:
        proc = run_g1(bundle, 40, "--steps", "5", "--report", str(report))
    finally:
        robot.running = False
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [x for x in proc.stderr.splitlines() if x.startswith("orin-rl run:")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert "base_lin_vel" in lines[0] and REAL_G1 in lines[0], lines[0]
    assert robot.kp_seen and max(robot.kp_seen) == 0.0  # damping only reached it
    data = json.loads(report.read_text())
    assert data["end"] == "refused" and data["error"] in lines[0], data
    cause = "refused: a real unitree-g1 does not report base_lin_vel"
    assert data["transitions"][-1]["cause"] == cause, data["transitions"]
    assert f"passive -> stopped: {cause}" in proc.stdout and "run ended" not in proc.stdout


def test_the_twin_runs_mjlabs_g1_with_a_warning_and_a_g1_runs_the_real_task(
    g1_contract, real_contract, caplog
):
    """A simulator (``mode_machine`` 0, publishing the velocity) stands mjlab's G1 policy up
    with a warning naming ``base_lin_vel`` (mutation: the warning dropped); a real G1 with
    no ``rt/sportmodestate`` stands the new task's policy up, the plant waiting for no
    velocity and reporting none measured."""
    require_dds()
    from orin_rl.robot.safety import Mode, SafetyConfig
    from orin_rl.robot.unitree import UnitreePlant

    for domain, deploy, mode_machine, sport in ((41, g1_contract, 0, True),
                                                (42, real_contract, 5, False)):  # fmt: skip
        contract = DeployContract.from_dict(deploy)
        robot = StandIn(domain, contract, mode_machine=mode_machine, sport=sport)
        robot.start()
        caplog.clear()
        plant = UnitreePlant(contract, domain=domain, interface="lo",
                             safety=SafetyConfig(stand_s=0.2))  # fmt: skip
        try:
            with caplog.at_level(logging.WARNING, logger="orin_rl.robot.unitree"):
                plant.start(wait_s=5.0)
            assert plant.machine.mode is Mode.POLICY, plant.machine.transitions
        finally:
            plant.close()
            robot.running = False
        warned = [r.getMessage() for r in caplog.records if "base_lin_vel" in r.getMessage()]
        if sport:
            assert len(warned) == 1 and REAL_G1 in warned[0], caplog.records
        else:
            assert not plant.needs_velocity and warned == []
            assert plant.report()["velocity_source"] is None
