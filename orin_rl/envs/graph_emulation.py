"""A CUDA graph's semantics on any device, for testing what a capture keeps and loses.

A captured CUDA graph replays the device work its capture recorded, on the tensors the capture
saw, and none of the Python around it: an attribute rebound during the capture, a Python flag
flipped, a dict entry added, happen once (at the capture) and never again. Those are the
mistakes a graphed step makes, and they are Python-level: this module reproduces them where no
GPU is. ``EmulatedGraph`` records every ATen operation (and every Warp kernel launch) that a
function runs, and ``replay`` runs the recorded operations again on the recorded tensors,
writing each result into the tensor the capture produced, as a graph writes into its memory
pool. What a CUDA capture forbids (a host read of a device value, an output whose shape
depends on the data) raises here too.

It is for tests (``SegmentedStep(..., emulate=True)`` on Warp's CPU device): the CPU is slow
at it, and it does not model CUDA's streams.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_HOST_READS = {
    torch.ops.aten._local_scalar_dense.default,  # .item(), bool(), int() of a tensor
    torch.ops.aten.equal.default,  # torch.equal: a host bool
    torch.ops.aten.nonzero.default,  # an output shape that depends on the data
    torch.ops.aten.masked_select.default,
    torch.ops.aten.unique_dim.default,
    torch.ops.aten._unique2.default,
    torch.ops.aten.unique_consecutive.default,
    torch.ops.aten.bincount.default,
    torch.ops.aten.repeat_interleave.Tensor,
}


class CaptureError(RuntimeError):
    """Work that a CUDA graph capture cannot record."""


def _aliases(func: Any) -> bool:
    """The op returns (a view of) an input, or writes one in place: nothing to copy back."""
    return any(r.alias_info is not None for r in func._schema.returns)


def _written(func: Any, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensor arguments an op writes (in place or as ``out=``)."""
    schema = func._schema
    written = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        value = kwargs.get(arg.name, args[i] if i < len(args) and not arg.kwarg_only else None)
        written += [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]
    return written


class _Recorder(TorchDispatchMode):
    """Runs and records each op; remembers, before the first write, the contents of every
    storage the recording did not create, so that the recording can be undone (a capture
    does not run the work)."""

    def __init__(self, ops: list):
        super().__init__()
        self.ops = ops
        self.created: set[int] = set()
        self.saved: dict[int, tuple[Any, Any]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _HOST_READS:
            raise CaptureError(f"{func} reads device values on the host during a capture")
        for t in _written(func, args, kwargs):
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key not in self.created and key not in self.saved:
                self.saved[key] = (storage, storage.clone())
        out = func(*args, **kwargs)
        aliasing = _aliases(func)
        if not aliasing:
            for t in tree_flatten(out)[0]:
                if isinstance(t, torch.Tensor):
                    self.created.add(t.untyped_storage().data_ptr())
        self.ops.append(("aten", func, args, kwargs, None if aliasing else out))
        return out

    def undo(self) -> None:
        for storage, before in reversed(self.saved.values()):
            storage.copy_(before)


class EmulatedGraph:
    """``torch.cuda.CUDAGraph``'s contract: ``recording()`` around the work, then ``replay()``.

    The recording runs the work once, to know what it does, then puts back every tensor it
    wrote and the generator's state, so that like a capture it changes nothing (Warp kernels
    launched during the recording are not undone: ``warp_launches`` counts them)."""

    def __init__(self) -> None:
        self.ops: list[tuple] = []
        self.warp_launches = 0

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        import warp as wp

        launch = wp.launch
        ops = self.ops

        def recorded_launch(*args: Any, **kwargs: Any) -> Any:
            ops.append(("warp", launch, args, kwargs, None))
            return launch(*args, **kwargs)

        def host_read(*args: Any, **kwargs: Any) -> Any:
            raise CaptureError("a tensor read on the host (tolist/numpy) during a capture")

        tolist, numpy = torch.Tensor.tolist, torch.Tensor.numpy
        wp.launch = recorded_launch
        torch.Tensor.tolist = host_read  # type: ignore[method-assign]
        torch.Tensor.numpy = host_read  # type: ignore[method-assign]
        rng = torch.get_rng_state()
        recorder = _Recorder(ops)
        try:
            with recorder:
                yield
        finally:
            wp.launch = launch
            torch.Tensor.tolist, torch.Tensor.numpy = tolist, numpy  # type: ignore[method-assign]
            recorder.undo()  # what the work wrote goes back: a capture changes no tensor
            torch.set_rng_state(rng)  # nor the generator
        self.warp_launches = sum(op[0] == "warp" for op in ops)

    def replay(self) -> None:
        for kind, func, args, kwargs, out in self.ops:
            if kind == "warp":
                func(*args, **kwargs)
                continue
            new = func(*args, **kwargs)
            if out is None:
                continue
            for dst, src in zip(tree_flatten(out)[0], tree_flatten(new)[0], strict=True):
                if isinstance(dst, torch.Tensor):
                    dst.copy_(src)
