"""compute_gae against a hand-worked case and a float64 reference, on every path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orin_rl.buffers import compute_gae, kernels

GAMMA, LAM = 0.9, 0.8


def reference_gae(rewards, values, next_values, terminated, episode_end, gamma, lam):
    """Plain float64 loops, written from the formula in the issue."""
    rewards, values, next_values = (
        np.asarray(a, np.float64) for a in (rewards, values, next_values)
    )
    num_steps, num_envs = rewards.shape
    adv = np.zeros((num_steps, num_envs))
    for env in range(num_envs):
        next_adv = 0.0
        for t in reversed(range(num_steps)):
            delta = (
                rewards[t, env]
                + gamma * next_values[t, env] * (1 - terminated[t, env])
                - values[t, env]
            )
            next_adv = delta + gamma * lam * (1 - episode_end[t, env]) * next_adv
            adv[t, env] = next_adv
    return adv


def random_case(rng, num_steps, num_envs, dtype=np.float32):
    terminated = rng.random((num_steps, num_envs)) < 0.1
    truncated = rng.random((num_steps, num_envs)) < 0.05
    return (
        rng.normal(size=(num_steps, num_envs)).astype(dtype),
        rng.normal(size=(num_steps, num_envs)).astype(dtype),
        rng.normal(size=(num_steps, num_envs)).astype(dtype),
        terminated,
        terminated | truncated,
    )


# One env, three steps, worked by hand (gamma = 0.9, lambda = 0.8):
#   rewards r = [1, 2, 3], values V = [0.5, 1.0, 1.5], next values V' = [1.0, 1.5, 2.0]
#   delta_1 = 2 + 0.9 * 1.5 - 1.0 = 2.35, delta_0 = 1 + 0.9 * 1.0 - 0.5 = 1.4
HAND = dict(
    rewards=[[1.0], [2.0], [3.0]],
    values=[[0.5], [1.0], [1.5]],
    next_values=[[1.0], [1.5], [2.0]],
)
HAND_CASES = {
    # terminated at t=2: delta_2 = 3 - 1.5 = 1.5; A_1 = 2.35 + 0.72 * 1.5 = 3.43;
    # A_0 = 1.4 + 0.72 * 3.43 = 3.8696
    "terminated": ([0, 0, 1], [0, 0, 1], [3.8696, 3.43, 1.5]),
    # truncated at t=2 bootstraps from V(final obs) = 2.0: delta_2 = 3 + 1.8 - 1.5 = 3.3;
    # A_1 = 2.35 + 0.72 * 3.3 = 4.726; A_0 = 1.4 + 0.72 * 4.726 = 4.80272
    "truncated": ([0, 0, 0], [0, 0, 1], [4.80272, 4.726, 3.3]),
    # terminated at t=0: delta_0 = 1 - 0.5 = 0.5 and nothing flows back from the next episode;
    # t=2 is mid-episode at the rollout's end: delta_2 = 3.3, A_1 = 4.726
    "boundary": ([1, 0, 0], [1, 0, 0], [0.5, 4.726, 3.3]),
}


def _hand_arrays(case):
    term, end, expected = HAND_CASES[case]
    arrays = [np.array(HAND[k], np.float64) for k in ("rewards", "values", "next_values")]
    arrays += [np.array(term, bool)[:, None], np.array(end, bool)[:, None]]
    return arrays, np.array(expected)[:, None]


@pytest.mark.parametrize("case", sorted(HAND_CASES))
class TestHandWorked:
    def test_reference_matches_hand(self, case):
        arrays, expected = _hand_arrays(case)
        np.testing.assert_allclose(reference_gae(*arrays, GAMMA, LAM), expected, rtol=1e-12)

    def test_numpy(self, case):
        arrays, expected = _hand_arrays(case)
        np.testing.assert_allclose(compute_gae(*arrays, GAMMA, LAM), expected, rtol=1e-12)

    def test_torch(self, case):
        arrays, expected = _hand_arrays(case)
        out = compute_gae(*(torch.from_numpy(a) for a in arrays), GAMMA, LAM)
        assert isinstance(out, torch.Tensor)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)


class TestAgainstReference:
    @pytest.mark.parametrize("shape", [(1, 1), (3, 5), (64, 17), (128, 300)])
    def test_numpy_float32(self, rng, shape):
        arrays = random_case(rng, *shape)
        out = compute_gae(*arrays, GAMMA, LAM)
        assert out.dtype == np.float32 and out.shape == shape
        np.testing.assert_allclose(out, reference_gae(*arrays, GAMMA, LAM), rtol=1e-5, atol=1e-5)

    def test_numpy_float64(self, rng):
        arrays = random_case(rng, 50, 13, np.float64)
        out = compute_gae(*arrays, 0.99, 0.95)
        assert out.dtype == np.float64
        np.testing.assert_allclose(out, reference_gae(*arrays, 0.99, 0.95), rtol=1e-12)

    def test_torch_cpu(self, rng):
        arrays = random_case(rng, 40, 9)
        out = compute_gae(*(torch.from_numpy(a) for a in arrays), GAMMA, LAM)
        assert out.dtype == torch.float32 and out.device.type == "cpu"
        np.testing.assert_allclose(
            out.numpy(), reference_gae(*arrays, GAMMA, LAM), rtol=1e-5, atol=1e-5
        )

    def test_njit_kernel_directly(self, rng):
        arrays = random_case(rng, 33, 7, np.float64)
        out = np.empty((33, 7))
        kernels.gae_cpu(*arrays, GAMMA, LAM, out)
        np.testing.assert_allclose(out, reference_gae(*arrays, GAMMA, LAM), rtol=1e-12)

    @pytest.mark.parametrize("shape", [(5, 3), (16, 257)])
    def test_cuda_kernel(self, rng, shape):
        """The @cuda.jit kernel: on the simulator here, on the GPU where there is one."""
        arrays = random_case(rng, *shape, np.float64)
        out = np.zeros(shape)
        kernels.gae_cuda[kernels.blocks_for(shape[1]), kernels.THREADS_PER_BLOCK](
            *arrays, GAMMA, LAM, out
        )
        np.testing.assert_allclose(out, reference_gae(*arrays, GAMMA, LAM), rtol=1e-12)

    @pytest.mark.gpu
    def test_torch_cuda(self, rng):
        arrays = random_case(rng, 128, 4099)
        tensors = [torch.from_numpy(a).cuda() for a in arrays]
        out = compute_gae(*tensors, 0.99, 0.95)
        assert out.is_cuda
        np.testing.assert_allclose(
            out.cpu().numpy(), reference_gae(*arrays, 0.99, 0.95), rtol=1e-5, atol=1e-5
        )


class TestTruncationVersusTermination:
    def test_truncation_bootstraps_termination_does_not(self):
        rewards = np.ones((1, 2), np.float32)
        values = np.zeros((1, 2), np.float32)
        next_values = np.full((1, 2), 10.0, np.float32)
        terminated = np.array([[True, False]])
        episode_end = np.array([[True, True]])
        out = compute_gae(rewards, values, next_values, terminated, episode_end, 0.5, 0.9)
        np.testing.assert_allclose(out, [[1.0, 1.0 + 0.5 * 10.0]])


class TestBadInput:
    def test_shape_mismatch_names_the_array(self):
        a = np.zeros((3, 2), np.float32)
        with pytest.raises(ValueError, match="next_values"):
            compute_gae(a, a, np.zeros((3, 3), np.float32), a > 0, a > 0, 0.9, 0.9)

    def test_mixed_kinds(self):
        a = np.zeros((3, 2), np.float32)
        with pytest.raises(TypeError):
            compute_gae(a, torch.zeros(3, 2), a, a > 0, a > 0, 0.9, 0.9)

    def test_not_2d(self):
        a = np.zeros(3, np.float32)
        with pytest.raises(ValueError, match="num_steps, num_envs"):
            compute_gae(a, a, a, a > 0, a > 0, 0.9, 0.9)
