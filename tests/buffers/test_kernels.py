"""Gather and step-write kernels (CUDA kernel and @njit twin) and the advantage normalisation, against numpy."""

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
    """ops.normalize_, the one advantage normalisation, against a float64 reference."""

    @pytest.mark.parametrize(
        ("steps", "groups", "n"), [(1, 1, 2), (16, 1, 8), (7, 3, 5), (128, 4, 33)]
    )
    def test_per_group_against_numpy(self, rng, steps, groups, n):
        host = (rng.normal(size=(steps, groups, n)) * rng.uniform(0.5, 9.0, (1, groups, 1))
                + rng.normal(0, 5.0, (1, groups, 1))).astype(np.float32)  # fmt: skip
        x = torch.from_numpy(host.reshape(steps, groups * n).copy())
        ops.normalize_(x, groups=groups)
        expected = np.stack(
            [normalized_reference(host[:, k, :]) for k in range(groups)], axis=1
        ).reshape(steps, groups * n)
        np.testing.assert_allclose(x.numpy(), expected, rtol=1e-4, atol=1e-5)

    def test_all_reduce_sees_every_rank(self, rng):
        """With an all-reduce that doubles (two identical ranks) the statistics are those of
        the doubled sample: the same mean, and the std of 2n samples (unbiased)."""
        host = rng.normal(1.0, 2.0, size=(10, 6)).astype(np.float32)
        x = torch.from_numpy(host.copy())
        ops.normalize_(x, all_reduce=lambda t: t.mul_(2))
        doubled = np.concatenate([host.ravel(), host.ravel()])
        expected = (host - doubled.mean()) / (doubled.std(ddof=1) + 1e-8)
        np.testing.assert_allclose(x.numpy(), expected, rtol=1e-4, atol=1e-5)

    @pytest.mark.gpu
    def test_cuda(self, rng):
        host = rng.normal(2.0, 3.0, size=(128, 4096)).astype(np.float32)
        x = torch.from_numpy(host).cuda()
        ops.normalize_(x, groups=4)
        expected = np.concatenate(
            [normalized_reference(part) for part in np.split(host, 4, axis=1)], axis=1
        )
        np.testing.assert_allclose(x.cpu().numpy(), expected, rtol=1e-4, atol=1e-4)


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
