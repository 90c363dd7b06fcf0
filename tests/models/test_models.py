"""Observation normaliser and action distributions against numpy / torch.distributions."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from orin_rl.models import ActorCritic, ObsNormalizer, PolicySpec
from orin_rl.models.distributions import Categorical, DiagGaussian
from orin_rl.models.normalizer import RewardNormalizer


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


class TestRewardNormalizer:
    """Rewards divided by the running std of the discounted return (VecNormalize)."""

    def test_three_steps_by_hand(self):
        # gamma 0.5, one env, rewards 2, 4, 8; the episode ends after the second step.
        # G: 2, then 0.5 * 2 + 4 = 5 (episode ends: G -> 0), then 8.
        # Var over the G seen so far: [2] -> 0; [2, 5] -> 2.25; [2, 5, 8] -> 6.
        norm = RewardNormalizer(1, gamma=0.5, clip=100.0, eps=0.0)
        end = torch.tensor([False])
        first = norm(torch.tensor([2.0]), end)
        assert first.item() == 100.0  # 2 / sqrt(0): clipped
        second = norm(torch.tensor([4.0]), torch.tensor([True]))
        assert second.item() == pytest.approx(4.0 / 1.5)
        assert norm.returns.item() == 0.0  # restarted at the episode end
        third = norm(torch.tensor([8.0]), end)
        assert third.item() == pytest.approx(8.0 / 6.0**0.5)

    def test_clip(self):
        norm = RewardNormalizer(2, gamma=0.9, clip=0.5)
        out = norm(torch.tensor([100.0, -100.0]), torch.tensor([False, False]))
        assert out.tolist() == [0.5, -0.5]

    def test_groups_keep_statistics_of_their_own(self, rng):
        """Two groups of three envs scale like two separate normalisers."""
        both = RewardNormalizer(6, gamma=0.9, groups=2)
        a, b = RewardNormalizer(3, gamma=0.9), RewardNormalizer(3, gamma=0.9)
        for _ in range(20):
            r = torch.from_numpy(rng.normal(size=6) * np.array([1, 1, 1, 50, 50, 50]))
            end = torch.from_numpy(rng.random(6) < 0.1)
            got = both(r.float(), end)
            expected = torch.cat((a(r[:3].float(), end[:3]), b(r[3:].float(), end[3:])))
            assert torch.allclose(got, expected, rtol=1e-5)

    def test_gather_folds_every_rank_into_one_statistic(self):
        """Distributed: the statistics see every rank's returns (here two identical ranks), so
        they equal one normaliser fed the stacked samples."""
        ranks = RewardNormalizer(3, gamma=0.9)
        stacked = RewardNormalizer(6, gamma=0.9)
        end = torch.zeros(3, dtype=torch.bool)
        for r in (torch.tensor([1.0, 2.0, 4.0]), torch.tensor([0.5, -1.0, 3.0])):
            ranks(r, end, gather=lambda x: torch.cat((x, x)))
            stacked(torch.cat((r, r)), torch.cat((end, end)))
        assert torch.allclose(ranks.stats.var, stacked.stats.var)
        assert ranks.stats.count == stacked.stats.count == 12


def test_asymmetric_actor_critic_reads_its_groups_and_deploys_the_actors(rng):
    """obs_groups: the actor sees its slice only, the critic its own; the deployed policy
    takes the actor's group, normaliser folded for those columns, and acts as the policy."""
    import gymnasium as gym

    from orin_rl.models.deploy import DeterministicPolicy

    obs_space = gym.spaces.Box(-np.inf, np.inf, (5 + 7,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    groups = {"actor": [0, 5], "critic": [5, 12]}
    spec = PolicySpec.from_spaces(obs_space, act_space, obs_groups=groups, normalize_obs=True,
                                  hidden_sizes=[16], critic_hidden_sizes=[8, 8])  # fmt: skip
    policy = ActorCritic(spec)
    assert policy.actor[0].in_features == 5 and policy.critic[0].in_features == 7
    assert [m.out_features for m in policy.critic if hasattr(m, "out_features")] == [8, 8, 1]
    obs = torch.from_numpy(rng.normal(size=(64, 12)).astype(np.float32)) * 3 + 1
    policy.normalize(obs, update=True)
    x = policy.normalize(obs)
    critic_changed, actor_changed = x.clone(), x.clone()
    critic_changed[:, 5:] += 1.0
    actor_changed[:, :5] += 1.0
    assert torch.equal(policy.act_deterministic(critic_changed), policy.act_deterministic(x))
    assert torch.equal(policy.value(actor_changed), policy.value(x))
    assert not torch.equal(policy.act_deterministic(actor_changed), policy.act_deterministic(x))
    assert not torch.equal(policy.value(critic_changed), policy.value(x))
    deployed = DeterministicPolicy(policy, clip_actions=False)
    assert spec.deploy_obs_shape == [5]
    torch.testing.assert_close(deployed(obs[:, :5]), policy.act_deterministic(x))
