"""A signal during a robot run sets a flag and raises nothing (``robot_run.signals_stop``): the
plant's waits and the control loop end at their next poll, and the run latches damping from
its own code, never from wherever the handler happened to interrupt the main thread."""

from __future__ import annotations

import os
import signal
import threading
import time
from types import SimpleNamespace

import pytest

from orin_rl.runtime.robot_run import Terminated, signals_stop


def _deliver(sig: int) -> None:
    """Send ``sig`` to this process and let its handler run (a sleep is interrupted by it)."""
    os.kill(os.getpid(), sig)
    time.sleep(0.01)


@pytest.mark.parametrize("sig, end, second", [(signal.SIGINT, "interrupted", KeyboardInterrupt),
                                              (signal.SIGTERM, "terminated", Terminated)])  # fmt: skip
def test_a_signal_sets_the_flag_and_a_second_one_raises(sig, end, second):
    """The first signal: ``robot.signalled`` says which, and nothing is raised, even inside a
    held lock (a raise there left the lock held and the damping latch waiting on it for ever);
    a second: raised at once. The handlers are put back on the way out."""
    robot = SimpleNamespace(signalled=None)
    before = signal.getsignal(sig)
    lock, seen = threading.Lock(), []
    with pytest.raises(second), signals_stop(robot):
        with lock:
            _deliver(sig)
        seen += [robot.signalled, lock.acquire(timeout=1.0)]
        _deliver(sig)
        seen.append("the second signal raised nothing")
    assert seen == [end, True]
    assert signal.getsignal(sig) is before


def test_no_signal_interrupts_the_damping_latch():
    """While the run latches damping (``robot.closing``), a second Ctrl-C raises nothing: the
    latch finishes (a KeyboardInterrupt in it could cut it short or leave its lock held)."""
    robot = SimpleNamespace(signalled="interrupted", closing=True)
    try:
        with signals_stop(robot):
            _deliver(signal.SIGINT)
    except KeyboardInterrupt:
        pytest.fail("a Ctrl-C interrupted the damping latch")
    assert robot.signalled == "interrupted"


@pytest.mark.parametrize("raised, end", [("no state", "no robot"), ("refused", "refused"),
                                         ("bug", "failed"), ("in the stand-up", "failed")])  # fmt: skip
def test_an_error_after_connecting_is_an_end_of_its_own(raised, end):
    """The plant's start raising (no robot within the wait, a refusal of what answered, an
    error of the run's own, a robot error once the stand-up has begun: the robot was driven,
    so no refusal) ends the run with its own ``end`` and the error, which the caller writes
    into the report before raising it (they ended without a report); the robot is latched to
    damping either way (mutations: no robot counted as a refusal; an error in the stand-up
    called a refusal)."""
    from orin_rl.robot import RobotError
    from orin_rl.robot.unitree import NoRobotError
    from orin_rl.runtime.robot_run import _drive

    kinds = {"no state": NoRobotError, "refused": RobotError, "bug": ValueError,
             "in the stand-up": RobotError}  # fmt: skip
    error = kinds[raised](raised)
    began = [{"from": "passive", "to": "stand"}] if raised == "in the stand-up" else []

    def start(wait_s):
        raise error

    closed: list[str] = []
    robot = SimpleNamespace(signalled=None, closing=False, start=start, close=closed.append,
                            machine=SimpleNamespace(transitions=began))  # fmt: skip
    assert _drive(robot, 0.1, None, None, None, None, None) == (end, None, error)
    assert closed == ([f"run failed: {raised}"] if end == "failed" else ["run ended"]), closed
