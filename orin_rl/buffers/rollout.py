"""On-policy rollout storage: allocated once, written a step at a time, read as minibatches."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch

from orin_rl.buffers import memory, ops

log = logging.getLogger(__name__)


class BufferOverflowError(RuntimeError):
    """More steps were added than the buffer holds."""


@dataclass
class Transition:
    """One batched environment step, filled by the algorithm across act / process_env_step."""

    obs: torch.Tensor | None = None
    """(num_envs, *obs_shape) observation the action was taken in (normalised if enabled)."""
    actions: torch.Tensor | None = None
    """(num_envs, *action_shape) sampled actions."""
    logprobs: torch.Tensor | None = None
    """(num_envs,) log pi(a|s) at sampling time."""
    values: torch.Tensor | None = None
    """(num_envs,) V(s) at sampling time."""
    rewards: torch.Tensor | None = None
    """(num_envs,) rewards."""
    terminated: torch.Tensor | None = None
    """(num_envs,) bool terminal state reached."""
    episode_end: torch.Tensor | None = None
    """(num_envs,) bool terminated or truncated."""
    bootstrap_values: torch.Tensor | None = None
    """(num_envs,) V(final obs) where truncated, 0 elsewhere."""
    action_means: torch.Tensor | None = None
    """(num_envs, action_dim) the Gaussian's mean at sampling time (buffers that keep it)."""

    def clear(self) -> None:
        """Drop every field (the algorithm refills it each step)."""
        for name in self.__dataclass_fields__:
            setattr(self, name, None)


@dataclass
class Batch:
    """A minibatch of flattened transitions (``mb_`` tensors in the update)."""

    obs: torch.Tensor
    """(minibatch, *obs_shape)"""
    actions: torch.Tensor
    """(minibatch, *action_shape)"""
    logprobs: torch.Tensor
    """(minibatch,) log-probabilities at sampling time."""
    values: torch.Tensor
    """(minibatch,) values at sampling time."""
    advantages: torch.Tensor
    """(minibatch,) GAE advantages (normalised if asked)."""
    returns: torch.Tensor
    """(minibatch,) value targets: advantages + values, before normalisation."""
    action_means: torch.Tensor | None = None
    """(minibatch, action_dim) the behaviour Gaussian's means (buffers that keep them)."""


# Fields stored per step (name, per-env shape key, dtype key).
_STEP_FIELDS = (
    "obs",
    "actions",
    "logprobs",
    "values",
    "rewards",
    "terminated",
    "episode_end",
    "bootstrap_values",
)
_BATCH_FIELDS = ("obs", "actions", "logprobs", "values", "advantages", "returns")


class RolloutBuffer:
    """Time-major (num_steps, num_envs, ...) storage for PPO, placed by ``memory.allocate``.

    Host placements write steps and gather minibatches with the Numba ``@njit`` kernels;
    device placements gather with the ``@cuda.jit`` kernel and write steps with torch copies.
    GAE and advantage normalisation run the kernels of the storage's device.
    """

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: torch.device | str = "cpu",
        placement: str = "auto",
        num_minibatches: int = 1,
        storage: dict[str, memory.Storage] | None = None,
        keep_action_means: bool = False,
        float_dtype: torch.dtype = torch.float32,
        obs_dtype: torch.dtype | None = None,
    ):
        """``keep_action_means``: store each step's Gaussian mean too (rsl_rl's exact KL).
        ``float_dtype``: of every float field (float64 for reference tests). ``obs_dtype``: of
        the observations where it is not ``float_dtype`` (``torch.uint8`` frames, stored as the
        env gives them: the network scales them)."""
        self.num_steps = num_steps
        self.num_envs = num_envs
        self.device = torch.device(device)
        storage = storage or {}
        if storage:  # memory another writer fills (the rollout workers' shared blocks)
            self.placement = storage["obs"].placement
            self.placement_reason = "shared with the rollout workers, who write into it"
        else:
            self.placement, self.placement_reason = memory.resolve_placement(placement, self.device)
        log.info("rollout buffer placement: %s (%s)", self.placement, self.placement_reason)
        self.batch_size = num_steps * num_envs
        if self.batch_size % num_minibatches:
            raise ValueError(
                f"num_minibatches={num_minibatches} does not divide the batch {self.batch_size}"
            )
        self.num_minibatches = num_minibatches
        self.minibatch_size = self.batch_size // num_minibatches
        self.step = 0

        f32, boolean = float_dtype, torch.bool
        per_env = {
            "obs": (tuple(obs_shape), obs_dtype or f32),
            "actions": (tuple(action_shape), action_dtype),
            "logprobs": ((), f32),
            "values": ((), f32),
            "rewards": ((), f32),
            "terminated": ((), boolean),
            "episode_end": ((), boolean),
            "bootstrap_values": ((), f32),
            "next_values": ((), f32),
            "advantages": ((), f32),
            "returns": ((), f32),
        }
        if keep_action_means:
            per_env["action_means"] = (tuple(action_shape), f32)
        self._step_fields = _STEP_FIELDS + (("action_means",) if keep_action_means else ())
        self._batch_fields = _BATCH_FIELDS + (("action_means",) if keep_action_means else ())
        self._store: dict[str, memory.Storage] = {}
        for name, (shape, dtype) in per_env.items():
            full = (num_steps, num_envs, *shape)
            given = storage.get(name)
            if given is not None:
                if tuple(given.tensor.shape) != full or given.tensor.dtype != dtype:
                    raise ValueError(f"storage {name!r} is {tuple(given.tensor.shape)} "
                                     f"{given.tensor.dtype}, not {full} {dtype}")  # fmt: skip
                self._store[name] = given
            else:
                where = {"mapped": "device"}.get(self.placement, self.placement)
                self._store[name] = memory.allocate(full, dtype, where, self.device)
        # Flattened (batch, feature) Numba views for the step write and the gather kernels.
        self._flat_views = {
            name: ops.numba_view(s.tensor.view(self.batch_size, -1))
            for name, s in self._store.items()
        }
        self._step_views = {
            name: ops.numba_view(s.tensor.view(num_steps, -1)) for name, s in self._store.items()
        }
        # Minibatch slots, reused every epoch: slot j holds minibatch j of the current epoch.
        self._slots: dict[str, torch.Tensor] = {}
        self._slot_views: dict[str, list] = {}
        for name in self._batch_fields:
            src = self._store[name].tensor
            slot = torch.zeros(
                (num_minibatches, self.minibatch_size, *src.shape[2:]),
                dtype=src.dtype,
                device=self.storage_device,
            )
            self._slots[name] = slot
            self._slot_views[name] = [
                ops.numba_view(slot[j].view(self.minibatch_size, -1))
                for j in range(num_minibatches)
            ]
        self._perm = torch.zeros(self.batch_size, dtype=torch.int64, device=self.storage_device)
        self._perm_view = ops.numba_view(self._perm)
        self.generator: torch.Generator | None = None
        """The minibatch order's RNG: None, torch's global one (rsl_rl's draws, step for step);
        a run whose actions are drawn on another thread (``train.overlap``) gives it its own,
        else the two threads' draws interleave and a seed no longer fixes the run."""

    @property
    def storage_device(self) -> torch.device:
        """Device of the tensors (CPU for host/pinned placements)."""
        return self._store["obs"].tensor.device

    @property
    def host_writable(self) -> bool:
        """Whether the CPU can write observations straight into the storage the learner reads:
        ``host`` storage for a CPU learner, ``managed`` for a CUDA one (one DRAM on Orin)."""
        return self.placement == "managed" or (
            self.placement == "host" and self.device.type == "cpu"
        )

    def obs_slot(self, t: int) -> tuple[np.ndarray, torch.Tensor]:
        """Step ``t``'s observation storage as (host array, learner tensor) of one memory, for an
        env to write into (``host_writable`` storage only)."""
        store = self._store["obs"]
        if not self.host_writable or store.host is None:
            raise ValueError(f"{self.placement} storage on {self.device} is not host-writable")
        return store.host[t], store.tensor[t]

    def __getattr__(self, name: str) -> torch.Tensor:
        store = self.__dict__.get("_store")
        if store is not None and name in store:
            return store[name].tensor
        raise AttributeError(name)

    def add(self, transition: Transition) -> None:
        """Write one step of every field at the current step index."""
        if self.step >= self.num_steps:
            raise BufferOverflowError(
                f"rollout buffer holds {self.num_steps} steps; call clear() after each update"
            )
        t = self.step
        for name in self._step_fields:
            value = getattr(transition, name)
            if value is None:
                raise ValueError(f"transition.{name} was not set before add()")
            dest = self._store[name].tensor[t]
            same = value.data_ptr() == dest.data_ptr() and value.device == dest.device
            if same and value.shape == dest.shape:
                continue  # the env wrote this step straight into the slot (obs_slot)
            # torch's copy on either side: on CUDA a fresh tensor copies faster than it becomes
            # a Numba view for a kernel (GPU.md: 7 us against 25 + 13 us); on the host a Numba
            # write took 17 us a field with the view and dtype conversions (py-spy, MinAtar)
            dest.copy_(value, non_blocking=self.storage_device.type == "cuda")
        self.step += 1

    def clear(self) -> None:
        """Start a new rollout (storage is reused, not freed)."""
        self.step = 0

    def compute_returns(
        self, last_values: torch.Tensor, gamma: float, lam: float, normalize: bool
    ) -> None:
        """GAE advantages and value targets for the full rollout.

        ``last_values`` is V(obs after the last step) with shape (num_envs,).
        """
        if self.step != self.num_steps:
            raise RuntimeError(f"rollout holds {self.step}/{self.num_steps} steps")
        values, ended = self.values, self.episode_end
        next_values = self.next_values
        # V(s_{t+1}): the next step's value, or V(final obs) where the episode ended at t.
        next_values[:-1].copy_(values[1:])
        next_values[-1].copy_(last_values)
        torch.where(ended, self.bootstrap_values, next_values, out=next_values)
        views = self._step_views
        ops.gae(
            views["rewards"],
            views["values"],
            views["next_values"],
            views["terminated"],
            views["episode_end"],
            gamma,
            lam,
            views["advantages"],
            self.storage_device,
        )
        torch.add(self.advantages, values, out=self.returns)
        if normalize:
            self.normalize_advantages()

    def normalize_advantages(
        self, groups: int = 1, all_reduce: Callable[[torch.Tensor], None] | None = None
    ) -> None:
        """Advantages to zero mean and unit std in place, per group of env columns and over
        every rank when ``all_reduce`` is given (``ops.normalize_``)."""
        ops.normalize_(self.advantages, groups=groups, all_reduce=all_reduce)

    def warm_kernels(self) -> None:
        """Compile (or load from Numba's cache) the update's kernels now, on this buffer's own
        storage, so that a CUDA graph captured next meets none for the first time: GAE into
        ``advantages`` and one minibatch gather into the slots, both rewritten before they are
        read (``_perm`` starts at zeros: valid rows)."""
        v, device = self._step_views, self.storage_device
        ops.gae(v["rewards"], v["values"], v["next_values"], v["terminated"], v["episode_end"],
                0.99, 0.95, v["advantages"], device)  # fmt: skip
        index = self._perm_view[: self.minibatch_size]
        for name in self._batch_fields:
            ops.gather(self._flat_views[name], index, self._slot_views[name][0], device)

    def _shuffle(self) -> None:
        """A new random permutation of the batch into ``_perm``."""
        if self.storage_device.type == "cuda":
            # Sort of uniform keys: a random permutation with no host sync (graph-safe).
            keys = torch.rand(self.batch_size, device=self.storage_device, generator=self.generator)
            self._perm.copy_(torch.argsort(keys))
        else:
            torch.randperm(self.batch_size, out=self._perm, generator=self.generator)

    def minibatches(self, num_epochs: int, one_order: bool = False) -> Iterator[Batch]:
        """Yield ``num_epochs * num_minibatches`` minibatches, shuffled by torch's global RNG:
        a new permutation every epoch, or with ``one_order`` one for the whole update (rsl_rl's
        ``mini_batch_generator``: every epoch visits the same minibatches in the same order).

        A yielded Batch is overwritten one epoch later: use it before asking for more.
        """
        views = self._flat_views
        for epoch in range(num_epochs):
            if epoch == 0 or not one_order:
                self._shuffle()
            for j in range(self.num_minibatches):
                start = j * self.minibatch_size
                index = self._perm_view[start : start + self.minibatch_size]
                for name in self._batch_fields:
                    ops.gather(views[name], index, self._slot_views[name][j], self.storage_device)
                yield Batch(
                    **{
                        name: self._slots[name][j].to(self.device, non_blocking=True)
                        for name in self._batch_fields
                    }
                )
