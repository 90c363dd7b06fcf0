"""Where buffer storage lives, and one allocation path for every placement.

Placements: ``host`` (numpy), ``device`` (CUDA memory via torch), ``pinned`` (page-locked host
memory via torch), ``managed`` (CUDA unified memory via Numba). Torch sees each zero-copy and
Numba gets a view made once at allocation (``Storage.view``).
"""

from __future__ import annotations

import ctypes
import functools
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from orin_rl.errors import OrinError

log = logging.getLogger(__name__)

PLACEMENTS = ("host", "device", "pinned", "managed")


class PlacementError(OrinError, ValueError):
    """A placement cannot be used on this machine or for this request."""


@dataclass
class Storage:
    """A tensor and the Numba view of the same memory."""

    tensor: torch.Tensor
    """The torch tensor (zero-copy over the placement's memory)."""
    view: Any
    """Numba view for kernels: numpy array on host memory, device array on CUDA memory."""
    placement: str
    """Where the memory lives."""

    @functools.cached_property
    def host(self) -> np.ndarray | None:
        """A numpy array over the same memory that the CPU may write into, or None (``device``).

        For ``managed`` storage the CPU writes into the DRAM the GPU reads: no copy. Call
        ``host_write_fence`` first on a CUDA learner.
        """
        if self.placement == "device":
            return None
        if self.placement == "managed":
            # A Numba managed array is an ndarray subclass; its own .view() means something else.
            return np.ndarray.view(self.view, np.ndarray)
        return self.tensor.numpy()


def cuda_simulated() -> bool:
    """True when Numba runs CUDA kernels through its simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def is_integrated(device: torch.device) -> bool:
    """True for a GPU that shares DRAM with the CPU (Jetson Orin), from the CUDA attributes."""
    props = torch.cuda.get_device_properties(device)
    return bool(getattr(props, "is_integrated", False))


def resolve_placement(placement: str, device: torch.device) -> tuple[str, str]:
    """Return (placement, reason) for a request and the learner's ``device``.

    ``auto``: CPU learner → host; integrated GPU → managed (CPU and GPU share the DRAM, so
    neither side copies); discrete GPU → device, wherever the environments run: the policy
    reads every observation on the GPU in the step that produced it, and the update reads the
    stored transitions there, so host memory (pinned included) would add a copy each way.
    ``pinned`` stays for an explicit request (a replay buffer larger than the GPU's memory).
    """
    if placement not in ("auto", *PLACEMENTS):
        raise PlacementError(
            f"unknown buffer placement {placement!r}; choose auto, {', '.join(PLACEMENTS)}"
        )
    if placement == "auto":
        if device.type != "cuda":
            return "host", "learner on the CPU: buffer in host memory"
        if is_integrated(device):
            if cuda_simulated():
                return "host", "integrated GPU, but the Numba simulator has no managed memory"
            return "managed", "integrated GPU shares DRAM with the CPU: unified (managed) memory"
        return "device", "discrete GPU: buffer in device memory, where the learner reads it"
    if placement in ("device", "managed") and device.type != "cuda":
        raise PlacementError(
            f"buffer placement {placement!r} needs a CUDA learner; use --device cuda or "
            "--buffer-placement host"
        )
    if placement == "managed" and cuda_simulated():
        return "host", "Numba CUDA simulator has no managed memory: falling back to host"
    if placement == "pinned" and not torch.cuda.is_available():
        return "host", "pinned memory needs CUDA: falling back to host"
    return placement, "requested explicitly"


def available_bytes(meminfo: str = "/proc/meminfo") -> int | None:
    """The memory the kernel says a new allocation can take without swapping (MemAvailable:
    on an Orin, what CPU and GPU share); None where there is no /proc/meminfo."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def allocate(
    shape: tuple[int, ...], dtype: torch.dtype, placement: str, device: torch.device
) -> Storage:
    """Allocate zeroed storage of ``shape``/``dtype`` in a resolved ``placement``."""
    if placement == "host":
        tensor = torch.zeros(shape, dtype=dtype)
        return Storage(tensor, tensor.numpy(), placement)
    if placement == "pinned":
        tensor = torch.zeros(shape, dtype=dtype, pin_memory=True)
        return Storage(tensor, tensor.numpy(), placement)
    if placement == "device":
        from numba import cuda

        tensor = torch.zeros(shape, dtype=dtype, device=device)
        return Storage(tensor, cuda.as_cuda_array(tensor), placement)
    if placement == "managed":
        return _allocate_managed(shape, dtype, device)
    raise PlacementError(f"unknown buffer placement {placement!r}")


def _allocate_managed(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Storage:
    from numba import cuda

    np_dtype = torch.empty((), dtype=dtype).numpy().dtype
    nbytes = int(np.prod(shape)) * np_dtype.itemsize
    free, _total = torch.cuda.mem_get_info(device)
    # Over-asking managed memory can hang a GPU: keep a margin below what is free.
    if nbytes > 0.8 * free:
        raise PlacementError(
            f"managed buffer of {nbytes / 2**20:.0f} MiB does not fit in 80% of the "
            f"{free / 2**20:.0f} MiB free on {device}; lower num_envs/num_steps or use "
            "--set buffer.placement=device"
        )
    with cuda.gpus[device.index or 0]:
        array = cuda.managed_array(shape, dtype=np_dtype)
    tensor = torch.as_tensor(array, device=device)
    tensor.zero_()
    managed = query_managed(tensor.data_ptr()) if tensor.numel() else True
    if managed is False:
        raise PlacementError(
            f"the CUDA driver does not report the buffer at {tensor.data_ptr():#x} as managed "
            "memory; use --set buffer.placement=device"
        )
    if managed is None:
        log.warning("the CUDA driver could not say whether the managed buffer is managed")
    return Storage(tensor, array, "managed")


# CUpointer_attribute (cuda.h): CU_POINTER_ATTRIBUTE_IS_MANAGED.
_CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
_libcuda: ctypes.CDLL | None = None


def _driver() -> ctypes.CDLL:
    """libcuda (the CUDA driver API), loaded once."""
    global _libcuda
    if _libcuda is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as exc:
            raise PlacementError(f"no CUDA driver (libcuda.so.1): {exc}") from None
        # CUresult cuPointerGetAttribute(void *data, CUpointer_attribute, CUdeviceptr)
        lib.cuPointerGetAttribute.argtypes = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64)
        lib.cuPointerGetAttribute.restype = ctypes.c_int
        # CUresult cuMemHostGetDevicePointer(CUdeviceptr *pdptr, void *p, unsigned int Flags)
        lib.cuMemHostGetDevicePointer_v2.argtypes = (
            ctypes.POINTER(ctypes.c_uint64),
            ctypes.c_void_p,
            ctypes.c_uint,
        )
        lib.cuMemHostGetDevicePointer_v2.restype = ctypes.c_int
        _libcuda = lib
    return _libcuda


def query_managed(ptr: int) -> bool | None:
    """Whether the CUDA driver reports ``ptr`` as managed (unified) memory; None where the query
    itself failed (no current context, or host memory CUDA never registered).

    ``cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_IS_MANAGED)``, straight from libcuda, so the
    answer is the driver's own, not an inference from pointers that match.
    """
    value = ctypes.c_uint(0)
    status = _driver().cuPointerGetAttribute(
        ctypes.byref(value), _CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr
    )
    return bool(value.value) if status == 0 else None


def host_device_pointer(ptr: int) -> int:
    """The device address of host memory registered as mapped (``cuMemHostGetDevicePointer``)."""
    out = ctypes.c_uint64(0)
    status = _driver().cuMemHostGetDevicePointer_v2(ctypes.byref(out), ptr, 0)
    if status != 0:
        raise PlacementError(
            f"the CUDA driver has no device address for host memory at {ptr:#x} (CUresult "
            f"{status}): register it mapped first"
        )
    return int(out.value)


def host_write_fence(device: torch.device) -> None:
    """Wait until ``device`` runs no kernel, before the CPU writes into managed memory.

    Where a GPU reports ``concurrentManagedAccess`` 0, the CPU must not touch managed memory
    while any kernel runs (NVIDIA, CUDA for Tegra, "Effective Usage of Unified Memory on Tegra");
    on every GPU the write must not overtake a kernel still reading the old contents.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
