"""Host memory that other processes write into: named numpy arrays in one POSIX shared-memory
segment, and the views a learner on the GPU reads it through.

Rollout workers (``envs.worker_pool``) write transitions into a :class:`SharedBlock` where the
learner reads them: on a CPU learner the torch tensors are views of the segment itself. For a
CUDA learner the segment is page-locked once (``cudaHostRegister``) and then either

- *mapped* (``mapped=True``): a CUDA tensor over the same pages, as the GPU addresses them. On
  an integrated GPU (Orin) the CPU and GPU share the DRAM, so nothing is copied, and unlike
  managed memory a page-locked mapping has no ``concurrentManagedAccess`` rule: workers may
  write one block while kernels read another; or
- *pinned* (discrete GPU): the learner copies the block into device memory with one
  asynchronous DMA per field (``Tensor.copy_(..., non_blocking=True)``), since kernels reading
  host memory over PCIe at every minibatch would cost more than the copy.
"""

from __future__ import annotations

import ctypes
import logging
from multiprocessing import shared_memory
from typing import Any

import numpy as np
import torch

from orin_rl.buffers import memory

log = logging.getLogger(__name__)

_ALIGN = 64  # every array starts on a cache line

# cudaHostRegister flags (cuda_runtime_api.h)
_REGISTER_PORTABLE = 1
_REGISTER_MAPPED = 2


class SharedBlock:
    """Named arrays in one shared-memory segment; pickles as its name and layout, so a worker
    process attaches to the same memory (``multiprocessing.shared_memory``).

    Args:
        layout: name -> (shape, numpy dtype) of each array.
    """

    def __init__(self, layout: dict[str, tuple[tuple[int, ...], Any]], _name: str | None = None):
        self.layout = {k: (tuple(int(n) for n in shape), np.dtype(dt).str)
                       for k, (shape, dt) in layout.items()}  # fmt: skip
        offsets, total = {}, 0
        for key, (shape, dt) in self.layout.items():
            offsets[key] = total
            nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize
            total += -(-nbytes // _ALIGN) * _ALIGN
        self.nbytes = max(total, 1)
        self.owner = _name is None
        self._shm = shared_memory.SharedMemory(name=_name, create=self.owner, size=self.nbytes)
        self.arrays = {
            key: np.ndarray(shape, np.dtype(dt), buffer=self._shm.buf, offset=offsets[key])
            for key, (shape, dt) in self.layout.items()
        }
        if self.owner:
            for array in self.arrays.values():
                array.fill(0)
        self._registered: torch.device | None = None
        self._mapped = False

    def __getitem__(self, key: str) -> np.ndarray:
        return self.arrays[key]

    def __reduce__(self):
        return (_attach, (self.layout, self._shm.name))

    @property
    def address(self) -> int:
        """Host address of the segment's first byte."""
        return ctypes.addressof(ctypes.c_char.from_buffer(self._shm.buf))

    # ------------------------------------------------------------------ the learner's views
    def tensor(self, key: str) -> torch.Tensor:
        """A CPU tensor over ``key``'s memory (page-locked after ``register``)."""
        return torch.from_numpy(self.arrays[key])

    def register(self, device: torch.device, mapped: bool) -> None:
        """Page-lock the segment for ``device`` (``cudaHostRegister``), mapped into the GPU's
        address space when ``mapped``; once per block."""
        if self._registered is not None:
            return
        torch.zeros(1, device=device)  # the device's primary context is current
        flags = _REGISTER_PORTABLE | (_REGISTER_MAPPED if mapped else 0)
        status = torch.cuda.cudart().cudaHostRegister(self.address, self.nbytes, flags)
        code = int(getattr(status, "value", status))
        if code != 0:
            raise memory.PlacementError(
                f"cudaHostRegister of a {self.nbytes / 2**20:.1f} MiB shared block failed "
                f"(CUDA error {code}); lower num_envs or num_steps, or use --vectorization async"
            )
        self._registered, self._mapped = device, mapped

    def device_tensor(self, key: str) -> torch.Tensor:
        """A CUDA tensor over ``key``'s pages as the GPU maps them (``register(mapped=True)``
        first): the GPU reads what the workers wrote, with no copy."""
        if self._registered is None or not self._mapped:
            raise memory.PlacementError("device_tensor() needs register(device, mapped=True)")
        array = self.arrays[key]
        pointer = memory.host_device_pointer(array.ctypes.data) if array.size else 0
        view = _DeviceArray(array, pointer, self)
        return torch.as_tensor(view, device=self._registered)

    def close(self) -> None:
        """Unregister, unmap and (for the creating process) remove the segment."""
        if self._registered is not None:
            torch.cuda.synchronize(self._registered)
            torch.cuda.cudart().cudaHostUnregister(self.address)
            self._registered = None
        self.arrays = {}
        try:
            self._shm.close()
        except BufferError:  # a tensor still views it: the OS frees it with the last view
            log.debug("shared block %s still viewed at close", self._shm.name)
        if self.owner:
            self._shm.unlink()
            self.owner = False


def _attach(layout: dict[str, tuple[tuple[int, ...], str]], name: str) -> SharedBlock:
    return SharedBlock(layout, _name=name)


class _DeviceArray:
    """``__cuda_array_interface__`` of a mapped host array (torch takes it zero-copy); holds
    the block so the mapping outlives the tensor."""

    def __init__(self, array: np.ndarray, pointer: int, block: SharedBlock):
        self._block = block
        self.__cuda_array_interface__ = {
            "shape": array.shape,
            "typestr": array.dtype.str,
            "data": (pointer, False),
            "strides": None,
            "version": 3,
        }
