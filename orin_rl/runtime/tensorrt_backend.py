"""TensorRT backend: sidecar check, then the engine with name-based I/O, mapped (integrated GPU)
or staged (discrete GPU) buffers on its own stream, optional CUDA graphs of the whole call.

NOT RUN on any machine of this project (no TensorRT runtime here: GPU.md); written against
the documented API; ``orin-rl doctor --selftest`` is its first run on a board.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl import bundle
from orin_rl.runtime.base import Backend, RuntimeBackendError
from orin_rl.runtime.graph_cache import GraphCache
from orin_rl.runtime.tensorrt_engine import (
    TensorRTEngine,
    check_batch,
    contract_dtype,
    import_tensorrt,
    platform_info,
)

log = logging.getLogger(__name__)


def import_cudart():
    """cuda-python's runtime module (CUDA graphs: pycuda has no graph API), or None."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:
            from cuda import cudart  # cuda-python < 12.6
        except ImportError:
            return None
    return cudart


class _CaptureFailed(RuntimeError):
    """A CUDA graph capture of the enqueue failed; the backend falls back to plain enqueue."""


class TensorRTBackend(Backend):
    """Runs a TensorRT engine built by ``orin-rl build`` for this platform.

    Args:
        engine_path: the engine file (its sidecar ``*.engine.json`` beside it).
        batch: the batch to set up at activation (any batch in the profile works).
        cuda_graph: replay each call as a CUDA graph (needs cuda-python); re-captured when
            the batch changes.
        zero_copy: mapped host buffers (True), staged copies (False), None: mapped on
            integrated GPUs.
    """

    name = "tensorrt"

    def __init__(
        self,
        engine_path: str | Path,
        batch: int = 1,
        cuda_graph: bool = False,
        safe_action: np.ndarray | None = None,
        zero_copy: bool | None = None,
    ):
        self.engine_path = Path(engine_path)
        sidecar = bundle.load_sidecar(self.engine_path)
        inputs = [bundle.TensorSpec(t.name, list(t.shape), t.dtype) for t in sidecar.inputs]
        # Every backend returns discrete actions as int64, whatever the engine's own type.
        outputs = [
            bundle.TensorSpec(t.name, list(t.shape), contract_dtype(t.dtype))
            for t in sidecar.outputs
        ]
        if len(inputs) > 1:
            names = ", ".join(t.name for t in inputs)
            raise RuntimeBackendError(
                f"{self.engine_path}: an engine of {len(inputs)} inputs ({names}: a dict "
                "observation's) is not run by the TensorRT backend, which binds one: run the "
                "bundle with --backend onnxruntime"
            )
        super().__init__(inputs[0], outputs, safe_action)
        self.sidecar = sidecar
        self.batch = batch
        self.cuda_graph = cuda_graph
        self.zero_copy = zero_copy
        self.runner: TensorRTEngine | None = None
        self._graphs: GraphCache | None = None
        self._cudart = None

    def activate_impl(self) -> None:
        trt = import_tensorrt()
        # Check version, GPU and the file's hash BEFORE deserialising: a foreign engine's
        # plugins run code.
        self.sidecar = bundle.check_engine(self.engine_path, platform_info(trt))
        check_batch(self.batch, self.sidecar.batch_profile)
        self.runner = TensorRTEngine.from_file(
            self.engine_path,
            self.batch,
            version_compatible=self.sidecar.version_compatible,
            dla_core=self.sidecar.dla_core,
            zero_copy=self.zero_copy,
        )
        if self.cuda_graph:
            self._cudart = import_cudart()
            if self._cudart is None:
                log.warning("CUDA graph skipped: cuda-python is missing (pip install cuda-python)")
                return
            # One graph at a time: the context's input shapes are state a graph bakes in.
            self._graphs = GraphCache(self._capture, max_graphs=1, release=self._release)
            try:
                self._graphs.get(self._key())
            except _CaptureFailed as exc:
                log.warning("CUDA graph capture failed (%s): plain enqueue", exc)
                self._graphs = None

    def _key(self) -> tuple:
        runner = self.runner
        return (runner.batch, runner.addresses)

    def _capture(self, key: tuple):
        """Capture copies + ``execute_async_v3`` on the runner's non-default stream.

        TensorRT needs one enqueue after the shapes are set before a capture; the buffers never
        move (allocated for the profile's largest batch), so the key is batch + addresses.
        """
        cudart, runner = self._cudart, self.runner
        handle = runner.stream.handle
        runner.enqueue()
        runner.stream.synchronize()
        mode = cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        (err,) = cudart.cudaStreamBeginCapture(handle, mode)
        if int(err) != 0:
            raise _CaptureFailed(f"begin capture: {err}")
        try:
            runner.enqueue()
        finally:
            err, graph = cudart.cudaStreamEndCapture(handle)
        if int(err) != 0:
            raise _CaptureFailed(f"end capture: {err}")
        err, graph_exec = cudart.cudaGraphInstantiate(graph, 0)
        if int(err) != 0:
            cudart.cudaGraphDestroy(graph)
            raise _CaptureFailed(f"instantiate: {err}")
        return graph, graph_exec

    def _release(self, graphs) -> None:
        graph, graph_exec = graphs
        self._cudart.cudaGraphExecDestroy(graph_exec)
        self._cudart.cudaGraphDestroy(graph)

    def infer_impl(self, obs: np.ndarray) -> np.ndarray:
        check_batch(len(obs), self.sidecar.batch_profile)
        runner = self.runner
        name_in, name_out = self.input_spec.name, self.output_spec[0].name
        if self._graphs is None:
            return runner.run({name_in: obs})[name_out]
        runner.set_batch(len(obs))
        try:
            _, graph_exec = self._graphs.get(self._key())
        except _CaptureFailed as exc:
            log.warning("CUDA graph capture failed (%s): plain enqueue from now on", exc)
            self._graphs = None
            return runner.run({name_in: obs})[name_out]
        np.copyto(runner.views[name_in], obs)
        (err,) = self._cudart.cudaGraphLaunch(graph_exec, runner.stream.handle)
        if int(err) != 0:
            raise RuntimeBackendError(f"cudaGraphLaunch failed: {err}")
        runner.stream.synchronize()
        return runner.result(name_out)

    def deactivate_impl(self) -> None:
        if self._graphs is not None:
            self._graphs.clear()
            self._graphs = None
        if self.runner is not None:
            self.runner.close()
            self.runner = None

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "engine": str(self.engine_path),
            "mode": "cuda-graph" if self._graphs is not None else "enqueue",
            "zero_copy": None if self.runner is None else self.runner.mapped,
            "dla_core": self.sidecar.dla_core,
        }
