"""The deploy contract as a run loads it (issue 67, item 2): policy.json and its model are one
unit (``bundle_sha256``), so an edited contract is refused (a changed stiffness ran to exit 0);
every field is checked for shape and range, so a bundle from before the hash with a bad field
is refused too (a motor index past the robot's motors ended in a traceback, exit 1); each in
one line, exit 2, before anything reaches the wire. Pure Python, no mjlab: a contract made by
hand (``tiny_g1_contract``); the wire's flags (loopback, a domain of its own, a short wait)
only bound a run that a broken check would let through."""

from __future__ import annotations

import json

import pytest

from orin_rl.robot import RobotError
from orin_rl.robot.contract import DeployContract
from tests.robot.conftest import linear_bundle, tiny_g1_contract

WIRE = ["--dds-domain", "39", "--dds-interface", "lo", "--wait-s", "0.2", "--steps", "5"]
"""Where a run the checks let through would look for a robot: nowhere, briefly."""


def _edit(path: str, value):
    """An edit of the contract: the field at ``path`` (keys and indices, '/'-separated) set to
    ``value``, or removed where ``value`` is ``...``."""

    def edit(contract: dict) -> None:
        *parents, last = [int(p) if p.isdigit() else p for p in path.split("/")]
        target = contract
        for key in parents:
            target = target[key]
        if value is ...:
            del target[last]
        else:
            target[last] = value

    return edit


def _swap_motors(contract: dict) -> None:
    contract["motor_index"][0], contract["motor_index"][1] = 1, 0


BAD_FIELDS = {
    "motor past the motors": (_edit("motor_index/3", 40),
                              r"motor_index\[3\] \(left_knee_joint\) is 40, not a motor: "
                              r"unitree-g1 has motors 0 to 28"),
    "negative motor": (_edit("motor_index/0", -1), r"motor_index\[0\] .* is -1, not a motor"),
    "motor twice": (_edit("motor_index/1", 0), r"is motor 0, as is motor_index\[0\]"),
    "motors swapped": (_swap_motors, r"puts left_hip_pitch_joint on motor 1, which is "
                                     r"left_hip_roll_joint"),
    "negative stiffness": (_edit("stiffness/4", -40.0), r"stiffness\[4\] is -40, below 0"),
    "damping not a number": (_edit("damping/2", "2.0"), r"damping\[2\] is '2.0', not a number"),
    "infinite gain": (_edit("stiffness/0", float("inf")), r"stiffness\[0\] is inf, not a finite number"),
    "negative effort": (_edit("effort_limit/7", -1.0), r"effort_limit\[7\] is -1, below 0"),
    "limits reversed": (_edit("joint_pos_limits/5", [1.0, -1.0]),
                        r"joint_pos_limits\[5\] \(left_ankle_roll_joint\) is \[1, -1\]: its low "
                        r"is above its high"),
    "limit not a pair": (_edit("joint_pos_limits/5", [1.0]), r"is \[1.0\], not \[low, high\]"),
    "clip reversed": (_edit("action_clip", [[1.0, -1.0]] * 29), r"action_clip\[0\] .* low is "
                                                               r"above its high"),
    "scale too short": (_edit("action_scale", [0.25] * 28),
                        r"action_scale has 28 values, 29 expected"),
    "scale NaN": (_edit("action_scale/3", float("nan")), r"action_scale\[3\] is nan, not a finite"),
    "joint term narrow": (_edit("observations/3/dim", 28),
                          r"term 'joint_vel' \(joint_vel_rel\) has dim 28; its source gives 29"),
    "gyro wide": (_edit("observations/0/dim", 4), r"'base_ang_vel' \(gyro\) has dim 4"),
    "term scale length": (_edit("observations/1/scale", [1.0, 2.0]),
                          r"'projected_gravity': scale has 2 values, 3 expected"),
    "history negative": (_edit("observations/2/history_length", -1),
                         r"history_length -1 is not an integer >= 0"),
    "term clip reversed": (_edit("observations/4/clip", [5.0, -5.0]), r"clip is \[5, -5\]"),
    "command range reversed": (_edit("commands/ranges/lin_vel_x", [1.0, -1.0]),
                               r"commands.ranges.lin_vel_x is \[1, -1\]"),
    "command without range": (_edit("commands/ranges/ang_vel_z", ...),
                              r"commands.ranges has no range for 'ang_vel_z'"),
    "period off its parts": (_edit("step_dt", 0.03), r"step_dt 0.03 is not physics_dt 0.005 x "
                                                     r"decimation 4"),
    "period zero": (_edit("step_dt", 0.0), r"step_dt must be a positive period"),
    "joint twice": (_edit("joint_names/1", "left_hip_pitch_joint"),
                    r"joint 'left_hip_pitch_joint' is in joint_names twice"),
}  # fmt: skip
"""A bad field: how it is made, and the one line that refuses it."""


def test_a_contract_of_the_right_shape_passes():
    contract = DeployContract.from_dict(tiny_g1_contract())
    assert contract.num_joints == 29 and contract.obs_dim == 96


@pytest.mark.parametrize("what", BAD_FIELDS)
def test_each_field_out_of_shape_or_range_is_refused_in_one_line(what):
    """One line naming the field (and the joint, where it is one), then what to do
    (mutations, each failing its cases: no motor check (a motor past the motors, swapped or
    twice passes); no minimum on the gains and effort limits; no order check of the pairs; no
    width check of the observation terms; no range check of the command terms)."""
    make, message = BAD_FIELDS[what]
    data = tiny_g1_contract()
    make(data)
    with pytest.raises(RobotError, match=message) as err:
        DeployContract.from_dict(data, "b/policy.json")
    text = str(err.value)
    assert text.startswith("b/policy.json: ") and "\n" not in text, text
    assert text.endswith("export the bundle again (`orin-rl export`)"), text


def _run(bundle, capsys) -> tuple[int, list[str]]:
    from orin_rl.cli.app import main

    rc = main(["-q", "run", "--model", str(bundle), "--plant", "unitree-g1", *WIRE])
    return rc, capsys.readouterr().err.strip().splitlines()


def test_a_changed_stiffness_is_refused_in_one_line(tmp_path, capsys):
    """policy.json's stiffness edited after the export: the contract no longer matches its
    ``bundle_sha256``, refused in one line, exit 2 (it ran to exit 0; mutation: load_bundle
    without its check of the content)."""
    bundle = linear_bundle(tmp_path / "bundle", tiny_g1_contract())
    path = bundle / "policy.json"
    data = json.loads(path.read_text())
    data["deploy"]["stiffness"][0] = 80.0
    path.write_text(json.dumps(data, indent=2))
    rc, err = _run(bundle, capsys)
    assert rc == 2 and len(err) == 1, err
    assert "policy.json: changed since it was exported" in err[0] and "orin-rl export" in err[0]


def test_an_unsigned_bundles_out_of_range_motor_is_refused_in_one_line(tmp_path, capsys, caplog):
    """A bundle from before the hash is accepted with one warning naming `orin-rl export`, and
    its fields are still checked: a motor index past the G1's motors is one line, exit 2 (it
    ended in an IndexError's traceback, exit 1; mutation: no motor check: the run goes on to
    the wire and fails there, on something else)."""
    contract = tiny_g1_contract()
    contract["motor_index"][3] = 40
    bundle = linear_bundle(tmp_path / "bundle", contract)
    path = bundle / "policy.json"
    data = json.loads(path.read_text())
    del data["bundle_sha256"]
    path.write_text(json.dumps(data, indent=2))
    rc, err = _run(bundle, capsys)
    assert rc == 2 and len(err) == 1, err
    assert "motor_index[3] (left_knee_joint) is 40, not a motor" in err[0], err
    warned = [r.getMessage() for r in caplog.records if "bundle_sha256" in r.getMessage()]
    assert len(warned) == 1 and "orin-rl export" in warned[0], warned


def test_a_missing_bundle_folder_is_named_missing(tmp_path, capsys):
    """It was reported as a bundle without a deploy contract (mutation: no check that the
    folder is there)."""
    rc, err = _run(tmp_path / "runs" / "g1" / "bundle", capsys)
    assert rc == 2 and len(err) == 1 and "bundle: no such bundle folder" in err[0], err


def test_the_shipped_g1_bundle_loads_whole():
    """docs/examples/g1_walk_bundle (the README's policy for a user without a GPU: the one
    g1_walk_h200 measured) loads as a run loads it: its hash over policy.json, its model's
    sha256, every contract field; an actor a real G1 can feed (no ``base_lin_vel``)."""
    from pathlib import Path

    from orin_rl.bundle import load_bundle

    folder = Path(__file__).resolve().parents[2] / "docs" / "examples" / "g1_walk_bundle"
    info, onnx_path = load_bundle(folder, verify_hash=True)
    assert info.bundle_sha256 and onnx_path.is_file()
    assert info.env_id == "Orin-Velocity-Flat-Unitree-G1-Real"
    contract = DeployContract.from_dict(info.deploy)
    contract.check()
    sources = {t.source for t in contract.observations}
    assert "base_lin_vel" not in sources and "gyro" in sources
