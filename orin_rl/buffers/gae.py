"""``compute_gae``: generalised advantage estimation on numpy arrays or torch tensors."""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

from orin_rl.buffers import ops

ArrayT = TypeVar("ArrayT", np.ndarray, torch.Tensor)


def compute_gae(
    rewards: ArrayT,
    values: ArrayT,
    next_values: ArrayT,
    terminated: ArrayT,
    episode_end: ArrayT,
    gamma: float,
    lam: float,
) -> ArrayT:
    """Advantages A_t by GAE(gamma, lambda), every array shaped (num_steps, num_envs).

    ``delta_t = r_t + gamma * next_values_t * (1 - terminated_t) - values_t`` and
    ``A_t = delta_t + gamma * lam * (1 - episode_end_t) * A_{t+1}`` with A_T = 0.

    Args:
        rewards: float rewards r_t.
        values: V(s_t).
        next_values: V of the true next state; where an episode ended at t, V(final obs).
        terminated: the episode reached a terminal state at t (cuts the bootstrap).
        episode_end: terminated or truncated at t (stops A flowing back across episodes).
        gamma: discount.
        lam: GAE lambda.

    Returns:
        Advantages with the kind (numpy / torch), device and float dtype of ``rewards``.
        CUDA tensors run the ``@cuda.jit`` kernel on torch's current stream, CPU inputs the
        ``@njit`` twin.
    """
    arrays = (rewards, values, next_values, terminated, episode_end)
    names = ("rewards", "values", "next_values", "terminated", "episode_end")
    shape = tuple(rewards.shape)
    if len(shape) != 2:
        raise ValueError(f"rewards: expected (num_steps, num_envs), got shape {shape}")
    for name, array in zip(names, arrays, strict=True):
        if tuple(array.shape) != shape:
            raise ValueError(f"{name}: shape {tuple(array.shape)} differs from rewards {shape}")
    if isinstance(rewards, np.ndarray):
        if not all(isinstance(a, np.ndarray) for a in arrays):
            raise TypeError("compute_gae: pass all numpy arrays or all torch tensors")
        dtype = rewards.dtype if rewards.dtype in (np.float32, np.float64) else np.float32
        advantages = np.empty(shape, dtype=dtype)
        conv = [np.ascontiguousarray(a, dtype=dtype) for a in arrays[:3]]
        flags = [np.ascontiguousarray(a, dtype=np.bool_) for a in arrays[3:]]
        ops.gae(*conv, *flags, gamma, lam, advantages, torch.device("cpu"))
        return advantages
    if not all(isinstance(a, torch.Tensor) for a in arrays):
        raise TypeError("compute_gae: pass all numpy arrays or all torch tensors")
    device = rewards.device
    if any(a.device != device for a in arrays):
        raise ValueError(f"compute_gae: all tensors must be on {device}")
    dtype = rewards.dtype if rewards.dtype in (torch.float32, torch.float64) else torch.float32
    conv = [a.detach().to(dtype).contiguous() for a in arrays[:3]]
    flags = [a.detach().to(torch.bool).contiguous() for a in arrays[3:]]
    advantages = torch.empty(shape, dtype=dtype, device=device)
    views = [ops.numba_view(a) for a in (*conv, *flags, advantages)]
    ops.gae(*views[:5], gamma, lam, views[5], device)
    return advantages
