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

from orin_rl.buffers import ops
from orin_rl.capture import capture
from orin_rl.envs.graph_emulation import EmulatedGraph

log = logging.getLogger(__name__)


def nvtx_range(name: str, enabled: bool):
    """An NVTX range for Nsight Systems when ``enabled`` on a CUDA build, else a no-op."""
    if enabled and torch.cuda.is_available():
        return torch.cuda.nvtx.range(name)
    return contextlib.nullcontext()


BUFFER_LAUNCHERS = tuple((ops, name) for name in ("gae", "gather"))
"""The rollout buffer's kernel launches (Numba: CUDA kernels on torch's stream, ``@njit`` host
twins on the CPU), recorded as launches by an emulated graph."""


class GraphedIteration:
    """Captures ``rollout → compute_returns → update_steps`` of ``algo`` on ``env`` once.

    Call ``capture`` after ``algo.prepare_capture()`` (the optimizer state made, as the first
    update would make it), from the observations the first reset produced, or after one eager
    iteration (the fallback); then ``replay`` runs an iteration. ``emulate``: an
    ``EmulatedGraph`` for the CPU (tests), the CUDA graph's semantics without CUDA.
    """

    def __init__(self, algo: Any, env: Any, num_steps: int, emulate: bool = False):
        self.algo = algo
        self.env = env
        self.num_steps = num_steps
        self.emulated = emulate
        self.graph: Any = (
            EmulatedGraph([env.generator], BUFFER_LAUNCHERS) if emulate else torch.cuda.CUDAGraph()
        )
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
        if self.emulated:
            with capture(self.graph):
                self._iteration()
            return
        if not hasattr(self.graph, "register_generator_state"):  # the env's own RNG
            raise RuntimeError("this torch cannot capture a custom generator in a CUDA graph")
        torch.cuda.synchronize()
        # Envs whose kernels come from another library (MuJoCo Warp) tell it about the capture.
        # a failure leaves torch's generators, and the env's, as found
        with capture(self.graph, generators=[self.env.generator]), self.env.capture_scope():
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


class GraphedUpdate:
    """PPO's update (every epoch and minibatch: gathers, forward, backward, clipping, Adam) as
    one CUDA graph per rollout buffer, for a CUDA learner whose envs step on the host.

    A small policy's minibatch step is a hundred-odd kernels of microseconds each; launched
    from Python they cost milliseconds (Humanoid-v5 on the H200: 1.49 s for an update's 320
    steps op by op, 0.33 s replayed, docs/benchmarks/overlap_h200.json). Replayed, the update
    is one launch. The first
    update runs eagerly on a side stream (torch's recipe: it creates the optimizer state and
    warms cuBLAS up); each later update on a buffer without a graph captures one and replays
    it (a capture records and runs nothing). A graph reads its buffer's storage: the
    overlapped paths' two buffers get a graph each. A capture that fails leaves the run eager.

    Called as ``algo.update_steps`` is: returns (gradient steps, epochs); the loss sums are in
    the algorithm's device tensor, read by ``finish_update``.
    """

    def __init__(self, algo: Any):
        self.algo = algo
        self.graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, int, int]] = {}
        self.warmed = False
        self.failed: str | None = None
        """Why the update runs eagerly after a failed capture (None while graphed)."""

    def reset(self) -> None:
        """Forget the graphs (they read the optimizer state a checkpoint load replaced)."""
        self.graphs.clear()

    def _key(self) -> tuple[int, int]:
        buffer = self.algo.buffer
        return (id(buffer), buffer.obs.data_ptr())

    def prepare(self) -> None:
        """Capture now the graph the next call would capture. A capture puts the default CUDA
        generator in capture mode for every thread: the overlapped collector thread, which
        samples actions from it, must not run beside one (``runners.overlap``)."""
        if self.failed is None and self.warmed and self._key() not in self.graphs:
            self._capture(self._key())

    def __call__(self) -> tuple[int, int]:
        algo = self.algo
        if self.failed is not None:
            return algo.update_steps()
        if not self.warmed:
            return self._warm_up()
        key = self._key()
        entry = self.graphs.get(key)
        if entry is None:
            entry = self._capture(key)
            if entry is None:
                return algo.update_steps()
        graph, num_updates, epochs = entry
        graph.replay()
        return num_updates, epochs

    def _warm_up(self) -> tuple[int, int]:
        device = self.algo.device
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            out = self.algo.update_steps()
        torch.cuda.current_stream(device).wait_stream(side)
        self.warmed = True
        return out

    def _capture(self, key: tuple[int, int]) -> tuple[torch.cuda.CUDAGraph, int, int] | None:
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(self.algo.device)
        try:
            # thread_local: another thread's CUDA calls do not fail this capture (the collector
            # thread of runners.overlap is idle by then: prepare)
            # a buffer's own generator (runners.overlap's minibatch order) is registered
            # with the graph, as torch's default one is
            order = getattr(self.algo.buffer, "generator", None)
            gens = [order] if order is not None and order.device.type == "cuda" else []
            with capture(graph, generators=gens, capture_error_mode="thread_local"):
                num_updates, epochs = self.algo.update_steps()
        except Exception as exc:  # stay correct: an eager update is slower, not wrong
            self.failed = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
            log.warning("CUDA graph capture of the update failed (%s); updating eagerly",
                        self.failed)  # fmt: skip
            return None
        self.graphs[key] = (graph, num_updates, epochs)
        log.info("captured the PPO update in a CUDA graph (%d gradient steps)", num_updates)
        return self.graphs[key]


class GraphedAct:
    """The policy's ``act`` (forward pass and sampling) as one CUDA graph, for a CUDA learner
    whose envs step on the host (``train.cuda_graphs`` where a whole iteration cannot be
    captured): each env step then costs one graph launch instead of the forward pass's dozens
    of kernel launches from Python (a Nature CNN's convolutions, the heads, the sampling).

    The observation is copied into the graph's input; the outputs are the graph's own tensors,
    overwritten by the next call (the rollout buffer copies them first). Samples come from
    torch's default CUDA generator, whose offsets a graph advances on every replay. The first
    calls run eagerly on a side stream (warm-up); a capture that fails leaves ``act`` eager.
    """

    WARM_UP = 3

    def __init__(self, act: Any):
        self.act = act
        self.calls = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_obs: torch.Tensor | None = None
        self.outputs: Any = None
        self.failed: str | None = None
        """Why ``act`` runs eagerly after a failed capture (None while graphed)."""

    def __call__(self, obs: torch.Tensor) -> Any:
        if self.failed is not None:
            return self.act(obs)
        if self.graph is not None and obs.shape == self.static_obs.shape:
            self.static_obs.copy_(obs)
            self.graph.replay()
            return self.outputs
        self.calls += 1
        if self.calls <= self.WARM_UP:
            side = torch.cuda.Stream(obs.device)
            side.wait_stream(torch.cuda.current_stream(obs.device))
            with torch.cuda.stream(side):
                out = self.act(obs)
            torch.cuda.current_stream(obs.device).wait_stream(side)
            return out
        self._capture(obs)
        return self(obs)

    def _capture(self, obs: torch.Tensor) -> None:
        self.static_obs = obs.clone()
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(obs.device)
        try:
            with capture(graph, capture_error_mode="thread_local"):
                self.outputs = self.act(self.static_obs)
        except Exception as exc:  # stay correct: an eager act is slower, not wrong
            self.failed = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:200]}"
            log.warning("CUDA graph capture of the policy's act failed (%s); acting eagerly",
                        self.failed)  # fmt: skip
            return
        self.graph = graph
        log.info("captured the policy's act in a CUDA graph (one launch an env step)")
