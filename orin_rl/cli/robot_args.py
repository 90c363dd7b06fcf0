"""The flags of the commands around a robot: ``plant-server``, ``sim-robot`` and the robot
options of ``run`` (the rest of ``orin-rl``'s flags are in ``cli/parser.py``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from orin_rl.cli.argtypes import _NON_NEGATIVE, _POSITIVE, _POSITIVE_INT, _int_type

PLANTS = ("unitree-g1",)


def _peers(text: str) -> list[str]:
    """``--dds-peers``: comma-separated addresses, each one this machine can resolve (CycloneDDS
    would log an unknown one and go on, then find no robot)."""
    import socket

    peers = [a.strip() for a in text.split(",") if a.strip()]
    if not peers:
        raise argparse.ArgumentTypeError("give at least one address, e.g. 127.0.0.1")
    for peer in peers:
        try:
            socket.getaddrinfo(peer, None)
        except (OSError, UnicodeError):
            raise argparse.ArgumentTypeError(
                f"{peer!r} is not an address this machine can resolve (e.g. 127.0.0.1)"
            ) from None
    return peers


def _push(text: str):
    """``--push AT_S,FORCE_N[,DURATION_S]``: a ``twin.Push``."""
    from orin_rl.robot import RobotError
    from orin_rl.robot.twin import Push

    try:
        return Push.parse(text)
    except RobotError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _dds_flags(p: argparse._ActionsContainer, default_domain: int) -> None:
    p.add_argument("--dds-domain", type=_int_type(0, 232), default=default_domain,
                   help="DDS domain id (Unitree's robots: 0; their MuJoCo twin: 1)")  # fmt: skip
    p.add_argument(
        "--dds-interface",
        metavar="IF",
        help="network interface DDS binds to (lo: this machine only; a robot: the interface on "
        "its network, e.g. eth0; default: CycloneDDS's choice)",
    )
    p.add_argument(
        "--dds-peers",
        metavar="ADDR[,ADDR]",
        type=_peers,
        help="discover by unicast to these addresses, multicast off (a network or an emulator "
        "without multicast; both ends need it, e.g. 127.0.0.1 for a twin here; default: "
        "multicast discovery)",
    )


_STOP_LIMITS = (
    ("--tilt-limit", 1.0, "above this base tilt in radians (at most 1.2)"),
    (
        "--late-factor",
        1.5,
        "when a policy tick comes this many periods after the previous one (at most 5)",
    ),
    ("--silence-s", 0.1, "when the robot's state is silent this many seconds (at most 0.5)"),
)
"""The latched stops' flags of ``run --plant``: flag, default, when it stops."""


def robot_run_flags(p: argparse.ArgumentParser) -> None:
    """``orin-rl run --plant ...``."""
    g = p.add_argument_group("robot (--plant)")
    g.add_argument(
        "--plant",
        choices=PLANTS,
        help="drive a robot over its own wire (default: none, a simulated env)",
    )
    _dds_flags(g, default_domain=0)
    g.add_argument("--command", metavar="VX,VY,WZ", dest="velocity_command",
                   help="the velocity command, clamped to the policy's training ranges "
                   "(default: zero; 'remote': the robot's remote, whose L2+up stands it up and "
                   "R1+X starts the policy; 'random': resampled in the training ranges every "
                   "--command-every seconds; 'ros2': ROS 2's cmd_vel, and the run publishes "
                   "joint_states, imu, diagnostics). L2+B on the remote stops the robot in "
                   "every case")  # fmt: skip
    g.add_argument("--command-every", type=_POSITIVE, default=5.0,
                   help="seconds between random commands")  # fmt: skip
    g.add_argument("--ros-domain", type=_int_type(0, 232),
                   help="--command ros2: ROS 2's domain (default: ROS_DOMAIN_ID or 0)")  # fmt: skip
    g.add_argument("--ros-namespace", default="",
                   help="--command ros2: the topics' namespace (default: none)")  # fmt: skip
    g.add_argument("--cmd-vel-timeout", type=_POSITIVE, default=0.5,
                   help="--command ros2: the command is zero after cmd_vel is silent this "
                   "many seconds")  # fmt: skip
    g.add_argument(
        "--stand-s",
        type=_POSITIVE,
        default=2.0,
        help="seconds of the interpolation to the default pose before the policy",
    )
    for flag, default, when in _STOP_LIMITS:
        g.add_argument(flag, type=_POSITIVE, default=default,
                       help=f"stop (damping, latched) {when}")  # fmt: skip
    g.add_argument("--wait-s", type=_POSITIVE, default=60.0,
                   help="seconds to wait for the robot's first state (a twin takes ~10 s to "
                   "start)")  # fmt: skip


def sim_robot_flags(p: argparse.ArgumentParser) -> None:
    """``orin-rl sim-robot``."""
    p.add_argument("--robot", default="g1", choices=["g1"], help="the robot to simulate")
    _dds_flags(p, default_domain=1)
    p.add_argument("--seconds", type=_POSITIVE, help="stop after this long (default: Ctrl-C)")
    p.add_argument(
        "--physics-dt",
        type=_POSITIVE,
        default=0.002,
        help="physics step; a state is published after each (0.002: 500 Hz)",
    )
    p.add_argument(
        "--hold-s",
        type=_NON_NEGATIVE,
        default=2.5,
        help="the gantry holds the pelvis until this long after the stand-up began",
    )
    p.add_argument(
        "--tilt",
        type=float,
        default=0.0,
        help="start the robot rolled by this many radians (tests the tilt stop)",
    )
    p.add_argument(
        "--remote-script",
        type=Path,
        metavar="JSON",
        help="play the robot's remote from this file of timed buttons and sticks, from each "
        'run\'s first command, e.g. [{"t": 0.5, "buttons": "L2+up"}, {"t": 4, "buttons": '
        '"R1+X"}, {"t": 6, "ly": 0.5}] (default: an idle remote)',
    )
    p.add_argument(
        "--push",
        type=_push,
        action="append",
        default=[],
        metavar="AT_S,FORCE_N[,DURATION_S]",
        help="push the pelvis sideways: FORCE_N newtons to the robot's left (negative: right; "
        "its heading at the push) for DURATION_S seconds (default 0.15), AT_S seconds after "
        "each run's first command (--remote-script's clock); repeatable. The G1's 33.3 kg "
        "take 110 N for 0.15 s as 0.5 m/s, the per-axis bound of mjlab's training push",
    )
    p.add_argument(
        "--report",
        type=Path,
        help="write the twin's JSON report here on exit: counts, falls (while a run drives the "
        "robot; after a run's end, folding under damping, apart), each push, and each run's "
        "base series every 20 ms (default: not written)",
    )


def plant_server_flags(p: argparse.ArgumentParser) -> None:
    """``orin-rl plant-server``."""
    p.add_argument("--env", default="Pendulum-v1", help="gymnasium id (default Pendulum-v1)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=_int_type(0, 65535), default=5555, help="UDP port (default 5555)")
    p.add_argument(
        "--max-episode-steps",
        type=_POSITIVE_INT,
        help="override the env's time limit (default: the env's own)",
    )


ROBOT_COMMANDS = [
    (
        "sim-robot",
        sim_robot_flags,
        "a robot's twin on its own wire (MuJoCo + Unitree SDK2 over DDS), for sim-to-sim",
        (
            "Step the task's robot model in MuJoCo (CPU) and speak Unitree SDK2 over DDS as "
            "the robot does: rt/lowcmd in (CRC checked, PD at every physics step), rt/lowstate "
            "and rt/sportmodestate out after each step, with --remote-script's remote in "
            "wireless_remote. Then: orin-rl run --model BUNDLE --plant unitree-g1 --dds-domain 1 "
            "--dds-interface lo --command remote. Back in its start pose 1 s after each run. "
            "Stops on Ctrl-C."
        ),
    ),
    (
        "plant-server",
        plant_server_flags,
        "serve a gymnasium env as a UDP plant for `train --online --plant udp://...`",
        (
            "Run a gymnasium environment as a plant in its own process, speaking the "
            "UDP protocol of orin_rl/runners/plant_udp.py: the worked example of a robot adapter "
            "(docs/online.md). Stops on a close request or Ctrl-C."
        ),
    ),
]
