"""Numba kernels for the buffers: each ``@cuda.jit`` kernel has a CPU ``@njit`` twin.

The CUDA kernels run on a GPU, or through the Numba CUDA simulator when
``NUMBA_ENABLE_CUDASIM=1`` (tests). The twins are what a plain-CPU user runs: the simulator
is a debugging tool, far too slow for training. Launchers that pick one or the other for torch
tensors live in ``ops.py``; nothing here imports torch.

Layout convention: rollout fields are (num_steps, num_envs[, feature]) row-major, so in the
time-major kernels consecutive threads (envs) touch consecutive addresses.
"""

from __future__ import annotations

import numba
from numba import cuda

THREADS_PER_BLOCK = 256


def blocks_for(n: int, threads: int = THREADS_PER_BLOCK) -> int:
    """Blocks needed to give ``n`` work items one thread each (at least one block)."""
    return max(1, (n + threads - 1) // threads)


MAX_GRID_Y = 65535


def row_launch(rows: int, cols: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """(grid, block) for the row kernels: threadIdx.x walks a row's columns (coalesced),
    threadIdx.y and the grid's y axis walk rows (grid-stride past 65535 blocks). No integer
    division in the kernel: 64-bit division is emulated on a GPU and dominated these kernels.
    """
    tx = min(32, 1 << max(0, (cols - 1).bit_length()))
    ty = THREADS_PER_BLOCK // tx
    return (1, min(MAX_GRID_Y, blocks_for(rows, ty))), (tx, ty)


# --------------------------------------------------------------------------- GAE
# delta_t = r_t + gamma * V(s_{t+1}) * (1 - terminated_t) - V(s_t)
# A_t     = delta_t + gamma * lambda * (1 - episode_end_t) * A_{t+1}
# One thread per environment walks time backwards; the recursion is sequential in t.


def _gae_env(rewards, values, next_values, terminated, episode_end, gamma, lam, advantages, env):
    """GAE of environment ``env`` (a column of the arrays), backwards in time."""
    last = 0.0
    for t in range(rewards.shape[0] - 1, -1, -1):
        bootstrap = 0.0 if terminated[t, env] else gamma * next_values[t, env]
        delta = rewards[t, env] + bootstrap - values[t, env]
        carry = 0.0 if episode_end[t, env] else gamma * lam * last
        last = delta + carry
        advantages[t, env] = last


_gae_env_cuda = cuda.jit(device=True)(_gae_env)
_gae_env_cpu = numba.njit(cache=True, nogil=True)(_gae_env)


@cuda.jit
def gae_cuda(rewards, values, next_values, terminated, episode_end, gamma, lam, advantages):
    """GAE over (num_steps, num_envs) arrays, one thread per env, written into ``advantages``."""
    env = cuda.grid(1)
    if env < rewards.shape[1]:
        _gae_env_cuda(
            rewards, values, next_values, terminated, episode_end, gamma, lam, advantages, env
        )


@numba.njit(cache=True, nogil=True)
def gae_cpu(rewards, values, next_values, terminated, episode_end, gamma, lam, advantages):
    """CPU twin of ``gae_cuda`` (same arguments, same arithmetic order)."""
    for env in range(rewards.shape[1]):
        _gae_env_cpu(
            rewards, values, next_values, terminated, episode_end, gamma, lam, advantages, env
        )


# ------------------------------------------------------------- minibatch gather
# dst[j, :] = src[index[j], :] for a permutation slice ``index``; one thread per element of
# dst so that neighbouring threads copy neighbouring features of a row.


@cuda.jit
def gather_cuda(src, index, dst):
    """Row gather of a 2-D ``src`` by ``index`` into 2-D ``dst`` (launch with ``row_launch``)."""
    rows, cols = dst.shape
    for row in range(
        cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, rows, cuda.gridDim.y * cuda.blockDim.y
    ):
        s = index[row]
        for col in range(cuda.threadIdx.x, cols, cuda.blockDim.x):
            dst[row, col] = src[s, col]


@numba.njit(cache=True, nogil=True)
def gather_cpu(src, index, dst):
    """CPU twin of ``gather_cuda``."""
    rows, cols = dst.shape
    for row in range(rows):
        s = index[row]
        for col in range(cols):
            dst[row, col] = src[s, col]


# ------------------------------------------------------------- ring-buffer insert
# dst[(pos + row) % capacity, col] = src[row, col]: a batch of transitions written behind the
# write head, wrapping around the end of the ring.


@cuda.jit
def ring_insert_cuda(dst, pos, src):
    """Insert 2-D ``src`` rows into ring ``dst`` from row ``pos`` on (``row_launch``)."""
    rows, cols = src.shape
    capacity = dst.shape[0]
    for row in range(
        cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, rows, cuda.gridDim.y * cuda.blockDim.y
    ):
        r = pos + row
        if r >= capacity:  # at most one wrap: rows <= capacity
            r -= capacity
        for col in range(cuda.threadIdx.x, cols, cuda.blockDim.x):
            dst[r, col] = src[row, col]


@numba.njit(cache=True, nogil=True)
def ring_insert_cpu(dst, pos, src):
    """CPU twin of ``ring_insert_cuda``."""
    rows, cols = src.shape
    capacity = dst.shape[0]
    for row in range(rows):
        r = (pos + row) % capacity
        for col in range(cols):
            dst[r, col] = src[row, col]


# ----------------------------------------------------------------- uniform sample
# index_j = min(floor(u_j * size), size - 1) for u_j ~ U[0, 1), then dst[j] = src[index_j]:
# the draw and the gather in one pass; the indices are written out for the caller.


@cuda.jit
def sample_uniform_cuda(src, u, size, dst, index):
    """Gather rows of ``src`` at uniform indices in [0, size) drawn from ``u`` (``row_launch``)."""
    rows, cols = dst.shape
    for row in range(
        cuda.blockIdx.y * cuda.blockDim.y + cuda.threadIdx.y, rows, cuda.gridDim.y * cuda.blockDim.y
    ):
        k = min(int(u[row] * size), size - 1)
        if cuda.threadIdx.x == 0:
            index[row] = k
        for col in range(cuda.threadIdx.x, cols, cuda.blockDim.x):
            dst[row, col] = src[k, col]


@numba.njit(cache=True, nogil=True)
def sample_uniform_cpu(src, u, size, dst, index):
    """CPU twin of ``sample_uniform_cuda``."""
    rows, cols = dst.shape
    for row in range(rows):
        k = min(int(u[row] * size), size - 1)
        index[row] = k
        for col in range(cols):
            dst[row, col] = src[k, col]


# ------------------------------------------------------------------------ sum-tree
# A complete binary tree over ``capacity`` leaves (a power of two) stored in a float64 array
# of 2 * capacity: node 1 is the root (the total), node n has children 2n and 2n + 1, leaf i
# sits at capacity + i. Entry 0 is unused.
#
# Batched update: write the leaves, then recompute the parents level by level. Every level
# needs the level below finished, so the update runs as ONE block whose threads stride over
# the batch and meet at a block barrier between levels: one launch, no atomics, correct for
# duplicate indices (they rewrite the same parent with the same sum).

SUMTREE_THREADS = 1024


@cuda.jit
def sumtree_update_cuda(tree, capacity, leaves, values, scratch):
    """Set tree leaves ``leaves[j]`` to ``values[j]`` and repair their ancestors.

    Launch with ONE block (SUMTREE_THREADS threads on a GPU); ``scratch`` is an int64 array
    of len(leaves) that holds the current node of each update while climbing.
    """
    tid = cuda.threadIdx.x
    stride = cuda.blockDim.x
    n = leaves.size
    for j in range(tid, n, stride):
        node = capacity + leaves[j]
        tree[node] = values[j]
        scratch[j] = node
    cuda.syncthreads()
    level_size = capacity
    while level_size > 1:
        for j in range(tid, n, stride):
            parent = scratch[j] // 2
            scratch[j] = parent
            tree[parent] = tree[2 * parent] + tree[2 * parent + 1]
        cuda.syncthreads()
        level_size //= 2


@numba.njit(cache=True, nogil=True)
def sumtree_update_cpu(tree, capacity, leaves, values):
    """CPU twin of ``sumtree_update_cuda`` (each leaf climbs in turn; exact sums)."""
    for j in range(leaves.size):
        node = capacity + leaves[j]
        tree[node] = values[j]
        node //= 2
        while node >= 1:
            tree[node] = tree[2 * node] + tree[2 * node + 1]
            node //= 2


def _descend(tree, capacity, target):
    """The leaf (from 0) whose prefix-sum span holds ``target``: down from the root, left
    where ``target`` is below the left child's sum, else right with that sum taken off."""
    node = 1
    while node < capacity:
        left = 2 * node
        if target < tree[left]:
            node = left
        else:
            target -= tree[left]
            node = left + 1
    return node - capacity


_descend_cuda = cuda.jit(device=True)(_descend)
_descend_cpu = numba.njit(cache=True, nogil=True)(_descend)


@cuda.jit
def sumtree_sample_cuda(tree, capacity, size, u, index, priority):
    """Stratified proportional sampling: draw j takes the leaf where the prefix sum reaches
    (j + u_j) * total / batch. Writes leaf ``index`` and its ``priority``."""
    j = cuda.grid(1)
    batch = u.size
    if j < batch:
        total = tree[1]
        target = (j + u[j]) * (total / batch)
        # Rounding can push target to the total; stay strictly inside the last leaf's span.
        target = min(target, total * (1.0 - 1e-12))
        leaf = _descend_cuda(tree, capacity, target)
        leaf = min(leaf, size - 1)
        index[j] = leaf
        priority[j] = tree[capacity + leaf]


@numba.njit(cache=True, nogil=True)
def sumtree_sample_cpu(tree, capacity, size, u, index, priority):
    """CPU twin of ``sumtree_sample_cuda``."""
    batch = u.size
    total = tree[1]
    for j in range(batch):
        target = min((j + u[j]) * (total / batch), total * (1.0 - 1e-12))
        leaf = min(_descend_cpu(tree, capacity, target), size - 1)
        index[j] = leaf
        priority[j] = tree[capacity + leaf]
