"""Normalisation, gather and step-write kernels (CUDA kernel and @njit twin) against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orin_rl.buffers import kernels, ops

SIZES = [1, 2, 255, 257, 1000]


def normalized_reference(x: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    x = x.astype(np.float64)
    return (x - x.mean()) / (x.std(ddof=1 if x.size > 1 else 0) + eps)


class TestNormalize:
    @pytest.mark.parametrize("n", SIZES)
    def test_cpu_twin(self, rng, n):
        x = rng.normal(3.0, 2.0, size=n).astype(np.float32)
        expected = normalized_reference(x)
        original = x.astype(np.float64)
        mean, std = kernels.normalize_cpu(x, 1e-8)
        np.testing.assert_allclose(x, expected, rtol=1e-4, atol=1e-5)
        assert mean == pytest.approx(original.mean(), rel=1e-5, abs=1e-6)
        assert std == pytest.approx(original.std(ddof=1) if n > 1 else 0.0, rel=1e-5, abs=1e-6)

    @pytest.mark.parametrize("n", [2, 257, 1000])
    def test_cuda_kernels(self, rng, n):
        x = rng.normal(-1.0, 5.0, size=n)
        expected = normalized_reference(x)
        moments = np.zeros(2)
        blocks = min(kernels.blocks_for(n), kernels.REDUCE_BLOCKS_MAX)
        kernels.moments_cuda[blocks, kernels.THREADS_PER_BLOCK](x, moments)
        np.testing.assert_allclose(moments, [x.sum(), (x * x).sum()], rtol=1e-10)
        kernels.normalize_cuda[blocks, kernels.THREADS_PER_BLOCK](x, moments, 1e-8)
        np.testing.assert_allclose(x, expected, rtol=1e-8, atol=1e-10)

    def test_torch_launcher_cpu(self, rng):
        x = torch.from_numpy(rng.normal(size=(16, 8)).astype(np.float32))
        expected = normalized_reference(x.numpy())
        ops.normalize_(x)
        np.testing.assert_allclose(x.numpy(), expected, rtol=1e-4, atol=1e-5)
        assert abs(float(x.mean())) < 1e-5 and float(x.std()) == pytest.approx(1.0, rel=1e-4)

    @pytest.mark.gpu
    def test_torch_launcher_cuda(self, rng):
        host = rng.normal(2.0, 3.0, size=(128, 4096)).astype(np.float32)
        x = torch.from_numpy(host).cuda()
        ops.normalize_(x)
        np.testing.assert_allclose(
            x.cpu().numpy(), normalized_reference(host), rtol=1e-4, atol=1e-4
        )


class TestGather:
    @pytest.mark.parametrize(("rows", "cols", "take"), [(10, 1, 10), (300, 4, 257), (64, 3, 1)])
    def test_cpu_twin(self, rng, rows, cols, take):
        src = rng.normal(size=(rows, cols)).astype(np.float32)
        index = rng.permutation(rows)[:take].astype(np.int64)
        dst = np.zeros((take, cols), np.float32)
        kernels.gather_cpu(src, index, dst)
        np.testing.assert_array_equal(dst, src[index])

    @pytest.mark.parametrize(("rows", "cols", "take"), [(10, 1, 10), (300, 4, 257)])
    def test_cuda_kernel(self, rng, rows, cols, take):
        src = rng.integers(0, 255, size=(rows, cols)).astype(np.uint8)
        index = rng.permutation(rows)[:take].astype(np.int64)
        dst = np.zeros((take, cols), np.uint8)
        kernels.gather_cuda[kernels.row_launch(take, cols)](src, index, dst)
        np.testing.assert_array_equal(dst, src[index])


class TestWriteStep:
    def test_cpu_twin(self, rng):
        dst = np.zeros((5, 12), np.float32)
        src = rng.normal(size=12).astype(np.float32)
        kernels.write_step_cpu(dst, 3, src)
        np.testing.assert_array_equal(dst[3], src)
        assert not dst[[0, 1, 2, 4]].any()

    def test_cuda_kernel(self, rng):
        dst = np.zeros((4, 300))
        src = rng.normal(size=300)
        kernels.write_step_cuda[kernels.blocks_for(300), kernels.THREADS_PER_BLOCK](dst, 1, src)
        np.testing.assert_array_equal(dst[1], src)
        assert not dst[[0, 2, 3]].any()

    def test_torch_launcher(self, rng):
        dst = torch.zeros(3, 4, 2)
        src = torch.from_numpy(rng.normal(size=(4, 2)).astype(np.float32))
        ops.write_step(ops.numba_view(dst.view(3, -1)), 2, src)
        torch.testing.assert_close(dst[2], src)


def test_row_kernels_grid_stride_past_the_grid(rng):
    """A grid smaller than the rows (as past 65535 blocks on a GPU) still covers every row."""
    src = rng.normal(size=(300, 5))
    index = rng.permutation(300).astype(np.int64)
    dst = np.zeros((300, 5))
    kernels.gather_cuda[(1, 2), (4, 8)](src, index, dst)  # 16 row-threads, 4 column-threads
    np.testing.assert_array_equal(dst, src[index])


@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (10, 3), (1 << 24, 16), (5, 100)])
def test_row_launch_shapes(rows, cols):
    (gx, gy), (tx, ty) = kernels.row_launch(rows, cols)
    assert gx == 1 and tx * ty == kernels.THREADS_PER_BLOCK and tx <= 32
    assert tx >= min(cols, 32) and gy <= kernels.MAX_GRID_Y
