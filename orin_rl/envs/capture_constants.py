"""Host constants made device constants while a CUDA graph is captured, on the capturing thread.

A copy from pageable host memory cannot be captured, and mjlab's terms make one at every
call wherever they index with a Python list (``x[:, asset_cfg.body_ids]``) or build a tensor
from Python numbers (``torch.tensor(range_list, device=...)``). Within
:func:`device_list_indices` both become cached device tensors, made once in the eager
warm-up step and reused (or copied on the device) while capturing and replaying.

The one patch of the project, and why it stays: those calls are inside mjlab's own reward,
event and sensor terms (dozens of them, each task its own), so the project's masked twins
cannot replace them all, and mjlab's code as it is makes the copies. The patch is narrow:
``torch.Tensor.__getitem__``, ``torch.Tensor.__setitem__`` and ``torch.tensor`` are replaced
only while some thread is inside the context, and the replacements act only for the thread
that entered it (any other thread — a rollout collector, a logger — gets torch's own
behaviour); the last thread to leave puts torch's own functions back, whether its block ended
or raised (tests/envs/test_capture_constants.py).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import torch

_LOCK = threading.Lock()
_LOCAL = threading.local()
"""Per thread: ``scopes``, the (cache, device) of each context this thread is inside."""
_ORIGINALS: dict[str, Any] = {
    "__getitem__": torch.Tensor.__getitem__,
    "__setitem__": torch.Tensor.__setitem__,
    "tensor": torch.tensor,
}
"""torch's own functions (as this module found them): the replacements call these, so a
reference to a replacement kept past the context still behaves as torch."""
_USERS = 0
"""Contexts open on any thread: the patch is installed while it is positive."""


def _is_int_list(x: Any) -> bool:
    return (
        type(x) is list
        and len(x) > 0
        and all(type(v) is int for v in x)  # not bool: a list of bools is a mask
    )


def _scope() -> tuple[dict[tuple, torch.Tensor], torch.device] | None:
    """This thread's innermost (cache, device), or None outside every context."""
    scopes = getattr(_LOCAL, "scopes", None)
    return scopes[-1] if scopes else None


def _on(tensor: torch.Tensor, device: torch.device) -> bool:
    here = tensor.device
    return here.type == device.type and (device.index is None or here.index == device.index)


def _convert(tensor: torch.Tensor, idx: Any, cache: dict, device: torch.device) -> Any:
    """``idx`` with each list of ints made a cached int64 tensor on ``tensor``'s device."""
    if not _on(tensor, device):
        return idx
    factory = _ORIGINALS["tensor"]

    def one(x: Any) -> Any:
        if not _is_int_list(x):
            return x
        key = (tensor.device, tuple(x))
        if key not in cache:
            cache[key] = factory(x, dtype=torch.int64, device=tensor.device)
        return cache[key]

    if isinstance(idx, tuple):
        return tuple(one(x) for x in idx)
    return one(idx)


def _getitem(self: torch.Tensor, idx: Any) -> Any:
    scope = _scope()
    if scope is not None:
        idx = _convert(self, idx, *scope)
    return _ORIGINALS["__getitem__"](self, idx)


def _setitem(self: torch.Tensor, idx: Any, value: Any) -> None:
    """``x[ids] = 0.0`` on a CUDA tensor makes the 0.0 a CPU tensor that ``index_put_`` copies
    to the device (mjlab's resets: ``clear_state``, the sensors' and the action manager's
    ``reset``): the value becomes a cached device scalar of ``x``'s dtype."""
    scope = _scope()
    if scope is not None:
        cache, device = scope
        if type(value) in (bool, int, float) and _on(self, device):
            key = ("scalar", type(value).__name__, repr(value), self.dtype, str(self.device))
            if key not in cache:
                cache[key] = _ORIGINALS["tensor"](value, dtype=self.dtype, device=self.device)
            value = cache[key]
        idx = _convert(self, idx, cache, device)
    return _ORIGINALS["__setitem__"](self, idx, value)


def _tensor(data: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
    """``torch.tensor(python numbers, device=cuda)`` (mjlab's ``_sample_se3_range``) is a copy
    from pageable memory: made once, then a device copy of it (capturable)."""
    factory = _ORIGINALS["tensor"]
    scope = _scope()
    if scope is None:
        return factory(data, *args, **kwargs)
    cache, device = scope
    here = torch.device(kwargs.get("device") or "cpu")
    key = _frozen(data)
    if here.type != device.type or args or key is None:
        return factory(data, *args, **kwargs)
    key = ("tensor", key, tuple(sorted((k, str(v)) for k, v in kwargs.items())))
    if key not in cache:
        cache[key] = factory(data, **kwargs)
    return cache[key].clone()


def _install() -> None:
    torch.Tensor.__getitem__ = _getitem
    torch.Tensor.__setitem__ = _setitem
    torch.tensor = _tensor


def _uninstall() -> None:
    torch.Tensor.__getitem__ = _ORIGINALS["__getitem__"]
    torch.Tensor.__setitem__ = _ORIGINALS["__setitem__"]
    torch.tensor = _ORIGINALS["tensor"]


@contextlib.contextmanager
def device_list_indices(cache: dict[tuple, torch.Tensor], device: torch.device):
    """On this thread, while inside: indexing a tensor on ``device`` with a Python list of
    ints (``x[:, asset_cfg.body_ids, :]``, as mjlab's reward terms do) uses a cached int64
    tensor there instead of copying the list from pageable memory at every call (which no
    capture takes): the same advanced indexing, made once (eagerly, in the warm-up step) and
    reused while capturing. So does ``torch.tensor`` of Python numbers on ``device`` (a fresh
    device copy of the cached one each call), and a Python number assigned into a tensor
    there. Other threads are left to torch (module docstring)."""
    global _USERS
    with _LOCK:
        if _USERS == 0:
            _install()
        _USERS += 1
    scopes = _LOCAL.__dict__.setdefault("scopes", [])
    scopes.append((cache, device))
    try:
        yield
    finally:
        scopes.pop()
        with _LOCK:
            _USERS -= 1
            if _USERS == 0:
                _uninstall()


def _frozen(data: Any) -> Any:
    """Python numbers (nested lists/tuples of them) as a hashable key, else None."""
    if isinstance(data, bool | int | float):
        return (type(data).__name__, repr(data))  # -0.0 is not 0.0; nan is itself
    if isinstance(data, list | tuple) and len(data) <= 64:
        items = tuple(_frozen(x) for x in data)
        return None if any(x is None for x in items) else items
    return None
