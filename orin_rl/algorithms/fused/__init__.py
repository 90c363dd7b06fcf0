"""Fused PPO: a whole rollout in one Numba CUDA kernel and, for small minibatches, each
minibatch step of the update in three, instead of the thousands of small torch kernels of the
general path.

Measured on the H200 (docs/benchmarks/profile_h200.md), one 4-env iteration of the general path
is 12,672 GPU ops in the rollout (~99 per env step) and 2,703 in the update (~170 per minibatch
step), 1-2 µs of device time each; its CUDA graph replays them in 28.1 ms. The fused iteration
is 66 GPU ops and takes 2.19 ms (profile_fused_h200.md); docs/fused.md has the measurements.

- ``rollout`` kernel: grid = agents x env chunks, a block runs its envs for all ``num_steps``:
  the actor and critic forward passes (the agent's weights copied into shared memory), the
  categorical draw, the env step, the time limit, auto-reset, the episode statistics, every
  buffer field, the value of the true final observation where an episode was truncated, and
  GAE at the end. The uniform draws come from one ``torch.rand`` per iteration (torch's CUDA
  generator, saved in checkpoints), so a resumed run draws what it would have.
- update: ``prepare`` (grid = agents) normalises the advantages; then per minibatch step
  either the gradient by batched GEMMs (``gemm_update``, ``ppo.fused_grads=gemm``; on ``auto``
  wherever the gradient kernel does not take the shape) and ``apply``, or
  ``grads`` (grid = agents x parts: each block takes a slice of the agent's minibatch, gathers
  it through the permutation, one torch sort of uniform keys per iteration, and runs
  forward, the PPO loss's gradient by hand (clipped surrogate, clipped value loss, entropy)
  and backward into a partial gradient; the two W2 matrices in shared memory, their
  gradients in registers, chunks of ``CHUNK`` samples), ``reduce`` (the parts summed in a
  fixed order, and the squared norm) and ``apply`` (the global grad-norm clip and Adam with
  torch's formula). The learning rate and the Adam step count are device scalars, so the
  whole iteration can be captured in one CUDA graph. A block per 8 samples cannot beat cuBLAS
  on big minibatches, so the update kernels are used only up to ``MAX_FUSED_MINIBATCH``
  samples per agent; above that the fused rollout feeds torch's update.

Scope (``blocker`` names what is missing, and the trainer logs it and runs the general path):
CartPole-v1 on the GPU-native backend (float32), a categorical policy with two hidden layers
(tanh or relu) whose weights fit in a block's 48 KiB of static shared memory, fp32, no
observation/reward normalisation, no ``target_kl``, one process, the rollout buffer on the
device (or managed).

Every agent's parameters live in one flat float32 buffer that the torch modules view: parameter
tensor ``l`` occupies ``[K * off_l, K * (off_l + size_l))`` with agent ``k``'s block at
``K * off_l + k * size_l``. The modules, their state dicts, export and the torch optimizer see
the same memory the kernels write.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any, NamedTuple

import numba
import numpy as np
import torch
from numba import cuda

from orin_rl.algorithms.gemm_update import GemmGrads
from orin_rl.buffers import ops

log = logging.getLogger(__name__)

MAX_FUSED_MINIBATCH = 2048
"""Largest per-agent minibatch the update kernels take (above it, torch's GEMMs)."""
ROLLOUT_THREADS = 128
UPDATE_THREADS = 256  # a power of two (tree reductions), at least 2 x the widest hidden layer
ENVS_PER_BLOCK = 8
CHUNK = 8  # minibatch samples the update kernel holds in shared memory at a time
BLOCKS_PER_SM = 2  # the update splits a small minibatch over blocks until these fill the GPU
ELEMENTS_PER_THREAD = 4  # parameters per thread in the gradient-sum and Adam kernels
GRADS_MAX_REGISTERS: int | None = 128
"""Register cap of the gradient kernel. Uncapped it took 168 registers a thread, room for one
256-thread block per SM; at 128 two fit (H200, 512 agents, an exploratory sweep this change's
note reports: 25.4 -> 19.9 ms an iteration). Numba's cache key leaves compile options out:
change it here (the source, whose change drops the cache), not at run time."""
SHARED_FLOATS = 12_288  # 48 KiB: static shared memory per block
UNIFORMS_PER_STEP = 5  # one for the action, four for a reset state
KERNEL_CACHE = os.environ.get("ORIN_RL_KERNEL_CACHE", "1") != "0"
"""Keep the compiled kernels on disk (Numba's cache: ``__pycache__`` beside this file, or
``NUMBA_CACHE_DIR``), so only a machine's first run of a policy shape pays the compile.
``ORIN_RL_KERNEL_CACHE=0`` compiles in every process."""

F32 = np.float32
ZERO = F32(0.0)
ONE = F32(1.0)
HALF = F32(0.5)
# gymnasium CartPole-v1 (orin_rl.envs.gpu.classic.CartPole)
CP_GRAVITY, CP_MASSPOLE, CP_TOTAL_MASS = F32(9.8), F32(0.1), F32(1.1)
CP_LENGTH, CP_POLEMASS_LENGTH, CP_FORCE, CP_TAU = F32(0.5), F32(0.05), F32(10.0), F32(0.02)
CP_FOUR_THIRDS = F32(4.0 / 3.0)
CP_THETA_LIMIT, CP_X_LIMIT = F32(12 * 2 * math.pi / 360), F32(2.4)
CP_RESET_LOW, CP_RESET_SPAN = F32(-0.05), F32(0.1)


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


def blocker(cfg: Any, env: Any, policy: torch.nn.Module, device: torch.device,
            distributed: bool) -> str | None:  # fmt: skip
    """Why the fused kernels cannot run this configuration (None: they can)."""
    from orin_rl.buffers import memory

    ppo = cfg.ppo
    spec = policy.spec
    checks = [
        (ppo.fused == "off", "ppo.fused is off"),
        (device.type != "cuda" and not (ppo.fused == "on" and memory.cuda_simulated()),
         "the learner is not on CUDA"),
        (env.fused_task != "CartPole-v1", f"the fused kernels cover CartPole-v1 on the gpu "
                                          f"backend, not {cfg.env.env_id} ({cfg.env.backend})"),
        (env.dtype != torch.float32, "a float64 env"),
        (device.type == "cuda" and cfg.buffer.placement in ("host", "pinned"),
         f"buffer placement {cfg.buffer.placement} keeps the rollout in host memory"),
        (spec.action_kind != "discrete", "continuous actions"),
        (len(spec.hidden_sizes) != 2, "the fused kernels take two hidden layers"),
        (spec.obs_groups is not None or spec.critic_hidden_sizes is not None,
         "an asymmetric actor-critic"),
        (ppo.desired_kl is not None, "the adaptive learning rate (ppo.desired_kl)"),
        (ppo.rsl_rl, "ppo.rsl_rl (rsl_rl's init, std and clipping)"),
        (ppo.normalize_advantage and ppo.normalize_advantage_per_minibatch,
         "ppo.normalize_advantage_per_minibatch (the fused update normalises the rollout's)"),
        (ppo.timeout_bootstrap != "final_obs", "ppo.timeout_bootstrap=value"),
        (spec.activation not in ("tanh", "relu"), f"activation {spec.activation}"),
        (ppo.normalize_obs or ppo.normalize_reward, "observation/reward normalisation"),
        (cfg.train.precision != "fp32", f"precision {cfg.train.precision}"),
        (ppo.target_kl is not None, "target_kl needs a host read per epoch"),
        (distributed, "a distributed run"),
        (cfg.train.compile, "torch.compile was asked for"),
    ]  # fmt: skip
    for failed, reason in checks:
        if failed:
            return reason
    dims = _dims(spec)
    if shared_floats(*dims, 1, CHUNK)[0] > SHARED_FLOATS:
        return f"a policy of {spec.hidden_sizes} does not fit in a block's shared memory"
    return None


def _dims(spec: Any) -> tuple[int, int, int, int]:
    h1, h2 = spec.hidden_sizes
    return int(np.prod(spec.obs_shape)), int(h1), int(h2), int(spec.action_dim)


def update_blocker(cfg: Any, spec: Any) -> str | None:
    """Why the update stays torch's even when the rollout is fused (None: fused too, its
    gradients by ``grads_path``)."""
    if cfg.ppo.compile_update:
        return "ppo.compile_update asks for torch's update, compiled"
    if cfg.ppo.fused_grads == "kernel":
        return kernel_blocker(cfg, spec)
    return None


def grads_path(cfg: Any, spec: Any) -> str:
    """Who computes the fused update's gradients (``ppo.fused_grads``): ``kernel`` where asked,
    or on ``auto`` where the gradient kernel takes the shape; else ``gemm`` (gemm_update)."""
    choice = cfg.ppo.fused_grads
    if choice == "auto":
        return "kernel" if kernel_blocker(cfg, spec) is None else "gemm"
    return choice


def kernel_blocker(cfg: Any, spec: Any) -> str | None:
    """Why the gradient kernel does not take this update (None: it does)."""
    minibatch = cfg.ppo.num_steps * cfg.env.num_envs // cfg.ppo.num_minibatches
    if minibatch > MAX_FUSED_MINIBATCH:
        return (
            f"a minibatch of {minibatch} samples per agent (> {MAX_FUSED_MINIBATCH}): torch's "
            "matmuls beat the update kernels there"
        )
    dims = _dims(spec)
    if 2 * max(dims[1], dims[2]) > UPDATE_THREADS:
        return f"hidden layers wider than {UPDATE_THREADS // 2} units"
    if shared_floats(*dims, 1, CHUNK)[1] > SHARED_FLOATS:
        return f"a policy of {spec.hidden_sizes} does not fit in the update's shared memory"
    return None


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


# ---------------------------------------------------------------------------- kernels
def _packed(tensors: np.ndarray, sizes: list[int]) -> tuple[np.ndarray, int]:
    """Offsets (indexed by tensor id) of ``tensors`` laid end to end, and their total size."""
    offsets = np.zeros(len(sizes), np.int64)
    total = 0
    for t in tensors:
        offsets[t] = total
        total += sizes[t]
    return offsets, int(total)


class FusedKernels(NamedTuple):
    """The compiled kernels of one policy shape (see the module docstring)."""

    rollout: Any
    prepare: Any
    grads: Any
    reduce: Any
    apply: Any


_KERNELS: dict[tuple, FusedKernels] = {}


def shared_floats(obs_dim: int, h1: int, h2: int, num_actions: int, envs_per_block: int,
                  chunk: int) -> tuple[int, int]:  # fmt: skip
    """Shared-memory floats of a (rollout, update) block: the rollout holds every parameter and
    its envs' activations, the update the two W2 (rows padded), a chunk's activations and the
    other parameters' gradients."""
    d, a1 = obs_dim, num_actions + 1
    params = sum(max(n_in, 1) * n_out for n_in, n_out in param_layout(d, h1, h2, num_actions))
    rollout = params + envs_per_block * (2 * d + 2 * h1 + 2 * h2 + a1) + envs_per_block
    small = params - 2 * h1 * h2  # gradients of all but the W2s
    shared_params = small - 2 * d * h1  # biases and heads (the W1s are read from global)
    update = (2 * h1 * (h2 + 1) + chunk * (d + 2 * h1 + 2 * h2 + a1 + 5) + small
              + shared_params + 5)  # fmt: skip
    return rollout, update


def build_kernels(obs_dim: int, h1: int, h2: int, num_actions: int, activation: str,
                  in_major: bool, num_agents: int, envs_per_block: int, rollout_threads: int,
                  update_threads: int, cache: bool | None = None) -> FusedKernels:  # fmt: skip
    """Compile (once per shape) the rollout and update kernels; sizes are compile-time.
    ``cache``: keep them in Numba's disk cache (default ``KERNEL_CACHE``)."""
    use_cache = KERNEL_CACHE if cache is None else cache
    key = (obs_dim, h1, h2, num_actions, activation, in_major, num_agents, envs_per_block,
           rollout_threads, update_threads, GRADS_MAX_REGISTERS, use_cache)  # fmt: skip
    if key in _KERNELS:
        return _KERNELS[key]
    s = _shape(obs_dim, h1, h2, num_actions, activation, in_major, num_agents, envs_per_block,
               rollout_threads, update_threads)  # fmt: skip
    dev = _device_functions(s)
    reduce, apply = _reduce_and_apply(s, dev, use_cache)
    kernels = FusedKernels(_rollout_kernel(s, dev, use_cache), _prepare_kernel(s, dev, use_cache),
                           _grads_kernel(s, dev, use_cache), reduce, apply)  # fmt: skip
    _KERNELS[key] = kernels
    return kernels


class _Shape(NamedTuple):
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


def _shape(obs_dim: int, h1: int, h2: int, num_actions: int, activation: str, in_major: bool,
           num_agents: int, envs_per_block: int, rollout_threads: int,
           update_threads: int) -> _Shape:  # fmt: skip
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
    return _Shape(D, H1, H2, A, K, E, RT, UT, C, P, NT, BASE, SIZE, OFF, NIN, NOUT, SMALL, SOFF,
                  NSMALL, SHP, POFF, NSP, W2H1, W2H2, A1, W2P, NW2S, NSG, G2, G1, R2, CS2, CS1,
                  TANH, in_major)  # fmt: skip


class _Device(NamedTuple):
    """The device functions the kernel builders share."""

    fmax: Any
    fmin: Any
    act: Any
    dact: Any
    logsumexp: Any
    local: Any
    gidx: Any
    block_sum: Any


def _device_functions(s: _Shape) -> _Device:
    """The shared device functions of shape ``s``."""
    A, UT, BASE, SIZE, NIN, NOUT = s.A, s.UT, s.BASE, s.SIZE, s.NIN, s.NOUT
    TANH, in_major = s.TANH, s.in_major

    @cuda.jit(device=True, inline=True)
    def fmax(a, b):
        return a if a > b else b

    @cuda.jit(device=True, inline=True)
    def fmin(a, b):
        return a if a < b else b

    @cuda.jit(device=True, inline=True)
    def act(x):
        if TANH:
            return math.tanh(x)
        return x if x > ZERO else ZERO

    @cuda.jit(device=True, inline=True)
    def dact(y):  # derivative from the activation's output
        if TANH:
            return ONE - y * y
        return ONE if y > ZERO else ZERO

    @cuda.jit(device=True, inline=True)
    def logsumexp(outs, row):
        """log sum exp of the A logits in ``outs[row, :A]`` (max-shifted)."""
        mx = outs[row, 0]
        for j in range(1, A):
            mx = fmax(mx, outs[row, j])
        z = ZERO
        for j in range(A):
            z += math.exp(outs[row, j] - mx)
        return mx + math.log(z)

    @cuda.jit(device=True, inline=True)
    def local(t, i, j):
        """Index of (input i, output j) of tensor t inside one agent's block (a bias: j)."""
        if NIN[t] == 0:
            return j
        if in_major:
            return i * NOUT[t] + j
        return j * NIN[t] + i

    @cuda.jit(device=True, inline=True)
    def gidx(t, k, i, j):
        """Flat index of agent k's element (i, j) of tensor t."""
        return BASE[t] + k * SIZE[t] + local(t, i, j)

    @cuda.jit(device=True)
    def block_sum(red, value, tid):
        """Sum of the float32 ``value`` over the block (a tree in a fixed order: reproducible),
        returned to every thread."""
        red[tid] = value
        cuda.syncthreads()
        step = UT // 2
        while step > 0:
            if tid < step:
                red[tid] += red[tid + step]
            cuda.syncthreads()
            step //= 2
        total = red[0]
        cuda.syncthreads()
        return total

    return _Device(fmax, fmin, act, dact, logsumexp, local, gidx, block_sum)


def _rollout_kernel(s: _Shape, dev: _Device, use_cache: bool) -> Any:
    """The rollout kernel: a block steps its envs for the whole rollout (module docstring)."""
    D, H1, H2, A, E, RT, P = s.D, s.H1, s.H2, s.A, s.E, s.RT, s.P
    SIZE, OFF, NOUT, W2H1, W2H2, A1 = s.SIZE, s.OFF, s.NOUT, s.W2H1, s.W2H2, s.A1
    act, logsumexp, gidx = dev.act, dev.logsumexp, dev.gidx
    f32 = numba.float32

    @cuda.jit(device=True, inline=True)
    def sw(t, i, j):
        """Index of (i, j) of tensor t in the rollout's shared copy (always input-major)."""
        return OFF[t] + i * NOUT[t] + j

    @cuda.jit(device=True)
    def forward_envs(ws, xs, n, h1s, h2s, outs, tid):
        """Actor logits and critic value of the n observations in xs, all threads; weights in
        shared memory."""
        for idx in range(tid, n * W2H1, RT):
            e = idx // W2H1
            u = idx % W2H1
            net = u // H1
            q = u % H1
            acc = ws[OFF[6 * net + 1] + q]
            for i in range(D):
                acc += xs[e, i] * ws[sw(6 * net, i, q)]
            h1s[e, u] = act(acc)
        cuda.syncthreads()
        hacc = cuda.local.array(E, f32)
        for u in range(tid, W2H2, RT):  # one unit per thread, every env: each weight read once
            net = u // H2
            q = u % H2
            w0 = OFF[6 * net + 2] + q
            bias = ws[OFF[6 * net + 3] + q]
            for e in range(E):
                hacc[e] = bias
            for i in range(H1):
                w = ws[w0 + i * H2]
                for e in range(E):
                    if e < n:
                        hacc[e] += h1s[e, net * H1 + i] * w
            for e in range(E):
                if e < n:
                    h2s[e, u] = act(hacc[e])
        cuda.syncthreads()
        for idx in range(tid, n * A1, RT):
            e = idx // A1
            o = idx % A1
            if o < A:
                acc = ws[OFF[5] + o]
                for i in range(H2):
                    acc += h2s[e, i] * ws[OFF[4] + i * A + o]
            else:
                acc = ws[OFF[11]]
                for i in range(H2):
                    acc += h2s[e, H2 + i] * ws[OFF[10] + i]
            outs[e, o] = acc
        cuda.syncthreads()

    @cuda.jit(cache=use_cache)
    def rollout(params, state, elapsed, ep_ret, ep_len, last_ret, last_len, finished, rand,
                obs_b, actions_b, logp_b, values_b, rewards_b, term_b, end_b, boot_b, next_b,
                adv_b, ret_b, gamma, lam, max_steps, n_envs, chunks):  # fmt: skip
        tid = cuda.threadIdx.x
        k = cuda.blockIdx.x // chunks
        e0 = (cuda.blockIdx.x % chunks) * E
        n = n_envs - e0
        if n > E:
            n = E
        g0 = k * n_envs + e0
        ws = cuda.shared.array(P, f32)
        xs = cuda.shared.array((E, D), f32)
        fin = cuda.shared.array((E, D), f32)
        h1s = cuda.shared.array((E, W2H1), f32)
        h2s = cuda.shared.array((E, W2H2), f32)
        outs = cuda.shared.array((E, A1), f32)
        need = cuda.shared.array(E, numba.int32)
        flag = cuda.shared.array(1, numba.int32)
        for tt in range(12):  # this agent's weights, input-major, into shared memory
            n_out = NOUT[tt]
            for idx in range(tid, SIZE[tt], RT):
                ws[OFF[tt] + idx] = params[gidx(tt, k, idx // n_out, idx % n_out)]
        # Each env's state lives in shared memory (CartPole's observation is its state) and its
        # counters in its thread's registers for the whole rollout; written back at the end.
        steps = 0
        ret = 0.0
        length = 0
        if tid < n:
            for i in range(D):
                xs[tid, i] = state[g0 + tid, i]
            steps = elapsed[g0 + tid]
            ret = ep_ret[g0 + tid]
            length = ep_len[g0 + tid]
        cuda.syncthreads()
        num_steps = obs_b.shape[0]
        for t in range(num_steps):
            for idx in range(tid, n * D, RT):
                obs_b[t, g0 + idx // D, idx % D] = xs[idx // D, idx % D]
            if tid == 0:
                flag[0] = 0
            cuda.syncthreads()
            forward_envs(ws, xs, n, h1s, h2s, outs, tid)
            if tid < n:
                e = tid
                g = g0 + e
                lse = logsumexp(outs, e)
                u = rand[t, g, 0]
                a = A - 1
                cum = ZERO
                for j in range(A):
                    cum += math.exp(outs[e, j] - lse)
                    if u < cum:
                        a = j
                        break
                actions_b[t, g] = a
                logp_b[t, g] = outs[e, a] - lse
                values_b[t, g] = outs[e, A]
                # CartPole-v1, explicit Euler (gymnasium's order of operations)
                x, x_dot, theta, theta_dot = xs[e, 0], xs[e, 1], xs[e, 2], xs[e, 3]
                force = CP_FORCE if a == 1 else -CP_FORCE
                costheta = math.cos(theta)
                sintheta = math.sin(theta)
                temp = (force + CP_POLEMASS_LENGTH * theta_dot * theta_dot * sintheta) / (
                    CP_TOTAL_MASS
                )
                thetaacc = (CP_GRAVITY * sintheta - costheta * temp) / (
                    CP_LENGTH * (CP_FOUR_THIRDS - CP_MASSPOLE * costheta * costheta / CP_TOTAL_MASS)
                )
                xacc = temp - CP_POLEMASS_LENGTH * thetaacc * costheta / CP_TOTAL_MASS
                x = x + CP_TAU * x_dot
                x_dot = x_dot + CP_TAU * xacc
                theta = theta + CP_TAU * theta_dot
                theta_dot = theta_dot + CP_TAU * thetaacc
                terminated = abs(x) > CP_X_LIMIT or abs(theta) > CP_THETA_LIMIT
                steps += 1
                truncated = steps >= max_steps
                done = terminated or truncated
                rewards_b[t, g] = ONE
                term_b[t, g] = terminated
                end_b[t, g] = done
                boot_b[t, g] = ZERO
                ret += 1.0
                length += 1
                if done:
                    last_ret[g] = ret
                    last_len[g] = length
                    finished[g] = True
                    ret = 0.0
                    length = 0
                need[e] = 0
                if truncated and not terminated:  # bootstrap from V(true final observation)
                    fin[e, 0], fin[e, 1], fin[e, 2], fin[e, 3] = x, x_dot, theta, theta_dot
                    need[e] = 1
                    flag[0] = 1
                if done:
                    for i in range(4):
                        xs[e, i] = CP_RESET_LOW + CP_RESET_SPAN * rand[t, g, 1 + i]
                    steps = 0
                else:
                    xs[e, 0], xs[e, 1], xs[e, 2], xs[e, 3] = x, x_dot, theta, theta_dot
            cuda.syncthreads()
            if flag[0] != 0:  # the same shared value for every thread: a uniform branch
                forward_envs(ws, fin, n, h1s, h2s, outs, tid)
                if tid < n and need[tid] != 0:
                    boot_b[t, g0 + tid] = outs[tid, A]
                cuda.syncthreads()
        # V(observation after the last step), then GAE per env (ops.gae's arithmetic)
        forward_envs(ws, xs, n, h1s, h2s, outs, tid)
        if tid < n:
            g = g0 + tid
            for i in range(D):
                state[g, i] = xs[tid, i]
            elapsed[g] = steps
            ep_ret[g] = ret
            ep_len[g] = length
            last = ZERO
            for t in range(num_steps - 1, -1, -1):
                nv = outs[tid, A] if t == num_steps - 1 else values_b[t + 1, g]
                if end_b[t, g]:
                    nv = boot_b[t, g]
                next_b[t, g] = nv
                bootstrap = ZERO if term_b[t, g] else gamma * nv
                delta = rewards_b[t, g] + bootstrap - values_b[t, g]
                carry = ZERO if end_b[t, g] else gamma * lam * last
                last = delta + carry
                adv_b[t, g] = last
                ret_b[t, g] = last + values_b[t, g]

    return rollout


def _prepare_kernel(s: _Shape, dev: _Device, use_cache: bool) -> Any:
    """The update's first kernel: the advantages normalised per agent."""
    UT, block_sum = s.UT, dev.block_sum
    f32 = numba.float32

    @cuda.jit(cache=use_cache)
    def prepare(adv_b, stats, n_envs, norm_adv):
        """Block k: zero agent k's loss sums and normalise its advantages in place
        (ops.normalize_: unbiased std, eps 1e-8; two passes, the mean and then the spread)."""
        tid = cuda.threadIdx.x
        k = cuda.blockIdx.x
        red = cuda.shared.array(UT, f32)
        if tid < 5:
            stats[k, tid] = ZERO
        if norm_adv:
            batch = adv_b.shape[0] * n_envs
            part = ZERO
            for idx in range(tid, batch, UT):
                part += adv_b[idx // n_envs, k * n_envs + idx % n_envs]
            mean32 = block_sum(red, part, tid) / f32(batch)
            part = ZERO
            for idx in range(tid, batch, UT):
                dev = adv_b[idx // n_envs, k * n_envs + idx % n_envs] - mean32
                part += dev * dev
            var = block_sum(red, part, tid) / f32(batch - 1 if batch > 1 else 1)
            std = math.sqrt(var)
            for idx in range(tid, batch, UT):
                t = idx // n_envs
                g = k * n_envs + idx % n_envs
                adv_b[t, g] = (adv_b[t, g] - mean32) / (std + F32(1e-8))

    return prepare


def _forward_and_loss(s: _Shape, dev: _Device) -> tuple[Any, Any]:
    """The gradient kernel's forward stages: a chunk through both networks, then the loss's
    gradient at the heads."""
    D, H1, H2, A, UT, C, POFF = s.D, s.H1, s.H2, s.A, s.UT, s.C, s.POFF
    W2H1, A1, W2P, G2, CS2 = s.W2H1, s.A1, s.W2P, s.G2, s.CS2
    fmax, fmin, act, logsumexp, local, gidx = (dev.fmax, dev.fmin, dev.act, dev.logsumexp,
                                               dev.local, dev.gidx)  # fmt: skip
    f32 = numba.float32

    @cuda.jit(device=True, inline=True)
    def chunk_forward(params, perm, obs_b, n_envs, k, epoch, first, c0, nc, xs, a1s, a2s, outs,
                      w2s, sp, tid, owner, grp, col, net2, q2):  # fmt: skip
        """The chunk's samples gathered into ``xs`` and run through both networks: layer
        activations into ``a1s``/``a2s``, logits and value into ``outs``."""
        hsum = cuda.local.array(CS2, f32)
        # A short last chunk is padded with zero rows whose loss gradient is zero: every
        # loop below runs C samples, a compile-time count.
        for idx in range(tid, C * D, UT):
            c = idx // D
            x = ZERO
            if c < nc:
                smp = perm[epoch, k, first + c0 + c]
                x = obs_b[smp // n_envs, k * n_envs + smp % n_envs, idx % D]
            xs[c, idx % D] = x
        cuda.syncthreads()
        for idx in range(tid, C * W2H1, UT):  # layer 1 (D inputs, from global)
            c = idx // W2H1
            u = idx % W2H1
            net = u // H1
            q = u % H1
            h = sp[POFF[6 * net + 1] + q]
            for i in range(D):
                h += xs[c, i] * params[gidx(6 * net, k, i, q)]
            a1s[c, u] = act(h)
        cuda.syncthreads()
        if owner:  # layer 2: column col, samples grp, grp + G2, ...; W2 read once
            for s in range(CS2):
                hsum[s] = ZERO
            for i in range(H1):
                w = w2s[(net2 * H1 + i) * W2P + q2]
                for s in range(CS2):
                    c = grp + s * G2
                    if c < C:
                        hsum[s] += a1s[c, net2 * H1 + i] * w
            bias = sp[POFF[6 * net2 + 3] + q2]
            for s in range(CS2):
                c = grp + s * G2
                if c < C:
                    a2s[c, col] = act(hsum[s] + bias)
        cuda.syncthreads()
        for idx in range(tid, C * A1, UT):  # heads
            c = idx // A1
            o = idx % A1
            if o < A:
                h = sp[POFF[5] + o]
                for i in range(H2):
                    h += a2s[c, i] * sp[POFF[4] + local(4, i, o)]
            else:
                h = sp[POFF[11]]
                for i in range(H2):
                    h += a2s[c, H2 + i] * sp[POFF[10] + i]
            outs[c, o] = h
        cuda.syncthreads()

    @cuda.jit(device=True, inline=True)
    def loss_at_heads(outs, terms, perm, actions_b, logp_b, values_b, adv_b, ret_b, clip,
                      ent_coef, vf_coef, clip_vloss, inv_mb, n_envs, k, epoch, first, c0, nc,
                      tid):  # fmt: skip
        """The loss's gradient at the heads into ``outs`` and its terms into ``terms``, one
        sample per thread."""
        # The loss's gradient at the heads, one sample per thread (PPO's _minibatch_step
        # differentiated by hand, torch.max's and clamp's subgradients included).
        for c in range(nc + tid, C, UT):  # the padding: no gradient, no loss terms
            for o in range(A1):
                outs[c, o] = ZERO
            for m in range(5):
                terms[c, m] = ZERO
        for c in range(tid, nc, UT):
            smp = perm[epoch, k, first + c0 + c]
            t = smp // n_envs
            g = k * n_envs + smp % n_envs
            a = actions_b[t, g]
            lse = logsumexp(outs, c)
            entropy = ZERO
            for o in range(A):
                lp = outs[c, o] - lse
                entropy -= math.exp(lp) * lp
            logratio = outs[c, a] - lse - logp_b[t, g]
            ratio = math.exp(logratio)
            adv = adv_b[t, g]
            inside = ratio >= ONE - clip and ratio <= ONE + clip
            unclipped = -adv * ratio
            clipped = -adv * fmin(fmax(ratio, ONE - clip), ONE + clip)
            if unclipped > clipped:
                d_ratio = -adv
                pg = unclipped
            elif unclipped == clipped:
                d_ratio = -adv * HALF + (-adv * HALF if inside else ZERO)
                pg = unclipped
            else:
                d_ratio = -adv if inside else ZERO
                pg = clipped
            g_logp = d_ratio * ratio * inv_mb
            value = outs[c, A]
            ret = ret_b[t, g]
            if clip_vloss:
                old = values_b[t, g]
                dv = value - old
                inside_v = dv >= -clip and dv <= clip
                vc = old + fmin(fmax(dv, -clip), clip)
                sq_u = (value - ret) * (value - ret)
                sq_c = (vc - ret) * (vc - ret)
                if sq_u > sq_c:
                    g_v = value - ret
                    vloss = sq_u
                elif sq_u == sq_c:
                    half_c = HALF * (vc - ret) if inside_v else ZERO
                    g_v = HALF * (value - ret) + half_c
                    vloss = sq_u
                else:
                    g_v = (vc - ret) if inside_v else ZERO
                    vloss = sq_c
            else:
                g_v = value - ret
                vloss = (value - ret) * (value - ret)
            for o in range(A):
                lp = outs[c, o] - lse
                p = math.exp(lp)
                onehot = ONE if o == a else ZERO
                outs[c, o] = g_logp * (onehot - p) + ent_coef * inv_mb * p * (lp + entropy)
            outs[c, A] = vf_coef * g_v * inv_mb
            terms[c, 0] = pg
            terms[c, 1] = HALF * vloss
            terms[c, 2] = entropy
            terms[c, 3] = (ratio - ONE) - logratio
            terms[c, 4] = ONE if abs(ratio - ONE) > clip else ZERO

    return chunk_forward, loss_at_heads


def _backward(s: _Shape, dev: _Device) -> tuple[Any, Any]:
    """The gradient kernel's backward stages: the heads and layer 2, then layer 1."""
    D, H1, H2, A, UT, C, POFF, SOFF = s.D, s.H1, s.H2, s.A, s.UT, s.C, s.POFF, s.SOFF
    W2H1, W2H2, A1, W2P, G1, CS1 = s.W2H1, s.W2H2, s.A1, s.W2P, s.G1, s.CS1
    dact, local = dev.dact, dev.local
    f32 = numba.float32

    @cuda.jit(device=True, inline=True)
    def heads_backward(sp, sg, a2s, outs, tid):
        """The heads' gradients into ``sg``, then d2 in place of the layer-2 activations."""
        # heads' gradients (need the layer-2 activations, before d2 replaces them)
        for idx in range(tid, H2 * A1 + A1, UT):
            if idx < H2 * A:
                i = idx // A
                o = idx % A
                h = ZERO
                for c in range(C):
                    h += a2s[c, i] * outs[c, o]
                sg[SOFF[4] + local(4, i, o)] += h
            elif idx < H2 * A1:
                i = idx - H2 * A
                h = ZERO
                for c in range(C):
                    h += a2s[c, H2 + i] * outs[c, A]
                sg[SOFF[10] + i] += h
            else:
                o = idx - H2 * A1
                h = ZERO
                for c in range(C):
                    h += outs[c, o]
                sg[(SOFF[5] + o) if o < A else SOFF[11]] += h
        cuda.syncthreads()
        for idx in range(tid, C * W2H2, UT):  # d2, in place of the activations
            c = idx // W2H2
            u = idx % W2H2
            q = u % H2
            if u < H2:
                h = ZERO
                for o in range(A):
                    h += sp[POFF[4] + local(4, q, o)] * outs[c, o]
            else:
                h = sp[POFF[10] + q] * outs[c, A]
            a2s[c, u] = h * dact(a2s[c, u])
        cuda.syncthreads()

    @cuda.jit(device=True, inline=True)
    def layer1_backward(w2s, xs, a1s, a2s, sg, tid):
        """d1 in place of the layer-1 activations, then dW1 and db1 into ``sg``."""
        hsum1 = cuda.local.array(CS1, f32)
        unit = tid % W2H1  # d1, in place of the layer-1 activations
        g1 = tid // W2H1
        if g1 < G1:
            net = unit // H1
            i = unit % H1
            row = (net * H1 + i) * W2P
            for s in range(CS1):
                hsum1[s] = ZERO
            for q in range(H2):  # W2 read once for the thread's samples
                w = w2s[row + q]
                for s in range(CS1):
                    c = g1 + s * G1
                    if c < C:
                        hsum1[s] += w * a2s[c, net * H2 + q]
            for s in range(CS1):
                c = g1 + s * G1
                if c < C:
                    a1s[c, unit] = hsum1[s] * dact(a1s[c, unit])
        cuda.syncthreads()
        for idx in range(tid, 2 * (D * H1 + H1), UT):  # dW1 and db1
            net = idx // (D * H1 + H1)
            e = idx % (D * H1 + H1)
            h = ZERO
            if e < D * H1:
                i = e // H1
                q = e % H1
                for c in range(C):
                    h += xs[c, i] * a1s[c, net * H1 + q]
                sg[SOFF[6 * net] + local(6 * net, i, q)] += h
            else:
                q = e - D * H1
                for c in range(C):
                    h += a1s[c, net * H1 + q]
                sg[SOFF[6 * net + 1] + q] += h
        cuda.syncthreads()

    return heads_backward, layer1_backward


def _grads_kernel(s: _Shape, dev: _Device, use_cache: bool) -> Any:
    """The update's gradient kernel: per chunk of its slice of the minibatch, the forward
    stages (``_forward_and_loss``) and the backward ones (``_backward``), inlined into it."""
    D, H1, H2, UT, C, W2H1, W2H2, A1, W2P = s.D, s.H1, s.H2, s.UT, s.C, s.W2H1, s.W2H2, s.A1, s.W2P
    BASE, SIZE, SMALL, SOFF, NSMALL, SHP, POFF, NSP = (s.BASE, s.SIZE, s.SMALL, s.SOFF,
                                                        s.NSMALL, s.SHP, s.POFF, s.NSP)  # fmt: skip
    NW2S, NSG, G2, R2, gidx = s.NW2S, s.NSG, s.G2, s.R2, dev.gidx
    chunk_forward, loss_at_heads = _forward_and_loss(s, dev)
    heads_backward, layer1_backward = _backward(s, dev)
    limits = {}  # the simulator takes no register limit
    if GRADS_MAX_REGISTERS and not numba.config.ENABLE_CUDASIM:
        limits["max_registers"] = GRADS_MAX_REGISTERS
    f32 = numba.float32

    @cuda.jit(cache=use_cache, **limits)
    def grads(params, partial, pterms, obs_b, actions_b, logp_b, values_b, adv_b, ret_b, perm,
              clip, ent_coef, vf_coef, clip_vloss, n_envs, num_mb, j):  # fmt: skip
        """Minibatch step ``j`` (epoch j // num_mb, minibatch j % num_mb), split over
        ``partial.shape[0]`` blocks per agent: block (k, part) writes the loss gradient of its
        slice of agent k's minibatch into ``partial[part]`` (the flat layout) and the sums of
        its loss terms into ``pterms[part, k]``."""
        tid = cuda.threadIdx.x
        nparts = partial.shape[0]
        k = cuda.blockIdx.x // nparts
        part = cuda.blockIdx.x % nparts
        w2s = cuda.shared.array(NW2S, f32)  # both W2, input-major, rows padded
        xs = cuda.shared.array((C, D), f32)
        a1s = cuda.shared.array((C, W2H1), f32)  # layer-1 activations, then d1
        a2s = cuda.shared.array((C, W2H2), f32)  # layer-2 activations, then d2
        outs = cuda.shared.array((C, A1), f32)  # logits and value, then their gradients
        terms = cuda.shared.array((C, 5), f32)
        sg = cuda.shared.array(NSG, f32)  # gradients of every tensor but the W2s
        sp = cuda.shared.array(NSP, f32)  # biases and heads: read in every chunk
        mb_terms = cuda.shared.array(5, f32)
        acc = cuda.local.array(R2, f32)  # this thread's W2 gradient elements
        mb = obs_b.shape[0] * n_envs // num_mb
        inv_mb = ONE / f32(mb)
        per = (mb + nparts - 1) // nparts
        lo = part * per
        hi = lo + per
        if hi > mb:
            hi = mb
        epoch = j // num_mb
        first = (j % num_mb) * mb  # the minibatch's first position in the permutation
        # dW2 ownership: column col of the two W2 (net, q), rows grp, grp + G2, ...
        col = tid % W2H2
        grp = tid // W2H2
        owner = grp < G2
        net2 = col // H2
        q2 = col % H2
        for idx in range(tid, 2 * H1 * H2, UT):
            net = idx // (H1 * H2)
            i = (idx // H2) % H1
            q = idx % H2
            w2s[(net * H1 + i) * W2P + q] = params[gidx(6 * net + 2, k, i, q)]
        for s in range(SHP.shape[0]):
            t = SHP[s]
            for idx in range(tid, SIZE[t], UT):
                sp[POFF[t] + idx] = params[BASE[t] + k * SIZE[t] + idx]
        for r in range(R2):
            acc[r] = ZERO
        for idx in range(tid, NSMALL, UT):
            sg[idx] = ZERO
        if tid < 5:
            mb_terms[tid] = ZERO
        cuda.syncthreads()
        for c0 in range(lo, hi, C):
            nc = hi - c0
            if nc > C:
                nc = C
            chunk_forward(params, perm, obs_b, n_envs, k, epoch, first, c0, nc, xs, a1s, a2s, outs,
                          w2s, sp, tid, owner, grp, col, net2, q2)  # fmt: skip
            loss_at_heads(outs, terms, perm, actions_b, logp_b, values_b, adv_b, ret_b, clip,
                          ent_coef, vf_coef, clip_vloss, inv_mb, n_envs, k, epoch, first, c0, nc,
                          tid)  # fmt: skip
            cuda.syncthreads()
            if tid < 5:  # fixed order: a run is reproducible
                for c in range(C):
                    mb_terms[tid] += terms[c, tid]
            heads_backward(sp, sg, a2s, outs, tid)
            if owner:  # dW2 (registers) and db2
                for c in range(C):
                    d = a2s[c, col]
                    for r in range(R2):
                        i = grp + r * G2
                        if i < H1:
                            acc[r] += a1s[c, net2 * H1 + i] * d
                if grp == 0:
                    h = ZERO
                    for c in range(C):
                        h += a2s[c, col]
                    sg[SOFF[6 * net2 + 3] + q2] += h
            cuda.syncthreads()
            layer1_backward(w2s, xs, a1s, a2s, sg, tid)
        if owner:  # this slice's gradient, in the flat layout
            for r in range(R2):
                i = grp + r * G2
                if i < H1:
                    partial[part, gidx(6 * net2 + 2, k, i, q2)] = acc[r]
        for s in range(SMALL.shape[0]):
            t = SMALL[s]
            for idx in range(tid, SIZE[t], UT):
                partial[part, BASE[t] + k * SIZE[t] + idx] = sg[SOFF[t] + idx]
        if tid < 5:
            pterms[part, k, tid] = mb_terms[tid]

    return grads


def _reduce_and_apply(s: _Shape, dev: _Device, use_cache: bool) -> tuple[Any, Any]:
    """The update's last two kernels: the parts' gradients summed, then clipped into Adam."""
    UT, P, NT, BASE, SIZE, OFF = s.UT, s.P, s.NT, s.BASE, s.SIZE, s.OFF
    fmin, block_sum = dev.fmin, dev.block_sum
    f32 = numba.float32

    @cuda.jit(device=True, inline=True)
    def adam(params, m1, m2, q, g, step_size, bc2_sqrt):
        """torch.optim.Adam's step (betas 0.9, 0.999, eps 1e-5) of element q; the new value."""
        mq = F32(0.9) * m1[q] + F32(0.1) * g
        vq = F32(0.999) * m2[q] + F32(0.001) * g * g
        m1[q] = mq
        m2[q] = vq
        p = params[q] - step_size * mq / (math.sqrt(vq) / bc2_sqrt + F32(1e-5))
        params[q] = p
        return p

    @cuda.jit(device=True, inline=True)
    def element(k, e):
        """Flat index of element ``e`` of agent k's parameters, counted tensor by tensor."""
        t = 0
        while t + 1 < NT and e >= OFF[t + 1]:
            t += 1
        return BASE[t] + k * SIZE[t] + e - OFF[t]

    @cuda.jit(cache=use_cache)
    def reduce(partial, grad, norms):
        """After ``grads``: block (k, r) sums the slices' gradients of its share of agent k's
        parameters in a fixed order into ``grad`` and their sum of squares into
        ``norms[k, r]``."""
        tid = cuda.threadIdx.x
        nblocks = norms.shape[1]
        k = cuda.blockIdx.x // nblocks
        r = cuda.blockIdx.x % nblocks
        red = cuda.shared.array(UT, f32)
        per = (P + nblocks - 1) // nblocks
        hi = (r + 1) * per
        if hi > P:
            hi = P
        nparts = partial.shape[0]
        full = nparts - nparts % 4
        ss = ZERO
        for e in range(r * per + tid, hi, UT):
            q = element(k, e)
            # four independent sums keep four loads in flight (hundreds of parts for one
            # agent's big minibatch); the order is fixed, so a run stays reproducible
            g0 = ZERO
            g1 = ZERO
            g2 = ZERO
            g3 = ZERO
            for p in range(0, full, 4):
                g0 += partial[p, q]
                g1 += partial[p + 1, q]
                g2 += partial[p + 2, q]
                g3 += partial[p + 3, q]
            for p in range(full, nparts):
                g0 += partial[p, q]
            g = (g0 + g1) + (g2 + g3)
            grad[q] = g
            ss += g * g
        total = block_sum(red, ss, tid)
        if tid == 0:
            norms[k, r] = total

    @cuda.jit(cache=use_cache)
    def apply(params, grad, m1, m2, norms, pterms, stats, hyper, max_grad_norm, mb, j):
        """After ``reduce``: block (k, r) clips agent k's gradient by its global norm
        (clip_grad_norm_) and takes torch's Adam step on its share, with ``hyper`` =
        (learning rate, Adam steps before this iteration): device scalars, so a captured graph
        replays with the current values. Block (k, 0) adds the loss sums into ``stats[k]``."""
        tid = cuda.threadIdx.x
        nblocks = norms.shape[1]
        k = cuda.blockIdx.x // nblocks
        r = cuda.blockIdx.x % nblocks
        ss = ZERO
        for b in range(nblocks):  # every block adds them in the same order: one norm
            ss += norms[k, b]
        norm = math.sqrt(ss)
        coef = f32(fmin(max_grad_norm / (norm + F32(1e-6)), ONE))
        step = hyper[1] + j + 1
        step_size = f32(hyper[0] / (1.0 - 0.9**step))
        bc2_sqrt = f32(math.sqrt(1.0 - 0.999**step))
        per = (P + nblocks - 1) // nblocks
        hi = (r + 1) * per
        if hi > P:
            hi = P
        for e in range(r * per + tid, hi, UT):
            q = element(k, e)
            adam(params, m1, m2, q, grad[q] * coef, step_size, bc2_sqrt)
        if r == 0 and tid < 5:
            h = ZERO
            for p in range(pterms.shape[0]):
                h += pterms[p, k, tid]
            stats[k, tid] += h * (ONE / f32(mb))

    return reduce, apply


# ---------------------------------------------------------------------------- driver
class FusedPPO:
    """Runs PPO iterations of ``algo`` (a PPO or MultiAgentPPO) with the fused kernels.

    Owns the flat parameter buffer (the policy's parameters become views of it), the Adam
    moments of the fused update and the scratch memory; ``iteration`` is one PPO iteration.
    """

    def __init__(self, algo: Any, env: Any, cfg: Any, fused_update: bool,
                 threads: tuple[int, int] | None = None, parts: int | None = None,
                 grads: str = "kernel"):  # fmt: skip
        self.algo = algo
        self.env = env
        self.cfg = cfg.ppo
        self.fused_update = fused_update
        self.gemm: GemmGrads | None = None
        """The update's gradients by batched GEMMs (``grads="gemm"``), else by the ``grads``
        and ``reduce`` kernels; ``apply`` steps either."""
        policy = algo.policy
        spec = policy.spec
        self.num_agents = getattr(policy, "num_agents", 1)
        self.num_envs = env.num_envs // self.num_agents  # per agent
        self.device = algo.device
        self.dims = _dims(spec)
        self.params = module_params(policy)
        self.flat = self._bind_flat(self.params)
        # as many envs per block as fit in shared memory, at most ENVS_PER_BLOCK
        self.envs_per_block = max(
            [e for e in range(1, min(ENVS_PER_BLOCK, self.num_envs) + 1)
             if shared_floats(*self.dims, e, CHUNK)[0] <= SHARED_FLOATS] or [1]
        )  # fmt: skip
        self.chunks = math.ceil(self.num_envs / self.envs_per_block)
        rt, ut = threads or (ROLLOUT_THREADS, UPDATE_THREADS)
        self.threads = (rt, ut)
        shape = (*self.dims, spec.activation, self.num_agents > 1, self.num_agents,
                 self.envs_per_block, rt, ut)  # fmt: skip
        try:
            self.kernels = build_kernels(*shape)
        except RuntimeError as exc:  # Numba finds no writable cache folder (read-only install)
            if "cannot cache" not in str(exc):
                raise
            log.warning("the fused kernels cannot be cached here (%s): they compile in every "
                        "process; set NUMBA_CACHE_DIR to a writable folder to keep them",
                        exc)  # fmt: skip
            self.kernels = build_kernels(*shape, cache=False)
        buf = algo.buffer
        T, K, N = buf.num_steps, self.num_agents, self.num_envs
        self.rand = torch.zeros(T, K * N, UNIFORMS_PER_STEP, device=self.device)
        view = ops.numba_view
        st = env.stats
        self._rollout_args = [
            view(self.flat), view(env.state), view(env.elapsed), view(st.episode_return),
            view(st.episode_length), view(st._last_return), view(st._last_length),
            view(st._finished), view(self.rand),
            *(view(getattr(buf, name)) for name in (
                "obs", "actions", "logprobs", "values", "rewards", "terminated", "episode_end",
                "bootstrap_values", "next_values", "advantages", "returns")),
        ]  # fmt: skip
        if fused_update:
            z = lambda *shape: torch.zeros(*shape, device=self.device)  # noqa: E731
            size = self.flat.numel()
            self.grad, self.m1, self.m2 = z(size), z(size), z(size)
            self.stats = z(K, 5)
            self.keys = z(self.cfg.num_epochs, K, T * N)
            self.sorted = z(self.cfg.num_epochs, K, T * N)
            self.perm = torch.zeros(self.cfg.num_epochs, K, T * N, dtype=torch.int64,
                                    device=self.device)  # fmt: skip
            self.minibatch = T * N // self.cfg.num_minibatches
            if grads == "gemm":
                self.gemm = GemmGrads(self, spec.activation == "tanh")
            self.parts = parts or parts_per_agent(self.minibatch, K, self.device)
            # each block's slice of a minibatch gradient (the gemm path writes ``grad`` whole)
            self.partial = z(self.parts if self.gemm is None else 1, size)
            self.pterms = z(self.parts, K, 5)
            # blocks per agent of the reduce and Adam kernels: about 4 elements per thread
            self.reduce_blocks = reduce_blocks(size // K, K, self.threads[1], self.device)
            self.norms = z(K, self.reduce_blocks)
            # (learning rate, Adam steps so far): device scalars, so a graph replays them
            self.hyper = torch.zeros(2, dtype=torch.float64, device=self.device)
            self.adam_steps = 0
            self._prepare_args = [view(buf.advantages), view(self.stats), N]
            self._grads_args = [
                view(self.flat), view(self.partial), view(self.pterms),
                *(view(getattr(buf, name)) for name in (
                    "obs", "actions", "logprobs", "values", "advantages", "returns")),
                view(self.perm),
            ]  # fmt: skip
            self._reduce_args = [view(self.partial), view(self.grad), view(self.norms)]
            self._apply_args = [
                view(self.flat), view(self.grad), view(self.m1), view(self.m2),
                view(self.norms), view(self.pterms), view(self.stats), view(self.hyper),
            ]  # fmt: skip
            if self.gemm is not None:
                self._gemm_apply_args = [
                    *self._apply_args[:4], view(self.gemm.norms), view(self.gemm.pterms),
                    *self._apply_args[6:],
                ]  # fmt: skip

    @property
    def grads_path(self) -> str:
        """Who computes the update's gradients: ``gemm`` or ``kernel``."""
        return "kernel" if self.gemm is None else "gemm"

    def _bind_flat(self, params: list[torch.nn.Parameter]) -> torch.Tensor:
        """One flat buffer holding every parameter (agent-major within each tensor); the
        parameters become views of it, so torch and the kernels share the memory."""
        total = sum(p.numel() for p in params)
        flat = torch.empty(total, dtype=torch.float32, device=params[0].device)
        start = 0
        for p in params:
            n = p.numel()
            view = flat[start : start + n].view(p.shape)
            view.copy_(p.detach())
            p.data = view
            start += n
        return flat

    def _launch(self, kernel: Any, grid: int, block: int, args: list) -> None:
        if self.device.type == "cuda":
            kernel[grid, block, ops.stream(self.device)](*args)
        else:  # the Numba CUDA simulator (tests)
            kernel[grid, block](*args)

    def rollout(self) -> None:
        """One rollout into the algorithm's buffer: env steps, returns and advantages."""
        cfg = self.cfg
        self.rand.uniform_()
        self._launch(
            self.kernels.rollout, self.num_agents * self.chunks, self.threads[0],
            [*self._rollout_args, np.float32(cfg.gamma), np.float32(cfg.gae_lambda),
             int(self.env.max_episode_steps), self.num_envs, self.chunks],
        )  # fmt: skip
        self.algo.buffer.step = self.algo.buffer.num_steps

    def begin(self, lr: float) -> None:
        """Hand this iteration's learning rate and Adam step count to the update kernels
        (device scalars: a captured ``launch`` replays with them)."""
        if self.fused_update:
            self.hyper[0].fill_(float(lr))
            self.hyper[1].fill_(float(self.adam_steps))

    def end(self, num_updates: int) -> None:
        """Count the Adam steps that ``launch`` ran (host-side: a graph replay cannot)."""
        if self.fused_update:
            self.adam_steps += num_updates

    def launch_update(self, perm: torch.Tensor | None = None) -> tuple[int, int]:
        """Every epoch and minibatch step of the update, on the stream; loss sums into the
        algorithm's. ``perm`` (epochs, agents, samples) overrides the random permutation
        (tests). Launches only: it can be captured in a CUDA graph."""
        cfg, K, ut = self.cfg, self.num_agents, self.threads[1]
        if perm is None:
            self.keys.uniform_()
            torch.sort(self.keys, dim=-1, out=(self.sorted, self.perm))
        else:
            self.perm.copy_(perm)
        self._launch(self.kernels.prepare, K, ut,
                     [*self._prepare_args, bool(cfg.normalize_advantage)])  # fmt: skip
        consts = [np.float32(cfg.clip_coef), np.float32(cfg.ent_coef), np.float32(cfg.vf_coef),
                  bool(cfg.clip_value_loss), self.num_envs, cfg.num_minibatches]  # fmt: skip
        steps = cfg.num_epochs * cfg.num_minibatches
        if self.gemm is not None:
            self.gemm.begin()
        for j in range(steps):
            if self.gemm is None:
                self._launch(self.kernels.grads, K * self.parts, ut,
                             [*self._grads_args, *consts, j])  # fmt: skip
                self._launch(self.kernels.reduce, K * self.reduce_blocks, ut, self._reduce_args)
                args, blocks = self._apply_args, self.reduce_blocks
            else:  # the gradient by cuBLAS, straight into ``grad``; norms a column a tensor
                self.gemm.step(j)
                args, blocks = self._gemm_apply_args, self.gemm.norms.shape[1]
            apply = [*args, float(cfg.max_grad_norm), self.minibatch, j]
            self._launch(self.kernels.apply, K * blocks, ut, apply)
        torch.mean(self.stats, 0, out=self.algo._loss_sums)
        return steps, cfg.num_epochs

    def update(self, lr: float, perm: torch.Tensor | None = None) -> tuple[int, int]:
        """The whole update of one iteration at learning rate ``lr``: (gradient steps, epochs)."""
        self.begin(lr)
        num_updates, epochs = self.launch_update(perm)
        self.end(num_updates)
        return num_updates, epochs

    def launch(self) -> tuple[int, int]:
        """Rollout, returns and update of one iteration, launches only (capturable); call
        ``begin`` before and ``end`` after. (gradient steps, epochs)."""
        self.rollout()
        if self.fused_update:
            return self.launch_update()
        if self.cfg.normalize_advantage:
            self.algo.normalize_advantages()
        return self.algo.update_steps()

    def iteration(self, lr: float) -> tuple[int, int]:
        """One whole iteration, eagerly; (gradient steps, epochs)."""
        self.begin(lr)
        num_updates, epochs = self.launch()
        self.end(num_updates)
        return num_updates, epochs

    # ----------------------------------------------------------------- checkpoints
    def to_optimizer(self) -> None:
        """Write the fused Adam state into the torch optimizer (the checkpoint's format), so a
        run resumes on either path."""
        if not self.fused_update or self.adam_steps == 0:
            return
        opt = self.algo.optimizer
        start = 0
        for p in self.params:
            n = p.numel()
            state = opt.state[p]
            state["exp_avg"] = self.m1[start : start + n].view(p.shape).clone()
            state["exp_avg_sq"] = self.m2[start : start + n].view(p.shape).clone()
            state["step"] = torch.tensor(float(self.adam_steps), device=p.device)
            start += n

    def from_optimizer(self) -> None:
        """Take the Adam state from the torch optimizer (after a resume)."""
        if not self.fused_update:
            return
        opt = self.algo.optimizer
        start = 0
        for p in self.params:
            n = p.numel()
            state = opt.state.get(p)
            if state and "exp_avg" in state:
                self.m1[start : start + n].copy_(state["exp_avg"].reshape(-1))
                self.m2[start : start + n].copy_(state["exp_avg_sq"].reshape(-1))
                self.adam_steps = int(float(state["step"]))
            start += n
