"""PyTorch backend: the run folder's checkpoint in eager mode, or replayed as a CUDA graph.

The only runtime module that imports torch (lazily, at construction)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.bundle import TensorSpec
from orin_rl.runtime.base import Backend, RuntimeBackendError


class TorchBackend(Backend):
    """Deterministic policy from ``checkpoint.pt``.

    Args:
        run_dir: a run folder (or its checkpoint.pt).
        device: ``cpu`` or ``cuda``.
        cuda_graph: capture the forward pass once per batch size and replay it (CUDA only).
        batch: the batch the CUDA graph is captured for.
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
    ):
        import torch

        self.torch = torch
        self.module = module.eval()
        super().__init__(input_spec, [output_spec], safe_action)
        self.device = device
        self.cuda_graph = cuda_graph and device.startswith("cuda")
        self.graph_batch = batch
        self.threads = threads
        self._graph = None

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
        discrete = spec.action_kind == "discrete"
        obs = TensorSpec("obs", ["batch", *spec.obs_shape], "float32")
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
            self._capture(self.graph_batch)

    def _forward(self, x):
        out = self.module(x)
        return out[0] if isinstance(out, tuple) else out

    def _capture(self, batch: int) -> None:
        torch = self.torch
        self._static_in = torch.zeros((batch, *self._fixed), device=self.device)
        self._host_out = None
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.inference_mode():
            for _ in range(3):  # warm up kernels and the allocator outside the graph
                self._forward(self._static_in)
        torch.cuda.current_stream().wait_stream(side)
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph), torch.inference_mode():
            self._static_out = self._forward(self._static_in)
        self._host_out = torch.empty(
            self._static_out.shape, dtype=self._static_out.dtype, pin_memory=True
        )
        self._host_in = torch.empty(self._static_in.shape, pin_memory=True)

    def infer_impl(self, obs: np.ndarray) -> np.ndarray:
        torch = self.torch
        if self._graph is not None and len(obs) == self.graph_batch:
            self._host_in.numpy()[...] = obs
            self._static_in.copy_(self._host_in, non_blocking=True)
            self._graph.replay()
            self._host_out.copy_(self._static_out, non_blocking=True)
            torch.cuda.current_stream().synchronize()
            return self._host_out.numpy().copy()
        with torch.inference_mode():
            x = torch.from_numpy(obs).to(self.device, non_blocking=True)
            return self._forward(x).cpu().numpy()

    def deactivate_impl(self) -> None:
        self._graph = None

    def describe(self) -> dict[str, Any]:
        mode = "cuda-graph" if self.cuda_graph else "eager"
        return {"backend": self.name, "device": self.device, "mode": mode}
