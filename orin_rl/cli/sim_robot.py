"""``orin-rl sim-robot``: a robot's twin on its own wire (``robot/twin.py``)."""

from __future__ import annotations

import argparse


def cmd_sim_robot(args: argparse.Namespace) -> int:
    """Run the twin until ``--seconds`` or Ctrl-C; print its report."""
    from orin_rl.robot import wire
    from orin_rl.robot.remote import RemoteScript
    from orin_rl.robot.twin import RobotTwin

    wire.use_peers(args.dds_peers)

    script = RemoteScript.load(args.remote_script) if args.remote_script else None
    print(f"sim-robot    building unitree-{args.robot}'s model (~10 s)", flush=True)
    twin = RobotTwin(
        f"unitree-{args.robot}",
        domain=args.dds_domain,
        interface=args.dds_interface,
        physics_dt=args.physics_dt,
        hold_s=args.hold_s,
        tilt0=args.tilt,
        remote=script,
        pushes=args.push,
        series_every_s=0.02 if args.report else None,  # the base's series: for the report
    )
    remote = f", remote script {args.remote_script}" if script else ""
    for push in args.push:
        remote += (f"; push {push.force_n:g} N for {push.duration_s:g} s at {push.at_s:g} s "
                   f"(Δv {push.force_n * push.duration_s / twin.mass:+.2f} m/s on "
                   f"{twin.mass:.1f} kg)")  # fmt: skip
    print(
        f"sim-robot    unitree-{args.robot} on DDS domain {args.dds_domain} "
        f"({args.dds_interface or 'default interface'}), physics {args.physics_dt * 1e3:g} ms"
        f"{remote}; back in its start pose 1 s after each run",
        flush=True,
    )
    try:
        report = twin.run(args.seconds, args.report)
    finally:
        wire.release_domains()  # DDS's threads end before the interpreter's teardown
    print(
        f"sim-robot    {report['seconds']:.1f} s, {report['commands']} commands "
        f"({report['bad_crc']} with a bad CRC), {report['states']} states, "
        f"{report['falls']} falls while driven ({report['falls_after_end']} after a run's "
        f"end, folding under damping), {report['late_steps']} late steps"
    )
    for push in report["pushes"]:
        fell = {True: "fell", False: "no fall", None: "not watched"}[push["fell"]]
        dv = "-" if push["base_dv"] is None else f"{push['base_dv']:+.2f}"
        print(f"sim-robot    push at {push['at_s']:.2f} s of run {push['run']}: "
              f"{push['force_n']:g} N for {push['duration_s']:g} s, base Δv {dv} m/s "
              f"(impulse/mass {push['expected_dv']:+.2f}); {fell} within "
              f"{push['fell_within_s']:g} s")  # fmt: skip
    return 0
