"""Sizes of the fused kernels: the flat parameter layout, the shared-memory budget, the launch
geometry and ``Shape``, the compile-time constants and index tables of one policy shape that
the kernel builders capture.

Every agent's parameters live in one flat float32 buffer that the torch modules view: parameter
tensor ``l`` occupies ``[K * off_l, K * (off_l + size_l))`` with agent ``k``'s block at
``K * off_l + k * size_l``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch

ENVS_PER_BLOCK = 8
CHUNK = 8  # minibatch samples the update kernel holds in shared memory at a time
BLOCKS_PER_SM = 2  # the update splits a small minibatch over blocks until these fill the GPU
ELEMENTS_PER_THREAD = 4  # parameters per thread in the gradient-sum and Adam kernels
SHARED_FLOATS = 12_288  # 48 KiB: static shared memory per block

F32 = np.float32
ZERO = F32(0.0)
ONE = F32(1.0)
HALF = F32(0.5)


def param_layout(obs_dim: int, h1: int, h2: int, num_actions: int) -> list[tuple[int, int]]:
    """(n_in, n_out) of the 12 tensors in kernel order: actor W1 b1 W2 b2 W3 b3, then critic's.
    A bias has n_in = 0."""
    net = [(obs_dim, h1), (0, h1), (h1, h2), (0, h2)]
    return [*net, (h2, num_actions), (0, num_actions), *net, (h2, 1), (0, 1)]


def module_params(policy: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The policy's 12 parameters in kernel order (ActorCritic or BatchedActorCritic)."""
    out = []
    for net in (policy.actor, policy.critic):
        if hasattr(net, "weights"):  # BatchedMLP: (K, in, out) weights, (K, 1, out) biases
            for w, b in zip(net.weights, net.biases, strict=True):
                out += [w, b]
        else:  # nn.Sequential(Linear, act, Linear, act, Linear)
            for layer in net[::2]:
                out += [layer.weight, layer.bias]
    return out


def shared_floats(obs_dim: int, h1: int, h2: int, num_actions: int, envs_per_block: int,
                  chunk: int, state_dim: int | None = None) -> tuple[int, int]:  # fmt: skip
    """Shared-memory floats of a (rollout, update) block: the rollout holds every parameter and
    its envs' states (``state_dim`` floats each, default ``obs_dim``), observations and
    activations, the update the two W2 (rows padded), a chunk's activations and the other
    parameters' gradients."""
    d, a1 = obs_dim, num_actions + 1
    s = d if state_dim is None else state_dim
    params = sum(max(n_in, 1) * n_out for n_in, n_out in param_layout(d, h1, h2, num_actions))
    rollout = params + envs_per_block * (s + 2 * d + 2 * h1 + 2 * h2 + a1) + envs_per_block
    small = params - 2 * h1 * h2  # gradients of all but the W2s
    shared_params = small - 2 * d * h1  # biases and heads (the W1s are read from global)
    update = (2 * h1 * (h2 + 1) + chunk * (d + 2 * h1 + 2 * h2 + a1 + 5) + small
              + shared_params + 5)  # fmt: skip
    return rollout, update


def parts_per_agent(minibatch: int, num_agents: int, device: torch.device) -> int:
    """Thread blocks that share one agent's minibatch step: enough for ``BLOCKS_PER_SM``
    blocks on every SM, at most one per ``CHUNK`` samples (each writes a partial gradient)."""
    sms = 2
    if device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
    wanted = -(-BLOCKS_PER_SM * sms // num_agents)
    return max(1, min(wanted, -(-minibatch // CHUNK)))


def reduce_blocks(params: int, num_agents: int, threads: int, device: torch.device) -> int:
    """Blocks per agent of the gradient-sum and Adam kernels: ``ELEMENTS_PER_THREAD``
    parameters a thread, or one where that would leave SMs without ``BLOCKS_PER_SM`` blocks
    (one agent: its sum runs over hundreds of partial gradients, latency-bound)."""
    sms = 2
    if device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
    blocks = -(-params // (threads * ELEMENTS_PER_THREAD))
    if num_agents * blocks < BLOCKS_PER_SM * sms:
        blocks = -(-params // threads)
    return max(1, blocks)


def _packed(tensors: np.ndarray, sizes: list[int]) -> tuple[np.ndarray, int]:
    """Offsets (indexed by tensor id) of ``tensors`` laid end to end, and their total size."""
    offsets = np.zeros(len(sizes), np.int64)
    total = 0
    for t in tensors:
        offsets[t] = total
        total += sizes[t]
    return offsets, int(total)


class Shape(NamedTuple):
    """The compile-time sizes and index tables of one policy shape, which the kernels capture
    as constants (each builder unpacks the ones its kernels read into its own locals)."""

    D: int
    H1: int
    H2: int
    A: int
    K: int
    E: int
    RT: int
    UT: int
    C: int
    P: int
    NT: int
    BASE: np.ndarray
    SIZE: np.ndarray
    OFF: np.ndarray
    NIN: np.ndarray
    NOUT: np.ndarray
    SMALL: np.ndarray
    SOFF: np.ndarray
    NSMALL: int
    SHP: np.ndarray
    POFF: np.ndarray
    NSP: int
    W2H1: int
    W2H2: int
    A1: int
    W2P: int
    NW2S: int
    NSG: int
    G2: int
    G1: int
    R2: int
    CS2: int
    CS1: int
    TANH: bool
    in_major: bool


def kernel_shape(obs_dim: int, h1: int, h2: int, num_actions: int, activation: str,
                 in_major: bool, num_agents: int, envs_per_block: int, rollout_threads: int,
                 update_threads: int) -> Shape:  # fmt: skip
    """The constants of ``build_kernels``'s shape, computed once."""
    D, H1, H2, A, K, E = obs_dim, h1, h2, num_actions, num_agents, envs_per_block
    RT, UT = rollout_threads, update_threads
    C = CHUNK
    layout = param_layout(D, H1, H2, A)
    sizes = [max(n_in, 1) * n_out for n_in, n_out in layout]
    offs = np.cumsum([0, *sizes])[:-1]
    P = int(sum(sizes))
    NT = len(sizes)
    BASE = np.array([K * o for o in offs], np.int64)  # each tensor's start in the flat buffer
    SIZE = np.array(sizes, np.int64)  # one agent's elements of each tensor
    OFF = np.array(offs, np.int64)  # each tensor's start in one agent's (shared) copy
    NIN = np.array([n for n, _ in layout], np.int64)
    NOUT = np.array([n for _, n in layout], np.int64)
    SMALL = np.array([t for t in range(12) if t not in (2, 8)], np.int64)  # all but the W2s
    SOFF, NSMALL = _packed(SMALL, sizes)  # their gradients, packed in shared memory
    SHP = np.array([t for t in SMALL if t not in (0, 6)], np.int64)  # biases and heads
    POFF, NSP = _packed(SHP, sizes)  # their values, packed in shared memory

    W2H1, W2H2, A1 = 2 * H1, 2 * H2, A + 1
    W2P = H2 + 1  # padded row stride of the shared W2 copies (conflict-free column reads)
    NW2S = 2 * H1 * W2P
    NSG = max(NSMALL, 1)  # shared arrays need compile-time sizes: plain names, no expressions
    G2 = max(UT // W2H2, 1)  # thread groups over the 2*H2 columns (dW2, forward layer 2)
    G1 = max(UT // W2H1, 1)  # ... over the 2*H1 rows (backward d1)
    R2 = -(-H1 // G2)  # W2 rows a thread owns the gradient of
    CS2 = -(-C // G2)  # chunk samples a thread computes in layer 2
    CS1 = -(-C // G1)  # ... in d1
    TANH = activation == "tanh"
    return Shape(D, H1, H2, A, K, E, RT, UT, C, P, NT, BASE, SIZE, OFF, NIN, NOUT, SMALL, SOFF,
                 NSMALL, SHP, POFF, NSP, W2H1, W2H2, A1, W2P, NW2S, NSG, G2, G1, R2, CS2, CS1,
                 TANH, in_major)  # fmt: skip
