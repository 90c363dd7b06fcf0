"""A dict observation (images and states) as one row of bytes per environment.

An image-and-state observation (a gymnasium ``Dict`` of uint8 image Boxes and float32 vector
Boxes: mjlab's camera tasks, SB3's ``MultiInputPolicy`` envs) travels through training as a
single ``(batch, row_bytes)`` uint8 tensor, so every stage that moves observations by rows (the
env's step, the rollout storage and its minibatch gathers, a CUDA graph's static input, a
distributed gather) moves it unchanged, and only the ends read it by key: the env packs its
groups into rows (``pack``), the policy's encoder views them back (``unpack``: zero-copy, a
float32 key reinterpreted from its own bytes, bit for bit), and the exported model takes one
input per key. Images stay uint8 from the env to the network; each key's bytes start at a
multiple of ``ALIGN`` so that a float view of them is aligned. numpy arrays and torch tensors
alike (torch is never imported here: a tensor brings its module).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DTYPES = ("uint8", "float32")
"""What a key may hold: uint8 (images, 0-255) or float32 (states)."""
ALIGN = 8
"""Each key's first byte in the row is a multiple of this (a float view must be aligned)."""


class LayoutError(ValueError):
    """A dict observation that cannot travel as a row (a dtype or a space it does not take)."""


@dataclass(frozen=True)
class Part:
    """One key of the row: its shape and dtype per environment, and where its bytes lie."""

    key: str
    shape: tuple[int, ...]
    dtype: str
    offset: int
    """First byte of the key in the row."""

    @property
    def size(self) -> int:
        """Elements of one environment's value."""
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        """Bytes of one environment's value."""
        return self.size * np.dtype(self.dtype).itemsize

    @property
    def image(self) -> bool:
        """A uint8 (C, H, W) or (H, W, C) frame: an image encoder reads it."""
        return self.dtype == "uint8" and len(self.shape) == 3


class ObsLayout:
    """Where each key of a dict observation lies in its row of bytes (keys in the given order).

    Args:
        entries: (key, shape, dtype) of each key, dtype one of ``DTYPES``.
    """

    def __init__(self, entries: Sequence[tuple[str, Sequence[int], str]]):
        parts, offset = [], 0
        for key, shape, dtype in entries:
            if str(dtype) not in DTYPES:
                raise LayoutError(
                    f"observation key {key!r} is {dtype}: a dict observation holds uint8 images "
                    "(0-255) and float32 states; cast it in the environment"
                )
            part = Part(str(key), tuple(int(d) for d in shape), str(dtype), offset)
            parts.append(part)
            offset += -(-part.nbytes // ALIGN) * ALIGN  # the next key starts aligned
        if not parts:
            raise LayoutError("a dict observation needs at least one key")
        self.parts: dict[str, Part] = {p.key: p for p in parts}
        self.row_bytes = offset
        """Bytes of one environment's row (padding included)."""

    @classmethod
    def from_space(cls, space: Any) -> ObsLayout:
        """The layout of a gymnasium ``Dict`` space of Boxes (its keys in its order); a float
        Box is float32, whatever float dtype the space declares."""
        import gymnasium as gym

        entries = []
        for key, sub in space.spaces.items():
            if not isinstance(sub, gym.spaces.Box):
                raise LayoutError(f"observation key {key!r} is {sub}: a dict observation holds "
                                  "Boxes (uint8 images, float states)")  # fmt: skip
            dtype = "float32" if np.issubdtype(sub.dtype, np.floating) else str(sub.dtype)
            entries.append((key, sub.shape, dtype))
        return cls(entries)

    @classmethod
    def from_spec(cls, spec: Sequence[Mapping[str, Any]]) -> ObsLayout:
        """The layout ``to_spec`` described."""
        return cls([(e["key"], e["shape"], e["dtype"]) for e in spec])

    def to_spec(self) -> list[dict[str, Any]]:
        """[{key, shape, dtype}] in row order: plain values (a checkpoint's ``PolicySpec``)."""
        return [
            {"key": p.key, "shape": list(p.shape), "dtype": p.dtype} for p in self.parts.values()
        ]

    def pack(self, values: Mapping[str, Any]) -> Any:
        """(*batch, row_bytes) uint8 rows of ``values`` (each key (*batch, *shape), cast to its
        dtype): a torch tensor on the values' device, or a numpy array."""
        first = next(iter(self.parts.values()))
        sample = values[first.key]
        batch = tuple(sample.shape[: sample.ndim - len(first.shape)])
        torch = _torch_of(sample)
        pieces = []
        for part in self.parts.values():
            value = values[part.key]
            if tuple(value.shape) != (*batch, *part.shape):
                raise LayoutError(f"observation key {part.key!r} has shape {tuple(value.shape)}, "
                                  f"not {(*batch, *part.shape)}")  # fmt: skip
            if torch is not None:
                value = value.to(getattr(torch, part.dtype)).reshape(*batch, -1).contiguous()
            else:
                value = np.ascontiguousarray(value, dtype=part.dtype).reshape(*batch, -1)
            pieces.append(value.view(torch.uint8 if torch is not None else np.uint8))
            pad = -part.nbytes % ALIGN
            if pad and torch is not None:
                pieces.append(torch.zeros((*batch, pad), dtype=torch.uint8, device=value.device))
            elif pad:
                pieces.append(np.zeros((*batch, pad), np.uint8))
        if torch is not None:
            return torch.cat(pieces, dim=-1)
        return np.concatenate(pieces, axis=-1)

    def unpack(self, rows: Any, keys: Sequence[str] | None = None) -> dict[str, Any]:
        """``keys`` (default: all) of (*batch, row_bytes) uint8 ``rows`` as (*batch, *shape)
        views of their bytes (no copy, except of rows a float view cannot start aligned in)."""
        if rows.shape[-1] != self.row_bytes:
            raise LayoutError(f"rows of {rows.shape[-1]} bytes are not this layout's "
                              f"{self.row_bytes}")  # fmt: skip
        torch = _torch_of(rows)
        if torch is not None and (rows.storage_offset() % ALIGN or rows.stride(-1) != 1):
            rows = rows.clone(memory_format=torch.contiguous_format)
        batch = tuple(rows.shape[:-1])
        out = {}
        for key in keys if keys is not None else self.parts:
            part = self.parts[key]
            raw = rows[..., part.offset : part.offset + part.nbytes]
            if part.dtype != "uint8":
                raw = raw.view(getattr(torch, part.dtype) if torch is not None else part.dtype)
            out[key] = raw.reshape(*batch, *part.shape)
        return out


def _torch_of(value: Any) -> Any:
    """torch, when ``value`` is one of its tensors (the module is then imported), else None."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(value, torch.Tensor) else None
