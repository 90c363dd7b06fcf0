"""A CUDA graph's semantics on any device, for testing what a capture keeps and loses.

A captured CUDA graph replays the device work its capture recorded, on the tensors the capture
saw, and none of the Python around it: an attribute rebound during the capture, a Python flag
flipped, a dict entry added, happen once (at the capture) and never again. Those are the
mistakes a graphed step makes, and they are Python-level: this module reproduces them where no
GPU is. ``EmulatedGraph`` records every ATen operation (and every Warp kernel launch) that a
function runs, and ``replay`` runs the recorded operations again on the recorded tensors,
writing each result into the tensor the capture produced, as a graph writes into its memory
pool. Warp work that a CUDA graph would hold too (the one-unit step's physics) goes through
``warp_graph``: Warp's own capture on its CPU device records it without running it, and the
replay launches that Warp graph in its place between the torch ops. What a CUDA capture
forbids (a host read of a device value, an output whose shape depends on the data) raises here
too.

It is for tests (``SegmentedStep(..., emulate=True)`` on Warp's CPU device): the CPU is slow
at it, and it does not model CUDA's streams.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from orin_rl.capture import emulate_failed_capture

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
    # CUDA kernels that read a device value on the host inside them (an info code, a count):
    torch.ops.aten._linalg_eigh.default,  # torch.linalg.eigh checks its info on the host
    torch.ops.aten._linalg_check_errors.default,  # linalg.inv, cholesky, solve (not *_ex)
}
_MASK_INDEXED = {  # with a boolean index these run nonzero() inside, on the host's behalf
    torch.ops.aten.index.Tensor,
    torch.ops.aten.index_put.default,
    torch.ops.aten.index_put_.default,
    torch.ops.aten._index_put_impl_.default,
}


def host_read(func: Any, args: tuple) -> bool:
    """Whether the op reads device values on the host (a CUDA capture fails on it, and it
    syncs an eager run): the op itself, or one that does so inside (a boolean-mask index)."""
    if func in _HOST_READS:
        return True
    if func in _MASK_INDEXED and len(args) > 1:
        return any(
            isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
            for i in args[1]
            if i is not None
        )
    return False


class HostReadWatch(TorchDispatchMode):
    """Runs the work and names every op in it that reads device values on the host: the
    warm-up's check, before any capture is tried. On CUDA it also names the ops that
    ``torch.cuda.set_sync_debug_mode`` reports as synchronising (a copy from a host tensor
    aside: lazy set-up makes those once, and a capture that meets one again falls back)."""

    def __init__(self, cuda_syncs: bool = False) -> None:
        super().__init__()
        self.reads: list[str] = []
        self.cuda_syncs = cuda_syncs

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if host_read(func, args):
            self._note(func)
        if not self.cuda_syncs:
            return func(*args, **kwargs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = func(*args, **kwargs)
        if any("synchroniz" in str(w.message) for w in caught):
            from_host = any(
                isinstance(t, torch.Tensor) and t.device.type == "cpu"
                for t in tree_flatten((args, kwargs))[0]
            )
            if not from_host:
                self._note(func)
        return out

    def _note(self, func: Any) -> None:
        name = str(func)
        if name not in self.reads and len(self.reads) < 8:
            self.reads.append(name)

    def __enter__(self) -> HostReadWatch:
        if self.cuda_syncs:
            # what sync-debug mode says outside an op (a tensor made from a Python list) and
            # its own prototype notice are not the user's business: kept off the console
            self._quiet = warnings.catch_warnings()
            self._quiet.__enter__()
            warnings.filterwarnings("ignore", message=".*synchroniz.*", category=UserWarning)
            warnings.filterwarnings("ignore", message="Synchronization debug mode")
            self._sync_mode = torch.cuda.get_sync_debug_mode()
            torch.cuda.set_sync_debug_mode("warn")
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        if self.cuda_syncs:
            torch.cuda.set_sync_debug_mode(self._sync_mode)
            self._quiet.__exit__(*exc)


class CaptureError(RuntimeError):
    """Work that a CUDA graph capture cannot record."""


def _aliases(func: Any, args: tuple, kwargs: dict, out: Any) -> bool:
    """The op returned (a view of) an input, or wrote one in place: nothing to copy back. An
    op that only may alias (``to``, ``reshape``, ``contiguous``: annotated in its schema, seen
    as such in inference mode) and made a copy is not: a replay copies its new result back."""
    if not any(r.alias_info is not None for r in func._schema.returns):
        return False
    inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0]
              if isinstance(t, torch.Tensor)}  # fmt: skip
    outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return all(t.untyped_storage().data_ptr() in inputs for t in outputs)


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
        if host_read(func, args):
            raise CaptureError(f"{func} reads device values on the host during a capture")
        for t in _written(func, args, kwargs):
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key not in self.created and key not in self.saved:
                self.saved[key] = (storage, storage.clone())
        out = func(*args, **kwargs)
        aliasing = _aliases(func, args, kwargs, out)
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
    wrote and the generators' states (torch's, and ``generators``: those a CUDA capture would
    register), so that like a capture it changes nothing (Warp kernels launched during the
    recording are not undone: ``warp_launches`` counts them). A recording that fails leaves
    seeded random ops raising, as a failed CUDA capture leaves torch's generators
    (``orin_rl.capture``): ``capture.recover`` ends that.

    ``launchers``: (module, name) of functions that launch device kernels on CUDA and run their
    host twins on the CPU (``orin_rl.buffers.ops``' Numba launches): recorded and replayed as
    launches are, their host reads of CPU tensors allowed (on CUDA they read none).
    """

    def __init__(self, generators: Sequence[torch.Generator] = (),
                 launchers: Sequence[tuple[Any, str]] = ()) -> None:  # fmt: skip
        self.ops: list[tuple] = []
        self.warp_launches = 0
        self.generators = list(generators)
        self.launchers = list(launchers)
        self._in_warp_capture = False

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        import warp as wp

        launch = wp.launch
        ops = self.ops
        tolist, numpy = torch.Tensor.tolist, torch.Tensor.numpy

        def recorded_launch(*args: Any, **kwargs: Any) -> Any:
            if not self._in_warp_capture:  # else Warp's own capture records it (warp_graph)
                ops.append(("warp", launch, args, kwargs, None))
            return launch(*args, **kwargs)

        def recorded(fn: Any) -> Any:
            def run(*args: Any, **kwargs: Any) -> Any:
                ops.append(("launch", fn, args, kwargs, None))
                guarded = torch.Tensor.tolist, torch.Tensor.numpy
                torch.Tensor.tolist, torch.Tensor.numpy = tolist, numpy  # type: ignore[method-assign]
                try:
                    return fn(*args, **kwargs)
                finally:
                    torch.Tensor.tolist, torch.Tensor.numpy = guarded  # type: ignore[method-assign]

            return run

        def host_read(*args: Any, **kwargs: Any) -> Any:
            raise CaptureError("a tensor read on the host (tolist/numpy) during a capture")

        originals = [(module, name, getattr(module, name)) for module, name in self.launchers]
        for module, name, fn in originals:
            setattr(module, name, recorded(fn))
        wp.launch = recorded_launch
        torch.Tensor.tolist = host_read  # type: ignore[method-assign]
        torch.Tensor.numpy = host_read  # type: ignore[method-assign]
        rng = torch.get_rng_state()
        states = [g.get_state() for g in self.generators]
        recorder = _Recorder(ops)
        try:
            with recorder:
                yield
        except BaseException:
            emulate_failed_capture()
            raise
        finally:
            wp.launch = launch
            for module, name, fn in originals:
                setattr(module, name, fn)
            torch.Tensor.tolist, torch.Tensor.numpy = tolist, numpy  # type: ignore[method-assign]
            recorder.undo()  # what the work wrote goes back: a capture changes no tensor
            torch.set_rng_state(rng)  # nor the generators
            for g, state in zip(self.generators, states, strict=True):
                g.set_state(state)
        self.warp_launches = sum(op[0] == "warp" for op in ops)

    def warp_graph(self, device: Any, work: Callable[[], Any]) -> Any:
        """Inside ``recording()``: ``work``'s Warp operations (kernels, copies, memsets,
        ``capture_while`` loops) captured by Warp's own capture on its CPU device, recorded as
        one launch of that graph. Like a CUDA capture it runs nothing now: what ``work``
        would write stays as it is until a replay."""
        import warp as wp

        self._in_warp_capture = True
        try:
            with wp.ScopedCapture(device=device) as scope:
                out = work()
        finally:
            self._in_warp_capture = False
        self.ops.append(("warp", wp.capture_launch, (scope.graph,), {}, None))
        return out

    def replay(self) -> None:
        # below autograd, as a graph's kernels are: the recorded ops include in-place writes
        # to parameters and to tensors made in inference mode
        with torch.inference_mode():
            self._replay()

    def _replay(self) -> None:
        for kind, func, args, kwargs, out in self.ops:
            if kind in ("warp", "launch"):
                func(*args, **kwargs)
                continue
            new = func(*args, **kwargs)
            if out is None:
                continue
            for dst, src in zip(tree_flatten(out)[0], tree_flatten(new)[0], strict=True):
                if isinstance(dst, torch.Tensor):
                    dst.copy_(src)
