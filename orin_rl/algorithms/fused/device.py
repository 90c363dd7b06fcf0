"""Device functions that several fused kernels share, built per policy shape: activations,
the logits' log-sum-exp, indices into the flat parameter buffer, a reproducible block sum.

A kernel's builder binds each device function it calls to a local name, so that the kernel
captures it in its closure: Numba's disk cache keys a kernel by its own file and by the code
and constants of what its closure holds, so a change here compiles the kernels that call the
changed function afresh.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from numba import cuda

from orin_rl.algorithms.fused.shapes import ONE, ZERO, Shape


class Device(NamedTuple):
    """The device functions the kernel builders share."""

    fmax: Any
    fmin: Any
    act: Any
    dact: Any
    logsumexp: Any
    local: Any
    gidx: Any
    block_sum: Any


def device_functions(s: Shape) -> Device:
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

    return Device(fmax, fmin, act, dact, logsumexp, local, gidx, block_sum)
