"""ONNX Runtime backend: provider choice with fallback (TensorRT EP → CUDA EP → CPU) and the
TensorRT / CUDA execution-provider options of an engine recipe, IO binding bound once per batch
size (no per-call feed dict, binding or output allocation), one intra-op thread by default
(small policies on small CPUs).

On the CUDA EP the binding is device memory (``OrtValue`` on ``cuda``): a call copies the
observation in, runs, and copies the action back. With ``EpSettings.cuda_graph``
(``--cuda-graph``) the EP captures the run in a CUDA graph on its first call at a batch size
and replays it after (``enable_cuda_graph``, one ``gpu_graph_id`` per batch size);
``docs/benchmarks/infer_h200.json`` has both beside torch's. A dict observation's model (one
input per key) runs with a feed of its inputs by name, on host buffers."""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass
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
TENSORRT_EP = "TensorrtExecutionProvider"
CUDA_EP = "CUDAExecutionProvider"
CPU_EP = "CPUExecutionProvider"
PROVIDER_NAMES = {"tensorrt": TENSORRT_EP, "cuda": CUDA_EP, "cpu": CPU_EP}
MAX_BINDINGS = 8
"""Batch sizes kept bound at once (a control loop uses one)."""


def import_ort():
    """The onnxruntime module, or a one-sentence error naming what to install."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise RuntimeBackendError(ORT_HINT) from None
    return ort


def provider_name(name: str) -> str:
    """``tensorrt``/``cuda``/``cpu`` (or a full execution-provider name) → the full name."""
    full = PROVIDER_NAMES.get(name.strip().lower(), name.strip())
    if full not in PROVIDER_NAMES.values():
        raise RuntimeBackendError(
            f"unknown ONNX Runtime provider {name!r}; choose from {', '.join(PROVIDER_NAMES)}"
        )
    return full


@dataclass
class EpSettings:
    """TensorRT / CUDA execution-provider settings (an engine recipe's, or these defaults)."""

    precision: str = "fp32"
    """fp32, fp16 or int8 for the TensorRT EP."""
    dla_core: int | None = None
    """DLA core for the TensorRT EP, or None."""
    batch: tuple[int, int, int] = (1, 1, 1)
    """(min, opt, max) batch of the TensorRT EP's profile."""
    workspace_mb: int = 256
    """TensorRT EP workspace limit."""
    cache_root: str = "engines/ort-cache"
    """Root folder of the TensorRT EP's engine and timing caches."""
    cuda_graph: bool = False
    """CUDA EP: capture each batch size's run in a CUDA graph and replay it (``runtime.load``
    and the CLI's ``--cuda-graph`` set it)."""


def provider_options(
    names: list[str],
    onnx_sha256: str,
    obs_shape: list[int] | dict[str, list[int]],
    versions: dict[str, str],
    settings: EpSettings,
) -> list[tuple[str, dict[str, Any]]]:
    """``(provider, options)`` for each of ``names`` in order; ``obs_shape``: one observation's
    shape of the input ``obs``, or of each input by name.

    The TensorRT EP's engine and timing caches go to a folder keyed by the model hash and the
    versions of ONNX Runtime, TensorRT and the GPU, so a cache is never reused across a change
    of any of them.
    """
    key = hashlib.sha256(
        (onnx_sha256 + "|" + "|".join(f"{k}={v}" for k, v in sorted(versions.items()))).encode()
    ).hexdigest()[:16]
    cache = str(Path(settings.cache_root) / key)
    chosen: list[tuple[str, dict[str, Any]]] = []
    for name in names:
        if name == TENSORRT_EP:
            trt: dict[str, Any] = {
                "trt_fp16_enable": settings.precision in ("fp16", "int8"),
                "trt_int8_enable": settings.precision == "int8",
                "trt_engine_cache_enable": True,
                "trt_engine_cache_path": cache,
                "trt_timing_cache_enable": True,
                "trt_timing_cache_path": cache,
                "trt_max_workspace_size": settings.workspace_mb << 20,
            }
            if settings.dla_core is not None:
                trt.update(trt_dla_enable=True, trt_dla_core=settings.dla_core)
            shapes = obs_shape if isinstance(obs_shape, dict) else {"obs": obs_shape}
            mn, opt, mx = settings.batch
            trt.update(
                trt_profile_min_shapes=_profile(shapes, mn),
                trt_profile_opt_shapes=_profile(shapes, opt),
                trt_profile_max_shapes=_profile(shapes, mx),
            )
            chosen.append((TENSORRT_EP, trt))
        elif name == CUDA_EP:
            chosen.append((CUDA_EP, {
                "cudnn_conv_algo_search": "HEURISTIC",
                "enable_cuda_graph": "1" if settings.cuda_graph else "0",
            }))  # fmt: skip
        else:
            chosen.append((name, {}))
    return chosen


def _profile(shapes: dict[str, list[int]], batch: int) -> str:
    """The TensorRT EP's shape profile: ``name:BxDxD,...`` for each input."""
    return ",".join(f"{name}:{batch}x" + "x".join(str(d) for d in dims)
                    for name, dims in shapes.items())  # fmt: skip


def _versions(ort, names: list[str]) -> dict[str, str]:
    """What a TensorRT EP engine cache depends on: ONNX Runtime, TensorRT and the GPU."""
    versions = {"onnxruntime": ort.__version__}
    if TENSORRT_EP in names:
        import importlib.metadata  # only here: it pulls in email, csv and zipfile

        try:
            versions["tensorrt"] = importlib.metadata.version("tensorrt")
        except importlib.metadata.PackageNotFoundError:
            versions["tensorrt"] = "unknown"
        from orin_rl.cudainfo import gpu_info

        gpu = gpu_info()
        versions["gpu"] = f"{gpu.name} sm_{gpu.compute_capability}" if gpu else "unknown"
    return versions


class OnnxRuntimeBackend(Backend):
    """Runs the bundle's ONNX through ONNX Runtime.

    Args:
        onnx_path: the model file (already hash-checked by ``bundle.load_bundle``).
        info: the bundle description.
        device: ``cpu`` or ``cuda`` (tries the TensorRT and CUDA providers first).
        threads: intra-op threads (1 suits a batch-1 policy; 0 lets ONNX Runtime choose).
        providers: provider names to try in order (``tensorrt``, ``cuda``, ``cpu`` or full
            names), or an explicit (name, options) list (``export.recipes.ort_providers``);
            None: by ``device``.
        ep: TensorRT / CUDA provider settings (``EpSettings``; an engine recipe's).
    """

    name = "onnxruntime"

    def __init__(
        self,
        onnx_path: str | Path,
        info: BundleInfo,
        device: str = "cpu",
        threads: int = 1,
        providers: list[str] | list[tuple[str, dict[str, Any]]] | None = None,
        safe_action: np.ndarray | None = None,
        ep: EpSettings | None = None,
    ):
        super().__init__(list(info.inputs), info.outputs, safe_action)
        self.onnx_path = Path(onnx_path)
        self.info = info
        self.precision = info.precision
        self.device = device
        self.threads = threads
        if providers and all(isinstance(p, str) for p in providers):
            providers = [provider_name(p) for p in providers]
        self.requested = providers
        self.ep = ep or EpSettings()
        self.session = None
        self.provider = None
        self._bindings: dict[int, tuple[Any, Any, Any, Any]] = {}
        self._device_io = False  # bound buffers in CUDA memory (the CUDA EP)
        self._graph_ids = 0  # CUDA graphs captured by this session (never reused)
        self._lock = threading.Lock()

    def provider_candidates(
        self, available: list[str], ort=None
    ) -> list[tuple[str, dict[str, Any]]]:
        """What to try, best first: the requested providers (all of them: one that is not
        compiled in fails with its reason), or by device those of TensorRT, CUDA and CPU that
        ``available`` lists; with the recipe's TensorRT / CUDA options."""
        requested = self.requested
        if requested and not isinstance(requested[0], str):
            return list(requested)  # explicit (name, options)
        if requested:
            names = list(requested)
        else:
            wanted = [TENSORRT_EP, CUDA_EP, CPU_EP] if self.device.startswith("cuda") else [CPU_EP]
            names = [p for p in wanted if p in available]
        shapes = {s.name: [d for d in s.shape[1:] if isinstance(d, int)] for s in self.input_specs}
        obs_shape = shapes if len(shapes) > 1 else next(iter(shapes.values()))
        versions = _versions(ort, names) if ort is not None else {}
        return provider_options(names, self.info.onnx_sha256, obs_shape, versions, self.ep)

    def activate_impl(self) -> None:
        ort = import_ort()
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        errors = []
        # get_available_providers() lists what was compiled in, not what works: try each.
        candidates = self.provider_candidates(ort.get_available_providers(), ort)
        if any(p in (CUDA_EP, TENSORRT_EP) for p, _ in candidates):
            _preload_cuda_libraries(ort)
        for provider, opts in candidates:
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
            raise RuntimeBackendError(
                f"no ONNX Runtime provider could start ({'; '.join(errors) or 'none requested'}): "
                "GPU providers need onnxruntime-gpu (NVIDIA's Jetson build on a Jetson), or use "
                "--providers cpu"
            )
        if errors:
            log.warning("ONNX Runtime fell back to %s (%s)", self.provider, "; ".join(errors))
        self._input = self.input_spec.name
        self._outputs = [self.output_spec[0].name]
        self._bindings = {}
        out_dims = self.output_spec[0].shape[1:]
        self._device_io = (
            self.provider == CUDA_EP
            and all(isinstance(d, int) for d in out_dims)
            and len(self.input_specs) == 1
        )
        self._graph_ids = 0

    def _bind(self, obs: np.ndarray, action: np.ndarray) -> None:
        """IO binding for this batch size over buffers of our own, bound once: later calls
        copy the observation in and run, with no per-call binding, feed dict or allocation
        inside ONNX Runtime (ORT moves the data to the provider's device as needed)."""
        if len(self._bindings) >= MAX_BINDINGS:
            self._bindings.clear()
        in_buf, out_buf = np.empty_like(obs), np.empty_like(action)
        binding = self.session.io_binding()
        binding.bind_input(
            self._input, "cpu", 0, in_buf.dtype.type, list(in_buf.shape), in_buf.ctypes.data
        )
        binding.bind_output(
            self._outputs[0], "cpu", 0, out_buf.dtype.type, list(out_buf.shape), out_buf.ctypes.data
        )
        self._bindings[len(obs)] = (binding, in_buf, out_buf, None)

    def _bind_device(self, batch: int) -> tuple[Any, Any, Any, Any]:
        """CUDA EP: input and output ``OrtValue`` in device memory at fixed addresses (what a
        CUDA graph replays), and the run options naming this batch size's graph."""
        ort = import_ort()
        if len(self._bindings) >= MAX_BINDINGS:
            self._bindings.clear()  # their graphs stay captured under ids never used again
        out = self.output_spec[0]
        in_val = ort.OrtValue.ortvalue_from_shape_and_type(
            [batch, *self._fixed], self._dtype.type, "cuda", 0
        )
        out_val = ort.OrtValue.ortvalue_from_shape_and_type(
            [batch, *out.shape[1:]], np.dtype(out.dtype).type, "cuda", 0
        )
        binding = self.session.io_binding()
        binding.bind_ortvalue_input(self._input, in_val)
        binding.bind_ortvalue_output(self._outputs[0], out_val)
        run_options = ort.RunOptions()
        if self.ep.cuda_graph:
            run_options.add_run_config_entry("gpu_graph_id", str(self._graph_ids))
            self._graph_ids += 1
        bound = (binding, in_val, out_val, run_options)
        self._bindings[batch] = bound
        return bound

    def infer_impl(self, obs: np.ndarray | dict[str, np.ndarray]) -> np.ndarray:
        if isinstance(obs, dict):  # a dict observation's model: its inputs by name
            return self.session.run(self._outputs, obs)[0]
        with self._lock:  # the bound buffers are shared: one call at a time uses them
            return self._infer_bound(obs)

    def _infer_bound(self, obs: np.ndarray) -> np.ndarray:
        bound = self._bindings.get(len(obs))
        if self._device_io:
            binding, in_val, out_val, run_options = bound or self._bind_device(len(obs))
            in_val.update_inplace(np.ascontiguousarray(obs))  # host -> device
            self.session.run_with_iobinding(binding, run_options)  # captures, then replays
            return out_val.numpy()  # device -> host, a new array
        if bound is None:  # first call at this batch: plain run, which also gives the shapes
            action = self.session.run(self._outputs, {self._input: obs})[0]
            self._bind(obs, action)
            return action
        binding, in_buf, out_buf, _ = bound
        np.copyto(in_buf, obs)
        self.session.run_with_iobinding(binding)
        return out_buf.copy()  # the buffer is reused by the next call

    def deactivate_impl(self) -> None:
        self._bindings = {}
        self.session = None

    def describe(self) -> dict[str, Any]:
        return {
            "backend": self.name,
            "provider": self.provider,
            "threads": self.threads,
            "precision": self.precision,
            "device_io": self._device_io,
            "cuda_graph": self._device_io and self.ep.cuda_graph,
        }


def _preload_cuda_libraries(ort) -> None:
    """onnxruntime-gpu's x86 wheels find CUDA and cuDNN through pip's nvidia-* packages (what a
    CUDA torch installs) only after ``preload_dlls`` (ORT >= 1.21); a Jetson's come with
    JetPack. Failing here is not fatal: the provider then fails with its own reason."""
    preload = getattr(ort, "preload_dlls", None)
    if preload is None:
        return
    try:
        preload()
    except Exception as exc:  # missing packages: the session says what failed
        log.debug("onnxruntime.preload_dlls: %s", exc)
