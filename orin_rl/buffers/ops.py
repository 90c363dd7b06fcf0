"""Launch the buffer kernels on torch tensors: the CUDA kernel on CUDA tensors (on torch's
current stream, so they order with torch ops without a device-wide sync and can be captured
in a CUDA graph), the ``@njit`` twin on CPU tensors. Both see the tensor's memory zero-copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
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


_MOMENTS: dict[torch.device, tuple[torch.Tensor, Any]] = {}


def _moments_scratch(device: torch.device) -> tuple[torch.Tensor, Any]:
    """A per-device float64 (sum, sum of squares) pair and its Numba view, made once."""
    if device not in _MOMENTS:
        moments = torch.zeros(2, dtype=torch.float64, device=device)
        _MOMENTS[device] = (moments, numba_view(moments))
    return _MOMENTS[device]


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


def normalize_(x: torch.Tensor, eps: float = 1e-8, view: Any = None) -> None:
    """Normalise ``x`` in place to zero mean and unit (unbiased) std without a host round trip.

    Args:
        x: contiguous float tensor, any shape.
        eps: added to the std.
        view: cached ``numba_view(x.view(-1))``; made here if None.
    """
    flat = x.view(-1)
    view = numba_view(flat) if view is None else view
    if x.device.type != "cuda":
        kernels.normalize_cpu(view, eps)
        return
    # Reused scratch is safe: every use is ordered on the same stream.
    moments, moments_view = _moments_scratch(x.device)
    moments.zero_()
    launch_stream = stream(x.device)
    tpb = kernels.THREADS_PER_BLOCK
    blocks = min(kernels.blocks_for(flat.numel()), kernels.REDUCE_BLOCKS_MAX)
    kernels.moments_cuda[blocks, tpb, launch_stream](view, moments_view)
    kernels.normalize_cuda[blocks, tpb, launch_stream](view, moments_view, float(eps))


def gather(src: Any, index: Any, dst: Any, device: torch.device) -> None:
    """dst[j] = src[index[j]] on Numba views of 2-D ``src``/``dst`` and 1-D int64 ``index``."""
    if device.type == "cuda":
        grid, block = kernels.row_launch(*dst.shape)
        kernels.gather_cuda[grid, block, stream(device)](src, index, dst)
    else:
        kernels.gather_cpu(src, index, dst)


def write_step(dst: Any, t: int, src: torch.Tensor) -> None:
    """dst[t] = src for a 2-D host Numba view ``dst`` (num_steps, num_envs * feature).

    CPU only: on CUDA a torch ``copy_`` of a fresh tensor is faster than converting it to a
    Numba view for a kernel (GPU.md: 7 µs against 25 + 13 µs), so device buffers copy with torch.
    """
    kernels.write_step_cpu(dst, t, np.ascontiguousarray(src.detach().cpu().numpy()).reshape(-1))
