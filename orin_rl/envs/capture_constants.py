"""Host constants made device constants while a CUDA graph is captured.

A copy from pageable host memory cannot be captured, and mjlab's terms make one at every
call wherever they index with a Python list (``x[:, asset_cfg.body_ids]``) or build a tensor
from Python numbers (``torch.tensor(range_list, device=...)``). Within
:func:`device_list_indices` both become cached device tensors, made once in the eager
warm-up step and reused (or copied on the device) while capturing and replaying.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch


def _is_int_list(x: Any) -> bool:
    return (
        type(x) is list
        and len(x) > 0
        and all(type(v) is int for v in x)  # not bool: a list of bools is a mask
    )


@contextlib.contextmanager
def device_list_indices(cache: dict[tuple, torch.Tensor], device: torch.device):
    """Indexing a CUDA tensor with a Python list of ints (``x[:, asset_cfg.body_ids, :]``, as
    mjlab's reward terms do) copies the list to the device at every call, and a copy from
    pageable memory cannot be captured. Within this context such a list, indexing a tensor on
    ``device``, becomes a cached int64 tensor there: the same advanced indexing, made once
    (eagerly, in the warm-up step) and reused while capturing. So does ``torch.tensor`` of
    Python numbers on ``device`` (a fresh device copy of the cached one each call), and a
    Python number assigned into a tensor there."""
    getitem, setitem = torch.Tensor.__getitem__, torch.Tensor.__setitem__

    def _on(tensor: torch.Tensor) -> bool:
        here = tensor.device
        return here.type == device.type and (device.index is None or here.index == device.index)

    def convert(tensor: torch.Tensor, idx: Any) -> Any:
        if not _on(tensor):
            return idx

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

    def patched_getitem(self, idx):
        return getitem(self, convert(self, idx))

    def patched_setitem(self, idx, value):
        """``x[ids] = 0.0`` on a CUDA tensor makes the 0.0 a CPU tensor that ``index_put_``
        copies to the device (mjlab's resets: ``clear_state``, the sensors' and the action
        manager's ``reset``): the value becomes a cached device scalar of ``x``'s dtype."""
        if type(value) in (bool, int, float) and _on(self):
            key = ("scalar", type(value).__name__, repr(value), self.dtype, str(self.device))
            if key not in cache:
                cache[key] = factory(value, dtype=self.dtype, device=self.device)
            value = cache[key]
        return setitem(self, convert(self, idx), value)

    def patched_tensor(data, *args, **kwargs):
        """``torch.tensor(python numbers, device=cuda)`` (mjlab's ``_sample_se3_range``) is
        a copy from pageable memory: made once, then a device copy of it (capturable)."""
        here = torch.device(kwargs.get("device") or "cpu")
        key = _frozen(data)
        if here.type != device.type or args or key is None:
            return factory(data, *args, **kwargs)
        key = ("tensor", key, tuple(sorted((k, str(v)) for k, v in kwargs.items())))
        if key not in cache:
            cache[key] = factory(data, **kwargs)
        return cache[key].clone()

    factory = torch.tensor
    torch.Tensor.__getitem__ = patched_getitem
    torch.Tensor.__setitem__ = patched_setitem
    torch.tensor = patched_tensor
    try:
        yield
    finally:
        torch.Tensor.__getitem__ = getitem
        torch.Tensor.__setitem__ = setitem
        torch.tensor = factory


def _frozen(data: Any) -> Any:
    """Python numbers (nested lists/tuples of them) as a hashable key, else None."""
    if isinstance(data, bool | int | float):
        return (type(data).__name__, repr(data))  # -0.0 is not 0.0; nan is itself
    if isinstance(data, list | tuple) and len(data) <= 64:
        items = tuple(_frozen(x) for x in data)
        return None if any(x is None for x in items) else items
    return None
