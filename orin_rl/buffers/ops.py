"""Launch the buffer kernels on torch tensors: the CUDA kernel on CUDA tensors (on torch's
current stream, so they order with torch ops without a device-wide sync and can be captured
in a CUDA graph), the ``@njit`` twin on CPU tensors. Both see the tensor's memory zero-copy.
Advantage normalisation is plain torch ops here (per group, optionally over ranks): one
implementation for one agent, many agents and several processes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from orin_rl.buffers import kernels


def numba_view(tensor: torch.Tensor) -> Any:
    """A zero-copy Numba view of ``tensor``: a numpy array on CPU, a device array on CUDA.

    Views are cheap on CPU; on CUDA the conversion costs ~13 µs, so buffers make theirs once.
    """
    if tensor.device.type == "cuda":
        from numba import cuda

        return cuda.as_cuda_array(tensor.detach())
    return tensor.detach().numpy()


_STREAMS: dict[int, Any] = {}


def stream(device: torch.device):
    """Numba's handle on torch's current stream of ``device`` (kernels order with torch ops).

    Inside ``torch.cuda.graph`` capture this is the capture stream, so kernels are captured.
    """
    ptr = torch.cuda.current_stream(device).cuda_stream
    handle = _STREAMS.get(ptr)
    if handle is None:
        from numba import cuda

        handle = _STREAMS[ptr] = cuda.external_stream(ptr)
    return handle


def gae(
    rewards: Any,
    values: Any,
    next_values: Any,
    terminated: Any,
    episode_end: Any,
    gamma: float,
    lam: float,
    advantages: Any,
    device: torch.device,
) -> None:
    """Run GAE on Numba views (from ``numba_view``) of tensors living on ``device``."""
    args = (rewards, values, next_values, terminated, episode_end, float(gamma), float(lam))
    if device.type == "cuda":
        num_envs = rewards.shape[1]
        kernels.gae_cuda[kernels.blocks_for(num_envs), kernels.THREADS_PER_BLOCK, stream(device)](
            *args, advantages
        )
    else:
        kernels.gae_cpu(*args, advantages)


def normalize_(
    x: torch.Tensor,
    eps: float = 1e-8,
    groups: int = 1,
    all_reduce: Callable[[torch.Tensor], None] | None = None,
) -> None:
    """Advantage normalisation, the one implementation: in place, per group,
    x <- (x - mean) / (std + eps) with the unbiased std, without a host round trip.

    Args:
        x: (num_steps, groups * n) float tensor; group k is the k-th block of n columns (the
            k-th agent's envs with --num-agents).
        eps: added to the std.
        groups: number of column blocks with statistics of their own.
        all_reduce: sums a tensor in place over every rank (distributed runs), so the
            statistics are those of all ranks' samples.
    """
    g = x.view(x.shape[0], groups, -1)  # (T, K, n)
    wide = g.double()
    count = torch.full_like(wide[0, :, 0], float(g.shape[0] * g.shape[2]))  # a device fill
    stats = torch.stack((wide.sum((0, 2)), wide.square().sum((0, 2)), count))  # (3, K)
    if all_reduce is not None:
        all_reduce(stats)
    total, total_sq, n = stats.unbind()
    mean = total / n
    std = ((total_sq - n * mean.square()) / (n - 1).clamp_min(1)).clamp_min(0).sqrt()
    g.sub_(mean.view(1, groups, 1).to(x.dtype)).div_(std.view(1, groups, 1).to(x.dtype) + eps)


def gather(src: Any, index: Any, dst: Any, device: torch.device) -> None:
    """dst[j] = src[index[j]] on Numba views of 2-D ``src``/``dst`` and 1-D int64 ``index``."""
    if device.type == "cuda":
        grid, block = kernels.row_launch(*dst.shape)
        kernels.gather_cuda[grid, block, stream(device)](src, index, dst)
    else:
        kernels.gather_cpu(src, index, dst)
