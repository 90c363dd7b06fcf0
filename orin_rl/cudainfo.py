"""Which CUDA GPU this is, without torch: cuda-python, then pycuda, then torch if present."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class GpuInfo:
    """Name and compute capability of a CUDA device."""

    name: str
    """e.g. ``Orin`` or ``NVIDIA H200``."""
    compute_capability: str
    """``major.minor``, e.g. ``8.7``."""
    integrated: bool
    """Shares DRAM with the CPU (Jetson)."""


def gpu_info(index: int = 0) -> GpuInfo | None:
    """The device's facts, or None when no CUDA library here can see a GPU."""
    for probe in (_cuda_python, _pycuda, _torch):
        try:
            info = probe(index)
        # A missing or broken binding: try the next one.
        except Exception:  # nosec B112
            continue
        if info is not None:
            return info
    return None


def _cuda_python(index: int) -> GpuInfo | None:
    from cuda.bindings import runtime as cudart

    err, props = cudart.cudaGetDeviceProperties(index)
    if int(err) != 0:
        return None
    name = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
    return GpuInfo(name.strip("\x00"), f"{props.major}.{props.minor}", bool(props.integrated))


def _pycuda(index: int) -> GpuInfo | None:
    import pycuda.driver as cuda

    cuda.init()
    dev = cuda.Device(index)
    major, minor = dev.compute_capability()
    integrated = bool(dev.get_attribute(cuda.device_attribute.INTEGRATED))
    return GpuInfo(dev.name(), f"{major}.{minor}", integrated)


def _torch(index: int) -> GpuInfo | None:
    import sys

    if "torch" not in sys.modules:  # never pull torch into a torch-free process
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(index)
    return GpuInfo(props.name, f"{props.major}.{props.minor}", bool(props.is_integrated))
