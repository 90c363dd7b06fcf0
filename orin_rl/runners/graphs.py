"""One CUDA graph for a whole PPO iteration: rollout, GAE and the update, replayed.

A PPO iteration on small networks is hundreds of tiny kernels; launched one by one from
Python, the launches cost more than the maths. With GPU-native environments nothing in an
iteration needs the host, so the trainer records it once and replays it: every replay is one
launch. What changes between iterations lives in device tensors the graph reads (the learning
rate, the observation the rollout starts from, RNG offsets).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch

from orin_rl.capture import capture

log = logging.getLogger(__name__)


def nvtx_range(name: str, enabled: bool):
    """An NVTX range for Nsight Systems when ``enabled`` on a CUDA build, else a no-op."""
    if enabled and torch.cuda.is_available():
        return torch.cuda.nvtx.range(name)
    return contextlib.nullcontext()


def graph_blocker(env: Any, device: torch.device, target_kl: float | None) -> str | None:
    """Why an iteration cannot be captured here (None when it can)."""
    if device.type != "cuda":
        return "the learner is not on a CUDA device"
    if not getattr(env, "graph_safe", False):
        return "the environments step on the host (use --env-backend gpu)"
    if env.device != device:
        return f"the environments are on {env.device}, the learner on {device}"
    if target_kl is not None:
        return "ppo.target_kl needs a host read after every epoch"
    return None


class GraphedIteration:
    """Captures ``rollout → compute_returns → update_steps`` of ``algo`` on ``env`` once.

    Call ``capture`` after one eager iteration (it compiled the Numba kernels, created the
    gradients and the optimizer state, and warmed up cuBLAS); then ``replay`` runs an iteration.
    """

    def __init__(self, algo: Any, env: Any, num_steps: int):
        self.algo = algo
        self.env = env
        self.num_steps = num_steps
        self.graph = torch.cuda.CUDAGraph()
        self.static_obs: torch.Tensor | None = None
        self.num_updates = 0
        self.epochs = 0

    def _iteration(self) -> None:
        algo, env = self.algo, self.env
        obs = self.static_obs
        for _ in range(self.num_steps):
            actions = algo.act(obs)
            step = env.step(actions)
            algo.process_env_step(step)
            obs = step.obs
        algo.compute_returns(obs)
        self.num_updates, self.epochs = algo.update_steps()
        self.static_obs.copy_(obs)  # where the next replay's rollout starts
        algo.buffer.clear()

    def capture(self, obs: torch.Tensor) -> None:
        """Record one iteration starting from ``obs`` (nothing runs until ``replay``)."""
        self.static_obs = obs.clone()
        if not hasattr(self.graph, "register_generator_state"):  # the env's own RNG
            raise RuntimeError("this torch cannot capture a custom generator in a CUDA graph")
        torch.cuda.synchronize()
        # Envs whose kernels come from another library (MuJoCo Warp) tell it about the capture.
        scope = getattr(self.env, "capture_scope", contextlib.nullcontext)
        # a failure leaves torch's generators, and the env's, as found
        with capture(self.graph, generators=[self.env.generator]), scope():
            self._iteration()
        torch.cuda.synchronize()

    def replay(self) -> tuple[torch.Tensor, int, int]:
        """Run one captured iteration; returns (next observation, gradient steps, epochs)."""
        self.graph.replay()
        return self.static_obs, self.num_updates, self.epochs


class GraphedCall:
    """Captures ``fn() -> (gradient steps, epochs)`` once (run it eagerly first, on a side
    stream: that warms up cuBLAS and the optimizer state); ``replay`` runs it again."""

    def __init__(self, fn: Any):
        self.fn = fn
        self.graph = torch.cuda.CUDAGraph()
        self.num_updates = 0
        self.epochs = 0

    def capture(self) -> None:
        """Record one call (nothing runs until ``replay``)."""
        torch.cuda.synchronize()
        with capture(self.graph):  # a failure leaves torch's generators as found
            self.num_updates, self.epochs = self.fn()
        torch.cuda.synchronize()

    def replay(self) -> tuple[None, int, int]:
        """Run the captured call; returns (None, gradient steps, epochs)."""
        self.graph.replay()
        return None, self.num_updates, self.epochs
