"""Off-policy replay storage: uniform, prioritized (sum-tree) and sharded over several GPUs.

Every field is one preallocated ring of (capacity, *shape) in the field's own dtype (uint8
images stay uint8), placed by ``memory.allocate``. Inserts, samples and priority updates run
the Numba kernels of the storage's device: ``@cuda.jit`` on CUDA (on torch's current stream),
the ``@njit`` twins on the CPU.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from orin_rl.buffers import kernels, memory, ops
from orin_rl.errors import OrinError

log = logging.getLogger(__name__)


class ReplayError(OrinError, ValueError):
    """A replay buffer was used with data or arguments it cannot take."""


@dataclass(frozen=True)
class FieldSpec:
    """Shape (per transition) and dtype of one stored field."""

    shape: tuple[int, ...]
    """Per-transition shape, e.g. (84, 84, 4) for stacked frames, () for a reward."""
    dtype: torch.dtype
    """Storage dtype; inputs are cast to it."""


@dataclass
class ReplayBatch:
    """A sampled batch: the fields, where they came from and (prioritized) their IS weights."""

    data: dict[str, torch.Tensor]
    """Field name → (batch, *shape) tensor on the buffer's device."""
    indices: torch.Tensor
    """(batch,) int64 slots in the buffer (pass back to ``update_priorities``); for a sharded
    buffer (batch, 2) rows of (shard, slot)."""
    weights: torch.Tensor | None = None
    """(batch,) importance-sampling weights, max-normalised (prioritized buffers only)."""

    def __getitem__(self, name: str) -> torch.Tensor:
        return self.data[name]


def _as_specs(fields: Mapping[str, FieldSpec | tuple]) -> dict[str, FieldSpec]:
    specs = {}
    for name, spec in fields.items():
        if not isinstance(spec, FieldSpec):
            shape, dtype = spec
            spec = FieldSpec(tuple(shape), dtype)
        specs[name] = spec
    return specs


def _cpu_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A CPU tensor that owns its memory: one copy from any device, never a view."""
    return tensor.to("cpu", copy=True)


class ReplayBuffer:
    """Uniform replay over a ring of ``capacity`` transitions.

    Args:
        capacity: transitions held; the oldest are overwritten once full.
        fields: name → FieldSpec (or (shape, dtype)) of every stored field.
        device: the learner's device (where sampled batches are used).
        placement: ``auto`` or one of memory.PLACEMENTS.
    """

    def __init__(
        self,
        capacity: int,
        fields: Mapping[str, FieldSpec | tuple],
        device: torch.device | str = "cpu",
        placement: str = "auto",
    ):
        if capacity <= 0:
            raise ReplayError(f"capacity must be positive, got {capacity}")
        if not fields:
            raise ReplayError("a replay buffer needs at least one field")
        self.capacity = capacity
        self.device = torch.device(device)
        self.specs = _as_specs(fields)
        self.placement, self.placement_reason = memory.resolve_placement(placement, self.device)
        log.info("replay buffer placement: %s (%s)", self.placement, self.placement_reason)
        self._check_memory()
        self._store = {
            name: memory.allocate((capacity, *spec.shape), spec.dtype, self.placement, self.device)
            for name, spec in self.specs.items()
        }
        # (capacity, feature) Numba views, made once.
        self._views = {
            name: ops.numba_view(s.tensor.view(capacity, -1)) for name, s in self._store.items()
        }
        self.pos = 0
        """Next slot to write."""
        self.size = 0
        """Transitions stored."""

    def _check_memory(self) -> None:
        """Refuse, before allocating, a buffer larger than the memory available (host memory:
        every placement but ``device``; on an Orin the GPU's too): zeroing it would swap or
        be killed, minutes into a run. Logs its size either way."""
        per = sum(math.prod(s.shape) * torch.empty((), dtype=s.dtype).element_size()
                  for s in self.specs.values())  # fmt: skip
        total = per * self.capacity
        log.info("replay buffer: %d transitions of %d bytes, %.2f GB", self.capacity, per,
                 total / 1e9)  # fmt: skip
        host = self.placement != "device" or memory.is_integrated(self.device)  # Orin: one DRAM
        free = memory.available_bytes() if host else None
        if free is not None and total > free:
            raise ReplayError(
                f"a replay buffer of {self.capacity:,} transitions of {per:,} bytes needs "
                f"{total / 1e9:.2f} GB; this machine has {free / 1e9:.2f} GB available: lower "
                "the algorithm's buffer_size (dqn.buffer_size, sac.buffer_size)"
            )

    # ------------------------------------------------------------------ basics
    @property
    def storage_device(self) -> torch.device:
        """Where the storage tensors live (CPU for host and pinned placements)."""
        return next(iter(self._store.values())).tensor.device

    @property
    def nbytes(self) -> int:
        """Bytes of storage held by the fields."""
        return sum(s.tensor.numel() * s.tensor.element_size() for s in self._store.values())

    def __len__(self) -> int:
        return self.size

    def field(self, name: str) -> torch.Tensor:
        """The whole (capacity, *shape) storage tensor of a field (zero-copy)."""
        return self._store[name].tensor

    def _on_kernel_device(self, name: str, value: torch.Tensor) -> torch.Tensor:
        spec = self.specs[name]
        value = torch.as_tensor(value)
        if tuple(value.shape[1:]) != spec.shape:
            raise ReplayError(
                f"field {name!r}: expected (batch, {', '.join(map(str, spec.shape))}) "
                f"got {tuple(value.shape)}"
            )
        return value.to(self.storage_device, spec.dtype, non_blocking=True).contiguous()

    # --------------------------------------------------------------------- add
    def add(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Insert a batch of transitions (every field, same leading size); returns their slots."""
        missing = set(self.specs) - set(batch)
        extra = set(batch) - set(self.specs)
        if missing or extra:
            raise ReplayError(
                f"add() needs exactly the fields {sorted(self.specs)}; "
                f"missing {sorted(missing)}, unknown {sorted(extra)}"
            )
        sizes = {len(v) for v in batch.values()}
        if len(sizes) != 1:
            raise ReplayError(f"add(): fields have different batch sizes {sorted(sizes)}")
        n = sizes.pop()
        if n > self.capacity:
            raise ReplayError(f"add(): batch of {n} exceeds the capacity {self.capacity}")
        for name, value in batch.items():
            src = self._on_kernel_device(name, value).view(n, -1)
            self._insert(self._views[name], src)
        slots = (torch.arange(n, device=self.storage_device) + self.pos) % self.capacity
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        return slots

    def _insert(self, dst_view, src: torch.Tensor) -> None:
        if src.numel() == 0:
            return
        if self.storage_device.type == "cuda":
            grid, block = kernels.row_launch(*src.shape)
            kernels.ring_insert_cuda[grid, block, ops.stream(src.device)](
                dst_view, self.pos, ops.numba_view(src)
            )
        else:
            kernels.ring_insert_cpu(dst_view, self.pos, src.numpy())

    # ------------------------------------------------------------------ sample
    def sample(self, batch_size: int) -> ReplayBatch:
        """``batch_size`` transitions drawn uniformly with replacement."""
        self._check_sample(batch_size)
        dev = self.storage_device
        u = torch.rand(batch_size, device=dev, dtype=torch.float64)
        index = torch.empty(batch_size, dtype=torch.int64, device=dev)
        data = {}
        for i, (name, spec) in enumerate(self.specs.items()):
            out = torch.empty((batch_size, *spec.shape), dtype=spec.dtype, device=dev)
            flat = out.view(batch_size, -1)
            if i == 0:  # the first field draws the indices; the rest gather at them
                self._sample_uniform(self._views[name], u, flat, index)
            else:
                self._gather(name, index, flat)
            data[name] = out
        return ReplayBatch(self._to_device(data), index.to(self.device))

    def _sample_uniform(self, src_view, u, flat: torch.Tensor, index: torch.Tensor) -> None:
        if self.storage_device.type == "cuda":
            grid, block = kernels.row_launch(*flat.shape)
            kernels.sample_uniform_cuda[grid, block, ops.stream(flat.device)](
                src_view, ops.numba_view(u), self.size, ops.numba_view(flat), ops.numba_view(index)
            )
        else:
            kernels.sample_uniform_cpu(src_view, u.numpy(), self.size, flat.numpy(), index.numpy())

    def _gather(self, name: str, index: torch.Tensor, flat: torch.Tensor) -> None:
        ops.gather(
            self._views[name], ops.numba_view(index), ops.numba_view(flat), self.storage_device
        )

    def gather(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every field at the slots ``index`` (int64), on the learner's device."""
        index = index.to(self.storage_device, torch.int64).contiguous()
        data = {}
        for name, spec in self.specs.items():
            out = torch.empty(
                (len(index), *spec.shape), dtype=spec.dtype, device=self.storage_device
            )
            self._gather(name, index, out.view(len(index), -1))
            data[name] = out
        return self._to_device(data)

    def _to_device(self, data: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        if self.storage_device == self.device:
            return data
        return {k: v.to(self.device, non_blocking=True) for k, v in data.items()}

    def _check_sample(self, batch_size: int) -> None:
        if batch_size <= 0:
            raise ReplayError(f"batch_size must be positive, got {batch_size}")
        if self.size == 0:
            raise ReplayError("cannot sample from an empty replay buffer; add() transitions first")

    # ------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        """The stored transitions (filled part only, on the CPU) and the ring position.

        Slots ``[0, size)`` hold every transition (a ring that has wrapped is full), so the
        ring restores from them and ``pos``. Each field is a copy of its own: ``.cpu()`` of a
        host-memory slice is a view, and ``torch.save`` writes a view's whole storage (the
        empty capacity too); a copy also keeps the state from changing with later inserts.
        """
        return {
            "capacity": self.capacity,
            "pos": self.pos,
            "size": self.size,
            "fields": {n: _cpu_copy(s.tensor[: self.size]) for n, s in self._store.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore a ``state_dict`` of a buffer with the same capacity and fields."""
        if state["capacity"] != self.capacity or set(state["fields"]) != set(self.specs):
            raise ReplayError(
                f"replay state has capacity {state['capacity']} and fields "
                f"{sorted(state['fields'])}; this buffer has {self.capacity} and "
                f"{sorted(self.specs)}: it was saved with another buffer size or layout (before "
                "2026-12-06, dqn.frame_history kept two frames a transition); resume it with the "
                "config and orin_rl version that saved it, or start a new run"
            )
        size = int(state["size"])
        for name, value in state["fields"].items():
            self._store[name].tensor[:size].copy_(self._on_kernel_device(name, value))
        self.pos, self.size = int(state["pos"]), size


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al., 2016) over a float64 sum-tree.

    P(i) = p_i^alpha / sum_k p_k^alpha with p_i = |priority_i| + eps; new transitions get the
    largest priority seen so far. Importance weights w_i = (N P(i))^-beta are divided by their
    maximum over the sampled batch. The tree lives beside the storage and is updated and
    sampled by kernels; the running maximum priority stays on the device (no host sync).

    Args: ``ReplayBuffer``'s, then (by keyword) ``alpha``, ``beta`` and ``eps`` as above.
    """

    def __init__(
        self, *args: Any, alpha: float = 0.6, beta: float = 0.4, eps: float = 1e-6, **kwargs: Any
    ):
        super().__init__(*args, **kwargs)
        if alpha < 0 or not 0 <= beta <= 1 or eps <= 0:
            raise ReplayError(
                f"need alpha >= 0, 0 <= beta <= 1, eps > 0; got {alpha}, {beta}, {eps}"
            )
        self.alpha, self.beta, self.eps = alpha, beta, eps
        self.tree_capacity = 1 << max(0, math.ceil(math.log2(self.capacity)))
        dev = self.storage_device
        self.tree = torch.zeros(2 * self.tree_capacity, dtype=torch.float64, device=dev)
        self._tree_view = ops.numba_view(self.tree)
        self._max_priority = torch.ones((), dtype=torch.float64, device=dev)  # p^alpha
        self._scratch: dict[tuple[str, int], tuple[torch.Tensor, Any]] = {}

    def _buffer(self, name: str, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, Any]:
        """A reusable device tensor (and its Numba view) for kernel arguments, per size.

        Reuse is safe because every use is ordered on the same stream; tensors handed to the
        caller are clones.
        """
        key = (name, n)
        if key not in self._scratch:
            t = torch.empty(n, dtype=dtype, device=self.storage_device)
            self._scratch[key] = (t, ops.numba_view(t))
        return self._scratch[key]

    @property
    def total_priority(self) -> torch.Tensor:
        """Sum of p_i^alpha over stored transitions (a device scalar)."""
        return self.tree[1]

    def add(self, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Insert transitions with the maximum priority seen so far; returns their slots."""
        slots = super().add(batch)
        self._set(slots, self._max_priority.expand(len(slots)))
        return slots

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set p_i = |priorities| + eps for the sampled ``indices`` (e.g. |TD error|)."""
        dev = self.storage_device
        indices = torch.as_tensor(indices).to(dev, torch.int64)
        p = torch.as_tensor(priorities).to(dev, torch.float64).abs().add_(self.eps).pow_(self.alpha)
        if indices.shape != p.shape or indices.dim() != 1:
            raise ReplayError(
                f"indices {tuple(indices.shape)} and priorities {tuple(p.shape)} differ"
            )
        self._set(indices, p)
        torch.maximum(self._max_priority, p.max(), out=self._max_priority)

    def _set(self, slots: torch.Tensor, values: torch.Tensor) -> None:
        n = len(slots)
        if self.storage_device.type == "cuda":
            leaves, leaves_view = self._buffer("leaves", n, torch.int64)
            vals, vals_view = self._buffer("values", n, torch.float64)
            _, climb_view = self._buffer("climb", n, torch.int64)
            leaves.copy_(slots)
            vals.copy_(values)
            kernels.sumtree_update_cuda[1, kernels.SUMTREE_THREADS, ops.stream(leaves.device)](
                self._tree_view, self.tree_capacity, leaves_view, vals_view, climb_view
            )
        else:
            kernels.sumtree_update_cpu(
                self._tree_view,
                self.tree_capacity,
                slots.contiguous().numpy(),
                values.to(torch.float64).contiguous().numpy(),
            )

    def sample(self, batch_size: int, beta: float | None = None) -> ReplayBatch:
        """Stratified proportional sample with importance weights (``beta`` overrides)."""
        self._check_sample(batch_size)
        beta = self.beta if beta is None else beta
        dev = self.storage_device
        u, u_view = self._buffer("u", batch_size, torch.float64)
        index, index_view = self._buffer("index", batch_size, torch.int64)
        prio, prio_view = self._buffer("priority", batch_size, torch.float64)
        torch.rand(batch_size, dtype=torch.float64, device=dev, out=u)
        if dev.type == "cuda":
            kernels.sumtree_sample_cuda[
                kernels.blocks_for(batch_size), kernels.THREADS_PER_BLOCK, ops.stream(dev)
            ](self._tree_view, self.tree_capacity, self.size, u_view, index_view, prio_view)
        else:
            kernels.sumtree_sample_cpu(
                self._tree_view, self.tree_capacity, self.size, u_view, index_view, prio_view
            )
        # w_i = (N * P(i))^-beta / max_j w_j
        weights = (self.size * prio / self.total_priority).pow(-beta)
        weights = (weights / weights.max()).to(torch.float32)
        data = self.gather(index)
        return ReplayBatch(data, index.to(self.device, copy=True), weights.to(self.device))

    def state_dict(self) -> dict:
        """Transitions, ring position, and the tree's leaves and maximum priority (copies)."""
        state = super().state_dict()
        leaves = _cpu_copy(self.tree[self.tree_capacity : self.tree_capacity + self.size])
        state.update(priorities=leaves, max_priority=_cpu_copy(self._max_priority))
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore transitions and priorities."""
        super().load_state_dict(state)
        self.tree.zero_()
        slots = torch.arange(self.size, device=self.storage_device)
        self._set(slots, state["priorities"].to(self.storage_device))
        self._max_priority.copy_(state["max_priority"])


class ShardedReplayBuffer:
    """Uniform replay split over several buffers (one per CUDA device, or any list).

    ``add`` sends a whole batch to the next shard in turn (``round_robin``) or splits it so the
    shards stay equal in size (``balanced``). ``sample`` first splits ``batch_size`` over the
    shards by a multinomial draw with probabilities size_k / total, then samples each shard
    uniformly: every returned transition is a uniform draw over all stored transitions, and
    the batch is exactly ``batch_size``, concatenated on ``device``.
    """

    def __init__(
        self,
        shards: Sequence[ReplayBuffer],
        device: torch.device | str,
        mode: str = "round_robin",
    ):
        if not shards:
            raise ReplayError("a sharded buffer needs at least one shard")
        if mode not in ("round_robin", "balanced"):
            raise ReplayError(f"mode must be 'round_robin' or 'balanced', got {mode!r}")
        specs = {tuple(sorted(s.specs.items(), key=lambda kv: kv[0])) for s in shards}
        if len(specs) != 1:
            raise ReplayError("all shards must store the same fields")
        self.shards = list(shards)
        self.device = torch.device(device)
        self.mode = mode
        self._next = 0

    @classmethod
    def across_devices(
        cls,
        capacity_per_shard: int,
        fields: Mapping[str, FieldSpec | tuple],
        devices: Sequence[torch.device | str],
        target: torch.device | str,
        mode: str = "round_robin",
        placement: str = "auto",
    ) -> ShardedReplayBuffer:
        """One ReplayBuffer of ``capacity_per_shard`` on each of ``devices``."""
        shards = [ReplayBuffer(capacity_per_shard, fields, d, placement) for d in devices]
        return cls(shards, target, mode)

    def __len__(self) -> int:
        return sum(len(s) for s in self.shards)

    def add(self, batch: Mapping[str, torch.Tensor]) -> None:
        """Insert a batch (see the class docstring for the two modes)."""
        if self.mode == "round_robin":
            self.shards[self._next].add(batch)
            self._next = (self._next + 1) % len(self.shards)
            return
        n = len(next(iter(batch.values())))
        counts = self._balanced_counts(n)
        start = 0
        for shard, count in zip(self.shards, counts, strict=True):
            if count:
                shard.add({k: v[start : start + count] for k, v in batch.items()})
            start += count

    def _balanced_counts(self, n: int) -> list[int]:
        # Water-filling: give each new item to the currently smallest shard (ties → lowest id).
        sizes = [len(s) for s in self.shards]
        counts = [0] * len(self.shards)
        for _ in range(n):
            k = min(range(len(sizes)), key=lambda i: (sizes[i] + counts[i], i))
            counts[k] += 1
        return counts

    def sample(self, batch_size: int) -> ReplayBatch:
        """Exactly ``batch_size`` transitions, uniform over everything stored."""
        sizes = np.array([len(s) for s in self.shards], dtype=np.float64)
        if sizes.sum() == 0:
            raise ReplayError("cannot sample from an empty replay buffer; add() transitions first")
        counts = np.random.multinomial(batch_size, sizes / sizes.sum())
        parts, indices = [], []
        for k, (shard, count) in enumerate(zip(self.shards, counts, strict=True)):
            if count:
                b = shard.sample(int(count))
                parts.append({n: v.to(self.device, non_blocking=True) for n, v in b.data.items()})
                indices.append(
                    torch.stack([torch.full_like(b.indices, k), b.indices], 1).to(self.device)
                )
        data = {n: torch.cat([p[n] for p in parts]) for n in parts[0]}
        return ReplayBatch(data, torch.cat(indices))
