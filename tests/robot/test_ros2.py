"""The ROS 2 bridge on plain CycloneDDS against real ROS 2: rclpy (Kilted, Fast DDS) from the
package registry, installed by the test set-up (``make install``), never by the deploy image.

The types' bytes against rclpy's own serialiser; rclpy nodes in subprocesses (one node a
process, ``ros2_peer.py``) publishing ``cmd_vel`` and echoing ``joint_states``, ``imu`` and
``diagnostics``; the command's clamp and its timeout on an injected clock, plus one bounded
real-time check of a silent ``cmd_vel``. Loopback only: CycloneDDS bound to ``lo``, Fast DDS
to 127.0.0.1 (``fastdds_loopback.xml``); each test its own domain (60-69)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.robot.conftest import require_dds

require_dds()

from orin_rl.robot import RobotError  # noqa: E402
from orin_rl.robot import ros2_msgs as m  # noqa: E402
from orin_rl.robot.ros2 import (  # noqa: E402
    CmdVelCommand,
    RobotSnapshot,
    Ros2CmdVel,
    Ros2Publisher,
    RunStatus,
    TickStats,
)
from orin_rl.robot.wire import FAST_DDS_VENDOR, participant  # noqa: E402

HERE = Path(__file__).parent
TERMS = ["lin_vel_x", "lin_vel_y", "ang_vel_z"]
RANGES = [[-0.5, 1.0], [-0.5, 0.5], [-1.0, 1.0]]  # Unitree's G1 deploy.yaml


def require_rclpy():
    """rclpy, or a skip (a failure where ORIN_RL_REQUIRE_ROS2=1, as in CI)."""
    if os.environ.get("ORIN_RL_REQUIRE_ROS2") == "1":
        import rclpy

        return rclpy
    return pytest.importorskip("rclpy", reason="the ROS 2 tests need rclpy: make install")


def peer_env(domain: int) -> dict[str, str]:
    """A rclpy process's environment: its domain, Fast DDS, loopback only."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("ROS_AUTOMATIC_DISCOVERY_RANGE", "ROS_LOCALHOST_ONLY",
                        "ROS_STATIC_PEERS")}  # fmt: skip
    env.update(ROS_DOMAIN_ID=str(domain), RMW_IMPLEMENTATION="rmw_fastrtps_cpp",
               FASTDDS_DEFAULT_PROFILES_FILE=str(HERE / "fastdds_loopback.xml"))  # fmt: skip
    return env


def peer(domain: int, *args: str) -> subprocess.Popen:
    """A rclpy node (``ros2_peer.py``) in its own process."""
    return subprocess.Popen([sys.executable, str(HERE / "ros2_peer.py"), *args],
                            env=peer_env(domain), stdout=subprocess.PIPE, text=True)  # fmt: skip


def records(proc: subprocess.Popen, timeout: float) -> list[dict]:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"the rclpy peer failed ({proc.returncode})"
    return [json.loads(line) for line in out.splitlines() if line.strip()]


# ---------------------------------------------------------------------- the types, byte for byte


def _to_rclpy(ours, ros_cls):
    """Our message as rclpy's, field by field by rclpy's field names."""
    ros = ros_cls()
    for name, kind in ros_cls.get_fields_and_field_types().items():
        value = getattr(ours, name)
        current = getattr(ros, name)
        if kind == "octet":
            value = bytes([value])
        elif hasattr(value, "__dataclass_fields__"):
            value = _to_rclpy(value, type(current))
        elif isinstance(value, list) and value and hasattr(value[0], "__dataclass_fields__"):
            pkg, _, typ = kind[len("sequence<") : -1].partition("/")
            module = __import__(f"{pkg}.msg", fromlist=[typ])
            value = [_to_rclpy(v, getattr(module, typ)) for v in value]
        setattr(ros, name, value)
    return ros


def _header(sec: int, frame: str) -> m.Header:
    return m.Header(stamp=m.Time(sec, 123456789), frame_id=frame)


def _cases():
    """(ours, rclpy's class): every field set, each value its own (a swap shows); by
    keyword where a field order is what is under test."""
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import Twist
    from nav_msgs.msg import Odometry
    from sensor_msgs.msg import Imu, JointState

    def v3(a):
        return m.Vector3(a, a + 0.25, a + 0.5)

    cov = [0.5 + i for i in range(36)]
    return [
        (m.Twist(v3(1.5), v3(-2.0)), Twist),
        (m.JointState(_header(7, "base"), ["left_hip", "right_knee_joint", "w"],
                      [0.5, 1.5, 2.5], [3.5, 4.5, 5.5], [6.5, 7.5, 8.5]), JointState),
        (m.Imu(header=_header(8, "imu_in_pelvis"),
               orientation=m.Quaternion(0.1, 0.2, 0.3, 0.9), orientation_covariance=cov[:9],
               angular_velocity=v3(3.0), angular_velocity_covariance=cov[9:18],
               linear_acceleration=v3(4.0), linear_acceleration_covariance=cov[18:27]), Imu),
        (m.Odometry(header=_header(9, "odom"), child_frame_id="pelvis",
                    pose=m.PoseWithCovariance(m.Pose(m.Point(1.0, 2.0, 3.0),
                                                     m.Quaternion(0.4, 0.5, 0.6, 0.7)), cov),
                    twist=m.TwistWithCovariance(m.Twist(v3(5.0), v3(6.0)), cov[::-1])),
         Odometry),
        (m.DiagnosticArray(_header(10, "d"), [
            m.DiagnosticStatus(2, "orin_rl: g1", "safety: stopped", "g1",
                               [m.KeyValue("mode", "stopped"), m.KeyValue("p99", "812.5")]),
            m.DiagnosticStatus(1, "b", "c", "", [])]), DiagnosticArray),
    ]  # fmt: skip


class TestTypes:
    """Each type's DDS name and bytes are rclpy's (mutations seen failing: Imu's
    ``angular_velocity`` moved before ``orientation_covariance``, Twist's type name without
    its trailing ``_``, DiagnosticStatus's ``level`` as int32, JointState's ``position`` and
    ``velocity`` swapped)."""

    def test_type_names_are_ros2s(self):
        require_rclpy()
        for ours, ros_cls in _cases():
            pkg = ros_cls.__module__.split(".")[0]
            assert ours.__idl_typename__ == f"{pkg}.msg.dds_.{ros_cls.__name__}_"

    def test_bytes_equal_rclpys_serialisation(self):
        require_rclpy()
        from rclpy.serialization import deserialize_message, serialize_message

        for ours, ros_cls in _cases():
            ros = _to_rclpy(ours, ros_cls)
            mine, theirs = ours.serialize(), serialize_message(ros)
            assert len(theirs) >= len(mine), ros_cls.__name__
            a = np.frombuffer(mine, np.uint8)
            b = np.frombuffer(theirs[: len(mine)], np.uint8)
            # Fast CDR leaves its alignment padding unset: compare every byte we set nonzero
            # (the values are all nonzero), then both ways through the other's deserialiser
            differ = np.flatnonzero((a != 0) & (a != b))
            assert not len(differ), f"{ros_cls.__name__}: bytes differ at {differ[:8]}"
            assert deserialize_message(mine, ros_cls) == ros, ros_cls.__name__
            assert type(ours).deserialize(theirs) == ours, ros_cls.__name__

    def test_topic_names(self):
        assert m.topic("cmd_vel") == "rt/cmd_vel"
        assert m.topic("joint_states", "/g1/") == "rt/g1/joint_states"
        assert m.topic("/imu", "robot_1") == "rt/robot_1/imu"
        assert m.stamp(1_700_000_000_123_456_789) == m.Time(1_700_000_000, 123_456_789)


# ---------------------------------------------------------------------- the command, no DDS


class TestCmdVelCommand:
    def test_clamped_to_the_contracts_ranges(self):
        """Mutation seen failing: the clamp removed."""
        cmd = CmdVelCommand(TERMS, RANGES, timeout_s=0.5)
        cmd.update(m.Twist(m.Vector3(2.0, -0.1, 9.0), m.Vector3(7.0, 7.0, -3.0)), now=10.0)
        np.testing.assert_array_equal(cmd.latest(10.1), [1.0, -0.1, -1.0])

    def test_silence_zeroes_the_command_at_the_timeout(self):
        """Mutation seen failing: the age check removed (the last Twist held forever)."""
        cmd = CmdVelCommand(TERMS, RANGES, timeout_s=0.5)
        np.testing.assert_array_equal(cmd.latest(0.0), [0, 0, 0])  # before any Twist
        cmd.update(m.Twist(m.Vector3(0.5, 0.0, 0.0), m.Vector3(0, 0, 0.2)), now=100.0)
        np.testing.assert_array_equal(cmd.latest(100.5), [0.5, 0.0, 0.2])
        np.testing.assert_array_equal(cmd.latest(100.5001), [0, 0, 0])
        cmd.update(m.Twist(m.Vector3(0.3, 0.0, 0.0)), now=101.0)  # the teleop is back
        np.testing.assert_array_equal(cmd.latest(101.2), [0.3, 0.0, 0.0])

    def test_a_non_finite_twist_is_dropped_and_does_not_keep_it_alive(self):
        cmd = CmdVelCommand(TERMS, RANGES, timeout_s=0.5)
        cmd.update(m.Twist(m.Vector3(0.4, 0, 0)), now=0.0)
        cmd.update(m.Twist(m.Vector3(float("nan"), 0, 0)), now=0.4)
        np.testing.assert_array_equal(cmd.latest(0.45), [0.4, 0, 0])
        np.testing.assert_array_equal(cmd.latest(0.6), [0, 0, 0])
        assert cmd.rejected == 1

    def test_terms_cmd_vel_cannot_drive_are_refused(self):
        with pytest.raises(RobotError, match=r"cmd_vel cannot drive.*heading"):
            CmdVelCommand(["lin_vel_x", "heading"], [[0, 1], [0, 1]])


def test_tick_stats():
    clock = iter([0, 5_000_000, 20_000_000, 45_000_000]).__next__
    stats = TickStats(period_s=0.02, clock=clock)
    sensor, actuate = stats.wrap(lambda: "obs", lambda a: None)
    for _ in range(2):
        actuate(sensor())  # 5 ms, then 25 ms: one deadline miss
    s = stats.summary()
    assert (s["ticks"], s["deadline_misses"], s["latency_max_us"]) == (2, 1, 25_000.0)
    assert s["latency_p50_us"] == 15_000.0


def test_diagnostics_levels():
    """The status the bridge publishes: OK while standing up; WARN in policy mode with
    cmd_vel silent (the robot stands still on a zero command); ERROR after a safety stop,
    its cause in the message; OK when the run simply ended. Mutations seen failing: a stop's
    level from the mode alone (a normal end reported as ERROR), no WARN on silence."""
    from types import SimpleNamespace

    from orin_rl.robot.ros2 import Ros2Bridge
    from orin_rl.robot.safety import Mode

    contract = SimpleNamespace(commands={"terms": TERMS}, command_ranges=lambda: RANGES,
                               step_dt=0.02, joint_names=["a"])  # fmt: skip
    bridge = Ros2Bridge(contract, domain=66, interface="lo")
    machine = SimpleNamespace(mode=Mode.STAND, transitions=[])
    bridge.plant = SimpleNamespace(machine=machine)
    assert bridge.status().level == m.OK
    machine.mode = Mode.POLICY
    status = bridge.status()
    assert status.level == m.WARN and "cmd_vel silent" in status.message
    bridge.command.update(m.Twist(m.Vector3(0.2, 0, 0)), now=bridge.command.clock())  # fresh
    status = bridge.status()
    assert status.level == m.OK and status.values["mode"] == "policy"
    np.testing.assert_array_equal(status.values["cmd_vel"], [0.2, 0, 0])
    machine.mode = Mode.STOPPED
    machine.transitions = [{"to": "stopped", "cause": "tilt 1.23 rad > 1 rad"}]
    status = bridge.status()
    assert status.level == m.ERROR and "tilt 1.23 rad" in status.message
    machine.transitions = [{"to": "stopped", "cause": "run ended"}]
    assert bridge.status().level == m.OK
    bridge.close()


# ---------------------------------------------------------------------- against rclpy


def _poll_until(predicate, seconds: float, every: float = 0.01) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


@pytest.mark.parametrize(("domain", "qos"), [(60, "default"), (61, "sensor_data")])
def test_cmd_vel_from_rclpy_is_clamped_then_zero_when_silent(domain, qos):
    """rclpy publishes Twist(2.0, 0.1, -3.0) on cmd_vel (1 s once matched) with ROS's default QoS
    (reliable) and with sensor_data (best effort): the command is the clamped (1.0, 0.1,
    -1.0); once the publisher is gone, zero within the 0.3 s timeout (plus 0.5 s of slack:
    a bounded real-time check, the exact edge is on the injected clock above). Mutations
    seen failing: Twist's type name without its ``_`` (nothing arrives), the reader
    reliable (the best-effort publisher never matches it), the clamp removed, the timeout
    removed."""
    require_rclpy()
    dp = participant(domain, "lo", FAST_DDS_VENDOR)
    cmd = Ros2CmdVel(dp, TERMS, RANGES, timeout_s=0.3)
    proc = peer(domain, "pub", "2.0,0.1,-3.0", "1.0", "50", qos)
    seen = []

    def arrived() -> bool:
        seen.append(cmd.latest())
        return seen[-1] is not cmd.zero

    try:
        assert _poll_until(arrived, 20.0), "no cmd_vel arrived"
        np.testing.assert_array_equal(seen[-1], [1.0, 0.1, -1.0])

        def publisher_gone() -> bool:
            cmd.latest()  # read every 20 ms, as the plant's tick reads it
            return proc.poll() is not None

        assert _poll_until(publisher_gone, 30.0, every=0.02), "the rclpy publisher hangs"
        (done,) = [r for r in records(proc, 10.0) if "published" in r]
    finally:
        proc.kill()
    assert done["subscribers"] == 1  # rclpy saw our reader
    assert _poll_until(lambda: cmd.latest() is cmd.zero, 0.3 + 0.5), "cmd_vel silent, not zero"
    assert cmd.messages > 10  # a stream, not one sample (about 50 in its last second)


def test_rclpy_reads_joint_states_imu_and_diagnostics():
    """rclpy subscribes joint_states and imu (sensor_data) and diagnostics (ROS's default QoS,
    reliable) and reads the values published, stamps included. Mutations seen failing:
    diagnostics published best effort (a default subscriber never matches), JointState's
    position and velocity swapped, the Fast DDS type-information workaround removed
    (``wire.participant``'s ``match_by_name``: none of the three topics reaches rclpy)."""
    require_rclpy()
    domain = 62
    dp = participant(domain, "lo", FAST_DDS_VENDOR)
    snap = RobotSnapshot(q=np.array([0.1, -0.2, 0.3]), dq=np.array([1.0, 2.0, -3.0]),
                         quaternion_wxyz=np.array([0.9, 0.1, 0.2, 0.3]),
                         gyroscope=np.array([0.01, 0.02, 0.03]))  # fmt: skip
    status = RunStatus(
        m.ERROR,
        "safety: stopped (tilt 1.2 rad)",
        {"mode": "stopped", "deadline_misses": 3, "latency_p99_us": 812.25},
    )
    t_ns = 1_700_000_000_123_456_789
    pub = Ros2Publisher(dp, ["a_joint", "b_joint", "c_joint"], lambda: snap, lambda: status,
                        state_hz=50.0, diagnostics_hz=10.0, name="orin_rl: g1 policy",
                        hardware_id="unitree-g1", clock_ns=lambda: t_ns)  # fmt: skip
    pub.start()
    try:
        proc = peer(domain, "echo", "8", "5", "joint_states:sensor_data", "imu:sensor_data",
                    "diagnostics:default")  # fmt: skip
        got = records(proc, 30.0)
    finally:
        pub.close()
    counts = got[-1]["counts"]
    assert min(counts.values()) >= 5, counts
    by_topic = {r["topic"]: r for r in reversed(got) if "topic" in r}  # each topic's first
    js, imu, diag = by_topic["joint_states"], by_topic["imu"], by_topic["diagnostics"]
    stamp = [1_700_000_000, 123_456_789]
    assert js["stamp"] == imu["stamp"] == diag["stamp"] == stamp
    assert js["name"] == ["a_joint", "b_joint", "c_joint"]
    assert js["position"] == [0.1, -0.2, 0.3] and js["velocity"] == [1.0, 2.0, -3.0]
    assert js["effort"] == []
    assert imu["orientation"] == [0.1, 0.2, 0.3, 0.9]  # ROS: x, y, z, w
    assert imu["angular_velocity"] == [0.01, 0.02, 0.03]
    assert imu["frame_id"] == "imu_in_pelvis"
    assert imu["linear_acceleration_covariance"][0] == -1.0  # not reported
    (s,) = diag["status"]
    assert (s["level"], s["name"], s["hardware_id"]) == (2, "orin_rl: g1 policy", "unitree-g1")
    assert s["message"] == "safety: stopped (tilt 1.2 rad)"
    assert s["values"] == {"mode": "stopped", "deadline_misses": "3", "latency_p99_us": "812.25"}


def test_the_bridge_needs_neither_rclpy_nor_ros_packages_nor_torch():
    """The deploy image's view: with rclpy, ROS's message packages and torch hidden, the
    bridge imports, reads cmd_vel and publishes (CycloneDDS alone)."""
    code = (
        "import sys\n"
        "for name in ('rclpy', 'rosidl_runtime_py', 'geometry_msgs', 'sensor_msgs',\n"
        "             'nav_msgs', 'diagnostic_msgs', 'std_msgs', 'torch'):\n"
        "    sys.modules[name] = None  # as on a deploy image: the import fails\n"
        "import numpy as np\n"
        "from orin_rl.robot.ros2 import Ros2CmdVel, Ros2Publisher, RobotSnapshot, RunStatus\n"
        "from orin_rl.robot.wire import participant\n"
        "dp = participant(63, 'lo', '1.15')\n"
        "cmd = Ros2CmdVel(dp, ['lin_vel_x'], [[-1.0, 1.0]])\n"
        "snap = RobotSnapshot(np.zeros(2), np.zeros(2), np.array([1.0, 0, 0, 0]), np.zeros(3))\n"
        "pub = Ros2Publisher(dp, ['a', 'b'], lambda: snap, lambda: RunStatus(0, 'ok', {}))\n"
        "pub.publish_state(snap, 0); pub.publish_diagnostics(RunStatus(0, 'ok', {}), 0)\n"
        "assert cmd.latest().tolist() == [0.0]\n"
        "loaded = [m for m, mod in sys.modules.items() if mod is not None\n"
        "          and m.split('.')[0] in ('rclpy', 'rosidl_runtime_py', 'torch')]\n"
        "assert not loaded, loaded\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(HERE.parents[1])})  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_run_with_command_ros2_on_a_robot_stand_in(g1_contract, tmp_path):
    """``orin-rl run --plant unitree-g1 --command ros2`` (``run_on_robot``) against a robot
    stand-in (the robot on domain 64, ROS 2 on 65): rclpy's cmd_vel (3.0, -0.2, 0.4) is the policy's
    command clamped to the G1 contract's ranges (diagnostics reports it, in mode policy, with
    the loop's ticks and latency); rclpy's joint_states are the stand-in's joints in the
    contract's order; the report names the ROS 2 side. Mutations seen failing: the plant given
    the parsed --command instead of the bridge's cmd_vel (the run refuses 'ros2'), the
    loop's callbacks not wrapped (diagnostics has no latency)."""
    require_rclpy()
    from orin_rl.robot.contract import DeployContract
    from orin_rl.runtime.robot_run import run_on_robot
    from tests.robot.conftest import StandIn, linear_bundle

    contract = DeployContract.from_dict(g1_contract)
    domain, ros_domain = 64, 65  # the stand-in lives in this process: its own domain
    robot = StandIn(domain, contract)
    robot.start()
    bundle = linear_bundle(tmp_path / "bundle", g1_contract)
    pub = peer(ros_domain, "pub", "3.0,-0.2,0.4", "8", "50", "default")
    echo = peer(ros_domain, "echo", "10", "1000", "joint_states:sensor_data",
                "diagnostics:default")  # fmt: skip
    try:
        for node in (pub, echo):  # both rclpy nodes up first: only discovery is left to race
            assert json.loads(node.stdout.readline() or "{}") == {"ready": True}
        report = run_on_robot(bundle, "onnxruntime", "unitree-g1", 150, domain=domain,
                              interface="lo", command="ros2",
                              # the widest late-tick and silence limits: 150 ticks in this
                              # process on a loaded box, and the test is not about them
                              safety={"stand_s": 0.2, "late_factor": 5.0, "silence_s": 0.5},
                              ros2={"domain": ros_domain, "diagnostics_hz": 10.0},
                              wait_s=10.0)  # fmt: skip
        echo.terminate()  # it has heard enough: its output so far is what counts
        got = [json.loads(line) for line in echo.communicate(timeout=10)[0].splitlines()]
    finally:
        robot.running = False
        pub.kill()
        echo.kill()
    assert report["ticks"] == 150 and report["ros2_domain"] == ros_domain, report["transitions"]
    diags = [r["status"][0] for r in got if r.get("topic") == "diagnostics"]
    in_policy = [d["values"] for d in diags if d["values"]["mode"] == "policy"]
    assert in_policy, [d["message"] for d in diags]
    # lin_vel_x's range [-1, 1], ang_vel_z's [-0.5, 0.5]; before cmd_vel is heard: zero
    assert {d["cmd_vel"] for d in in_policy} <= {"1,-0.2,0.4", "0,0,0"}, in_policy
    assert in_policy[-1]["cmd_vel"] == "1,-0.2,0.4", in_policy[-1]
    assert int(in_policy[-1]["ticks"]) > 0 and float(in_policy[-1]["latency_p50_us"]) > 0
    states = [r for r in got if r.get("topic") == "joint_states"]
    assert states and states[-1]["name"] == list(contract.joint_names)
    q = robot.q[contract.motor_index].astype(np.float32)  # as LowState_ carries it
    np.testing.assert_allclose(states[-1]["position"], q, rtol=0, atol=1e-6)
