"""Numba kernels for the buffers: each ``@cuda.jit`` kernel has a CPU ``@njit`` twin.

The CUDA kernels run on a GPU, or through the Numba CUDA simulator when
``NUMBA_ENABLE_CUDASIM=1`` (tests). The twins are what a plain-CPU user runs: the simulator
is a debugging tool, far too slow for training. Launchers that pick one or the other for torch
tensors live in ``ops.py``; nothing here imports torch.

Layout convention: rollout fields are (num_steps, num_envs[, feature]) row-major, so in the
time-major kernels consecutive threads (envs) touch consecutive addresses.
"""

from __future__ import annotations

import math

import numba
from numba import cuda

THREADS_PER_BLOCK = 256
REDUCE_BLOCKS_MAX = 1024


def blocks_for(n: int, threads: int = THREADS_PER_BLOCK) -> int:
    """Blocks needed to give ``n`` work items one thread each (at least one block)."""
    return max(1, (n + threads - 1) // threads)


# --------------------------------------------------------------------------- GAE
# delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
# A_t     = delta_t + gamma * lambda * (1 - episode_end_t) * A_{t+1}
# One thread per environment walks time backwards; the recursion is sequential in t.


@cuda.jit
def gae_cuda(rewards, values, next_values, terminated, episode_end, gamma, lam, advantages):
    """GAE over (num_steps, num_envs) arrays, one thread per env, written into ``advantages``."""
    env = cuda.grid(1)
    num_steps, num_envs = rewards.shape
    if env >= num_envs:
        return
    last = 0.0
    for t in range(num_steps - 1, -1, -1):
        bootstrap = 0.0 if terminated[t, env] else gamma * next_values[t, env]
        delta = rewards[t, env] + bootstrap - values[t, env]
        carry = 0.0 if episode_end[t, env] else gamma * lam * last
        last = delta + carry
        advantages[t, env] = last


@numba.njit(cache=True, nogil=True)
def gae_cpu(rewards, values, next_values, terminated, episode_end, gamma, lam, advantages):
    """CPU twin of ``gae_cuda`` (same arguments, same arithmetic order)."""
    num_steps, num_envs = rewards.shape
    for env in range(num_envs):
        last = 0.0
        for t in range(num_steps - 1, -1, -1):
            bootstrap = 0.0 if terminated[t, env] else gamma * next_values[t, env]
            delta = rewards[t, env] + bootstrap - values[t, env]
            carry = 0.0 if episode_end[t, env] else gamma * lam * last
            last = delta + carry
            advantages[t, env] = last


# ------------------------------------------------------- advantage normalisation
# Two kernels: a grid-stride block reduction of (sum, sum of squares) in float64 with one
# atomic add per block, then an elementwise (x - mean) / (std + eps) that reads the moments
# on the device, so the mean and std never travel to the host.


@cuda.jit
def moments_cuda(x, moments):
    """Accumulate sum(x) into moments[0] and sum(x*x) into moments[1] (float64, zeroed first)."""
    shared_sum = cuda.shared.array(THREADS_PER_BLOCK, numba.float64)
    shared_sq = cuda.shared.array(THREADS_PER_BLOCK, numba.float64)
    tid = cuda.threadIdx.x
    acc = 0.0
    acc_sq = 0.0
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        v = numba.float64(x[i])
        acc += v
        acc_sq += v * v
    shared_sum[tid] = acc
    shared_sq[tid] = acc_sq
    cuda.syncthreads()
    stride = THREADS_PER_BLOCK // 2
    while stride > 0:
        if tid < stride:
            shared_sum[tid] += shared_sum[tid + stride]
            shared_sq[tid] += shared_sq[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        cuda.atomic.add(moments, 0, shared_sum[0])
        cuda.atomic.add(moments, 1, shared_sq[0])


@cuda.jit
def normalize_cuda(x, moments, eps):
    """In place: x = (x - mean) / (std + eps), mean/std (unbiased) from ``moments_cuda``."""
    n = x.size
    mean = moments[0] / n
    var = (moments[1] - n * mean * mean) / max(n - 1, 1)
    inv = 1.0 / (math.sqrt(max(var, 0.0)) + eps)
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):
        x[i] = (x[i] - mean) * inv


@numba.njit(cache=True, nogil=True)
def normalize_cpu(x, eps):
    """CPU twin: in place over a 1-D array; returns (mean, std) as float64."""
    n = x.size
    acc = 0.0
    for i in range(n):
        acc += x[i]
    mean = acc / n
    acc_sq = 0.0
    for i in range(n):
        d = x[i] - mean
        acc_sq += d * d
    std = math.sqrt(acc_sq / max(n - 1, 1))
    inv = 1.0 / (std + eps)
    for i in range(n):
        x[i] = (x[i] - mean) * inv
    return mean, std


# ------------------------------------------------------------- minibatch gather
# dst[j, :] = src[index[j], :] for a permutation slice ``index``; one thread per element of
# dst so that neighbouring threads copy neighbouring features of a row.


@cuda.jit
def gather_cuda(src, index, dst):
    """Row gather of a 2-D ``src`` by ``index`` into 2-D ``dst``."""
    i = cuda.grid(1)
    rows, cols = dst.shape
    if i < rows * cols:
        row = i // cols
        col = i - row * cols
        dst[row, col] = src[index[row], col]


@numba.njit(cache=True, nogil=True)
def gather_cpu(src, index, dst):
    """CPU twin of ``gather_cuda``."""
    rows, cols = dst.shape
    for row in range(rows):
        s = index[row]
        for col in range(cols):
            dst[row, col] = src[s, col]


# ------------------------------------------------------------------ step write
# dst[t, :] = src[:] for a time-major field flattened to (num_steps, num_envs * feature).


@cuda.jit
def write_step_cuda(dst, t, src):
    """Write one step ``src`` (flat, num_envs * feature) into row ``t`` of 2-D ``dst``."""
    i = cuda.grid(1)
    if i < src.size:
        dst[t, i] = src[i]


@numba.njit(cache=True, nogil=True)
def write_step_cpu(dst, t, src):
    """CPU twin of ``write_step_cuda``."""
    for i in range(src.size):
        dst[t, i] = src[i]
