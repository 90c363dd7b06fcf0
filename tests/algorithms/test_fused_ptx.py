"""The fused kernels compile for the real CUDA targets (H100/H200 sm_90, Jetson Orin sm_87),
not only in Numba's simulator, which accepts code the CUDA compiler refuses (a shared array
sized by an expression, say). Needs libNVVM (the CUDA toolkit, or the nvidia-cuda-nvcc wheel
that CUDA builds of torch install); it needs no GPU."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import re, sys
    import numba.cuda.dispatcher as dispatcher
    from numba import cuda, types as T

    class Device:  # device functions ask the current device for its compute capability
        compute_capability = tuple(int(c) for c in sys.argv[1].split("."))

    dispatcher.get_current_device = lambda: Device()
    from orin_rl.algorithms import fused

    def arr(dtype, ndim):
        return T.Array(dtype, ndim, "C")

    f1, f2, f3 = arr(T.float32, 1), arr(T.float32, 2), arr(T.float32, 3)
    i1, d1, b1, b2 = arr(T.int64, 1), arr(T.float64, 1), arr(T.boolean, 1), arr(T.boolean, 2)
    rollout_sig = (f1, f2, i1, d1, i1, d1, i1, b1, f3, f3, arr(T.int64, 2), f2, f2, f2, b2, b2,
                   f2, f2, f2, f2, T.float32, T.float32, T.int64, T.int64, T.int64)
    i2, i3 = arr(T.int64, 2), arr(T.int64, 3)
    prepare_sig = (f2, f2, T.int64, T.boolean)
    grads_sig = (f1, f2, f3, f3, i2, f2, f2, f2, f2, i3, T.float32, T.float32, T.float32,
                 T.boolean, T.int64, T.int64, T.int64)
    reduce_sig = (f2, f1, f2)
    apply_sig = (f1, f1, f1, f1, f2, f3, f2, d1, T.float64, T.int64, T.int64)
    cc = Device.compute_capability
    for in_major, agents in ((False, 1), (True, 512)):
        kernels = fused.build_kernels(4, 64, 64, 2, "tanh", in_major, agents, 8,
                                      fused.ROLLOUT_THREADS, fused.UPDATE_THREADS)
        sigs = (rollout_sig, prepare_sig, grads_sig, reduce_sig, apply_sig)
        for kernel, sig in zip(kernels, sigs, strict=True):
            ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc)
            shared = sum(int(n) for n in re.findall(r"\\.shared \\.align \\d+ \\.b8 \\w+\\[(\\d+)\\]", ptx))
            print(kernel.py_func.__name__, shared)
    """
)


def _nvvm_available() -> bool:
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    probe = "from numba.cuda.cudadrv import nvvm; nvvm.NVVM()"
    return (
        subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True).returncode == 0
    )


@pytest.mark.skipif(not _nvvm_available(), reason="libNVVM not installed (CPU-only torch)")
@pytest.mark.parametrize("cc", ["8.7"])  # Orin; 9.0 (H100, H200) compiles in the gpu tests
def test_fused_kernels_compile_for_cuda_within_static_shared_memory(cc):
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, cc], env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    sizes = [
        line.split() for line in proc.stdout.splitlines()
        if line.startswith(("rollout", "prepare", "grads", "reduce", "apply"))
    ]  # fmt: skip
    assert len(sizes) == 10
    assert all(int(n) <= 48 * 1024 for _, n in sizes), sizes  # static shared memory limit
