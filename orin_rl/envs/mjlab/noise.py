"""Known third-party noise of an mjlab run, kept off the terminal unless logging is verbose
(``orin-rl -v``: orin_rl's loggers at DEBUG).

Three messages every mjlab command printed on a CPU box, none of them about the user's run:

- torch's deprecation of ``torch.jit.script`` (a FutureWarning or DeprecationWarning, by torch
  version), raised when mjlab's ``utils.lab_api.math`` is imported;
- MuJoCo Warp's ``UserWarning`` that MULTICCD meets collision pairs without multicontact
  support (a rough-terrain task: height field against capsules and boxes), at the world's
  build;
- Warp's native ``Warp CUDA warning: Could not find or load the NVIDIA CUDA driver`` line,
  written to file descriptor 2 by ``wp.init()`` where there is no GPU driver.

Only these: the Python warnings are ignored by message and category (and module, where the
warning names it) inside ``known_warnings_filtered``, never all warnings; Warp's line is taken
out of what ``wp.init()`` writes, the rest of it passed on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator

JIT_SCRIPT = r"`torch\.jit\.script(_method)?` is (deprecated|not supported)"
MULTICCD = r"MULTICCD is enabled, but the scene contains CCD pairs without multicontact support"
KNOWN_WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    (JIT_SCRIPT, FutureWarning, ""),
    (JIT_SCRIPT, DeprecationWarning, ""),
    (MULTICCD, UserWarning, r"mujoco_warp\."),
)
"""(message, category, module) of each known warning: ``warnings.filterwarnings`` patterns."""
WARP_NO_DRIVER = "Warp CUDA warning: Could not find or load the NVIDIA CUDA driver"
"""The start of the line Warp's native code prints at ``wp.init()`` without a GPU driver."""


def verbose() -> bool:
    """``orin-rl -v`` (orin_rl's loggers at DEBUG): show the third-party noise too."""
    return logging.getLogger("orin_rl").isEnabledFor(logging.DEBUG)


@contextlib.contextmanager
def known_warnings_filtered() -> Iterator[None]:
    """Within: the known warnings ignored (``KNOWN_WARNINGS``), unless ``verbose()``; every
    other warning as before."""
    if verbose():
        yield
        return
    with warnings.catch_warnings():
        for message, category, module in KNOWN_WARNINGS:
            warnings.filterwarnings("ignore", message, category, module)
        yield


def init_warp() -> None:
    """``wp.init()``, its no-driver line kept off stderr unless ``verbose()``."""
    import warp as wp

    if verbose():
        wp.init()
        return
    with native_stderr_without(WARP_NO_DRIVER):
        wp.init()


@contextlib.contextmanager
def native_stderr_without(prefix: str) -> Iterator[None]:
    """Within: what is written to file descriptor 2 (native code's ``fprintf(stderr, ...)``
    included) is held, then passed on to ``sys.stderr`` without the lines starting with
    ``prefix``."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no descriptor 2 to redirect: nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.flush()  # Python's own writes meanwhile, into what is held
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode(errors="replace").splitlines(keepends=True)
            kept = "".join(line for line in lines if not line.startswith(prefix))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()
