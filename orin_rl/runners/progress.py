"""What a user sees of a run's progress (a tqdm bar on a terminal, plain log lines in logs and
CI), and the final evaluation's watch: its bar and the stop request it answers between steps."""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger(__name__)

PROGRESS_LINE_S = 10.0
"""With ``progress="lines"``: seconds between two progress log lines (plus the first and last
iteration)."""


class EvalWatch:
    """What an evaluation reports its progress to and checks, between steps, for a stop.

    ``bar``: a tqdm bar (or None); ``lines``: a log line every ``PROGRESS_LINE_S`` instead;
    ``stop``: a ``signals.StopRequest`` (or None). A stopped evaluation keeps the episodes that
    had finished. The first ``begin`` of a watch says its total (the outermost evaluator's).
    """

    def __init__(self, bar: Any = None, stop: Any = None, lines: str | None = None) -> None:
        self.bar = bar
        self.stop = stop
        self.lines = lines  # the label of the log lines, or None for none
        self.total: int | None = None
        self.unit = ""
        self.done = 0
        self._last_line = -float("inf")

    @property
    def stopped(self) -> bool:
        """Whether a signal asked the evaluation to stop."""
        return self.stop is not None and self.stop.signum is not None

    def begin(self, total: int, unit: str) -> None:
        """The evaluation has ``total`` ``unit``s (episodes, steps) to go (once per watch)."""
        if self.total is not None:
            return
        self.total, self.unit = total, unit
        if self.bar is not None:
            self.bar.reset(total=total)
            self.bar.unit = unit
        self._line()

    def advance(self, n: int = 1) -> None:
        """``n`` more units done."""
        if n <= 0:
            return
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        if self.lines is not None and time.perf_counter() - self._last_line >= PROGRESS_LINE_S:
            self._line()

    def _line(self) -> None:
        if self.lines is None:
            return
        self._last_line = time.perf_counter()
        log.info("%s: %d / %d %ss", self.lines, self.done, self.total or 0, self.unit)
