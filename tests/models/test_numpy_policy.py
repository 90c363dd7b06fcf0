"""The numpy actor-critic the rollout workers act with is ActorCritic's maths, term for term."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models import numpy_policy as npp


def _policy(kind: str, activation: str, rsl_rl: bool = False, seed: int = 0) -> ActorCritic:
    torch.manual_seed(seed)
    if kind == "discrete":
        spec = PolicySpec([5], "discrete", 3, hidden_sizes=[16, 8], activation=activation,
                          normalize_obs=True, obs_clip=2.0)  # fmt: skip
    else:
        spec = PolicySpec([5], "continuous", 2, hidden_sizes=[16, 8], activation=activation,
                          normalize_obs=True, obs_clip=2.0, rsl_rl=rsl_rl,
                          action_low=[-1.0, -1.0], action_high=[1.0, 1.0])  # fmt: skip
    policy = ActorCritic(spec)
    with torch.no_grad():  # fresh, non-trivial weights and statistics (orthogonal init: 0.01 head)
        for p in policy.parameters():
            p.copy_(torch.randn_like(p) * 0.7)
        if rsl_rl:
            policy.std.copy_(torch.rand_like(policy.std) + 0.2)
        if rsl_rl:  # rsl_rl's normalisers, one in each network, fed the same batch
            policy.update_normalizers(torch.randn(64, 5) * 3 + 1)
        else:
            policy.obs_normalizer.update(torch.randn(64, 5, dtype=torch.float64) * 3 + 1)
    return policy


def _numpy_twin(policy: ActorCritic) -> npp.NumpyActorCritic:
    arrays = {k: np.zeros(shape, dtype) for k, (shape, dtype) in npp.weight_layout(policy).items()}
    npp.publish(policy, arrays)
    return npp.NumpyActorCritic(policy.spec.to_dict(), arrays)


CASES = [("discrete", "tanh", False), ("continuous", "elu", False),
         ("continuous", "relu", True), ("continuous", "tanh", False)]  # fmt: skip


@pytest.mark.parametrize(("kind", "activation", "rsl_rl"), CASES)
def test_normalise_act_and_value_match_the_torch_policy(kind, activation, rsl_rl):
    """On fresh random observations: the normaliser, the values, and the log-probability of
    each sampled action under torch's ``evaluate`` (float32 rounding apart)."""
    policy = _policy(kind, activation, rsl_rl)
    twin = _numpy_twin(policy)
    obs = np.random.default_rng(1).normal(1.0, 4.0, (257, 5)).astype(np.float32)
    normed = twin.normalize(obs)
    with torch.no_grad():
        ref = policy.normalize(torch.from_numpy(obs))
    np.testing.assert_allclose(normed, ref.numpy(), rtol=1e-6, atol=1e-6)
    if rsl_rl:  # passed through: the networks normalise (x - mean) / (std + 1e-2) themselves
        np.testing.assert_array_equal(normed, obs)
    else:
        assert np.abs(normed).max() == pytest.approx(2.0)  # the clip took part
    actions, logp, values = twin.act(normed, np.random.default_rng(2))
    with torch.no_grad():
        t_logp, _, t_values = policy.evaluate(torch.from_numpy(normed), torch.from_numpy(actions))
    np.testing.assert_allclose(values, t_values.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(logp, t_logp.numpy(), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(twin.value(normed), t_values.numpy(), rtol=1e-5, atol=1e-5)


def test_gaussian_samples_are_the_mean_plus_std_times_the_generators_noise():
    policy = _policy("continuous", "tanh")
    twin = _numpy_twin(policy)
    normed = twin.normalize(np.random.default_rng(3).normal(size=(9, 5)).astype(np.float32))
    actions, _, _ = twin.act(normed, np.random.default_rng(4))
    noise = np.random.default_rng(4).standard_normal((9, 2), dtype=np.float32)
    with torch.no_grad():
        dist = policy.distribution(torch.from_numpy(normed))
        expected = dist.mean + dist.log_std.exp() * torch.from_numpy(noise)
    np.testing.assert_allclose(actions, expected.numpy(), rtol=1e-5, atol=1e-5)


def test_categorical_draws_follow_the_softmax():
    """20,000 draws for one observation: each action's frequency within 0.015 of pi(a)."""
    policy = _policy("discrete", "tanh")
    twin = _numpy_twin(policy)
    normed = np.repeat(twin.normalize(np.ones((1, 5), np.float32)), 20_000, axis=0)
    actions, logp, _ = twin.act(normed, np.random.default_rng(5))
    with torch.no_grad():
        probs = torch.softmax(policy.actor(torch.from_numpy(normed[:1])), -1)[0].numpy()
    freq = np.bincount(actions, minlength=3) / len(actions)
    np.testing.assert_allclose(freq, probs, atol=0.015)
    np.testing.assert_allclose(np.exp(logp[:3]), probs[actions[:3]], rtol=1e-5)


def test_a_publication_changes_what_the_twin_reads():
    policy = _policy("continuous", "elu")
    arrays = {k: np.zeros(s, d) for k, (s, d) in npp.weight_layout(policy).items()}
    twin = npp.NumpyActorCritic(policy.spec.to_dict(), arrays)
    normed = np.random.default_rng(6).normal(size=(4, 5)).astype(np.float32)
    assert np.all(twin.value(normed) == 0)
    npp.publish(policy, arrays)
    with torch.no_grad():
        expected = policy.value(torch.from_numpy(normed)).numpy()
    np.testing.assert_allclose(twin.value(normed), expected, rtol=1e-5, atol=1e-5)


def test_policies_without_a_numpy_twin_are_named():
    spec = PolicySpec([5], "continuous", 2, squash=True, action_low=[-1] * 2, action_high=[1] * 2)
    assert "squashed" in npp.blocker(ActorCritic(spec))
    grouped = PolicySpec([5], "discrete", 2, obs_groups={"actor": [0, 3], "critic": [0, 5]})
    assert "groups" in npp.blocker(ActorCritic(grouped))
    assert npp.blocker(ActorCritic(PolicySpec([5], "discrete", 2))) is None
    rsl = PolicySpec([5], "continuous", 2, normalize_obs=True, rsl_rl=True)
    assert "rsl_rl" in npp.blocker(ActorCritic(rsl))
