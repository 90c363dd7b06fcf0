"""Unitree's wire: our message types and codec give the bytes Unitree's IDL-generated types
give, and our CRC is Unitree's (its C library, through its Python SDK), on fresh random
messages; the CDR layout is also derived here by hand from the IDL, independently."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from tests.robot.conftest import require_dds

require_dds()

from orin_rl.robot import unitree_msgs as ours  # noqa: E402
from orin_rl.robot.crc import crc32_words_reference, crc_for, hg_lowcmd_crc  # noqa: E402
from orin_rl.robot.unitree import HgCodec  # noqa: E402
from orin_rl.robot.wire import Layout  # noqa: E402

ZERO_LOWCMD_CRC = 4262932383
"""Unitree's ``CRC().Crc`` of an all-zero ``unitree_hg`` LowCmd_ (its SDK, recorded)."""


def _unitree():
    """Unitree's IDL types and CRC (the ``unitree-sdk2py-dimos`` fork of its Python SDK)."""
    import os

    if os.environ.get("ORIN_RL_REQUIRE_ROBOT") == "1":
        import unitree_sdk2py  # noqa: F401
    idl = pytest.importorskip("unitree_sdk2py.idl.unitree_hg.msg.dds_")
    go = pytest.importorskip("unitree_sdk2py.idl.unitree_go.msg.dds_")
    crc = pytest.importorskip("unitree_sdk2py.utils.crc")
    return idl, go, crc.CRC()


def _fill(msg, rng, skip=()):
    """Random values in every field of an IDL message (in place), by its annotations."""
    import typing

    for name in msg.__dataclass_fields__:
        if name in skip:
            continue
        hint = typing.get_type_hints(type(msg), include_extras=True)[name]
        value = getattr(msg, name)
        if hasattr(value, "__dataclass_fields__"):
            _fill(value, rng)
        elif isinstance(value, list) and value and hasattr(value[0], "__dataclass_fields__"):
            for item in value:
                _fill(item, rng)
        else:
            setattr(msg, name, _random(hint, value, rng))


def _random(hint, value, rng):
    import typing

    meta = typing.get_args(hint)[1]
    kind = meta if isinstance(meta, str) else typing.get_args(meta.subtype)[1]
    n = None if isinstance(meta, str) else meta.length
    if kind.startswith("float"):
        draw = lambda: float(np.float32(rng.normal()))  # noqa: E731
    else:
        bits = int(kind.lstrip("uint").lstrip("int"))
        low, high = (0, 2**bits) if kind.startswith("u") else (-(2 ** (bits - 1)), 2 ** (bits - 1))
        draw = lambda: int(rng.integers(low, high))  # noqa: E731
    return draw() if n is None else [draw() for _ in range(n)]


def _copy(src, dst):
    """Field by field from one IDL message into another type's (same layout, other class)."""
    for name in src.__dataclass_fields__:
        value = getattr(src, name)
        if hasattr(value, "__dataclass_fields__"):
            _copy(value, getattr(dst, name))
        elif isinstance(value, list) and value and hasattr(value[0], "__dataclass_fields__"):
            for a, b in zip(value, getattr(dst, name), strict=True):
                _copy(a, b)
        else:
            setattr(dst, name, value)


@pytest.mark.parametrize(
    "name, theirs_of",
    [
        ("HgLowCmd", lambda u, g: u.LowCmd_),
        ("HgLowState", lambda u, g: u.LowState_),
        ("GoSportModeState", lambda u, g: g.SportModeState_),
    ],
)
def test_our_types_serialise_to_unitrees_bytes(name, theirs_of):
    """Fresh random values in every field: our type's bytes, Unitree's type's bytes and our
    numpy codec's bytes are one and the same; Unitree's type reads ours back (mutations: two
    fields of MotorCmd_ swapped, an array one element short: the bytes differ)."""
    unitree, go, _ = _unitree()
    from unitree_sdk2py.idl import default

    factory = {
        "HgLowCmd": default.unitree_hg_msg_dds__LowCmd_,
        "HgLowState": default.unitree_hg_msg_dds__LowState_,
        "GoSportModeState": default.unitree_go_msg_dds__SportModeState_,
    }[name]
    cls = getattr(ours, name)
    rng = np.random.default_rng()
    for _ in range(3):
        mine = cls()
        _fill(mine, rng)
        theirs = factory()
        _copy(mine, theirs)
        data = mine.serialize()
        assert data == theirs.serialize()
        assert theirs_of(unitree, go).deserialize(data).serialize() == data
        layout = Layout(cls)
        fields = layout.decode(data, layout.fields)
        assert bytes(layout.encode(fields)) == data


def test_cdr_bytes_derived_by_hand_from_the_idl():
    """Independently of cyclonedds and Unitree: XCDR1 little-endian, header 00 01 00 00, each
    primitive aligned to its size, structs adding none: LowCmd_ by hand from the IDL."""
    rng = np.random.default_rng()
    msg = ours.HgLowCmd()
    _fill(msg, rng)
    body = bytearray()

    def put(fmt, value):
        size = struct.calcsize(fmt)
        body.extend(b"\0" * (-len(body) % size))
        body.extend(struct.pack("<" + fmt, value))

    put("B", msg.mode_pr)
    put("B", msg.mode_machine)
    for m in msg.motor_cmd:
        put("B", m.mode)
        for v in (m.q, m.dq, m.tau, m.kp, m.kd):
            put("f", v)
        put("I", m.reserve)
    for v in msg.reserve:
        put("I", v)
    put("I", msg.crc)
    assert msg.serialize() == b"\x00\x01\x00\x00" + bytes(body)
    assert Layout(ours.HgLowCmd).size == 4 + len(body) == 1004


def test_the_crc_is_unitrees():
    """Our table CRC, the bit loop and Unitree's own CRC (its C library on Linux) agree on
    fresh random commands and on the recorded all-zero value (mutations: another polynomial,
    the crc word included in the sum, a table built one word short: each differs)."""
    _, _, unitree_crc = _unitree()
    from unitree_sdk2py.idl import default

    assert hg_lowcmd_crc(ours.HgLowCmd()) == ZERO_LOWCMD_CRC
    rng = np.random.default_rng()
    for _ in range(20):
        mine = ours.HgLowCmd()
        _fill(mine, rng)
        theirs = default.unitree_hg_msg_dds__LowCmd_()
        _copy(mine, theirs)
        assert hg_lowcmd_crc(mine) == unitree_crc.Crc(theirs)
    for n in (1, 3, 250):
        words = rng.integers(0, 2**32, n + 1, dtype=np.uint64).astype(np.uint32)
        assert crc_for(n).of_bytes(words.tobytes()) == crc32_words_reference(words[:-1].tolist())


def test_the_codecs_commands_carry_unitrees_crc():
    """What the plant publishes, read by Unitree's type: its CRC checks out with Unitree's
    CRC, and the values are the arrays given."""
    unitree, _, unitree_crc = _unitree()
    codec = HgCodec()
    rng = np.random.default_rng()
    q, kp, kd = (rng.normal(size=35).astype(np.float32) for _ in range(3))
    mode = rng.integers(0, 2, 35)
    msg = unitree.LowCmd_.deserialize(bytes(codec.lowcmd(q, kp, kd, mode, 5)))
    assert msg.mode_machine == 5
    assert [m.q for m in msg.motor_cmd] == q.tolist() and [m.mode for m in msg.motor_cmd] == list(
        mode
    )
    assert unitree_crc.Crc(msg) == msg.crc


def test_the_robot_side_runs_without_torch():
    """A robot's deploy image carries no torch: the plant, the codec, the contract and the
    run path import and work with torch unimportable (mutation: a module-level torch import
    in ``robot/``)."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import orin_rl.runtime.robot_run, orin_rl.robot.unitree, orin_rl.robot.safety\n"
        "from orin_rl.robot.unitree import HgCodec\n"
        "import numpy as np\n"
        "HgCodec().lowcmd(np.zeros(35), np.zeros(35), np.zeros(35), np.zeros(35), 5)\n"
        "print(sorted({m.split('.')[0] for m, v in sys.modules.items() if v is not None} & "
        "{'torch', 'numba', 'mjlab', 'warp'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
