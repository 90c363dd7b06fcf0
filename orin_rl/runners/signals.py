"""SIGINT/SIGTERM as a flag a loop checks between steps (training then ends on an iteration
boundary with a checkpoint, the final evaluation with the episodes finished so far); a second
signal stops at once."""

from __future__ import annotations

import contextlib
import logging
import signal
from typing import Any

log = logging.getLogger(__name__)


class StopRequest:
    """Turns SIGINT/SIGTERM into a flag the loop checks between steps.

    It answers them even where the process inherited SIGINT ignored (a job a script started
    with ``&``, where Python installs no KeyboardInterrupt): a Ctrl-C still reaches it there.
    ``then``: what the loop does on the first signal, for the one warning line.
    """

    def __init__(self, then: str = "finishing with a checkpoint") -> None:
        self.signum: int | None = None
        self.then = then
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, _frame) -> None:
        if self.signum is not None:  # second signal: give up immediately
            raise KeyboardInterrupt
        self.signum = signum
        log.warning("%s received: %s", signal.Signals(signum).name, self.then)

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
