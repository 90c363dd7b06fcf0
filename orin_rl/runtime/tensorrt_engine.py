"""A TensorRT engine with name-based I/O (TensorRT 8.5+ / 10 / 11) and pycuda buffers.

Torch-free. Not run on any machine of this project (no TensorRT runtime installs on them:
GPU.md); written against the documented API in JETSON.md; ``orin-rl doctor --selftest`` is
its first run on a board.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.bundle import PlatformInfo
from orin_rl.cudainfo import gpu_info
from orin_rl.errors import OrinError

JETPACK_HINT = (
    "TensorRT is not installed in this Python; on a Jetson it comes with JetPack "
    "(sudo apt install nvidia-jetpack, then create the venv with --system-site-packages "
    "or run jetson/setup.sh)"
)


class TensorRTUnavailable(OrinError, RuntimeError):
    """TensorRT (or pycuda for its buffers) is not importable here."""


def import_tensorrt():
    """The ``tensorrt`` module, or TensorRTUnavailable with the way to get it."""
    try:
        import tensorrt as trt
    except ImportError:
        raise TensorRTUnavailable(JETPACK_HINT) from None
    return trt


def platform_info(trt) -> PlatformInfo:
    """TensorRT version and GPU of this machine (what a sidecar must match)."""
    gpu = gpu_info()
    if gpu is None:
        raise TensorRTUnavailable(
            "no CUDA GPU is visible (cuda-python or pycuda needed to query it)"
        )
    return PlatformInfo(trt.__version__, gpu.name, gpu.compute_capability)


def trt_major(trt) -> int:
    """Major version of the imported TensorRT."""
    return int(trt.__version__.split(".")[0])


def _import_pycuda():
    try:
        import pycuda.autoinit  # noqa: F401  (creates the context)
        import pycuda.driver as cuda
    except ImportError:
        raise TensorRTUnavailable(
            "pycuda is needed for TensorRT buffers: pip install 'orin-rl[jetson]'"
        ) from None
    return cuda


class TensorRTEngine:
    """Deserialised engine + execution context + pinned host / device buffers per tensor.

    ``run(inputs)`` copies inputs in, enqueues with ``execute_async_v3`` on its own stream,
    copies outputs back and synchronises that stream only.
    """

    def __init__(self, engine_bytes: bytes, batch: int = 1):
        trt = import_tensorrt()
        self.cuda = _import_pycuda()
        self.trt = trt
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        self.engine = self.runtime.deserialize_cuda_engine(engine_bytes)
        if self.engine is None:
            raise OrinError("TensorRT could not deserialise the engine (see its log above)")
        self.context = self.engine.create_execution_context()
        self.stream = self.cuda.Stream()
        self.names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [
            n for n in self.names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT
        ]
        self.outputs = [n for n in self.names if n not in self.inputs]
        self.batch = 0
        self.host: dict[str, np.ndarray] = {}
        self.device: dict[str, Any] = {}
        self.set_batch(batch)

    def set_batch(self, batch: int) -> None:
        """(Re)allocate buffers and bind addresses for ``batch`` rows."""
        if batch == self.batch:
            return
        for name in self.inputs:
            shape = list(self.engine.get_tensor_shape(name))
            shape[0] = batch
            self.context.set_input_shape(name, shape)
        for name in self.names:
            shape = tuple(self.context.get_tensor_shape(name))
            dtype = np.dtype(self.trt.nptype(self.engine.get_tensor_dtype(name)))
            self.host[name] = self.cuda.pagelocked_empty(shape, dtype)
            self.device[name] = self.cuda.mem_alloc(max(1, self.host[name].nbytes))
            self.context.set_tensor_address(name, int(self.device[name]))
        self.batch = batch

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Inputs by name (leading axis = batch) → copies of the outputs by name."""
        batch = len(next(iter(inputs.values())))
        self.set_batch(batch)
        for name in self.inputs:
            np.copyto(self.host[name], inputs[name], casting="same_kind")
            self.cuda.memcpy_htod_async(self.device[name], self.host[name], self.stream)
        if not self.context.execute_async_v3(self.stream.handle):
            raise OrinError("TensorRT execute_async_v3 failed")
        for name in self.outputs:
            self.cuda.memcpy_dtoh_async(self.host[name], self.device[name], self.stream)
        self.stream.synchronize()
        return {name: self.host[name].copy() for name in self.outputs}

    @classmethod
    def from_file(cls, path: str | Path, batch: int = 1) -> TensorRTEngine:
        """Deserialise an engine file (check its sidecar first: bundle.check_engine)."""
        return cls(Path(path).read_bytes(), batch)
