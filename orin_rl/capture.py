"""CUDA-graph capture that leaves the process as it found it when the capture fails.

A capture begins by putting every registered random generator (the default CUDA generator and
those passed in) into capture mode; ``torch.cuda.graph``'s exit takes them out. When the work
inside fails (a host read, a sync, a copy from pageable memory), torch 2.11 ends the stream's
capture but leaves the generators in capture mode (pytorch #171263, #172390; per-capture
generator state came later, #176752): the next random draw outside a capture, or the replay of
a graph that draws, raises "Offset increment outside graph capture encountered unexpectedly".
One tiny capture that succeeds on the same stream, registering the same generators, takes them
out of capture mode again without moving their random streams (nothing in it draws).

``capture(graph, ...)`` is ``torch.cuda.graph`` with that recovery on failure; every capture
site in orin_rl goes through it. Off CUDA, ``graph_emulation`` models the same fault (a failed
emulated recording leaves seeded random ops raising until ``recover`` runs), so that the CPU
tests catch a capture site that forgets the recovery.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _pop_mode, _push_mode

log = logging.getLogger(__name__)

OFFSET_ERROR = "Offset increment outside graph capture encountered unexpectedly."
"""The message torch raises for a random draw on a generator left in capture mode."""


class _GeneratorLeftCapturing(TorchDispatchMode):
    """The emulation of a generator a failed capture left in capture mode: seeded random ops
    raise what CUDA raises, until ``recover``."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.Tag.nondeterministic_seeded in func.tags:
            raise RuntimeError(f"{OFFSET_ERROR} ({func}, emulated)")
        return func(*args, **(kwargs or {}))


_left_capturing: _GeneratorLeftCapturing | None = None


def emulate_failed_capture() -> None:
    """Off CUDA: put the process in the state a failed CUDA capture leaves it in."""
    global _left_capturing
    if _left_capturing is None:
        _left_capturing = _GeneratorLeftCapturing()
        _push_mode(_left_capturing)


def generators_left_capturing() -> bool:
    """Whether the emulated fault is in force (a failed emulated capture not yet recovered)."""
    return _left_capturing is not None


def recover(stream: torch.cuda.Stream | None = None, generators: Sequence[Any] = ()) -> None:
    """Take the generators out of capture mode after a failed capture on ``stream`` (one tiny
    capture that succeeds, on the same stream, with the same generators registered); off CUDA
    clear the emulated fault. Their random streams do not move."""
    global _left_capturing
    if _left_capturing is not None:
        _pop_mode()
        _left_capturing = None
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    if stream is not None and stream.device.type != "cuda":
        return
    scratch = torch.zeros(1, device=stream.device if stream is not None else "cuda")
    graph = torch.cuda.CUDAGraph()
    for generator in generators:
        graph.register_generator_state(generator)
    with torch.cuda.graph(graph, stream=stream):
        scratch.add_(1)  # no random draw: the generators' offsets stay where they were
    torch.cuda.current_stream(scratch.device).synchronize()
    del graph


@contextlib.contextmanager
def capture(
    graph: torch.cuda.CUDAGraph,
    stream: torch.cuda.Stream | None = None,
    generators: Sequence[Any] = (),
    **kwargs: Any,
) -> Iterator[None]:
    """``torch.cuda.graph(graph, stream=stream)`` with ``generators`` registered; when the
    capture fails, the generators are taken out of capture mode before the error propagates.
    ``graph`` may be an emulated one (``recording()``: ``graph_emulation``), recovered alike."""
    if hasattr(graph, "recording"):
        context = graph.recording()
    else:
        for generator in generators:
            graph.register_generator_state(generator)
        context = torch.cuda.graph(graph, stream=stream, **kwargs)
    try:
        with context:
            yield
    except BaseException:
        try:
            recover(stream, generators)
        except Exception as exc:  # the original error is the one to report
            log.warning("after a failed CUDA graph capture, recovery failed too: %s", exc)
        raise
