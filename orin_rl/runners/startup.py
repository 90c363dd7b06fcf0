"""Where a training process's time goes before its first iteration ends: phase marks from the
process's start (the kernel's record of it) to the end of the first iteration, for
summary.json's ``startup`` (``tools/bench_startup.py`` reads them)."""

from __future__ import annotations

import os
import time


def process_age_s() -> float | None:
    """Seconds since this process started (Linux: its start time in /proc, against the same
    boot clock); None where that cannot be read."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start, clock ticks
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class Phases:
    """Consecutive phases timed with ``perf_counter``; ``mark(name)`` ends the current one.
    The first phase runs from the process's start (``process_age_s``) when that is known."""

    def __init__(self) -> None:
        age = process_age_s()
        self._last = time.perf_counter()
        self.before_s = age  # process start -> this object
        self.phases: dict[str, float] = {}

    def mark(self, name: str) -> float:
        """End the phase ``name`` now (repeated names add up); its seconds."""
        now = time.perf_counter()
        took = now - self._last
        self._last = now
        self.phases[name] = self.phases.get(name, 0.0) + took
        return took

    def report(self) -> dict[str, float | None]:
        """Phase seconds (rounded), with ``process_start_s`` first and their ``total_s``."""
        out: dict[str, float | None] = {"process_start_s": _r(self.before_s)}
        out.update({name: _r(s) for name, s in self.phases.items()})
        known = [self.before_s or 0.0, *self.phases.values()]
        out["total_s"] = _r(sum(known)) if self.before_s is not None else None
        return out


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
