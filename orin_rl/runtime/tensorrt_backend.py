"""TensorRT backend: sidecar check, then the engine with name-based I/O, pinned host and
device buffers, async copies on its own stream, optional CUDA-graph capture of the enqueue.

NOT RUN on any machine of this project (no TensorRT runtime here: GPU.md); written against
the documented API; ``orin-rl doctor --selftest`` is its first run on a board.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl import bundle
from orin_rl.runtime.base import Backend
from orin_rl.runtime.tensorrt_engine import TensorRTEngine, import_tensorrt, platform_info

log = logging.getLogger(__name__)


class TensorRTBackend(Backend):
    """Runs a TensorRT engine built by ``orin-rl build`` for this platform."""

    name = "tensorrt"

    def __init__(
        self,
        engine_path: str | Path,
        batch: int = 1,
        cuda_graph: bool = False,
        safe_action: np.ndarray | None = None,
    ):
        self.engine_path = Path(engine_path)
        sidecar = bundle.load_sidecar(self.engine_path)
        inputs = [bundle.TensorSpec(t.name, list(t.shape), t.dtype) for t in sidecar.inputs]
        super().__init__(inputs[0], sidecar.outputs, safe_action)
        self.batch = batch
        self.cuda_graph = cuda_graph
        self.runner: TensorRTEngine | None = None
        self._graph = None

    def activate_impl(self) -> None:
        trt = import_tensorrt()
        # Check version, GPU and the file's hash BEFORE deserialising: a foreign engine's
        # plugins run code.
        bundle.check_engine(self.engine_path, platform_info(trt))
        self.runner = TensorRTEngine.from_file(self.engine_path, self.batch)
        if self.cuda_graph:
            self._capture()

    def _capture(self) -> None:
        """Capture the enqueue in a CUDA graph (cuda-python; pycuda has no graph API).

        execute_async_v3 runs once after the shapes are set, then is captured on the runner's
        non-default stream; addresses and shapes stay fixed, so the graph stays valid.
        """
        try:
            from cuda.bindings import runtime as cudart
        except ImportError:
            log.warning(
                "CUDA graph skipped: cuda-python is not installed (pip install cuda-python)"
            )
            return
        runner = self.runner
        handle = runner.stream.handle
        runner.context.execute_async_v3(handle)
        runner.stream.synchronize()
        mode = cudart.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        (err,) = cudart.cudaStreamBeginCapture(handle, mode)
        runner.context.execute_async_v3(handle)
        err2, graph = cudart.cudaStreamEndCapture(handle)
        err3, graph_exec = cudart.cudaGraphInstantiate(graph, 0)
        if any(int(e) != 0 for e in (err, err2, err3)):
            log.warning("CUDA graph capture failed (%s, %s, %s): plain enqueue", err, err2, err3)
            return
        self._cudart, self._graph = cudart, graph_exec

    def infer_impl(self, obs: np.ndarray) -> np.ndarray:
        runner = self.runner
        if self._graph is None or len(obs) != runner.batch:
            return runner.run({self.input_spec.name: obs})[self.output_spec[0].name]
        name_in, name_out = self.input_spec.name, self.output_spec[0].name
        np.copyto(runner.host[name_in], obs)
        runner.cuda.memcpy_htod_async(runner.device[name_in], runner.host[name_in], runner.stream)
        self._cudart.cudaGraphLaunch(self._graph, runner.stream.handle)
        runner.cuda.memcpy_dtoh_async(runner.host[name_out], runner.device[name_out], runner.stream)
        runner.stream.synchronize()
        return runner.host[name_out].copy()

    def deactivate_impl(self) -> None:
        self.runner = None
        self._graph = None

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "engine": str(self.engine_path),
            "cuda_graph": self._graph is not None,
        }
