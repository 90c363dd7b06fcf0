"""The safety state machine, transition by transition, on a fake clock (no wire)."""

from __future__ import annotations

import numpy as np
import pytest

from orin_rl.robot.contract import DeployContract, ObservationTerm
from orin_rl.robot.safety import Mode, SafetyConfig, SafetyMachine

UPRIGHT = np.array([1.0, 0.0, 0.0, 0.0])


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def _machine(**cfg):
    contract = DeployContract(
        joint_names=["hip", "knee"],
        default_joint_pos=[0.1, 0.6],
        action_scale=[0.5, 0.25],
        action_offset=[0.1, 0.6],
        stiffness=[40.0, 100.0],
        damping=[2.0, 5.0],
        step_dt=0.02,
        observations=[ObservationTerm("joint_pos", "joint_pos_rel", 2)],
        effort_limit=[20.0, 30.0],
        joint_pos_limits=[[-1.0, 1.0], [0.0, 2.0]],
    )
    clock = Clock()
    return SafetyMachine(contract, SafetyConfig(**cfg), clock=clock), clock


def _to_policy(machine, clock, q=(0.1, 0.6)):
    machine.start(np.array([0.0, 0.0]))
    clock.t += machine.cfg.stand_s
    assert machine.stand_done(np.array(q))
    assert machine.mode is Mode.POLICY


def test_passive_damps_stand_interpolates_to_the_default_pose_then_the_policy_drives():
    """Passive: kp 0, kd damping, targets the measured pose. Stand: halfway at half the time,
    the default pose at the end, with the stand gains; not before the pose is reached. Policy:
    offset + scale·action with the contract's gains (mutation: scale and offset swapped)."""
    machine, clock = _machine(stand_s=2.0, stand_gain_scale=2.0)
    cmd = machine.command(np.array([0.3, 0.2]))
    assert cmd.mode is Mode.PASSIVE and not cmd.kp.any() and np.all(cmd.kd == 3.0)
    np.testing.assert_allclose(cmd.q, [0.3, 0.2])
    machine.start(np.array([0.0, 0.0]))
    clock.t += 1.0
    cmd = machine.command(np.array([0.0, 0.3]))
    np.testing.assert_allclose(cmd.q, [0.05, 0.3])  # halfway
    np.testing.assert_allclose(cmd.kp, [80.0, 200.0])
    assert not machine.stand_done(np.array([0.05, 0.3]))  # too early
    clock.t += 1.0
    np.testing.assert_allclose(machine.command(np.array([0.1, 0.6])).q, [0.1, 0.6])
    assert not machine.stand_done(np.array([0.1, 1.0]))  # the knee has not come
    assert machine.stand_done(np.array([0.1, 0.55]))
    machine.policy_tick(np.array([0.4, -0.8]))
    cmd = machine.command(np.array([0.1, 0.6]))
    np.testing.assert_allclose(cmd.q, [0.1 + 0.5 * 0.4, 0.6 - 0.25 * 0.8])
    np.testing.assert_allclose(cmd.kp, [40.0, 100.0])
    assert [t["to"] for t in machine.transitions] == ["stand", "policy"]


def test_targets_are_clamped_so_the_pd_stays_within_the_effort_limit():
    """|target − q| ≤ τmax / kp (0.5 and 0.3 rad here) (mutation: no clamp)."""
    machine, clock = _machine()
    _to_policy(machine, clock)
    machine.policy_tick(np.array([10.0, -10.0]))
    cmd = machine.command(np.array([0.1, 0.6]))
    np.testing.assert_allclose(cmd.q, [0.1 + 20 / 40, 0.6 - 30 / 100])


@pytest.mark.parametrize(
    "event, cause",
    [
        ("tilt", "tilt 1.20 rad"),
        ("joint", "joint knee"),
        ("silence", "silent for 150 ms"),
        ("nan", "non-finite action"),
        ("late", "policy tick 40.0 ms after"),
        ("stalled", "no policy tick for 50.0 ms"),
    ],
)
def test_each_stop_latches_damping_with_its_cause(event, cause):
    """Tilt over the limit, a joint beyond its range, a silent robot, a NaN action, a late
    tick, a stalled policy: STOPPED, damping, the cause in the transition; nothing after
    brings the policy back (mutation: a stop that a later policy tick clears)."""
    machine, clock = _machine(tilt_limit=1.0)
    _to_policy(machine, clock)
    q = np.array([0.1, 0.6])
    machine.policy_tick(np.zeros(2))
    if event == "tilt":
        machine.check_state(np.array([np.cos(0.6), np.sin(0.6), 0.0, 0.0]), q)
    elif event == "joint":
        machine.check_state(UPRIGHT, np.array([0.1, 2.3]))
    elif event == "silence":
        machine.check_silence(0.15)
    elif event == "nan":
        machine.policy_tick(np.array([np.nan, 0.0]))
    elif event == "late":
        clock.t += 0.04
        machine.policy_tick(np.zeros(2))
    else:
        clock.t += 0.05
        machine.check_policy()
    assert machine.mode is Mode.STOPPED
    assert cause in machine.transitions[-1]["cause"], machine.transitions
    clock.t += 0.02
    machine.policy_tick(np.ones(2))
    machine.start(q)
    cmd = machine.command(q)
    assert cmd.mode is Mode.STOPPED and not cmd.kp.any() and np.all(cmd.kd > 0)
    assert [t["to"] for t in machine.transitions][-1] == "stopped"


def test_a_limp_robot_resting_outside_its_limits_is_not_a_stop_but_a_tilt_is():
    machine, _ = _machine()
    machine.check_state(UPRIGHT, np.array([0.1, 2.5]))
    assert machine.mode is Mode.PASSIVE
    machine.check_state(np.array([np.cos(0.7), np.sin(0.7), 0.0, 0.0]), np.zeros(2))
    assert machine.mode is Mode.STOPPED
