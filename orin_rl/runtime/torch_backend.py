"""PyTorch backend: the run folder's checkpoint in eager mode, or replayed as CUDA graphs.

With ``cuda_graph`` each call is one graph replay: the graph reads the observation from
page-locked host memory and writes the action back into page-locked host memory. On an
integrated GPU (Jetson: one DRAM for CPU and GPU) those buffers are bound directly as the
graph's input and output through their device mapping, so a tick copies nothing between host
and device; on a discrete GPU the host↔device copies are captured inside the graph.

The only runtime module that imports torch (lazily, at construction)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.bundle import TensorSpec
from orin_rl.runtime.base import Backend, RuntimeBackendError
from orin_rl.runtime.graph_cache import GraphCache


class _MappedHost:
    """``__cuda_array_interface__`` over a page-locked host tensor: with unified addressing
    the pointer cudaHostAlloc returned is valid on the device too (CUDA programming guide,
    "Unified Virtual Address Space"), so torch can view it as a CUDA tensor."""

    def __init__(self, tensor):
        self.__cuda_array_interface__ = {
            "shape": tuple(tensor.shape),
            "typestr": tensor.numpy().dtype.str,
            "data": (tensor.data_ptr(), False),
            "strides": None,
            "version": 3,
        }


@dataclass
class _Graph:
    """One captured batch size: the graph and the host buffers it reads and writes."""

    graph: Any
    host_in: Any
    host_out: Any
    np_in: np.ndarray
    np_out: np.ndarray
    keep: tuple
    """Device tensors the graph addresses (kept alive as long as the graph)."""


class TorchBackend(Backend):
    """Deterministic policy from ``checkpoint.pt``.

    Args:
        run_dir: a run folder (or its checkpoint.pt).
        device: ``cpu`` or ``cuda``.
        cuda_graph: replay each call as a CUDA graph, captured per batch size (CUDA only).
        batch: the batch captured at activation (others are captured on first use).
        zero_copy: bind the graph's I/O to mapped host memory (True), copy inside the graph
            (False), or None: mapped on integrated GPUs.
        max_graphs: batch sizes kept captured at once (least recently used dropped).
    """

    name = "torch"

    def __init__(
        self,
        module,
        input_spec: TensorSpec,
        output_spec: TensorSpec,
        device: str = "cpu",
        cuda_graph: bool = False,
        batch: int = 1,
        safe_action: np.ndarray | None = None,
        threads: int = 1,
        zero_copy: bool | None = None,
        max_graphs: int = 4,
    ):
        import torch

        self.torch = torch
        self.module = module.eval()
        super().__init__(input_spec, [output_spec], safe_action)
        if cuda_graph and not device.startswith("cuda"):
            raise RuntimeBackendError(
                "CUDA graphs need a GPU: use --device cuda (or drop --cuda-graph)"
            )
        self.device = device
        self.cuda_graph = cuda_graph
        self.graph_batch = batch
        self.threads = threads
        self.zero_copy = zero_copy
        self.mapped = False
        """Graph I/O bound to mapped host memory (set at activation)."""
        self.max_graphs = max_graphs
        self._graphs: GraphCache | None = None

    @classmethod
    def from_run(cls, run_dir: str | Path, device: str = "cpu", **kwargs) -> TorchBackend:
        """The deterministic policy of a run folder's checkpoint.pt."""
        try:
            import torch  # noqa: F401
        except ImportError:
            raise RuntimeBackendError(
                "the torch backend needs PyTorch (pip install torch)"
            ) from None
        from orin_rl.checkpoint import load_policy
        from orin_rl.models.deploy import DeterministicPolicy

        policy, spec, _ = load_policy(run_dir)
        if spec.obs_layout is not None:
            raise RuntimeBackendError(
                f"{run_dir}: a dict observation's policy (one input per key) runs from its "
                "bundle on onnxruntime, the torch backend takes one input: `orin-rl export "
                f"{run_dir}`, then --backend onnxruntime"
            )
        discrete = spec.action_kind == "discrete"
        obs = TensorSpec("obs", ["batch", *spec.deploy_obs_shape], spec.obs_dtype)
        action = TensorSpec(
            "action",
            ["batch"] if discrete else ["batch", spec.action_dim],
            "int64" if discrete else "float32",
        )
        return cls(DeterministicPolicy(policy), obs, action, device, **kwargs)

    @classmethod
    def from_module(
        cls, module, obs_shape: list[int], device: str = "cpu", **kwargs
    ) -> TorchBackend:
        """Any torch module taking (batch, *obs_shape) float32 (e.g. the seed CNN)."""
        obs = TensorSpec("obs", ["batch", *obs_shape], "float32")
        return cls(module, obs, TensorSpec("action", ["batch", "n"], "float32"), device, **kwargs)

    def activate_impl(self) -> None:
        torch = self.torch
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeBackendError("the torch backend was asked for CUDA but torch sees no GPU")
        if self.threads:
            torch.set_num_threads(self.threads)
        self.module.to(self.device)
        if self.cuda_graph:
            props = torch.cuda.get_device_properties(torch.device(self.device))
            integrated = bool(getattr(props, "is_integrated", False))
            self.mapped = integrated if self.zero_copy is None else bool(self.zero_copy)
            # Each graph owns its buffers, so graphs of several batch sizes stay valid side by
            # side; the key is the batch (the only thing a call can change).
            self._graphs = GraphCache(self._capture, self.max_graphs)
            self._graphs.get(self.graph_batch)

    def _forward(self, x):
        out = self.module(x)
        return out[0] if isinstance(out, tuple) else out

    def _mapped_view(self, host):
        return self.torch.as_tensor(_MappedHost(host), device=self.device)

    def _capture(self, batch: int) -> _Graph:
        """Capture host input → forward → host output for ``batch`` rows."""
        torch = self.torch
        dtype = getattr(torch, self.input_spec.dtype)  # float32, or uint8 frames
        host_in = torch.zeros((batch, *self._fixed), dtype=dtype, pin_memory=True)
        if self.mapped:
            dev_in = self._mapped_view(host_in)  # the graph reads the host buffer in place
        else:
            dev_in = torch.zeros(host_in.shape, dtype=dtype, device=self.device)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(3):  # warm up kernels and the allocator outside the graph
                out = self._forward(dev_in)
        torch.cuda.current_stream().wait_stream(side)
        host_out = torch.empty(out.shape, dtype=out.dtype, pin_memory=True)
        dev_out = self._mapped_view(host_out) if self.mapped else None
        from orin_rl.capture import capture  # torch's, as this backend is

        graph = torch.cuda.CUDAGraph()
        with capture(graph), torch.inference_mode():
            if not self.mapped:
                dev_in.copy_(host_in, non_blocking=True)  # H2D, captured
            out = self._forward(dev_in)
            if self.mapped:
                dev_out.copy_(out)  # into the mapped host buffer, on the device
            else:
                host_out.copy_(out, non_blocking=True)  # D2H, captured
        return _Graph(
            graph, host_in, host_out, host_in.numpy(), host_out.numpy(), (dev_in, out, dev_out)
        )

    def infer_impl(self, obs: np.ndarray) -> np.ndarray:
        torch = self.torch
        if self._graphs is not None:
            entry = self._graphs.get(len(obs))
            np.copyto(entry.np_in, obs)
            entry.graph.replay()
            torch.cuda.current_stream().synchronize()
            return entry.np_out.copy()
        with torch.inference_mode():
            x = torch.from_numpy(obs).to(self.device, non_blocking=True)
            return self._forward(x).cpu().numpy()

    def deactivate_impl(self) -> None:
        if self._graphs is not None:
            self._graphs.clear()
            self._graphs = None

    def describe(self) -> dict[str, Any]:
        mode = "cuda-graph" if self.cuda_graph else "eager"
        info = {"backend": self.name, "device": self.device, "mode": mode}
        if self.cuda_graph:
            info["zero_copy"] = self.mapped
        return info
