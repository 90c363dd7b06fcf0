"""Observation normaliser and action distributions against numpy / torch.distributions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orin_rl.models import ActorCritic, ObsNormalizer, PolicySpec
from orin_rl.models.distributions import Categorical, DiagGaussian


def test_normalizer_matches_numpy_over_batches(rng):
    data = rng.normal(4.0, 3.0, size=(500, 5))
    norm = ObsNormalizer((5,))
    for chunk in np.array_split(data, 7):
        norm.update(torch.from_numpy(chunk))
    np.testing.assert_allclose(norm.mean.numpy(), data.mean(0), rtol=1e-10)
    np.testing.assert_allclose(norm.var.numpy(), data.var(0), rtol=1e-10)
    out = norm(torch.from_numpy(data[:3]).float()).numpy()
    np.testing.assert_allclose(
        out, (data[:3] - data.mean(0)) / np.sqrt(data.var(0) + 1e-8), rtol=1e-5, atol=1e-6
    )


def test_categorical_matches_torch(rng):
    logits = torch.from_numpy(rng.normal(size=(6, 4)))
    actions = torch.from_numpy(rng.integers(0, 4, 6))
    ours, ref = Categorical(logits), torch.distributions.Categorical(logits=logits)
    torch.testing.assert_close(ours.log_prob(actions), ref.log_prob(actions))
    torch.testing.assert_close(ours.entropy(), ref.entropy())
    assert ours.sample().shape == (6,)


def test_gaussian_matches_torch(rng):
    mean = torch.from_numpy(rng.normal(size=(5, 3)))
    log_std = torch.from_numpy(rng.normal(size=3) * 0.3)
    actions = torch.from_numpy(rng.normal(size=(5, 3)))
    ref = torch.distributions.Normal(mean, log_std.exp())
    ours = DiagGaussian(mean, log_std)
    torch.testing.assert_close(ours.log_prob(actions), ref.log_prob(actions).sum(-1))
    torch.testing.assert_close(ours.entropy(), ref.entropy().sum(-1))


@pytest.mark.parametrize("kind", ["discrete", "continuous"])
def test_actor_critic_shapes(kind):
    spec = PolicySpec([4], kind, 2, normalize_obs=True)
    policy = ActorCritic(spec)
    obs = torch.randn(7, 4)
    actions, logp, values = policy.act(policy.normalize(obs, update=True))
    assert actions.shape == ((7,) if kind == "discrete" else (7, 2))
    assert logp.shape == values.shape == (7,)
    assert policy.act_deterministic(obs).shape == actions.shape
