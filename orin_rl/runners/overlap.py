"""Overlapped PPO rollouts (``train.overlap``): the envs collect rollout k+1 while the learner
runs update k+1 on rollout k.

With CPU physics a synchronous iteration leaves the learner idle while the env workers step,
then the workers idle while the learner updates. Here a collector thread steps the envs with
the *behaviour policy* (a copy of the learner's weights as of the last update, its own
observation normaliser) into one of two rollout buffers, while the learner trains on the
other; at the iteration's end they swap. The policy lag is one rollout: rollout k+1 is
collected with the weights of update k, while update k+1 trains on rollout k, collected with
those of update k-1. GAE uses the values the behaviour policy stored. The update's ratio is
clipped against the learner's own weights at the update's start, the proximal policy, and the
surrogate weighted by pi_prox / pi_behaviour (``train.overlap_correction=decoupled``, Hilton
et al. 2021: ``PPO.use_proximal_policy``); clipped against the behaviour policy's stored
log-probabilities instead (``off``), a sample that the last update already moved past the
clip gives no gradient, and Hopper learnt less per step (0 of 3 seeds at 1,500 in 300k steps
against 3 of 3 synchronous; decoupled, 2 of 3, and 3 of 6 against 4 of 6 over seeds 1-6:
docs/benchmarks/overlap_hopper_seeds*_cpu_2core.md).

No copies between the two sides: the collector writes each step into the buffer the next
update reads (``RolloutBuffer.add``; where the env writes straight into storage,
``obs_into_buffer``, into that buffer's slot), and the learner takes that buffer as its own.
Both sides release the GIL in their heavy parts (env workers' pipes, torch kernels), so a
thread is enough.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

import torch

from orin_rl.algorithms import PPO

log = logging.getLogger(__name__)


class OverlappedRollouts:
    """The two sides of an overlapped iteration (module docstring) for ``runner``."""

    def __init__(self, runner: Any):
        self.runner = runner
        self.learner: PPO = runner.algo
        cfg = runner.cfg
        self.learner.decoupled = cfg.train.overlap_correction == "decoupled"
        # The behaviour policy: the learner's weights, its own copy (the learner changes its
        # weights while the collector acts), with the observation statistics it updates.
        self.behaviour = copy.deepcopy(self.learner.policy)
        self.collector = PPO(
            self.behaviour,
            runner.make_rollout_buffer(),
            cfg.ppo,
            runner.num_iterations,
            runner.device,
            precision=cfg.train.precision,
        )
        self.collector.value_all_final_obs = self.learner.value_all_final_obs
        # One reward normaliser: the collector updates it, checkpoints save the learner's.
        self.collector.reward_normalizer = self.learner.reward_normalizer
        self.spare = self.learner.buffer  # the learner takes the collector's buffers in turn
        # The collector draws actions from torch's global RNG on its thread; the learner's
        # minibatch order draws from its own, seeded from (seed, iteration) before each update,
        # so a seed fixes the run and a resumed run draws the orders an unbroken one would.
        self.order = torch.Generator(self.spare.storage_device)
        self._order_seed = cfg.train.seed * 7919
        self.spare.generator = self.collector.buffer.generator = self.order
        self.primed = False
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="orin-rl-collector")
        self._stream = torch.cuda.Stream(runner.device) if runner.device.type == "cuda" else None
        self.lag_log: list[tuple[int, int]] = []
        """(weights' version that collected a rollout, update that trained on it), the last
        few (tests)."""
        self._behaviour_version = 0
        self._stop = threading.Event()  # set when the learner fails: the collector stops

    # ------------------------------------------------------------------ the two sides
    def _collect(self, obs: torch.Tensor) -> tuple[torch.Tensor, int]:
        """A rollout of ``num_steps`` with the behaviour policy into the collector's buffer,
        GAE included; (next observation, the weights' version)."""
        version = self._behaviour_version
        algo = self.collector
        ctx = torch.cuda.stream(self._stream) if self._stream is not None else nullcontext()
        with ctx:
            for _ in range(self.runner.rollout_steps):
                if self._stop.is_set():
                    raise _Stopped
                actions = algo.act(obs)
                step = self.runner.env_step(actions, algo.buffer)
                algo.process_env_step(step)
                obs = step.obs
            algo.compute_returns(obs)
        if self._stream is not None:
            self._stream.synchronize()
        return obs, version

    def iterate(self, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """Update k+1 on rollout k while rollout k+1 is collected; returns the observation the
        next rollout starts from and the update's losses."""
        if not self.primed:  # the first rollout has nothing to overlap with
            self._wait_for_weights()
            obs, version = self._collect(obs)
            self._pending_version = version
            self.primed = True
        filled = self.collector.buffer
        trained_version = self._pending_version
        self.collector.buffer = self.spare
        self.learner.buffer = filled  # the storage the collector wrote: no copy
        last = self.learner.iteration + 1 >= self.runner.num_iterations
        if self.learner.graphed_update is not None:  # no capture beside the collector
            self.learner.graphed_update.prepare()
        future = None
        if not last:  # the run's last update: no rollout after it to collect
            self._wait_for_weights()
            future = self.pool.submit(self._collect, obs)
        self.order.manual_seed(self._order_seed + self.learner.iteration)
        try:
            losses = self.learner.update()  # clears `filled` at its end
        except BaseException:
            self._stop.set()  # the collector stops at its next step; the learner's error wins
            if future is not None:
                try:
                    future.result()
                except BaseException as exc:  # reported, not raised
                    if not isinstance(exc, _Stopped):
                        log.warning("the collector failed too: %s", exc)
            raise
        if future is not None:
            obs, self._pending_version = future.result()  # the collector's errors surface here
        self.spare = filled
        self.lag_log = [*self.lag_log[-15:], (trained_version, self.learner.iteration)]
        self._sync_weights()
        return obs, losses

    def _wait_for_weights(self) -> None:
        """The collector's stream starts after the weights' copy on the learner's."""
        if self._stream is not None:
            self._stream.wait_stream(torch.cuda.current_stream(self.runner.device))

    def _sync_weights(self) -> None:
        """The behaviour policy takes the update's weights; the learner takes the observation
        statistics the behaviour policy gathered (what checkpoints and exports carry)."""
        with torch.no_grad():
            for mine, theirs in zip(
                self.behaviour.parameters(), self.learner.policy.parameters(), strict=True
            ):
                mine.copy_(theirs)
            learner_norm = self.learner.policy.obs_normalizer
            if learner_norm is not None:
                learner_norm.load_state_dict(self.behaviour.obs_normalizer.state_dict())
        self._behaviour_version = self.learner.iteration

    def restore_from_learner(self) -> None:
        """After the learner's state was loaded (a resume): the behaviour policy is the
        learner's policy, normaliser included."""
        self.behaviour.load_state_dict(self.learner.policy.state_dict())
        self._behaviour_version = self.learner.iteration

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class OverlappedWorkers:
    """Overlap with rollout workers (``env.vectorization=workers``): the worker processes
    collect rollout k+1, acting with the weights of update k, while this process trains on
    rollout k; no collector thread, so the learner has the GIL to itself."""

    def __init__(self, runner: Any):
        self.runner = runner
        self.learner: PPO = runner.algo
        self.learner.decoupled = runner.cfg.train.overlap_correction == "decoupled"
        self.rollouts = runner.worker_rollouts
        self.primed = False
        self.index = 0  # the buffer the workers fill next
        self.lag_log: list[tuple[int, int]] = []
        """(weights' version that collected a rollout, update that trained on it), the last
        few (tests)."""

    def _collected(self) -> tuple[Any, int]:
        """The rollout the workers are writing, once finished, and the weights' version."""
        version = self.rollouts.published_version
        buffer = self.rollouts.finish(self.index)
        self.index ^= 1
        return buffer, version

    def iterate(self, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """Update k+1 on rollout k while the workers collect rollout k+1."""
        rollouts = self.rollouts
        if not self.primed:  # the first rollout has nothing to overlap with
            rollouts.start(self.index)
            self._pending = self._collected()
            self.primed = True
        filled, trained_version = self._pending
        last = self.learner.iteration + 1 >= self.runner.num_iterations
        if not last:  # the run's last update: no rollout after it to collect
            rollouts.start(self.index)  # publishes the newest weights first
        self.learner.buffer = filled  # the storage the workers wrote (or its device copy)
        began = time.perf_counter()
        losses = self.learner.update()  # an error leaves the workers to env.close()
        losses["perf/update_s"] = time.perf_counter() - began
        if not last:
            self._pending = self._collected()
            losses["perf/rollout_wait_s"] = rollouts.wait_s
        self.lag_log = [*self.lag_log[-15:], (trained_version, self.learner.iteration)]
        return rollouts.env.observe(), losses

    def restore_from_learner(self) -> None:
        """After a resume: the next start publishes the learner's weights (their version)."""
        self.rollouts.published_version = -1

    def close(self) -> None:
        """Nothing of its own: the runner closes the workers and their blocks."""


class _Stopped(Exception):
    """The collector stopped because the learner failed."""
