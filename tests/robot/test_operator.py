"""``orin-rl run --plant`` as an operator at the robot sees it (issue 51): what is printed while
the robot is driven, how each way a run ends is reported (exit code, summary, report), and the
inputs refused before anything is driven. A robot stand-in on loopback DDS, each test its own
domain, each run bounded in time."""

from __future__ import annotations

import io
import json
import queue
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests.robot.conftest import StandIn, linear_bundle, require_dds, tiny_g1_contract

require_dds()

from orin_rl.robot import RobotError  # noqa: E402
from orin_rl.robot.contract import DeployContract  # noqa: E402
from orin_rl.robot.unitree import UnitreePlant  # noqa: E402

SAFETY_CODE = 3


class Run:
    """``orin-rl run --plant unitree-g1`` on ``domain`` in its own process, its stdout read
    line by line as it comes."""

    def __init__(self, bundle, domain: int, report, *extra: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orin_rl.cli", "-q", "run", "--model", str(bundle),
             "--plant", "unitree-g1", "--dds-domain", str(domain), "--dds-interface", "lo",
             "--stand-s", "0.2", "--steps", "100000", "--wait-s", "30", "--report", str(report),
             "--late-factor", "5", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 60.0) -> None:
        """Until a line containing ``text`` is printed (the run still going)."""
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.seen):
            try:
                self.seen.append(self.lines.get(timeout=max(0.01, deadline - time.monotonic())))
            except queue.Empty:
                self.proc.kill()
                pytest.fail(f"no line with {text!r} within {timeout} s: {self.seen}")

    def finish(self, timeout: float = 60.0) -> int:
        rc = self.proc.wait(timeout=timeout)
        time.sleep(0.1)
        while not self.lines.empty():
            self.seen.append(self.lines.get())
        return rc


@pytest.fixture
def bundle(tmp_path, g1_contract):
    return linear_bundle(tmp_path / "bundle", g1_contract)


@pytest.mark.parametrize("sig, code, end", [(signal.SIGINT, 130, "interrupted"),
                                            (signal.SIGTERM, 143, "terminated")])  # fmt: skip
def test_ctrl_c_and_sigterm_latch_damping_and_write_the_report(bundle, tmp_path, g1_contract,
                                                               sig, code, end):  # fmt: skip
    """The transitions are printed while the robot is driven (they came only after the run
    ended); Ctrl-C (SIGINT) or SIGTERM in the policy phase: the robot is latched to damping,
    the report is written in place of a stale one and says so (Ctrl-C wrote none and left the
    stale one; SIGTERM killed it silently) (mutation: the report written only after a normal
    end: the stale report stays)."""
    domain = {signal.SIGINT: 28, signal.SIGTERM: 29}[sig]
    robot = StandIn(domain, DeployContract.from_dict(g1_contract))
    robot.start()
    report = tmp_path / "run.json"
    report.write_text('{"stale": true}')
    try:
        run = Run(bundle, domain, report)
        run.wait_for("stand -> policy")
        assert run.proc.poll() is None  # printed live, the run still going
        run.proc.send_signal(sig)
        rc = run.finish()
    finally:
        robot.running = False
    assert rc == code, (run.seen, run.proc.stderr.read())
    data = json.loads(report.read_text())
    assert data["end"] == end and data["safety_mode"] == "stopped" and data["ticks"] > 0
    assert data["transitions"][-1]["to"] == "stopped" and not data["transitions"][-1]["safety"]
    assert any("latched to damping" in line and end in line for line in run.seen), run.seen


@pytest.mark.parametrize("flag, value", [("--late-factor", "10"), ("--silence-s", "2")])
def test_safety_limits_from_the_command_line_are_held_to_their_ranges(bundle, tmp_path, flag,
                                                                      value):  # fmt: skip
    """``--late-factor`` and ``--silence-s`` reach the safety machine, which refuses a value
    that would switch its check off, before anything is driven (exit 2, one line)."""
    run = Run(bundle, 49, tmp_path / "run.json", flag, value)
    rc = run.finish(timeout=60.0)
    err = run.proc.stderr.read()
    assert rc == 2 and f"{flag[2:]} {value} is outside" in err, err


def test_ctrl_c_while_waiting_for_the_robot_ends_the_wait(bundle, tmp_path):
    """No robot on the domain: Ctrl-C during the 30 s wait for its state ends the run in
    about a tick, exit 130, the report says interrupted (the handler only sets a flag; the
    wait polls it)."""
    report = tmp_path / "run.json"
    run = Run(bundle, 43, report)  # a domain no other test uses (48 is test_unitree.py's)
    run.wait_for("waiting up to 30 s for the robot's state")  # its signal handlers are set
    assert run.proc.poll() is None
    start = time.monotonic()
    run.proc.send_signal(signal.SIGINT)
    rc = run.finish(timeout=20.0)
    assert rc == 130 and time.monotonic() - start < 10.0, run.proc.stderr.read()
    data = json.loads(report.read_text())
    assert data["end"] == "interrupted" and data["ticks"] == 0


@pytest.mark.parametrize("phase", ["start-up", "policy"])
def test_a_safety_stop_in_any_phase_has_its_own_exit_code(bundle, tmp_path, g1_contract, phase):
    """A tilted robot (stopped at the start-up check: exited 2 with no summary) and a robot gone
    silent in the policy phase (the watchdog: exited 0) both exit with the safety code, with
    the summary and the report (mutations: the start-up check's stop raised again; the exit
    code taken from the loop's end only)."""
    domain = {"start-up": 30, "policy": 31}[phase]
    robot = StandIn(domain, DeployContract.from_dict(g1_contract),
                    tilt=1.2 if phase == "start-up" else 0.0)  # fmt: skip
    robot.start()
    report = tmp_path / "run.json"
    try:
        run = Run(bundle, domain, report)
        if phase == "policy":
            run.wait_for("stand -> policy")
            robot.publishing = False
        rc = run.finish()
    finally:
        robot.running = False
    assert rc == SAFETY_CODE, (run.seen, run.proc.stderr.read())
    data = json.loads(report.read_text())
    cause = "tilt 1.20 rad" if phase == "start-up" else "silent"
    assert data["end"] == "safety stop" and cause in data["safety_stop"], data["transitions"]
    assert any(line.startswith("end          safety stop") for line in run.seen), run.seen
    hinted = any(line.startswith("hint         stopped before the stand-up") for line in run.seen)
    assert hinted == (phase == "start-up"), run.seen  # a fallen twin said nothing of a reset


def test_the_remotes_combinations_move_the_machine_each_in_its_own_mode(g1_contract):
    """On the wire, as a robot forwards its remote: R1+X in passive does nothing; L2+up stands
    the robot up, which then holds the pose (no policy) until R1+X; L2+B stops it, the
    operator's stop, not a safety one (mutations: a combination counted in any mode: the
    early R1+X starts the policy; the remote's stop recorded as a safety stop)."""
    from orin_rl.robot.remote import COMBOS, RemoteState, combo_mask, encode
    from orin_rl.robot.safety import Mode, SafetyConfig

    def hold(combo: str | None, until=None, timeout: float = 10.0) -> None:
        """Press ``combo`` for 0.1 s, or until ``until()`` holds (a loaded box may take its
        time to read it), then release."""
        robot.remote = encode(RemoteState(combo_mask(combo) if combo else 0))
        deadline = time.monotonic() + (timeout if until else 0.1)
        while time.monotonic() < deadline and not (until and until()):
            time.sleep(0.01)
        robot.remote = encode(RemoteState(0))

    def wait(until, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not until():
            time.sleep(0.01)

    contract = DeployContract.from_dict(g1_contract)
    robot = StandIn(26, contract)
    robot.start()
    plant = UnitreePlant(contract, domain=26, interface="lo", remote=True,
                         safety=SafetyConfig(stand_s=0.2, late_factor=5.0))  # fmt: skip
    starter = threading.Thread(target=plant.start, kwargs={"wait_s": 10.0}, daemon=True)
    try:
        starter.start()
        wait(lambda: plant.phase.startswith("passive"))  # listening to the remote
        hold(COMBOS["policy"])  # too early: passive
        time.sleep(0.1)
        assert plant.machine.mode is Mode.PASSIVE
        hold(COMBOS["stand"], until=lambda: plant.machine.mode is Mode.STAND)
        wait(lambda: plant.phase.startswith("stand:"))  # standing up, waiting for R1+X
        time.sleep(0.5)  # the stand-up's 0.2 s are over: without R1+X it holds the pose
        assert plant.machine.mode is Mode.STAND
        hold(COMBOS["policy"], until=lambda: plant.machine.mode is Mode.POLICY)
        starter.join(timeout=10.0)
        assert plant.machine.mode is Mode.POLICY
        hold(COMBOS["stop"], until=lambda: plant.machine.stopped)
        assert plant.machine.stopped and plant.machine.safety_stop is None
    finally:
        plant.close()
        robot.running = False
    causes = [t["cause"] for t in plant.machine.transitions]
    assert causes[0] == "remote L2+up" and causes[1].startswith("remote R1+X"), causes
    assert causes[2] == "remote stop (L2+B)", causes


def test_a_second_publisher_of_the_robots_state_is_refused(g1_contract):
    """Two robots (or twins) on one domain went unnoticed, their states interleaved; the plant
    refuses before it drives anything (mutation: no count of rt/lowstate's publishers)."""
    contract = DeployContract.from_dict(g1_contract)
    robots = [StandIn(27, contract), StandIn(27, contract)]
    for robot in robots:
        robot.start()
    plant = UnitreePlant(contract, domain=27, interface="lo")
    try:
        with pytest.raises(RobotError, match="2 publishers of rt/lowstate"):
            plant.start(wait_s=10.0)
    finally:
        plant.close()
        for robot in robots:
            robot.running = False
    assert max(robots[0].kp_seen, default=0.0) == 0.0  # nothing was stood up
    assert plant.machine.transitions[-1]["cause"] == "refused: 2 publishers of rt/lowstate"


@pytest.mark.parametrize("flag, why", [(["--rate", "200"], "at its contract's period"),
                                       (["--env", "Pendulum-v1"], "the robot is the environment"),
                                       (["--env-kwargs", "{}"], "no simulated env to configure"),
                                       (["--plant-device", "cuda"], "a simulated env's physics")])  # fmt: skip
def test_a_flag_the_plant_overrides_is_refused_with_its_own_reason(flag, why, capsys):
    """``--rate 200`` with the G1 plant was silently ignored (the contract's period runs);
    now refused in one line before anything loads, each flag with its own reason (``--env``
    and ``--plant-device`` were refused with ``--rate``'s: mutations: no check of the flags;
    one reason for all)."""
    from orin_rl.cli.app import main

    rc = main(["-q", "run", "--model", "nowhere", "--plant", "unitree-g1", *flag])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and f"{flag[0]} does not apply" in err[0], err
    assert why in err[0], err


def test_a_robot_flag_without_a_plant_is_refused(capsys):
    """``--command`` or ``--tilt-limit`` without ``--plant`` went unnoticed into a simulated
    run (mutation: no check of the robot flags)."""
    from orin_rl.cli.app import main

    rc = main(["-q", "run", "--model", "nowhere", "--command", "0.5,0,0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--command drives a robot" in err[0], err


def test_the_status_line_shows_what_the_operator_needs():
    """mode, tick, commanded velocity, measured velocity (forward, lateral: '-' without a
    source) and yaw rate (the IMU's, always), tilt, p99 latency and misses."""
    from orin_rl.cli.run import status_line

    status = {"mode": "policy", "tick": 412, "command": [0.5, 0.0, -0.25],
              "velocity": np.array([0.48, 0.01]), "yaw_rate": -0.2, "tilt": 0.031,
              "p99_us": 721.4, "misses": 2}  # fmt: skip
    line = status_line(status)
    for part in ("policy", "412", "cmd +0.50 +0.00 -0.25", "vel +0.48 +0.01", "yaw -0.20",
                 "0.03 rad", "721 µs", "misses 2"):  # fmt: skip
        assert part in line, line
    line = status_line({**status, "velocity": None})
    assert "vel -  yaw -0.20" in line, line


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_status_is_rewritten_on_a_terminal_and_plain_lines_when_piped():
    """On a terminal the status line is rewritten in place (carriage return) and each
    transition gets its own line; piped, plain lines only, at most one status line per
    ``plain_every_s`` (nothing was printed while the robot was driven)."""
    from orin_rl.cli.run import StatusPrinter

    snap = {"mode": "policy", "phase": "policy", "tick": 7, "command": [0.5, 0.0, 0.0],
            "velocity": None, "tilt": 0.02, "p99_us": 400.0, "misses": 0,
            "transitions": [{"tick": 0, "time_s": 1.0, "from": "stand", "to": "policy",
                             "cause": "remote R1+X"}]}  # fmt: skip
    tty = _Terminal()
    printer = StatusPrinter(tty)
    printer(snap)
    printer({**snap, "tick": 8})
    text = tty.getvalue()
    assert "stand -> policy: remote R1+X\n" in text and "\rpolicy   tick      8" in text, text
    piped = io.StringIO()
    printer = StatusPrinter(piped, plain_every_s=3600.0)
    for tick in range(5):
        printer({**snap, "tick": tick})
    lines = piped.getvalue().splitlines()
    assert "\r" not in piped.getvalue() and sum(x.startswith("policy ") for x in lines) == 1


def test_the_status_line_is_ended_before_any_other_output():
    """On a terminal the status line has no newline of its own: the summary's first line
    followed it on the same line ("misses 0backend ..."), and so did a log record; now a log
    record inside the run, and the run's end, end it first (mutations: no newline at the end;
    no filter on the log handlers)."""
    import logging

    from orin_rl.cli.run import StatusPrinter

    snap = {"mode": "policy", "phase": "policy", "tick": 7, "command": None,
            "velocity": None, "tilt": None, "p99_us": None, "misses": 0,
            "transitions": []}  # fmt: skip
    tty = _Terminal()
    handler = logging.StreamHandler(tty)
    logging.getLogger().addHandler(handler)
    printer = StatusPrinter(tty)
    try:
        with printer.ends_line_before_logs():
            printer(snap)
            logging.getLogger("orin_rl.test").warning("a warning in the run")
            printer({**snap, "tick": 8})
    finally:
        logging.getLogger().removeHandler(handler)
    tty.write("backend      onnxruntime\n")  # the summary
    text = tty.getvalue()
    assert "misses 0\na warning in the run\n" in text, repr(text)
    assert "misses 0\nbackend      onnxruntime\n" in text, repr(text)
    assert text.count("\rpolicy   tick") == 2, repr(text)


@pytest.mark.parametrize("end, cause, words", [
    ("steps", "run ended", "end          steps: its 1500 ticks ran (--steps); the robot"),
    ("operator stop", "remote stop (L2+B)", "end          operator stop: remote stop (L2+B); "),
    ("interrupted", "interrupted (Ctrl-C)", "end          interrupted by Ctrl-C (SIGINT); "),
    ("terminated", "terminated (SIGTERM)", "end          terminated by SIGTERM; "),
    ("safety stop", "tilt 1.31 rad > 1", "end          safety stop: tilt 1.31 rad > 1; "),
])  # fmt: skip
def test_the_summary_says_what_ended_the_run_once(end, cause, words, capsys):
    """After a normal end, an L2+B stop or Ctrl-C the summary said "ticks 1500 of 1500; safety
    stopped" (the damping latch, read as a safety stop) and "end interrupted (interrupted
    (Ctrl-C))"; now the ticks, and the end with its cause once (mutation: the old lines)."""
    import argparse

    from orin_rl.cli.run import _print_robot_summary

    report = {"backend": "onnxruntime", "plant": "unitree-g1", "rate_hz": 50.0, "ticks": 1500,
              "latency_us": {"p50": 1.0, "p99": 2.0, "max": 3.0}, "deadline_misses": 0,
              "falls": 0, "velocity_source": None, "yaw_rate": None, "end": end,
              "safety_mode": "stopped", "safety_stop": cause if end == "safety stop" else None,
              "transitions": [{"from": "policy", "to": "stopped", "cause": cause}]}  # fmt: skip
    _print_robot_summary(report, argparse.Namespace(steps=1500, report=None))
    out = capsys.readouterr().out
    assert "ticks        1500 of 1500 (policy ticks run)\n" in out, out
    assert words in out and "safety stopped" not in out, out
    assert "interrupted (interrupted" not in out and "(run ended)" not in out, out


def test_no_robot_within_the_wait_writes_the_report_and_says_so(tmp_path, capsys):
    """Nothing on the domain for ``--wait-s``: exit 2 with one line, which names the report;
    the report is written, ``end`` "no robot" and ``error`` that line; the last transition
    printed says why (no report was written, and it printed "passive -> stopped: run ended")
    (mutation: the error raised from inside the run, before the report)."""
    from orin_rl.cli.app import main

    bundle = linear_bundle(tmp_path / "bundle", tiny_g1_contract())
    report = tmp_path / "run.json"
    rc = main(["-q", "run", "--model", str(bundle), "--plant", "unitree-g1", "--dds-domain",
               "38", "--dds-interface", "lo", "--wait-s", "0.3", "--report", str(report)])  # fmt: skip
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "no unitree-g1 state on rt/lowstate" in lines[0], err
    assert lines[0].endswith(f"(report {report})"), lines
    data = json.loads(report.read_text())
    assert data["end"] == "no robot" and data["ticks"] == 0, data
    assert data["error"] in lines[0] and data["safety_stop"] is None, data
    assert "passive -> stopped: no robot: no state on rt/lowstate within 0.3 s" in out, out
    assert "run ended" not in out, out


def test_run_without_cyclonedds_says_how_to_install_it(tmp_path, g1_contract):
    """No cyclonedds: ``run --plant`` ends in the one-line install hint, exit 2 (the command's
    last step, deleting the DDS domains, imported cyclonedds and replaced that line with a
    traceback; mutation: release_domains without its guard)."""
    bundle = linear_bundle(tmp_path / "bundle", g1_contract)
    code = ("import sys; sys.modules['cyclonedds'] = None; from orin_rl.cli import main; "
            "sys.exit(main(['-q', 'run', '--model', sys.argv[1], '--plant', 'unitree-g1']))")  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", code, str(bundle)], capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "pip install 'orin-rl[robot]'" in proc.stderr
