"""``tools/g1_walk_twin.py``'s arithmetic, on a synthetic twin series: the remote script and
its sticks for the contract's ranges, and the means over the windows the script commanded
(the first second of each segment left out, the 3 s after the push, everything after a fall;
the falls are the twin's count while the run drove the robot, a collapse after the operator's
stop being counted apart by the twin). No DDS, no model: plain numbers."""

from __future__ import annotations

import numpy as np
import pytest

from orin_rl.robot import RobotError
from tools.g1_walk_twin import DT, measure, scenario, window

RANGES = [[-1.0, 1.0], [-1.0, 1.0], [-0.5, 0.5]]
"""The G1 velocity task's command ranges (lin_vel_x, lin_vel_y, ang_vel_z)."""


def _series(plan, end_s: float) -> dict[str, list[float]]:
    """A twin's base series every 20 ms: forward speed ramping 0 → 0.45 over the walk's first
    second then 0.45, 2.0 for the 3 s after the push (its sway), 0 elsewhere; yaw rate
    ramping over the turn's first second then 0.4."""
    t = np.round(np.arange(0.0, end_s, DT), 6)
    walk, turn = plan.segments
    push = plan.push["at_s"]
    forward = np.where((t >= walk.start_s) & (t < walk.end_s),
                       np.minimum(t - walk.start_s, 1.0) * 0.45, 0.0)  # fmt: skip
    forward = np.where((t >= push) & (t < push + 3.0), 2.0, forward)
    yaw = np.where((t >= turn.start_s) & (t < turn.end_s),
                   np.minimum(t - turn.start_s, 1.0) * 0.4, 0.0)  # fmt: skip
    zeros = np.zeros_like(t)
    return {"t": t.tolist(), "sim_t": t.tolist(), "forward": forward.tolist(),
            "lateral": zeros.tolist(), "yaw_rate": yaw.tolist(),
            "height": (zeros + 0.75).tolist(), "tilt": zeros.tolist()}  # fmt: skip


def test_the_script_commands_half_a_metre_and_half_a_radian_a_second():
    """0.5 m/s forward is the left stick at 0.55 (0.1 deadzone, full stick 1.0 m/s), 0.5 rad/s
    turning left the right stick fully left (turn = −rx, full stick 0.5 rad/s); the script
    stands at 0.5 s, starts the policy at 3.5 s, walks 2 s later for the ticks asked, turns,
    stops 2 s after; the push two thirds into the walk; a turn the ranges do not reach is one
    line (mutation: the turn's sign: rx +1 gives −0.5 rad/s)."""
    plan = scenario(RANGES, forward_ticks=250, yaw_ticks=150)
    walk, turn = plan.segments
    assert walk.sticks == {"ly": pytest.approx(0.55), "lx": 0.0, "rx": 0.0}
    assert turn.sticks == {"ly": 0.0, "lx": 0.0, "rx": -1.0}
    assert walk.command == pytest.approx([0.5, 0.0, 0.0], abs=1e-6)
    assert turn.command == pytest.approx([0.0, 0.0, 0.5], abs=1e-6)
    assert (walk.start_s, walk.end_s, walk.ticks) == (pytest.approx(5.5), pytest.approx(10.5), 250)
    assert (turn.start_s, turn.end_s, turn.ticks) == (pytest.approx(10.5), pytest.approx(13.5), 150)
    assert plan.stop_s == pytest.approx(15.5)
    assert plan.push == {"at_s": pytest.approx(5.5 + 5.0 * 2 / 3, abs=1e-3), "force_n": 110.0,
                         "duration_s": 0.15}  # fmt: skip
    buttons = [(s["t"], s.get("buttons")) for s in plan.script if s.get("buttons")]
    assert buttons == [(0.5, "L2+up"), (3.5, "R1+X"), (pytest.approx(15.5), "L2+B")]
    assert plan.steps * DT > plan.stop_s - 3.5  # the operator's stop ends the run, not steps
    with pytest.raises(RobotError, match=r"outside the command range \[-0.3, 0.3\]"):
        scenario([[-1.0, 1.0], [-1.0, 1.0], [-0.3, 0.3]], 250, 150)


def test_the_means_leave_out_the_acceleration_the_push_and_what_follows_a_fall():
    """A 10 s walk from 5.5 s, pushed at 12.17 s, a 3 s turn from 15.5 s. Forward speed over
    [walk + 1 s, push) and [push + 3 s, walk's end): 0.45 exactly, from 284 + 16 samples (the
    sway between left out); the yaw rate over [turn + 1 s, turn's end): 0.4 from 100; 500 and 150 ticks
    held. A fall at 17.0 s cuts the turn (25 samples, 75 ticks held) and counts; the twin's
    collapse after the stop (its ``falls_after_end_s``) does not (mutations: no skip: the
    ramp lowers the means; no push window: the sway raises the forward one; no cut at the
    fall: the turn's samples go on; the falls after the end counted: 1 fall)."""
    plan = scenario(RANGES, forward_ticks=500, yaw_ticks=150)
    assert plan.push["at_s"] == pytest.approx(12.167, abs=1e-3)
    base = _series(plan, 23.0)
    twin = {"runs": [{"base": base, "falls_s": [], "falls_after_end_s": [plan.stop_s + 0.5]}]}
    out = measure(twin, plan, skip_s=1.0)
    assert out["falls"] == 0
    assert out["forward_speed_mean"] == pytest.approx(0.45)
    assert out["windows"]["forward"]["forward"]["samples"] == 284 + 16
    assert out["yaw_rate_mean"] == pytest.approx(0.4)
    assert out["windows"]["yaw"]["yaw_rate"]["samples"] == 100
    assert (out["forward_ticks"], out["yaw_ticks"]) == (500, 150)
    assert out["windows"]["yaw"]["forward"]["mean"] == 0.0

    twin["runs"][0]["falls_s"] = [17.0]
    fell = measure(twin, plan, skip_s=1.0)
    assert fell["falls"] == 1 and fell["fall_times_s"] == [17.0]
    assert fell["windows"]["yaw"]["yaw_rate"]["samples"] == 25 and fell["yaw_ticks"] == 75
    assert fell["yaw_rate_mean"] == pytest.approx(0.4)
    assert fell["forward_speed_mean"] == pytest.approx(0.45)


def test_a_window_with_no_samples_has_no_mean():
    """A segment the robot never reached (it fell before): no samples, mean None."""
    base = {"t": [0.0, 0.02, 0.04], "forward": [1.0, 1.0, 1.0]}
    assert window(base, "forward", 1.0, 2.0) == {
        "from_s": 2.0, "to_s": 2.0, "excluded": [], "cut_s": None, "samples": 0, "mean": None,
    }  # fmt: skip
