"""The robot's remote: ``wireless_remote`` decoded from bytes packed by hand from Unitree's
``xRockerBtnDataStruct``, sticks mapped into the contract's ranges, the remote script; and the
command and safety limits a run accepts (no wire: fast)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from orin_rl.errors import OrinError
from orin_rl.robot import RobotError
from orin_rl.robot.contract import DeployContract, ObservationTerm
from orin_rl.robot.remote import COMBOS, RemoteScript, RemoteState, StickCommand, decode, encode
from orin_rl.robot.safety import SafetyConfig

# xRockerBtnDataStruct: head[2], 16 button bits from bit 0, then lx, rx, ry, L2, ly (float32 LE)
NAMES = ("R1", "L1", "start", "select", "R2", "L2", "F1", "F2", "A", "B", "X", "Y", "up", "right",
         "down", "left")  # fmt: skip
BIT = {name: i for i, name in enumerate(NAMES)}
RANGES = [[-0.5, 1.0], [-0.5, 0.5], [-1.0, 1.0]]
"""unitree_rl_mjlab's G1 deploy.yaml command ranges."""


def packed(buttons=(), lx=0.0, rx=0.0, ry=0.0, l2=0.0, ly=0.0) -> bytes:
    """40 bytes as Unitree's struct lays them out, by hand."""
    bits = sum(1 << BIT[b] for b in buttons)
    return (b"\xfe\xef" + struct.pack("<H", bits) + struct.pack("<fffff", lx, rx, ry, l2, ly)
            + bytes(16))  # fmt: skip


class TestDecode:
    def test_buttons_and_sticks_from_the_structs_bytes(self):
        """Each button's bit and each stick's offset, from bytes packed by hand (mutations:
        the button field read big-endian, lx and rx swapped, ly read at offset 16: each
        fails)."""
        raw = packed(("L2", "up"), lx=0.25, rx=-0.5, ry=0.75, l2=1.0, ly=-0.125)
        pad = decode(raw)
        assert sorted(pad.pressed()) == ["L2", "up"] and pad.held("L2+up")
        assert not pad.held("L2+B")
        assert (pad.lx, pad.rx, pad.ry, pad.l2, pad.ly) == (0.25, -0.5, 0.75, 1.0, -0.125)
        for name in BIT:
            assert decode(packed((name,))).pressed() == [name]
        assert decode(np.frombuffer(raw, np.uint8)) == pad
        assert encode(pad)[2:] == raw[2:]  # the twin's bytes are the struct's (head aside)

    def test_a_short_buffer_is_refused(self):
        with pytest.raises(RobotError, match="40"):
            decode(bytes(39))


class TestSticks:
    def test_sticks_map_into_the_ranges_with_a_deadzone(self):
        """Forward = ly, left = -lx, turn = -rx; full deflection reaches the range's end on
        its side, the deadzone gives zero, halfway past it is half (mutations: no deadzone;
        a symmetric scale by the high end: back would give -1.0 m/s outside [-0.5, 1])."""
        sticks = StickCommand(RANGES, deadzone=0.1)
        np.testing.assert_allclose(sticks.of(RemoteState(ly=1.0, lx=-1.0, rx=1.0)),
                                   [1.0, 0.5, -1.0])  # fmt: skip
        np.testing.assert_allclose(sticks.of(RemoteState(ly=-1.0, lx=1.0, rx=-1.0)),
                                   [-0.5, -0.5, 1.0])  # fmt: skip
        np.testing.assert_allclose(sticks.of(RemoteState(ly=0.09, lx=-0.05, rx=0.1)), 0.0)
        np.testing.assert_allclose(sticks.of(RemoteState(ly=0.55)), [0.5, 0.0, 0.0])

    def test_the_remote_needs_three_commands(self):
        with pytest.raises(RobotError, match="--command"):
            StickCommand([[-1.0, 1.0]])


class TestScript:
    def test_a_script_holds_each_step_until_the_next(self, tmp_path):
        """Timed buttons and sticks (the twin's hand on the remote); an unknown key is one
        line."""
        path = tmp_path / "remote.json"
        path.write_text(json.dumps([{"t": 0.5, "buttons": COMBOS["stand"]},
                                    {"t": 2.0, "ly": 0.5}]))  # fmt: skip
        script = RemoteScript.load(path)
        assert script.at(0.4) == RemoteState()
        assert script.at(1.9).held(COMBOS["stand"])
        assert script.at(5.0) == RemoteState(ly=0.5)
        path.write_text(json.dumps([{"t": 0, "lz": 1}]))
        with pytest.raises(RobotError, match="unknown keys"):
            RemoteScript.load(path)


def _contract() -> DeployContract:
    return DeployContract(
        joint_names=["hip"], default_joint_pos=[0.0], action_scale=[0.5], action_offset=[0.0],
        stiffness=[40.0], damping=[2.0], step_dt=0.02,
        observations=[ObservationTerm("joint_pos", "joint_pos_rel", 1)],
        commands={"name": "twist", "terms": ["lin_vel_x", "lin_vel_y", "ang_vel_z"],
                  "ranges": {"lin_vel_x": [-1.0, 1.0], "lin_vel_y": [-1.0, 1.0],
                             "ang_vel_z": [-0.5, 0.5]}},
    )  # fmt: skip


class TestLimits:
    def test_a_fixed_command_outside_the_training_ranges_is_refused(self):
        """``--command 100,0,0`` ran to its end with a tracking error of 100 m/s (issue 51):
        now one line naming the ranges (mutation: the range check removed)."""
        from orin_rl.runtime.robot_run import parse_command

        with pytest.raises(OrinError, match=r"lin_vel_x 100 is outside.*lin_vel_x \[-1, 1\]"):
            parse_command("100,0,0", _contract(), 5.0)
        assert parse_command("1,0,-0.5", _contract(), 5.0).value.tolist() == [1.0, 0.0, -0.5]

    def test_every_command_is_clamped_to_the_ranges(self):
        """``clamp`` (what the plant applies to every command, fixed, random or the remote's)
        clips each element into its own range."""
        from orin_rl.robot.remote import clamp

        ranges = _contract().command_ranges()
        np.testing.assert_allclose(clamp(np.array([3.0, -2.0, 0.7]), ranges), [1.0, -1.0, 0.5])

    @pytest.mark.parametrize("field, value", [("tilt_limit", 100.0), ("silence_s", 60.0),
                                              ("late_factor", 1000.0), ("joint_margin", 9.0)])  # fmt: skip
    def test_limits_that_switch_a_check_off_are_refused(self, field, value):
        """``--tilt-limit 100`` was accepted and turned the tilt stop off (issue 51); each
        limit now has a range in which its check still works (mutation: no ``check``)."""
        from orin_rl.robot.safety import SafetyMachine

        with pytest.raises(RobotError, match=field.replace("_", "-")):
            SafetyMachine(_contract(), SafetyConfig(**{field: value}))
        SafetyMachine(_contract(), SafetyConfig(tilt_limit=0.8))


@pytest.mark.parametrize("command", [[0.5, 0.0, 0.0], [-0.3, 0.25, -0.7], [1.0, -0.5, 1.0],
                                     [0.0, 0.0, 0.0]])  # fmt: skip
def test_the_sticks_for_a_command_give_that_command(command):
    """``sticks_for`` is ``of``'s inverse (the deadzone and each side's range end included)
    through the float32 bytes the remote sends: 0.5 m/s forward on [-0.5, 1.0] is ly 0.55, a
    left turn is the right stick left (rx < 0); a value outside its range is one line
    (mutation: the inverse without the deadzone: 0.5 m/s came out 0.44)."""
    sticks = StickCommand(RANGES)
    values = sticks.sticks_for(command)
    assert sticks.of(decode(encode(RemoteState(**values)))) == pytest.approx(command, abs=1e-6)
    if command == [0.5, 0.0, 0.0]:
        assert values == {"ly": pytest.approx(0.55), "lx": 0.0, "rx": 0.0}
    if command[2] > 0:
        assert values["rx"] < 0
    with pytest.raises(RobotError, match=r"1.5 is outside the command range \[-0.5, 1\]"):
        sticks.sticks_for([1.5, 0.0, 0.0])


def test_a_range_without_zero_is_spanned_by_the_whole_stick():
    """A range that does not hold zero ([0.2, 1.0]): the stick's middle is the range's middle,
    and the inverse finds it."""
    from orin_rl.robot.remote import range_to_stick, stick_to_range

    for value in (0.2, 0.45, 0.6, 1.0):
        stick = range_to_stick(value, 0.2, 1.0, 0.1)
        assert stick_to_range(stick, 0.2, 1.0, 0.1) == pytest.approx(value)
