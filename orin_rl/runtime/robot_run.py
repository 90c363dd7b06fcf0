"""``orin-rl run --plant unitree-g1``: a bundle's policy driving a robot over its own wire.

The bundle's ``deploy`` contract says everything the robot side needs (``robot.contract``);
the plant (``robot.unitree``) stands the robot up through the safety state machine, then the
control loop runs the policy at the contract's period until ``steps`` ticks or a latched stop.
Torch-free with ONNX Runtime or TensorRT.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.runtime import load
from orin_rl.runtime.loop import ControlLoop, LoopConfig
from orin_rl.runtime.stats import histogram_png, write_report


def contract_of(model: str | Path) -> Any:
    """The deploy contract of the bundle beside ``model`` (one line when there is none)."""
    from orin_rl import bundle as bundle_mod
    from orin_rl.robot.contract import DeployContract

    path = Path(model)
    for folder in (path, path / "bundle", path.parent):
        if (folder / "policy.json").is_file():
            info, _ = bundle_mod.load_bundle(folder, verify_hash=False)
            if not info.deploy:
                break
            return DeployContract.from_dict(info.deploy, str(folder / "policy.json"))
    raise bundle_mod.BundleError(
        f"{model}: no deploy contract (policy.json's 'deploy'): export the mjlab run with "
        "`orin-rl export RUN`, or import mjlab's ONNX with `orin-rl export FILE.onnx --env TASK`"
    )


def parse_command(text: str | None, contract: Any, every_s: float) -> Any:
    """``--command``: 'VX,VY,WZ', 'random' (the training ranges) or None (zero)."""
    from orin_rl.errors import OrinError
    from orin_rl.robot.unitree import CommandSource

    if text is None:
        return None
    if text == "random":
        ranges = contract.command_ranges()
        if not ranges:
            raise OrinError("--command random: the contract has no command ranges")
        return CommandSource(ranges=ranges, every_s=every_s)
    try:
        value = np.array([float(x) for x in text.split(",")])
    except ValueError:
        raise OrinError(f"--command {text!r}: give numbers like 0.5,0,0 or 'random'") from None
    want = len(contract.commands.get("terms", [])) or len(value)
    if len(value) != want or not np.all(np.isfinite(value)):
        raise OrinError(f"--command {text!r}: the policy takes {want} finite values "
                        f"({', '.join(contract.commands.get('terms', []))})")  # fmt: skip
    return CommandSource(value=value)


def run_on_robot(
    model: str | Path,
    backend: str,
    plant: str,
    steps: int,
    device: str = "cpu",
    domain: int = 0,
    interface: str | None = None,
    command: str | None = None,
    command_every_s: float = 5.0,
    safety: dict[str, float] | None = None,
    report: str | Path | None = None,
    histogram: str | Path | None = None,
    loop_options: dict[str, Any] | None = None,
    backend_options: dict[str, Any] | None = None,
    precision: str | None = None,
    wait_s: float = 5.0,
    ros2: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Stand the robot up, run ``steps`` policy ticks (or until a latched stop), damp it.
    ``wait_s``: how long to wait for the robot's first state. ``command='ros2'``: the command
    from ROS 2's ``cmd_vel`` and the run on ROS 2 (``robot.ros2.Ros2Bridge``; ``ros2``: its
    options: domain, namespace, timeout_s)."""
    from orin_rl.robot.safety import SafetyConfig
    from orin_rl.robot.unitree import UnitreePlant
    from orin_rl.runtime.base import RuntimeBackendError

    contract = contract_of(model)
    runner = load(model, backend, device, precision=precision, **(backend_options or {}))
    width = [d for d in runner.input_spec.shape[1:] if isinstance(d, int)]
    if width and width != [contract.obs_dim]:
        raise RuntimeBackendError(
            f"the model takes {width[0]} observations, its deploy contract builds "
            f"{contract.obs_dim}: the bundle is inconsistent; export it again"
        )
    bridge = None
    if command == "ros2":  # before the plant: it takes the bridge's cmd_vel as its command
        from orin_rl.robot.ros2 import Ros2Bridge

        bridge = Ros2Bridge(contract, interface=interface, **(ros2 or {}))
    robot = UnitreePlant(
        contract,
        plant,
        domain,
        interface,
        bridge.command if bridge else parse_command(command, contract, command_every_s),
        SafetyConfig(**(safety or {})),
    )
    sensor, actuate = robot.sensor, robot.actuate
    if bridge:  # publishes the plant's state; times the loop's ticks for its diagnostics
        bridge.attach(robot)
        sensor, actuate = bridge.wrap(sensor, actuate)
    safe = np.zeros((1, contract.num_joints), dtype=np.float32)
    runner.safe_action = safe[0]

    def infer(obs: np.ndarray) -> np.ndarray:
        before = runner.non_finite_events
        action = runner.infer(obs)
        if runner.non_finite_events != before:
            robot.non_finite()
        return action

    rate = 1.0 / contract.step_dt
    cfg = LoopConfig(rate_hz=rate, iterations=steps, **(loop_options or {}))
    with runner, bridge or contextlib.nullcontext():
        robot.start(wait_s)
        try:
            result = ControlLoop(sensor, infer, actuate, cfg, safe_action=safe,
                                 should_stop=robot.should_stop).run()  # fmt: skip
        finally:
            robot.close()
    out = {**runner.describe(), "rate_hz": rate, **result.to_dict(), **robot.report()}
    out.update(bridge.description if bridge else {})
    if report:
        write_report(out, report)
    if histogram:
        histogram_png(result.latency_ns, histogram, f"{out['backend']} on {plant}", 1e6 / rate)
    return out
