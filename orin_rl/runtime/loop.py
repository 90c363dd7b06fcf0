"""A fixed-period control loop: sensor → infer → actuate, with deadline accounting.

Timing comes from a monotonic clock; the wait before each period sleeps until shortly before
the deadline and spins the rest (sub-millisecond accuracy without burning a core for the whole
period). The garbage collector is kept out of the loop. Optional CPU affinity and SCHED_FIFO
priority are applied where the OS permits, and skipped with a logged reason elsewhere.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orin_rl.runtime.stats import LatencyRecorder, jitter_us, summarize_us

log = logging.getLogger(__name__)


@dataclass
class LoopConfig:
    """How the loop runs."""

    rate_hz: float = 100.0
    """Loop frequency; 0 runs as fast as possible (no deadline)."""
    iterations: int = 1000
    """Iterations to run."""
    spin_us: float = 200.0
    """Busy-wait this long before each period start instead of sleeping (sleep overshoots)."""
    safe_action_on_overrun: bool = False
    """When an iteration's inference overruns the deadline, actuate the safe action instead."""
    cpu: int | None = None
    """Pin the loop thread to this CPU (Linux)."""
    fifo_priority: int | None = None
    """SCHED_FIFO priority (1-99) for the loop thread (needs CAP_SYS_NICE or root)."""
    disable_gc: bool = True
    """Keep Python's garbage collector out of the loop (collected before and after)."""
    lock_memory: bool = False
    """``mlockall`` the process's pages, present and future, so that no tick waits on a page
    fault (needs CAP_IPC_LOCK or a large enough ``ulimit -l``)."""


@dataclass
class LoopResult:
    """What a run of the loop measured."""

    iterations: int
    latency_us: dict[str, float]
    """Sensor → infer → actuate latency per iteration (mean, p50, p90, p99, p999, max)."""
    jitter_us: dict[str, float]
    """Deviation of the achieved period from the target."""
    deadline_misses: int
    """Iterations whose latency exceeded the period."""
    overruns: int
    """Iterations that started late because the previous one ran into their slot."""
    safe_actions: int
    """Times the safe action was actuated (overrun with safe_action_on_overrun)."""
    rt_settings: dict[str, str] = field(default_factory=dict)
    """What was applied (or why not): affinity, scheduler, memory."""
    latency_ns: np.ndarray | None = None
    """Raw per-iteration latencies."""
    missed: list[int] = field(default_factory=list)
    """Indices of the iterations that missed their deadline (the first 100)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (without the raw samples)."""
        return {
            "iterations": self.iterations,
            "latency_us": self.latency_us,
            "jitter_us": self.jitter_us,
            "deadline_misses": self.deadline_misses,
            "deadline_missed_iterations": self.missed,
            "slowest_iterations": self.slowest(),
            "overruns": self.overruns,
            "safe_actions": self.safe_actions,
            "rt_settings": self.rt_settings,
            "latency_drift": self.drift(),
        }

    def slowest(self, k: int = 5) -> list[list[float]]:
        """[iteration, latency µs] of the ``k`` slowest iterations, slowest first (which tick
        a spike came at: an env's reset, a collection, ...)."""
        if self.latency_ns is None or not len(self.latency_ns):
            return []
        top = np.argsort(self.latency_ns)[::-1][:k]
        return [[int(i), float(self.latency_ns[i]) / 1e3] for i in top]

    def drift(self) -> dict[str, float] | None:
        """p50 latency of the last 10% of iterations against the first 10% (late-run drift)."""
        if self.latency_ns is None or len(self.latency_ns) < 100:
            return None
        tenth = len(self.latency_ns) // 10
        first = float(np.median(self.latency_ns[:tenth])) / 1e3
        last = float(np.median(self.latency_ns[-tenth:])) / 1e3
        return {
            "first_p50_us": first,
            "last_p50_us": last,
            "ratio": last / first if first else None,
        }


def apply_rt_settings(cfg: LoopConfig) -> dict[str, str]:
    """Pin and prioritise the calling thread where permitted; report what happened."""
    done: dict[str, str] = {}
    if cfg.cpu is not None:
        try:
            os.sched_setaffinity(0, {cfg.cpu})
            done["affinity"] = f"cpu {cfg.cpu}"
        except (AttributeError, OSError) as exc:
            done["affinity"] = f"skipped: {exc}"
            log.warning("CPU affinity not applied: %s", exc)
    if cfg.fifo_priority is not None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(cfg.fifo_priority))
            done["scheduler"] = f"SCHED_FIFO {cfg.fifo_priority}"
        except (AttributeError, OSError) as exc:
            done["scheduler"] = f"skipped: {exc} (needs CAP_SYS_NICE or root)"
            log.warning("SCHED_FIFO not applied: %s", exc)
    if cfg.lock_memory:
        done["memory"] = _lock_memory()
    return done


MCL_CURRENT, MCL_FUTURE = 1, 2
"""mlockall flags (Linux, <sys/mman.h>)."""


def _libc():
    """The C library, with errno kept for ``ctypes.get_errno``."""
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _lock_memory() -> str:
    """``mlockall(MCL_CURRENT | MCL_FUTURE)``: what was done, or why not."""
    import ctypes

    try:
        rc = _libc().mlockall(MCL_CURRENT | MCL_FUTURE)
    except (OSError, AttributeError) as exc:
        reason = f"skipped: {exc}"
    else:
        if rc == 0:
            return f"locked (mlockall MCL_CURRENT|MCL_FUTURE): {_locked_kb():,} kB"
        err = ctypes.get_errno()
        reason = f"skipped: {os.strerror(err)} (needs CAP_IPC_LOCK or a larger ulimit -l)"
    log.warning("memory not locked: %s", reason)
    return reason


def _locked_kb() -> int:
    """The process's locked memory (the kernel's VmLck), 0 where /proc does not say."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmLck"))
    except (OSError, StopIteration, ValueError):
        return 0


def _unlock_memory() -> None:
    """``munlockall``: the loop is over; what the process does next is not real time."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().munlockall()


class ControlLoop:
    """Runs ``actuate(infer(sensor()))`` every period.

    Args:
        sensor: returns the observation for this iteration.
        infer: observation → action (a backend's ``infer``).
        actuate: consumes the action.
        cfg: timing and real-time settings.
        safe_action: actuated on overrun when ``cfg.safe_action_on_overrun``.
        clock: monotonic nanosecond clock (injectable for tests).
        sleep: seconds → None (injectable for tests).
        should_stop: checked after each iteration, outside its latency; True ends the run
            early (an episode ended, a stop was asked for).
    """

    def __init__(
        self,
        sensor: Callable[[], Any],
        infer: Callable[[Any], Any],
        actuate: Callable[[Any], None],
        cfg: LoopConfig,
        safe_action: Any = None,
        clock: Callable[[], int] = time.monotonic_ns,
        sleep: Callable[[float], None] = time.sleep,
        should_stop: Callable[[], bool] | None = None,
    ):
        if cfg.rate_hz < 0 or cfg.iterations <= 0:
            raise ValueError("rate_hz must be >= 0 and iterations > 0")
        if cfg.safe_action_on_overrun and safe_action is None:
            raise ValueError("safe_action_on_overrun needs a safe_action")
        self.sensor, self.infer, self.actuate = sensor, infer, actuate
        self.cfg = cfg
        self.safe_action = safe_action
        self.clock, self.sleep = clock, sleep
        self.should_stop = should_stop
        self.next_start_ns: int | None = None
        """When the iteration after the last one run is due (set by ``run``)."""
        self.period_ns = round(1e9 / cfg.rate_hz) if cfg.rate_hz > 0 else 0

    def _wait_until(self, deadline_ns: int) -> None:
        spin_ns = int(self.cfg.spin_us * 1e3)
        remaining = deadline_ns - self.clock()
        if remaining > spin_ns:
            self.sleep((remaining - spin_ns) / 1e9)
        while self.clock() < deadline_ns:  # busy-wait the last spin_us: sleep overshoots
            pass

    def run(self, first_start_ns: int | None = None) -> LoopResult:
        """Run ``cfg.iterations`` iterations and return their statistics.

        ``first_start_ns``: when the first iteration is due (a run continuing another's
        schedule passes the previous run's ``next_start_ns``); default now."""
        cfg = self.cfg
        rt = apply_rt_settings(cfg)
        rec = LatencyRecorder(cfg.iterations)
        period = self.period_ns
        misses = overruns = safe = 0
        missed: list[int] = []
        gc_was_enabled = gc.isenabled()
        if cfg.disable_gc:
            gc.collect()
            gc.disable()
        try:
            next_start = self.clock() if first_start_ns is None else first_start_ns
            previous = next_start
            for _ in range(cfg.iterations):
                if period:
                    now = self.clock()
                    if now > next_start + period // 2:
                        overruns += 1  # we are late: start now, re-anchor the schedule
                        next_start = now
                    else:
                        self._wait_until(next_start)
                start = self.clock()
                action = self.infer(self.sensor())
                late = period and self.clock() - start > period
                if late and cfg.safe_action_on_overrun:
                    action = self.safe_action
                    safe += 1
                self.actuate(action)
                end = self.clock()
                latency = end - start
                if period and latency > period:
                    if misses < 100:
                        missed.append(rec.count)
                    misses += 1
                rec.record(latency, start - previous)
                previous = start
                next_start += period
                if self.should_stop is not None and self.should_stop():
                    break
        finally:
            self.next_start_ns = next_start
            if cfg.disable_gc and gc_was_enabled:
                gc.enable()
                gc.collect()
            if rt.get("memory", "").startswith("locked"):
                _unlock_memory()  # MCL_FUTURE would bind what the process allocates later
        n = min(rec.count, rec.capacity)
        return LoopResult(
            iterations=rec.count,
            latency_us=summarize_us(rec.latency_ns[:n]),
            jitter_us=jitter_us(rec.period_ns[:n], period),
            deadline_misses=misses,
            overruns=overruns,
            safe_actions=safe,
            rt_settings=rt,
            latency_ns=rec.latency_ns[:n].copy(),
            missed=missed,
        )
