"""PPO rollouts collected by the rollout workers themselves (``env.vectorization=workers``).

Each worker acts for its envs with a numpy copy of the policy (``models.numpy_policy``) whose
weights and observation statistics the learner publishes into shared memory between rollouts,
and writes every transition straight into the rollout storage: a :class:`SharedBlock` per
rollout buffer, which is the learner's storage itself (CPU learner; mapped on an integrated
GPU) or is copied into it with one asynchronous DMA per field (discrete GPU). A rollout of T
steps costs one message each way per worker.

What the learner does after the workers are done (``finish``), in the order a synchronous
rollout would have done it step by step: the reward normaliser scales the raw rewards step by
step (its running return is a sequence over time); the observation statistics take in the
rollout's raw observations (``ObsNormalizer.update``, Chan's combination of a batch); GAE runs
from the values the workers stored, bootstrapped from their values of the last observation.
The observation statistics the workers normalise with are frozen for a rollout (published
with the weights), where the in-process path updates them every step.

Synchronously (``iterate``) the learner waits for each rollout; with ``train.overlap``
(``runners.overlap``) the workers collect rollout k+1 while the learner trains on rollout k,
the main process doing nothing else meanwhile: no collector thread, no GIL to share.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch

from orin_rl.buffers import RolloutBuffer, memory
from orin_rl.buffers.shared import SharedBlock
from orin_rl.models import numpy_policy

log = logging.getLogger(__name__)

# What the workers write per step, beside obs and actions: (name, dtype).
_STEP_FIELDS = (
    ("logprobs", np.float32),
    ("values", np.float32),
    ("rewards", np.float32),
    ("terminated", np.bool_),
    ("episode_end", np.bool_),
    ("bootstrap_values", np.float32),
)
_COPIED = ("obs", "actions", *(name for name, _ in _STEP_FIELDS))


class RolloutProgram:
    """A rollout of ``num_steps`` in one worker (pickled to it; runs as ``program(local)``)."""

    def __init__(self, spec: dict[str, Any], weights: SharedBlock, storage: SharedBlock,
                 num_steps: int, bootstrap_with_value: bool):  # fmt: skip
        self.spec, self.weights, self.storage = spec, weights, storage
        self.num_steps = num_steps
        self.bootstrap_with_value = bootstrap_with_value

    def __call__(self, local: Any) -> None:
        policy = numpy_policy.NumpyActorCritic(self.spec, self.weights.arrays)
        out = {key: array[:, local.lo : local.hi] for key, array in self.storage.arrays.items()
               if key != "last_values"}  # fmt: skip
        raw = out.get("raw_obs")
        obs = local.obs
        for t in range(self.num_steps):
            normed = policy.normalize(obs)
            actions, logprobs, values = policy.act(normed, local.rng)
            out["obs"][t] = normed
            if raw is not None:
                raw[t] = obs
            out["actions"][t] = actions
            out["logprobs"][t] = logprobs
            out["values"][t] = values
            step = local.step(actions)
            out["rewards"][t] = step.reward
            ended = step.terminated | step.truncated
            out["episode_end"][t] = ended
            # Truncated episodes bootstrap from V(true final observation); terminated ones do not
            cut = step.truncated & ~step.terminated
            boot = np.zeros_like(values)
            if self.bootstrap_with_value:  # rsl_rl's: V of the step's first observation, at
                cut = step.truncated  # every time-out, terminal or not (PPO.process_env_step)
                boot = np.where(cut, values, 0.0)
            elif cut.any():
                boot[cut] = policy.value(policy.normalize(step.final_obs[cut]))
            out["terminated"][t] = step.terminated & ~cut
            out["bootstrap_values"][t] = boot
            obs = step.obs
        self.storage["last_values"][local.lo : local.hi] = policy.value(policy.normalize(obs))


class WorkerRollouts:
    """The learner's side: the published weights, two rollout buffers over shared storage, and
    the hand-over of a finished rollout to the learner (module docstring)."""

    def __init__(self, runner: Any):
        self.runner = runner
        self.algo = runner.algo
        self.env = runner.env
        cfg, policy, device = runner.cfg, runner.policy, runner.device
        self.device = device
        self.num_steps = cfg.ppo.num_steps
        self.spec = policy.spec.to_dict()
        self.weights = SharedBlock(numpy_policy.weight_layout(policy))
        n, obs_shape = self.env.num_envs, tuple(policy.spec.obs_shape)
        discrete = policy.spec.action_kind == "discrete"
        action_shape = () if discrete else (policy.spec.action_dim,)
        steps = (self.num_steps, n)
        layout: dict[str, tuple[tuple[int, ...], Any]] = {
            "obs": ((*steps, *obs_shape), np.float32),
            "actions": ((*steps, *action_shape), np.int64 if discrete else np.float32),
            **{name: (steps, dtype) for name, dtype in _STEP_FIELDS},
            "last_values": ((n,), np.float32),
        }
        if policy.obs_normalizer is not None:
            layout["raw_obs"] = ((*steps, *obs_shape), np.float32)
        self.blocks = [SharedBlock(layout) for _ in range(2)]
        if device.type == "cuda":
            self.mapped = memory.is_integrated(device)
            for block in self.blocks:
                block.register(device, mapped=self.mapped)
        else:
            self.mapped = False
        self.buffers = [self._buffer(block) for block in self.blocks]
        self.copy_done: list[torch.cuda.Event | None] = [None, None]
        self.published_version = -1
        self.wait_s = 0.0
        """Seconds the learner waited for the last rollout (its un-hidden collection time)."""
        how = {"cpu": "the learner's storage itself"}.get(device.type, "")
        how = how or ("mapped into the GPU, no copy" if self.mapped else "one async copy a field")
        log.info("rollout workers collect whole rollouts into shared memory (%s)", how)

    def _buffer(self, block: SharedBlock) -> RolloutBuffer:
        """A rollout buffer over ``block`` (CPU, mapped), or in device memory (pinned copy)."""
        if self.device.type == "cuda" and not self.mapped:
            return self.runner.make_rollout_buffer()
        if self.device.type == "cuda":
            storage = {k: memory.Storage(block.device_tensor(k), None, "mapped") for k in _COPIED}
        else:
            storage = {k: memory.Storage(block.tensor(k), block[k], "host") for k in _COPIED}
        return self.runner.make_rollout_buffer(storage=storage)

    # ------------------------------------------------------------------ the two halves
    def publish(self) -> None:
        """The learner's weights and observation statistics, for the next rollout."""
        if self.published_version != self.algo.iteration:
            numpy_policy.publish(self.algo.policy, self.weights.arrays)
            self.published_version = self.algo.iteration

    def start(self, index: int) -> None:
        """The workers begin a rollout into buffer ``index`` with the published weights."""
        done = self.copy_done[index]
        if done is not None:
            done.synchronize()  # the last DMA out of this block has finished reading it
        self.publish()
        program = RolloutProgram(self.spec, self.weights, self.blocks[index], self.num_steps,
                                 self.runner.cfg.ppo.timeout_bootstrap == "value")  # fmt: skip
        self.env.start(program)

    @torch.inference_mode()
    def finish(self, index: int) -> RolloutBuffer:
        """Wait for the workers; buffer ``index`` as the learner trains on it, returns in."""
        began = time.perf_counter()
        self.env.wait()
        self.wait_s = time.perf_counter() - began
        block, buffer = self.blocks[index], self.buffers[index]
        if self.device.type == "cuda" and not self.mapped:
            for key in _COPIED:
                getattr(buffer, key).copy_(block.tensor(key), non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self.copy_done[index] = event
        buffer.step = buffer.num_steps
        policy, algo = self.algo.policy, self.algo
        if algo.reward_normalizer is not None:  # in time order, as step by step
            rewards, ended = buffer.rewards, buffer.episode_end
            for t in range(self.num_steps):
                rewards[t] = algo.reward_normalizer(rewards[t], ended[t])
        if policy.obs_normalizer is not None:
            raw = block.tensor("raw_obs").to(self.device, non_blocking=True)
            policy.obs_normalizer.update(raw.view(-1, *raw.shape[2:]))
        last_values = block.tensor("last_values").to(self.device, non_blocking=True)
        algo.buffer, previous = buffer, algo.buffer
        try:
            algo.compute_returns(last_values=last_values)
        finally:
            algo.buffer = previous
        return buffer

    def iterate(self) -> tuple[torch.Tensor, dict[str, float]]:
        """One synchronous iteration: a rollout by the workers, then the update."""
        began = time.perf_counter()
        self.start(0)
        self.algo.buffer = self.finish(0)
        rolled = time.perf_counter()
        losses = self.algo.update()
        losses["perf/rollout_s"] = rolled - began
        losses["perf/update_s"] = time.perf_counter() - rolled
        return self.env.observe(), losses

    def close(self) -> None:
        for block in (*self.blocks, self.weights):
            block.close()
