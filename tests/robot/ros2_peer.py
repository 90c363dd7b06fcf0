"""A real ROS 2 node (rclpy) for ``test_ros2.py``, one a process: publishes ``cmd_vel`` and
echoes topics as JSON lines on stdout. Run by the tests with ROS_DOMAIN_ID and
RMW_IMPLEMENTATION set (``test_ros2.peer_env``).

    python ros2_peer.py pub VX,VY,WZ SECONDS RATE_HZ QOS  (SECONDS after a reader matched;
                                                       QOS: default | sensor_data)
    python ros2_peer.py echo SECONDS COUNT TOPIC:QOS [...]    (stops early: COUNT of each)
"""

from __future__ import annotations

import json
import signal
import sys
import time

import rclpy
from rclpy.qos import QoSProfile, qos_profile_sensor_data, qos_profile_system_default

PROFILES = {"default": QoSProfile(depth=10), "sensor_data": qos_profile_sensor_data,
            "system_default": qos_profile_system_default}  # fmt: skip


def _emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def publish(node, values: str, seconds: float, rate: float, profile: str) -> None:
    from geometry_msgs.msg import Twist

    pub = node.create_publisher(Twist, "cmd_vel", PROFILES[profile])
    vx, vy, wz = (float(v) for v in values.split(","))
    msg = Twist()
    msg.linear.x, msg.linear.y, msg.angular.z = vx, vy, wz
    give_up, end, n = time.monotonic() + 20.0, None, 0
    while time.monotonic() < (end or give_up):
        pub.publish(msg)
        n += 1
        if end is None and pub.get_subscription_count():
            end = time.monotonic() + seconds  # a reader matched: SECONDS more from now
        time.sleep(1.0 / rate)
    _emit({"published": n, "subscribers": pub.get_subscription_count()})


def _joint_states(m) -> dict:
    return {"stamp": [m.header.stamp.sec, m.header.stamp.nanosec], "name": list(m.name),
            "position": list(m.position), "velocity": list(m.velocity),
            "effort": list(m.effort)}  # fmt: skip


def _imu(m) -> dict:
    o, w = m.orientation, m.angular_velocity
    return {"stamp": [m.header.stamp.sec, m.header.stamp.nanosec],
            "frame_id": m.header.frame_id, "orientation": [o.x, o.y, o.z, o.w],
            "angular_velocity": [w.x, w.y, w.z],
            "linear_acceleration_covariance": list(m.linear_acceleration_covariance)}  # fmt: skip


def _diagnostics(m) -> dict:
    return {"stamp": [m.header.stamp.sec, m.header.stamp.nanosec],
            "status": [{"level": int.from_bytes(s.level, "little"), "name": s.name,
                        "message": s.message, "hardware_id": s.hardware_id,
                        "values": {kv.key: kv.value for kv in s.values}}
                       for s in m.status]}  # fmt: skip


def echo(node, seconds: float, enough: int, specs: list[str]) -> None:
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import Imu, JointState

    kinds = {"joint_states": (JointState, _joint_states), "imu": (Imu, _imu),
             "diagnostics": (DiagnosticArray, _diagnostics)}  # fmt: skip
    counts = {}
    for spec in specs:
        topic, profile = spec.split(":")
        cls, to_dict = kinds[topic.rsplit("/", 1)[-1]]
        counts[topic] = 0

        def callback(msg, topic=topic, to_dict=to_dict):
            counts[topic] += 1
            if counts[topic] <= 200:
                _emit({"topic": topic, "received_ns": time.time_ns(), **to_dict(msg)})

        node.create_subscription(cls, topic, callback, PROFILES[profile])
    end = time.monotonic() + seconds
    while time.monotonic() < end and min(counts.values()) < enough and not STOP:
        rclpy.spin_once(node, timeout_sec=0.05)
    _emit({"counts": counts})


STOP: list[int] = []
"""Non-empty once SIGTERM came: the echo ends cleanly (the test has heard enough)."""


def main() -> None:
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    signal.signal(signal.SIGTERM, lambda signum, frame: STOP.append(signum))
    node = rclpy.create_node("orin_rl_test_peer")
    _emit({"ready": True})
    try:
        if sys.argv[1] == "pub":
            publish(node, sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
        else:
            echo(node, float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:])
    finally:
        node.destroy_node()
        rclpy.shutdown()


if __name__ == "__main__":
    main()
