"""Buffers: placement-aware storage managed by Numba kernels (CUDA and CPU twins)."""

from orin_rl.buffers.gae import compute_gae
from orin_rl.buffers.memory import PLACEMENTS, PlacementError, allocate, resolve_placement
from orin_rl.buffers.replay import (
    FieldSpec,
    PrioritizedReplayBuffer,
    ReplayBatch,
    ReplayBuffer,
    ReplayError,
    ShardedReplayBuffer,
)
from orin_rl.buffers.rollout import Batch, BufferOverflowError, RolloutBuffer, Transition

__all__ = [
    "PLACEMENTS",
    "Batch",
    "BufferOverflowError",
    "FieldSpec",
    "PlacementError",
    "PrioritizedReplayBuffer",
    "ReplayBatch",
    "ReplayBuffer",
    "ReplayError",
    "RolloutBuffer",
    "ShardedReplayBuffer",
    "Transition",
    "allocate",
    "compute_gae",
    "resolve_placement",
]
