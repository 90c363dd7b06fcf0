"""ONNX Runtime backend: provider choice with fallback (TensorRT EP → CUDA EP → CPU), IO
binding on the GPU, one intra-op thread by default (small policies on small CPUs)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.bundle import BundleInfo
from orin_rl.runtime.base import Backend, RuntimeBackendError

log = logging.getLogger(__name__)

ORT_HINT = (
    "onnxruntime is not installed: pip install 'orin-rl[export]' "
    "(on a Jetson, onnxruntime-gpu from NVIDIA's Jetson wheels)"
)


def import_ort():
    """The onnxruntime module, or a one-sentence error naming what to install."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise RuntimeBackendError(ORT_HINT) from None
    return ort


class OnnxRuntimeBackend(Backend):
    """Runs the bundle's ONNX through ONNX Runtime.

    Args:
        onnx_path: the model file (already hash-checked by ``bundle.load_bundle``).
        info: the bundle description.
        device: ``cpu`` or ``cuda`` (tries the TensorRT and CUDA providers first).
        threads: intra-op threads (1 suits a batch-1 policy; 0 lets ONNX Runtime choose).
        providers: explicit (name, options) list, e.g. from ``export.recipes.ort_providers``.
    """

    name = "onnxruntime"

    def __init__(
        self,
        onnx_path: str | Path,
        info: BundleInfo,
        device: str = "cpu",
        threads: int = 1,
        providers: list[tuple[str, dict[str, Any]]] | None = None,
        safe_action: np.ndarray | None = None,
    ):
        super().__init__(info.inputs[0], info.outputs, safe_action)
        self.onnx_path = Path(onnx_path)
        self.precision = info.precision
        self.device = device
        self.threads = threads
        self.requested = providers
        self.session = None
        self.provider = None
        self._binding = None

    def _provider_candidates(self, ort) -> list[tuple[str, dict[str, Any]]]:
        if self.requested is not None:
            return self.requested
        available = ort.get_available_providers()
        wanted = ["CPUExecutionProvider"]
        if self.device.startswith("cuda"):
            wanted = ["TensorrtExecutionProvider", "CUDAExecutionProvider", *wanted]
        return [(p, {}) for p in wanted if p in available]

    def activate_impl(self) -> None:
        ort = import_ort()
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        errors = []
        # get_available_providers() lists what was compiled in, not what works: try each.
        for provider, opts in self._provider_candidates(ort):
            chain = (
                [(provider, opts)]
                if provider == "CPUExecutionProvider"
                else [(provider, opts), "CPUExecutionProvider"]
            )
            try:
                session = ort.InferenceSession(str(self.onnx_path), options, providers=chain)
            except Exception as exc:  # provider libraries fail in many ways
                errors.append(f"{provider}: {exc.__class__.__name__}: {exc}"[:200])
                continue
            if session.get_providers()[0] == provider:
                self.session, self.provider = session, provider
                break
            errors.append(f"{provider}: not used by the session")
        if self.session is None:
            raise RuntimeBackendError(f"no ONNX Runtime provider could start: {'; '.join(errors)}")
        if errors:
            log.warning("ONNX Runtime fell back to %s (%s)", self.provider, "; ".join(errors))
        self._input = self.input_spec.name
        self._outputs = [self.output_spec[0].name]
        if self.provider != "CPUExecutionProvider":
            self._binding = self.session.io_binding()

    def infer_impl(self, obs: np.ndarray) -> np.ndarray:
        if self._binding is None:
            return self.session.run(self._outputs, {self._input: obs})[0]
        binding = self._binding
        binding.bind_cpu_input(self._input, obs)
        binding.bind_output(self._outputs[0], "cpu")
        self.session.run_with_iobinding(binding)
        return binding.copy_outputs_to_cpu()[0]

    def deactivate_impl(self) -> None:
        self.session = None
        self._binding = None

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "provider": self.provider,
            "threads": self.threads,
            "precision": self.precision,
        }
