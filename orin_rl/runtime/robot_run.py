"""``orin-rl run --plant unitree-g1``: a bundle's policy driving a robot over its own wire.

The bundle's ``deploy`` contract says everything the robot side needs (``robot.contract``);
the plant (``robot.unitree``) stands the robot up through the safety state machine, then the
control loop runs the policy at the contract's period until ``steps`` ticks or a latched stop.
Torch-free with ONNX Runtime or TensorRT.

Every way a run ends once the plant is on the wire writes the report, with ``end`` saying which
(``ENDS``): its ``steps``, the operator's stop (the remote), a safety stop in any phase, Ctrl-C
(``interrupted``) or SIGTERM (``terminated``); ``no robot`` (no state within ``wait_s``),
``refused`` (the plant would not drive what answered: a real robot lacking a term the policy
reads, a second publisher of ``rt/lowstate``, no velocity source for a policy that reads one)
and ``failed`` (an error of the run itself) carry the one-line reason in ``error`` and raise
it once the report is written. The robot is latched to damping in each. A ``status`` callback
sees the run live (``Watch``).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.runtime import load
from orin_rl.runtime.loop import ControlLoop, LoopConfig, LoopResult
from orin_rl.runtime.stats import (
    LatencyRecorder,
    histogram_png,
    jitter_us,
    percentile,
    summarize_us,
    write_report,
)

log = logging.getLogger(__name__)

ENDS = ("steps", "operator stop", "safety stop", "interrupted", "terminated", "no robot",
        "refused", "failed")  # fmt: skip
"""How a robot run ended (the report's ``end``; module docstring)."""


class Terminated(Exception):
    """A second SIGTERM during a robot run (raised in the main thread by its handler)."""


SIGNAL_ENDS = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated"}
SIGNAL_CAUSES = {"interrupted": "interrupted (Ctrl-C)", "terminated": "terminated (SIGTERM)"}


@contextlib.contextmanager
def signals_stop(robot: Any) -> Iterator[None]:
    """Ctrl-C (SIGINT) or SIGTERM while inside set ``robot.signalled`` ('interrupted',
    'terminated') and raise nothing: the plant's waits and the control loop see it at their
    next poll or tick and end, and the run latches damping from its own code. An exception
    raised by the handler could land anywhere in the main thread, inside the plant's or the
    safety machine's lock too, and the damping latch then waited on that lock for ever (CI saw
    a Ctrl-C'd run still alive after 60 s). A second signal raises (KeyboardInterrupt,
    ``Terminated``) for an operator who wants out at once, unless the run is latching damping
    (``robot.closing``): nothing interrupts that. Elsewhere than the main thread: nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        if getattr(robot, "closing", False):  # latching damping: let it finish
            return
        if robot.signalled is not None:
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated()
        robot.signalled = SIGNAL_ENDS[signal.Signals(signum)]

    previous = {sig: signal.signal(sig, handler) for sig in SIGNAL_ENDS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def contract_of(model: str | Path) -> Any:
    """The deploy contract of the bundle beside ``model`` (one line when there is none)."""
    from orin_rl import bundle as bundle_mod
    from orin_rl.robot.contract import DeployContract

    path = Path(model)
    if not path.exists():
        raise bundle_mod.BundleError(
            f"{model}: no such bundle folder: give the folder `orin-rl export` wrote "
            "(RUN/bundle, with policy.json and policy.onnx)"
        )
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
    """``--command``: 'VX,VY,WZ', 'random' (the training ranges), 'remote' or None (zero);
    a fixed value outside the contract's ranges is refused."""
    from orin_rl.errors import OrinError
    from orin_rl.robot.unitree import CommandSource

    if text is None or text == "remote":
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
    _check_in_ranges(text, value, contract)
    return CommandSource(value=value)


def _check_in_ranges(text: str, value: np.ndarray, contract: Any) -> None:
    """A fixed command outside the policy's training ranges: one line naming them."""
    from orin_rl.errors import OrinError

    terms = contract.commands.get("terms", [])
    for term, v, (low, high) in zip(terms, value, contract.command_ranges(), strict=False):
        if not low <= v <= high:
            ranges = ", ".join(f"{t} [{lo:g}, {hi:g}]" for t, (lo, hi) in
                               zip(terms, contract.command_ranges(), strict=False))  # fmt: skip
            raise OrinError(f"--command {text!r}: {term} {v:g} is outside the policy's "
                            f"training range; give values within {ranges}")  # fmt: skip


class Watch:
    """The run seen live: sensor → actuate latency of each tick (as the loop measures it), and
    a thread handing ``status`` a snapshot every ``every_s`` (mode, phase, tick, command,
    velocity, tilt, p99 of the last 500 ticks, deadline misses, transitions so far)."""

    def __init__(
        self,
        robot: Any,
        steps: int,
        period_s: float,
        status: Callable[[dict[str, Any]], None] | None,
        every_s: float = 0.2,
    ):
        self.robot, self.status, self.every_s = robot, status, every_s
        self.recorder = LatencyRecorder(steps)
        self.period_ns = round(period_s * 1e9)
        self.misses = 0
        self._start = self._previous = 0
        self._running = False
        self._thread: threading.Thread | None = None

    def sensor(self) -> np.ndarray:
        """The plant's sensor, timed from here."""
        self._start = time.monotonic_ns()
        return self.robot.sensor()

    def actuate(self, action: np.ndarray) -> None:
        """The plant's actuate; the tick's latency recorded."""
        self.robot.actuate(action)
        latency = time.monotonic_ns() - self._start
        self.misses += latency > self.period_ns
        self.recorder.record(latency, self._start - (self._previous or self._start))
        self._previous = self._start

    def snapshot(self) -> dict[str, Any]:
        """The status now."""
        n = min(self.recorder.count, self.recorder.capacity)
        recent = self.recorder.latency_ns[max(0, n - 500) : n]
        p99 = percentile(np.sort(recent), 99) / 1e3 if n else None
        return {**self.robot.status(), "p99_us": p99, "misses": self.misses,
                "transitions": list(self.robot.machine.transitions)}  # fmt: skip

    def result(self) -> LoopResult:
        """What the ticks so far measured (a run cut short by a signal has no loop result)."""
        n = min(self.recorder.count, self.recorder.capacity)
        latency = self.recorder.latency_ns[:n].copy()
        return LoopResult(n, summarize_us(latency), jitter_us(self.recorder.period_ns[1:n],
                          self.period_ns), self.misses, 0, 0, latency_ns=latency)  # fmt: skip

    def __enter__(self) -> Watch:
        if self.status is not None:
            self._running = True
            self._thread = threading.Thread(target=self._loop, name="status", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._running = False
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self.status is not None:
            self._call()  # the final state (the stop's transition)

    def _loop(self) -> None:
        while self._running:
            self._call()
            time.sleep(self.every_s)

    def _call(self) -> None:
        try:
            self.status(self.snapshot())
        except Exception:  # a display's failure never stops the robot's run
            log.exception("the status display failed")


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
    wait_s: float = 60.0,
    status: Callable[[dict[str, Any]], None] | None = None,
    ros2: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Stand the robot up, run ``steps`` policy ticks (or until a stop), damp it; the report
    (written to ``report`` however the run ends) says how it ended (``end``).

    ``command`` 'remote': the robot's remote gives the command and the transitions
    (``robot.remote``); 'ros2': the command from ROS 2's ``cmd_vel``, and the run published
    on ROS 2 (``robot.ros2.Ros2Bridge``; ``ros2``: its options: domain, namespace,
    timeout_s). ``wait_s``: how long to wait for the robot's first state. ``status``: called
    with a live snapshot (``Watch``) from another thread."""
    from orin_rl.robot.safety import SafetyConfig
    from orin_rl.robot.unitree import UnitreePlant

    if report:
        Path(report).unlink(missing_ok=True)  # no stale report outlives a run that fails
    contract = contract_of(model)
    source = None if command == "ros2" else parse_command(command, contract, command_every_s)
    safety_cfg = SafetyConfig(**(safety or {}))
    safety_cfg.check()
    runner = load(model, backend, device, precision=precision, **(backend_options or {}))
    _check_width(runner, contract)
    bridge = None
    if command == "ros2":  # before the plant: it takes the bridge's cmd_vel as its command
        from orin_rl.robot.ros2 import Ros2Bridge

        bridge = Ros2Bridge(contract, interface=interface, **(ros2 or {}))
        source = bridge.command
    robot = UnitreePlant(contract, plant, domain, interface, source, safety_cfg,
                         remote=command == "remote")  # fmt: skip
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
    watch = Watch(robot, steps, contract.step_dt, status)
    sensor, actuate = watch.sensor, watch.actuate
    if bridge:  # publishes the plant's state; times the loop's ticks for its diagnostics
        bridge.attach(robot)
        sensor, actuate = bridge.wrap(sensor, actuate)
    with signals_stop(robot), runner, watch, bridge or contextlib.nullcontext():
        end, result, error = _drive(robot, wait_s, sensor, infer, actuate, cfg, safe)
    result = result or watch.result()
    out = {**runner.describe(), "rate_hz": rate, **result.to_dict(), **robot.report(),
           "end": _end(end, robot.machine)}  # fmt: skip
    if error is not None:
        out["error"] = str(error)
    out.update(bridge.description if bridge else {})
    if report:
        write_report(out, report)
    if histogram and len(result.latency_ns):
        histogram_png(result.latency_ns, histogram, f"{out['backend']} on {plant}", 1e6 / rate)
    if error is not None:
        raise error
    return out


Ended = tuple[str, LoopResult | None, Exception | None]
"""``_drive``'s answer: the end, the loop's result, the error that ended the run."""


def _drive(robot: Any, wait_s: float, sensor: Callable, infer: Callable, actuate: Callable,
           cfg: LoopConfig, safe: np.ndarray) -> Ended:  # fmt: skip
    """Start the robot and run the loop; latch damping however it ends. Returns the end
    (``ENDS``, before ``_end``), the loop's result (None where it did not run to its end) and
    the error that ended it, if any (the caller writes the report, then raises it)."""
    from orin_rl.robot import RobotError
    from orin_rl.robot.safety import Mode
    from orin_rl.robot.unitree import NoRobotError

    end, result, error, started = "steps", None, None, False
    try:
        robot.start(wait_s)
        started = True
        if robot.machine.mode is Mode.POLICY and robot.signalled is None:
            result = ControlLoop(sensor, infer, actuate, cfg, safe_action=safe,
                                 should_stop=robot.should_stop).run()  # fmt: skip
    except KeyboardInterrupt:  # a second Ctrl-C
        robot.signalled = robot.signalled or "interrupted"
    except Terminated:  # a second SIGTERM
        robot.signalled = robot.signalled or "terminated"
    except NoRobotError as exc:  # nothing answered within wait_s
        end, error = "no robot", exc
    except RobotError as exc:  # the start-up refused what answered; later: the run broke
        driven = started or any(t["to"] == "stand" for t in robot.machine.transitions)
        end, error = ("failed" if driven else "refused"), exc  # refused: nothing was driven
    except Exception as exc:  # reported, then raised again by the caller
        end, error = "failed", exc
    finally:
        robot.closing = True  # signals from here on are ignored (signals_stop)
        if robot.signalled is not None and error is None:
            end = robot.signalled
            robot.close(SIGNAL_CAUSES[end])
        robot.close(f"run failed: {error}" if end == "failed" else "run ended")
    return end, result, error


def _end(end: str, machine: Any) -> str:
    """``ENDS``: a safety stop outranks everything but a signal; then the operator's stop."""
    if end != "steps":
        return end
    if machine.safety_stop:
        return "safety stop"
    if any(t["cause"].startswith("remote stop") for t in machine.transitions):
        return "operator stop"
    return "steps"


def _check_width(runner: Any, contract: Any) -> None:
    from orin_rl.runtime.base import RuntimeBackendError

    width = [d for d in runner.input_spec.shape[1:] if isinstance(d, int)]
    if width and width != [contract.obs_dim]:
        raise RuntimeBackendError(
            f"the model takes {width[0]} observations, its deploy contract builds "
            f"{contract.obs_dim}: the bundle is inconsistent; export it again"
        )
