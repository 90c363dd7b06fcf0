"""Buffers: placement-aware storage managed by Numba kernels (CUDA and CPU twins)."""

from orin_rl.buffers.gae import compute_gae
from orin_rl.buffers.memory import PLACEMENTS, PlacementError, allocate, resolve_placement
from orin_rl.buffers.rollout import Batch, BufferOverflowError, RolloutBuffer, Transition

__all__ = [
    "PLACEMENTS",
    "Batch",
    "BufferOverflowError",
    "PlacementError",
    "RolloutBuffer",
    "Transition",
    "allocate",
    "compute_gae",
    "resolve_placement",
]
