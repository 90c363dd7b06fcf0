"""SIGINT/SIGTERM as a flag a training loop checks between steps (the loop then ends on an
iteration boundary with a checkpoint; a second signal stops at once)."""

from __future__ import annotations

import contextlib
import logging
import signal
from typing import Any

log = logging.getLogger(__name__)


class StopRequest:
    """Turns SIGINT/SIGTERM into a flag the loop checks between steps."""

    def __init__(self) -> None:
        self.signum: int | None = None
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
        log.warning("%s received: finishing with a checkpoint", signal.Signals(signum).name)

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
