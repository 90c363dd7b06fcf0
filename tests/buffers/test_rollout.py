"""RolloutBuffer: step writes, bootstrap values, GAE wiring and minibatch gathers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orin_rl.buffers import BufferOverflowError, RolloutBuffer, Transition, compute_gae

T, N, OBS = 6, 4, (3,)


def fill(buffer: RolloutBuffer, rng, discrete: bool = True):
    """Write T random steps; return the stacked numpy copies of what was written."""
    written: dict[str, list[np.ndarray]] = {}
    for _ in range(buffer.num_steps):
        term = torch.from_numpy(rng.random(N) < 0.2)
        trunc = torch.from_numpy(rng.random(N) < 0.2) & ~term
        step = dict(
            obs=torch.from_numpy(rng.normal(size=(N, *OBS)).astype(np.float32)),
            actions=torch.from_numpy(rng.integers(0, 3, N)) if discrete else torch.randn(N, 2),
            logprobs=torch.randn(N),
            values=torch.randn(N),
            rewards=torch.randn(N),
            terminated=term,
            episode_end=term | trunc,
            bootstrap_values=torch.where(trunc, torch.randn(N), torch.zeros(N)),
        )
        for k, v in step.items():
            written.setdefault(k, []).append(v.clone().numpy())
        buffer.add(Transition(**step))
    return {k: np.stack(v) for k, v in written.items()}


def make_buffer(placement="host", minibatches=2, discrete=True, device="cpu"):
    return RolloutBuffer(
        T,
        N,
        OBS,
        () if discrete else (2,),
        torch.int64 if discrete else torch.float32,
        device,
        placement,
        minibatches,
    )


class TestWrite:
    def test_steps_land_in_order(self, rng):
        buf = make_buffer()
        written = fill(buf, rng)
        for name, expected in written.items():
            np.testing.assert_array_equal(getattr(buf, name).numpy(), expected, err_msg=name)

    def test_overflow_says_what_to_do(self, rng):
        buf = make_buffer()
        fill(buf, rng)
        with pytest.raises(BufferOverflowError, match="clear"):
            buf.add(Transition(obs=torch.zeros(N, 3)))

    def test_missing_field(self):
        with pytest.raises(ValueError, match=r"transition\.actions"):
            make_buffer().add(Transition(obs=torch.zeros(N, 3)))


class TestReturns:
    def test_next_values_and_gae(self, rng):
        buf = make_buffer()
        w = fill(buf, rng)
        last = torch.randn(N)
        buf.compute_returns(last, 0.99, 0.95, normalize=False)
        # V(s_{t+1}) is the next row's value, V(last obs) at the end, V(final obs) where ended.
        shifted = np.concatenate([w["values"][1:], last.numpy()[None]])
        expected_next = np.where(w["episode_end"], w["bootstrap_values"], shifted)
        np.testing.assert_allclose(buf.next_values.numpy(), expected_next)
        adv = compute_gae(
            w["rewards"], w["values"], expected_next, w["terminated"], w["episode_end"], 0.99, 0.95
        )
        np.testing.assert_allclose(buf.advantages.numpy(), adv, rtol=1e-6)
        np.testing.assert_allclose(buf.returns.numpy(), adv + w["values"], rtol=1e-6)

    def test_normalized_advantages_keep_raw_returns(self, rng):
        buf = make_buffer()
        w = fill(buf, rng)
        buf.compute_returns(torch.zeros(N), 0.99, 0.95, normalize=True)
        adv = buf.advantages.numpy()
        assert abs(adv.mean()) < 1e-5 and adv.std(ddof=1) == pytest.approx(1.0, rel=1e-4)
        raw = buf.returns.numpy() - w["values"]
        np.testing.assert_allclose((raw - raw.mean()) / raw.std(ddof=1), adv, rtol=1e-3, atol=1e-4)

    def test_incomplete_rollout(self):
        with pytest.raises(RuntimeError, match="0/6"):
            make_buffer().compute_returns(torch.zeros(N), 0.99, 0.95, normalize=False)


class TestMinibatches:
    @pytest.mark.parametrize("discrete", [True, False])
    def test_each_epoch_is_a_permutation(self, rng, discrete):
        buf = make_buffer(minibatches=3, discrete=discrete)
        fill(buf, rng, discrete)
        buf.compute_returns(torch.zeros(N), 0.99, 0.95, normalize=False)
        flat_obs = buf.obs.reshape(T * N, -1).numpy()
        flat_actions = buf.actions.reshape(T * N, -1).numpy()
        flat_returns = buf.returns.reshape(-1).numpy()
        rows = []
        for i, mb in enumerate(buf.minibatches(num_epochs=2)):
            assert mb.obs.shape == (T * N // 3, *OBS)
            # Find each gathered row in the flat storage and check every field agrees.
            for j in range(mb.obs.shape[0]):
                k = int(np.flatnonzero((flat_obs == mb.obs[j].numpy()).all(axis=1))[0])
                np.testing.assert_array_equal(flat_actions[k], mb.actions[j].reshape(-1).numpy())
                assert flat_returns[k] == pytest.approx(float(mb.returns[j]))
                rows.append((i // 3, k))
        for epoch in range(2):
            assert sorted(k for e, k in rows if e == epoch) == list(range(T * N))

    @pytest.mark.gpu
    @pytest.mark.parametrize("placement", ["device", "managed", "pinned"])
    def test_gpu_placements(self, rng, placement):
        buf = make_buffer(placement=placement, device="cuda")
        w = fill_cuda(buf, rng)
        last_values = rng.normal(size=N).astype(np.float32)
        buf.compute_returns(torch.from_numpy(last_values).cuda(), 0.99, 0.95, normalize=False)
        # next_values worked out from what was written, not read back from the buffer.
        shifted = np.concatenate([w["values"][1:], last_values[None]])
        expected_next = np.where(w["episode_end"], w["bootstrap_values"], shifted)
        np.testing.assert_allclose(buf.next_values.cpu().numpy(), expected_next, rtol=1e-6)
        adv = compute_gae(
            w["rewards"],
            w["values"],
            expected_next,
            w["terminated"],
            w["episode_end"],
            0.99,
            0.95,
        )
        np.testing.assert_allclose(buf.advantages.cpu().numpy(), adv, rtol=1e-5, atol=1e-6)
        seen = []
        for mb in buf.minibatches(1):
            assert mb.obs.is_cuda
            seen.append(mb.returns.cpu().numpy())
        np.testing.assert_allclose(
            np.sort(np.concatenate(seen)), np.sort(buf.returns.cpu().numpy().ravel()), rtol=1e-6
        )


def fill_cuda(buffer, rng):
    """Like ``fill`` but hands the buffer CUDA tensors, as a CUDA learner does."""
    cpu = make_buffer()
    w = fill(cpu, rng)
    for t in range(T):
        buffer.add(Transition(**{k: torch.from_numpy(v[t]).cuda() for k, v in w.items()}))
    return w
