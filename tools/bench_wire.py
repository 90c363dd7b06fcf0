"""Benchmark: the robot wire's message work on this CPU, ours against the libraries' own.

    python3 tools/bench_wire.py [--out docs/benchmarks/wire_cpu] [--repeats 2000]

Per message, the median time of: cyclonedds-python's ``serialize()``/``deserialize()`` of
Unitree's G1 LowState_ and LowCmd_ (our IDL types: the same bytes as Unitree's), against
orin_rl's numpy codec (``robot.wire.Layout``: encode the fields the twin sets, decode the
fields the plant reads); and Unitree's CRC (its Python SDK: its C library through ctypes on
Linux, where installed) against orin_rl's table CRC, on the same command. Ratios are the
libraries' time over ours, measured in the same run. Writes OUT.json and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path

import numpy as np
from bench_common import call_times_ns


def _median_us(fn, repeats: int) -> float:
    return float(np.median(call_times_ns(fn, repeats, warmup=min(100, repeats))) / 1e3)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("docs/benchmarks/wire_cpu"))
    p.add_argument("--repeats", type=int, default=2000)
    args = p.parse_args()

    from orin_rl.robot import unitree_msgs as msgs
    from orin_rl.robot.crc import hg_lowcmd_crc
    from orin_rl.robot.unitree import STATE_FIELDS, HgCodec
    from orin_rl.robot.wire import Layout

    rng = np.random.default_rng(0)
    state = msgs.HgLowState()
    for m in state.motor_state:
        m.q, m.dq = float(rng.normal()), float(rng.normal())
    state_bytes = state.serialize()
    cmd = msgs.HgLowCmd()
    for m in cmd.motor_cmd:
        m.q, m.kp, m.kd, m.mode = float(rng.normal()), 40.0, 2.0, 1
    layout, codec = Layout(msgs.HgLowState), HgCodec()
    q, dq = np.asarray([m.q for m in state.motor_state]), np.zeros(35)
    zeros = np.zeros(35)
    rows = []

    def row(name, theirs, ours):
        t, o = _median_us(theirs, args.repeats), _median_us(ours, args.repeats)
        rows.append({"what": name, "library_us": t, "ours_us": o, "ratio": t / o})

    row("LowState_ decode (cyclonedds deserialize vs numpy gather of the plant's fields)",
        lambda: msgs.HgLowState.deserialize(state_bytes),
        lambda: layout.decode(state_bytes, STATE_FIELDS))  # fmt: skip
    row("LowState_ encode (cyclonedds serialize vs numpy scatter of the twin's fields)",
        state.serialize,
        lambda: layout.encode({"motor_state[].q": q, "motor_state[].dq": dq,
                               "imu_state.quaternion": [1.0, 0, 0, 0]}))  # fmt: skip
    row("LowCmd_ encode with its CRC (cyclonedds serialize + our CRC vs the codec)",
        lambda: (cmd.serialize(), hg_lowcmd_crc(cmd)),
        lambda: codec.lowcmd(q, zeros + 40.0, zeros + 2.0, zeros + 1, 5))  # fmt: skip
    try:
        from unitree_sdk2py.idl.default import unitree_hg_msg_dds__LowCmd_
        from unitree_sdk2py.utils.crc import CRC

        theirs = unitree_hg_msg_dds__LowCmd_()
        for a, b in zip(cmd.motor_cmd, theirs.motor_cmd, strict=True):
            b.q, b.kp, b.kd, b.mode = a.q, a.kp, a.kd, a.mode
        unitree = CRC()
        if unitree.Crc(theirs) != hg_lowcmd_crc(cmd):
            raise SystemExit("the two CRCs disagree: run tests/robot/test_wire.py")
        row("LowCmd_ CRC (Unitree's CRC().Crc vs the table CRC, both packing the message)",
            lambda: unitree.Crc(theirs), lambda: hg_lowcmd_crc(cmd))  # fmt: skip
        crc_note = f"Unitree's CRC path here: {'C library (ctypes)' if unitree.platform == 'Linux' else 'Python'}"
    except ImportError:  # the CRC row needs Unitree's SDK (unitree-sdk2py-dimos)
        crc_note = "Unitree's SDK not installed: no CRC row"
    result = {
        "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
        "python": platform.python_version(),
        "repeats": args.repeats,
        "note": crc_note,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# The robot wire's message work on the CPU (median µs, same run)",
        "",
        f"{result['machine']}, Python {result['python']}, {args.repeats} repeats; {crc_note}.",
        "",
        "| work | library | ours | library / ours |",
        "|---|---|---|---|",
        *(
            f"| {r['what']} | {r['library_us']:.1f} | {r['ours_us']:.1f} | {r['ratio']:.1f}× |"
            for r in rows
        ),
    ]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
