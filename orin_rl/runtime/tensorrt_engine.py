"""A TensorRT engine with name-based I/O (TensorRT 8.6 / 10 / 11) and pycuda buffers.

Torch-free. The oldest TensorRT supported is 8.6 (JetPack 6.0): 8.5.2 (JetPack 5) has the
name-based calls, but its Python ``nptype`` uses ``np.bool`` (gone in numpy >= 1.24) and
JetPack 5's Python 3.8 is below this package's ``requires-python``.

Buffers are allocated once, for the optimisation profile's largest batch, so their addresses
never change (a CUDA graph over them stays valid). On an integrated GPU (Jetson: CPU and GPU
share the DRAM) they are page-locked host memory mapped into the GPU's address space and bound
directly as the engine's inputs and outputs: a call copies nothing between host and device.
On a discrete GPU they are pinned host staging buffers plus device buffers, copied
asynchronously on the engine's own stream.

NOT RUN on any machine of this project (no TensorRT runtime installs on them: GPU.md); written
against the documented API in JETSON.md; ``orin-rl doctor --selftest`` is its first run on a
board.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.bundle import PlatformInfo
from orin_rl.cudainfo import gpu_info
from orin_rl.errors import OrinError

MIN_TENSORRT = (8, 6)
JETPACK_HINT = (
    "TensorRT is not installed in this Python; on a Jetson it comes with JetPack "
    "(sudo apt install nvidia-jetpack, then create the venv with --system-site-packages "
    "or run jetson/setup.sh)"
)


class TensorRTUnavailable(OrinError, RuntimeError):
    """TensorRT (or pycuda for its buffers) is not importable here, or is too old."""


class ProfileError(OrinError, ValueError):
    """An input shape lies outside the engine's optimisation profile."""


def check_version(version: str) -> None:
    """Refuse TensorRT older than ``MIN_TENSORRT`` with the way forward."""
    parts = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
    if len(parts) == 2 and parts < MIN_TENSORRT:
        raise TensorRTUnavailable(
            f"TensorRT {version} is too old: orin_rl needs TensorRT 8.6+ (JetPack 6.0 or later; "
            "JetPack 5's 8.5.2 breaks on numpy >= 1.24 and ships Python 3.8)"
        )


def import_tensorrt():
    """The ``tensorrt`` module, or TensorRTUnavailable with the way to get it."""
    try:
        import tensorrt as trt
    except ImportError:
        raise TensorRTUnavailable(JETPACK_HINT) from None
    check_version(trt.__version__)
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


def runtime_settings(version_compatible: bool, dla_core: int | None) -> dict[str, Any]:
    """``IRuntime`` attributes to set before deserialising an engine.

    A version-compatible engine embeds its lean runtime, which TensorRT runs only with
    ``engine_host_code_allowed`` (default False); a DLA engine runs on ``DLA_core``.
    """
    settings: dict[str, Any] = {}
    if version_compatible:
        settings["engine_host_code_allowed"] = True
    if dla_core is not None:
        settings["DLA_core"] = int(dla_core)
    return settings


def contract_dtype(dtype: str) -> str:
    """The dtype every backend returns for an output: integers (discrete actions) as int64."""
    return "int64" if np.dtype(dtype).kind in "iu" else dtype


def widen_integers(array: np.ndarray) -> np.ndarray:
    """int64 for integer outputs: TensorRT 8.6's parser types ArgMax indices INT32 (10.x
    gives INT64), and every backend returns discrete actions as int64."""
    if array.dtype.kind in "iu" and array.dtype != np.int64:
        return array.astype(np.int64)
    return array


def check_batch(batch: int, profile: list[int]) -> None:
    """One-line error for a batch outside the engine's (min, opt, max) profile."""
    mn, opt, mx = profile
    if not mn <= batch <= mx:
        raise ProfileError(
            f"batch {batch} is outside the engine's optimisation profile (batch {mn} to {mx}): "
            f"rebuild it with orin-rl build BUNDLE --batch {min(mn, batch)},{opt},{max(mx, batch)}"
        )


def use_mapped(zero_copy: bool | None, integrated: bool, can_map: bool) -> bool:
    """Bind mapped host memory (``zero_copy``; None: on integrated GPUs) or stage copies."""
    if zero_copy is None:
        return integrated and can_map
    if zero_copy and not can_map:
        raise TensorRTUnavailable("this GPU cannot map host memory: use zero_copy=False")
    return bool(zero_copy)


def import_pycuda():
    """``pycuda.driver`` on the device's primary context (the one torch and cudart use)."""
    try:
        import pycuda.autoprimaryctx  # noqa: F401  (retains and pushes the primary context)
        import pycuda.driver as cuda
    except ImportError:
        raise TensorRTUnavailable(
            "pycuda is needed for TensorRT buffers: pip install 'orin-rl[jetson]'"
        ) from None
    return cuda


class TensorRTEngine:
    """Deserialised engine + execution context + one set of I/O buffers.

    ``run(inputs)`` copies inputs in, enqueues with ``execute_async_v3`` on its own stream,
    copies outputs back and synchronises that stream only; with mapped buffers the host/device
    copies vanish (``mapped``).

    Args:
        engine_bytes: the serialised engine (check its sidecar first: bundle.check_engine).
        batch: the batch to set up first.
        version_compatible: the engine was built VERSION_COMPATIBLE (from its sidecar).
        dla_core: the DLA core it was built for (from its sidecar), or None.
        zero_copy: mapped host buffers (True), staged copies (False), or None: mapped on
            integrated GPUs.
    """

    def __init__(
        self,
        engine_bytes: bytes,
        batch: int = 1,
        *,
        version_compatible: bool = False,
        dla_core: int | None = None,
        zero_copy: bool | None = None,
    ):
        trt = import_tensorrt()
        self.cuda = cuda = import_pycuda()
        self.trt = trt
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        for key, value in runtime_settings(version_compatible, dla_core).items():
            setattr(self.runtime, key, value)
        self.engine = self.runtime.deserialize_cuda_engine(engine_bytes)
        if self.engine is None:
            raise OrinError("TensorRT could not deserialise the engine (see its log above)")
        self.context = self.engine.create_execution_context()
        self.stream = cuda.Stream()
        self.names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [
            n for n in self.names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT
        ]
        self.outputs = [n for n in self.names if n not in self.inputs]
        device = cuda.Context.get_device()
        self.mapped = use_mapped(
            zero_copy,
            bool(device.get_attribute(cuda.device_attribute.INTEGRATED)),
            bool(device.get_attribute(cuda.device_attribute.CAN_MAP_HOST_MEMORY)),
        )
        self.profile = {name: self._profile(name) for name in self.inputs}
        self.host: dict[str, np.ndarray] = {}
        """Full-size host buffers (mapped or pinned), one per tensor."""
        self.device: dict[str, Any] = {}
        """Device allocations (staged mode only)."""
        self.views: dict[str, np.ndarray] = {}
        """Host views of the current batch's shape."""
        self.addresses: tuple[int, ...] = ()
        """Bound tensor addresses: fixed for the engine's life."""
        self._allocate()
        self.batch = 0
        self.set_batch(batch)

    def _profile(self, name: str) -> tuple[tuple[int, ...], ...]:
        shape = tuple(self.engine.get_tensor_shape(name))
        if all(d >= 0 for d in shape):
            return shape, shape, shape
        return tuple(tuple(s) for s in self.engine.get_tensor_profile_shape(name, 0))

    def _set_input_shape(self, name: str, shape: tuple[int, ...]) -> None:
        # False means: outside the profile. Unchecked, it surfaces later as a negative-size
        # buffer error far from the cause.
        if not self.context.set_input_shape(name, shape):
            mn, _, mx = self.profile[name]
            raise ProfileError(
                f"{name}: shape {shape} is outside the engine's optimisation profile "
                f"(min {mn}, max {mx}): rebuild with orin-rl build BUNDLE --batch MIN,OPT,MAX"
            )

    def _allocate(self) -> None:
        """Buffers for the profile's largest shapes, bound once."""
        cuda = self.cuda
        for name in self.inputs:
            self._set_input_shape(name, self.profile[name][2])
        addresses = []
        for name in self.names:
            shape = tuple(self.context.get_tensor_shape(name))
            dtype = np.dtype(self.trt.nptype(self.engine.get_tensor_dtype(name)))
            if self.mapped:
                flags = cuda.host_alloc_flags.DEVICEMAP
                host = cuda.pagelocked_empty(shape, dtype, mem_flags=flags)
                address = int(host.base.get_device_pointer())
            else:
                host = cuda.pagelocked_empty(shape, dtype)
                self.device[name] = cuda.mem_alloc(max(1, host.nbytes))
                address = int(self.device[name])
            self.host[name] = host
            self.context.set_tensor_address(name, address)
            addresses.append(address)
        self.addresses = tuple(addresses)

    @property
    def max_batch(self) -> int:
        """Largest batch of the optimisation profile."""
        return min(p[2][0] for p in self.profile.values())

    def set_batch(self, batch: int) -> None:
        """Set the input shapes for ``batch`` rows (buffers stay where they are)."""
        if batch == self.batch:
            return
        for name in self.inputs:
            self._set_input_shape(name, (batch, *self.profile[name][2][1:]))
        for name in self.names:
            shape = tuple(self.context.get_tensor_shape(name))
            flat = self.host[name].reshape(-1)
            self.views[name] = flat[: math.prod(shape)].reshape(shape)
        self.batch = batch

    def enqueue(self) -> None:
        """Copies in (staged mode), the engine, copies out, all on ``stream``: what a CUDA
        graph captures."""
        cuda, stream = self.cuda, self.stream
        if not self.mapped:
            for name in self.inputs:
                cuda.memcpy_htod_async(self.device[name], self.views[name], stream)
        if not self.context.execute_async_v3(stream.handle):
            raise OrinError("TensorRT execute_async_v3 failed")
        if not self.mapped:
            for name in self.outputs:
                cuda.memcpy_dtoh_async(self.views[name], self.device[name], stream)

    def result(self, name: str) -> np.ndarray:
        """A copy of output ``name`` (integers widened to int64), after ``stream`` synced."""
        view = self.views[name]
        widened = widen_integers(view)
        return widened if widened is not view else view.copy()

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Inputs by name (leading axis = batch) → copies of the outputs by name."""
        self.set_batch(len(next(iter(inputs.values()))))
        for name in self.inputs:
            np.copyto(self.views[name], inputs[name], casting="same_kind")
        self.enqueue()
        self.stream.synchronize()
        return {name: self.result(name) for name in self.outputs}

    def close(self) -> None:
        """Free in dependency order (context, engine, runtime, then buffers) while the CUDA
        context is still current, so nothing is left for interpreter exit to trip over."""
        if self.engine is None:
            return
        self.stream.synchronize()
        self.context = None
        self.engine = None
        self.runtime = None
        for allocation in self.device.values():
            allocation.free()
        for host in self.host.values():
            host.base.free()
        self.device.clear()
        self.host.clear()
        self.views.clear()

    def __enter__(self) -> TensorRTEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @classmethod
    def from_file(cls, path: str | Path, batch: int = 1, **kwargs) -> TensorRTEngine:
        """Deserialise an engine file (check its sidecar first: bundle.check_engine)."""
        return cls(Path(path).read_bytes(), batch, **kwargs)
