"""The fused update's gradient kernel (``ppo.fused_grads=kernel``): grid = agents x parts,
each block takes a slice of the agent's minibatch, gathers it through the permutation (one torch
sort of uniform keys per iteration), and runs forward, the PPO loss's gradient by hand (clipped
surrogate, clipped value loss, entropy) and backward into a partial gradient; the two W2
matrices in shared memory, their gradients in registers, chunks of ``CHUNK`` samples. The
``reduce`` kernel (update.py) sums the parts.

The kernel is assembled from inlined stages: ``forward_stage`` (a chunk through both networks),
``loss_stage`` (the loss's gradient at the heads), ``backward_stages`` (the heads and layer 2,
then layer 1) and ``slice_stages`` (the agent's parameters in, the slice's gradient out).
"""

from __future__ import annotations

import math
from typing import Any

import numba
from numba import cuda

from orin_rl.algorithms.fused.device import Device
from orin_rl.algorithms.fused.shapes import HALF, ONE, ZERO, Shape

GRADS_MAX_REGISTERS: int | None = 128
"""Register cap of the gradient kernel. Uncapped it took 168 registers a thread, room for one
256-thread block per SM; at 128 two fit (H200, 512 agents, an exploratory sweep this change's
note reports: 25.4 -> 19.9 ms an iteration). Numba's cache key leaves compile options out:
change it here (the source of the kernel, whose change drops the cache), not at run time."""


def forward_stage(s: Shape, dev: Device) -> Any:
    """The gradient kernel's forward stage: a chunk gathered and run through both networks."""
    D, H1, H2, A, UT, C, POFF = s.D, s.H1, s.H2, s.A, s.UT, s.C, s.POFF
    W2H1, A1, W2P, G2, CS2 = s.W2H1, s.A1, s.W2P, s.G2, s.CS2
    act, local, gidx = dev.act, dev.local, dev.gidx
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

    return chunk_forward


def loss_stage(s: Shape, dev: Device) -> Any:
    """The gradient kernel's loss stage: the PPO loss's gradient at the heads and its terms."""
    A, UT, C, A1 = s.A, s.UT, s.C, s.A1
    fmax, fmin, logsumexp = dev.fmax, dev.fmin, dev.logsumexp

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

    return loss_at_heads


def backward_stages(s: Shape, dev: Device) -> tuple[Any, Any]:
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


def slice_stages(s: Shape, dev: Device) -> tuple[Any, Any]:
    """The gradient kernel's stages around its chunks: ``load_agent`` (agent k's W2s and the
    parameters read in every chunk into shared memory, the shared gradient sums zeroed) and
    ``write_slice`` (the shared gradients and loss sums of the block's slice written out)."""
    H1, H2, UT, W2P = s.H1, s.H2, s.UT, s.W2P
    BASE, SIZE, SMALL, SOFF, NSMALL, SHP, POFF = (s.BASE, s.SIZE, s.SMALL, s.SOFF, s.NSMALL,
                                                  s.SHP, s.POFF)  # fmt: skip
    gidx = dev.gidx

    @cuda.jit(device=True, inline=True)
    def load_agent(params, w2s, sp, sg, mb_terms, k, tid):
        """Both W2 (rows padded) into ``w2s``, the biases and heads into ``sp``; ``sg`` and
        ``mb_terms`` zeroed."""
        for idx in range(tid, 2 * H1 * H2, UT):
            net = idx // (H1 * H2)
            i = (idx // H2) % H1
            q = idx % H2
            w2s[(net * H1 + i) * W2P + q] = params[gidx(6 * net + 2, k, i, q)]
        for s in range(SHP.shape[0]):
            t = SHP[s]
            for idx in range(tid, SIZE[t], UT):
                sp[POFF[t] + idx] = params[BASE[t] + k * SIZE[t] + idx]
        for idx in range(tid, NSMALL, UT):
            sg[idx] = ZERO
        if tid < 5:
            mb_terms[tid] = ZERO

    @cuda.jit(device=True, inline=True)
    def write_slice(partial, pterms, sg, mb_terms, k, part, tid):
        """The gradients in ``sg`` into ``partial[part]`` (the flat layout), the loss sums into
        ``pterms[part, k]``."""
        for s in range(SMALL.shape[0]):
            t = SMALL[s]
            for idx in range(tid, SIZE[t], UT):
                partial[part, BASE[t] + k * SIZE[t] + idx] = sg[SOFF[t] + idx]
        if tid < 5:
            pterms[part, k, tid] = mb_terms[tid]

    return load_agent, write_slice


def _register_limit() -> dict[str, int]:
    """The gradient kernel's compile options: ``GRADS_MAX_REGISTERS`` (the simulator takes no
    register limit)."""
    if GRADS_MAX_REGISTERS and not numba.config.ENABLE_CUDASIM:
        return {"max_registers": GRADS_MAX_REGISTERS}
    return {}


def grads_kernel(s: Shape, dev: Device, use_cache: bool) -> Any:
    """The update's gradient kernel: per chunk of its slice of the minibatch, the forward and
    loss stages and the backward ones, inlined into it."""
    D, H1, H2, C, W2H1, W2H2, A1 = s.D, s.H1, s.H2, s.C, s.W2H1, s.W2H2, s.A1
    SOFF, NW2S, NSG, NSP, G2, R2 = s.SOFF, s.NW2S, s.NSG, s.NSP, s.G2, s.R2
    gidx = dev.gidx
    chunk_forward, loss_at_heads = forward_stage(s, dev), loss_stage(s, dev)
    heads_backward, layer1_backward = backward_stages(s, dev)
    load_agent, write_slice = slice_stages(s, dev)
    f32 = numba.float32

    @cuda.jit(cache=use_cache, **_register_limit())
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
        load_agent(params, w2s, sp, sg, mb_terms, k, tid)
        for r in range(R2):
            acc[r] = ZERO
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
        if owner:  # this slice's W2 gradient, in the flat layout
            for r in range(R2):
                i = grp + r * G2
                if i < H1:
                    partial[part, gidx(6 * net2 + 2, k, i, q2)] = acc[r]
        write_slice(partial, pterms, sg, mb_terms, k, part, tid)

    return grads
