"""Shared pieces of the robot tests: the G1 task's deploy contract (read once), and a bundle
whose policy is a fixed linear map (zero: the default pose) carrying that contract."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

G1 = "Mjlab-Velocity-Flat-Unitree-G1"
REAL_G1 = "Orin-Velocity-Flat-Unitree-G1-Real"


def require_mjlab() -> None:
    if os.environ.get("ORIN_RL_REQUIRE_MJLAB") != "1":
        pytest.importorskip("mjlab", reason="needs the mjlab extra: pip install -e '.[mjlab]'")


def require_dds() -> None:
    if os.environ.get("ORIN_RL_REQUIRE_ROBOT") != "1":
        pytest.importorskip("cyclonedds", reason="needs the robot extra: pip install '.[robot]'")


ROBOT_NICENESS = -10
"""The robot tests' processes (this worker, its twin and run subprocesses, which inherit it)
run at this niceness where the OS allows it (root: CI): a robot runs its control loop at a
raised priority, and on the 2-core CI box the suite's other worker, training next to them,
otherwise starves the 500 Hz twin and the 50 Hz loop past their real-time checks (the watchdog's
0.1 s, a tick 1.5 periods late): the tests check what the robot path does, not the box's load."""


@pytest.fixture(autouse=True)
def robot_priority():
    """Raise this process's priority for one robot test, and put it back after."""
    before = os.getpriority(os.PRIO_PROCESS, 0)
    with contextlib.suppress(OSError):  # not permitted (no root, no CAP_SYS_NICE): as given
        os.setpriority(os.PRIO_PROCESS, 0, ROBOT_NICENESS)
    yield
    os.setpriority(os.PRIO_PROCESS, 0, before)


def _contract(task: str) -> dict:
    """``policy.json``'s ``deploy`` for ``task`` (its training configuration)."""
    require_mjlab()
    from orin_rl.envs.base import EnvOptions
    from orin_rl.envs.mjlab import MjlabVecEnv

    vec = MjlabVecEnv(task, 1, "cpu", EnvOptions(seed=0))
    try:
        return vec.deploy_contract()
    finally:
        vec.close()


@pytest.fixture(scope="session")
def g1_contract() -> dict:
    """``policy.json``'s ``deploy`` for the G1 velocity task (its training configuration)."""
    return _contract(G1)


@pytest.fixture(scope="session")
def real_contract() -> dict:
    """``policy.json``'s ``deploy`` for ``Orin-Velocity-Flat-Unitree-G1-Real`` (its actor reads
    no ``base_lin_vel``)."""
    return _contract(REAL_G1)


def tiny_g1_contract() -> dict:
    """A G1 deploy contract made by hand, without mjlab (its values are not the task's): the 29
    motors in the SDK's order, the velocity task's actor terms (no ``base_lin_vel``), the
    G1's command ranges. For what comes before any physics: the contract's checks, the
    refusals, the ends before the stand-up."""
    from orin_rl.robot.robots import G1

    n = len(G1.motors)
    terms = [("base_ang_vel", "gyro", 3), ("projected_gravity", "projected_gravity", 3),
             ("joint_pos", "joint_pos_rel", n), ("joint_vel", "joint_vel_rel", n),
             ("actions", "last_action", n), ("command", "command", 3)]  # fmt: skip
    return {
        "joint_names": list(G1.motors), "default_joint_pos": [0.0] * n,
        "action_scale": [0.25] * n, "action_offset": [0.0] * n, "stiffness": [40.0] * n,
        "damping": [2.0] * n, "step_dt": 0.02, "physics_dt": 0.005, "decimation": 4,
        "observations": [{"name": name, "source": source, "dim": dim, "scale": None,
                          "clip": None, "history_length": 0} for name, source, dim in terms],
        "effort_limit": [50.0] * n, "joint_pos_limits": [[-2.0, 2.0] for _ in range(n)],
        "commands": {"name": "twist", "terms": ["lin_vel_x", "lin_vel_y", "ang_vel_z"],
                     "ranges": {"lin_vel_x": [-1.0, 1.0], "lin_vel_y": [-1.0, 1.0],
                                "ang_vel_z": [-0.5, 0.5]}},
        "robot": "unitree-g1", "motor_index": list(range(n)),
    }  # fmt: skip


def run_g1(bundle: Path, domain: int, *flags: str, interface: str = "lo"):
    """``orin-rl run --plant unitree-g1`` with ``bundle`` on DDS ``domain`` over ``interface``,
    ``flags`` after: run to its end (two minutes at most), its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "orin_rl.cli", "-q", "run", "--model", str(bundle),
         "--plant", "unitree-g1", "--dds-domain", str(domain), "--dds-interface", interface,
         *flags],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def linear_bundle(folder: Path, contract: dict, weight: float = 0.0, bias=None) -> Path:
    """A bundle whose policy is action = weight · obs[:n] + bias (ONNX Runtime runs it)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from orin_rl.bundle import BundleInfo, TensorSpec, sha256_file

    n_obs = sum(t["dim"] * max(1, t["history_length"]) for t in contract["observations"])
    n_act = len(contract["joint_names"])
    w = np.zeros((n_obs, n_act), np.float32)
    w[np.arange(n_act), np.arange(n_act)] = weight
    b = np.zeros(n_act, np.float32) if bias is None else np.asarray(bias, np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["obs", "W", "B"], ["action"])],
        "linear",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, n_obs])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, [1, n_act])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(model, folder / "policy.onnx")
    info = BundleInfo(
        onnx_file="policy.onnx",
        onnx_sha256=sha256_file(folder / "policy.onnx"),
        opset=17,
        precision="fp32",
        inputs=[TensorSpec("obs", [1, n_obs], "float32")],
        outputs=[TensorSpec("action", [1, n_act], "float32")],
        action_space={
            "kind": "continuous",
            "shape": [n_act],
            "low": [float("-inf")] * n_act,
            "high": [float("inf")] * n_act,
        },
        normalizer=None,
        parity_max_abs_error=0.0,
        env_id=G1,
        deploy=contract,
    )
    (folder / "policy.json").write_text(info.to_json())
    return folder


class StandIn(threading.Thread):
    """A robot on the wire without physics: publishes LowState_ at 500 Hz (with
    ``mode_machine``: 0 a simulator, 5 a real G1 29-DoF) and ``rt/sportmodestate`` where
    ``sport``; its joints go where the last command with stiffness put them; records the kp of
    each command it takes. ``quat``, ``gyro`` (body frame) and ``velocity`` (world frame, on
    ``rt/sportmodestate``) are what it reports: set them to move it."""

    def __init__(self, domain: int, contract, tilt: float = 0.0, mode_machine: int = 0,
                 sport: bool = True):  # fmt: skip
        super().__init__(daemon=True)
        from orin_rl.robot import unitree_msgs as msgs
        from orin_rl.robot.wire import Endpoint, Layout, participant

        self.dp = participant(domain, "lo")
        self.out = Endpoint(self.dp, msgs.LOWSTATE, msgs.HgLowState, "writer")
        self.sport = Endpoint(self.dp, msgs.SPORTSTATE, msgs.GoSportModeState, "writer")
        self.sport_layout = Layout(msgs.GoSportModeState) if sport else None
        self.velocity = np.zeros(3)
        self.gyro = np.zeros(3)
        self.mode_machine = mode_machine
        self.cmd = Endpoint(self.dp, msgs.LOWCMD, msgs.HgLowCmd, "reader")
        self.state_layout, self.cmd_layout = Layout(msgs.HgLowState), Layout(msgs.HgLowCmd)
        self.q = np.zeros(35)
        self.q[contract.motor_index] = np.asarray(contract.default_joint_pos) + 0.05
        self.quat = np.array([np.cos(tilt / 2), np.sin(tilt / 2), 0.0, 0.0])
        self.remote = bytes(40)
        """``wireless_remote``'s bytes in each state."""
        self.kp_seen: list[float] = []
        self.publishing = True
        self.running = True

    def run(self):
        while self.running:
            data = self.cmd.take_latest()
            if data is not None:
                c = self.cmd_layout.decode(data, ("motor_cmd[].q", "motor_cmd[].kp"))
                self.kp_seen.append(float(c["motor_cmd[].kp"].max()))
                stiff = c["motor_cmd[].kp"] > 0
                self.q[stiff] = c["motor_cmd[].q"][stiff]
            if self.publishing:
                self.out.write(self.state_layout.encode(
                    {"imu_state.quaternion": self.quat, "imu_state.gyroscope": self.gyro,
                     "motor_state[].q": self.q,
                     "wireless_remote": np.frombuffer(self.remote, np.uint8),
                     "mode_machine": self.mode_machine}))  # fmt: skip
                if self.sport_layout is not None:
                    self.sport.write(self.sport_layout.encode({"velocity": self.velocity}))
            time.sleep(0.002)
