"""The fused update's kernels around the gradient (grads.py, or gemm_update's batched GEMMs):
``prepare`` (grid = agents) normalises the advantages; per minibatch step ``reduce`` sums the
gradient kernel's parts in a fixed order with their squared norm, and ``apply`` takes the global
grad-norm clip and Adam with torch's formula. The learning rate and the Adam step count are
device scalars, so the whole iteration can be captured in one CUDA graph.
"""

from __future__ import annotations

import math
from typing import Any

import numba
from numba import cuda

from orin_rl.algorithms.fused.device import Device
from orin_rl.algorithms.fused.shapes import F32, ONE, ZERO, Shape


def prepare_kernel(s: Shape, dev: Device, use_cache: bool) -> Any:
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


def reduce_and_apply(s: Shape, dev: Device, use_cache: bool) -> tuple[Any, Any]:
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
