"""K agents in one batched program: each agent is exactly an ActorCritic, and independent."""

from __future__ import annotations

import pytest
import torch

from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models.batched import BatchedActorCritic, per_agent_clip_grad_norm_

DISCRETE = PolicySpec([4], "discrete", 2, hidden_sizes=[16, 16], normalize_obs=True)
CONTINUOUS = PolicySpec([3], "continuous", 2, hidden_sizes=[8], action_low=[-1, -1],
                        action_high=[1, 1], init_log_std=-0.5)  # fmt: skip


@pytest.mark.parametrize("spec", [DISCRETE, CONTINUOUS], ids=["discrete", "continuous"])
def test_each_agent_equals_its_standalone_actor_critic(spec, rng):
    torch.manual_seed(int(rng.integers(2**31)))
    k, b = 3, 5
    agents = BatchedActorCritic(spec, k)
    obs = torch.from_numpy(rng.normal(size=(k, b, *spec.obs_shape))).float()
    if spec.normalize_obs:
        agents.normalize(obs * 3 + 1, update=True)  # give the agents non-trivial statistics
    actions = agents.act_deterministic(agents.normalize(obs))
    logp, ent, values = agents.evaluate(agents.normalize(obs), actions)
    for i in range(k):
        single = agents.agent(i)
        assert isinstance(single, ActorCritic)
        x = single.normalize(obs[i])
        torch.testing.assert_close(single.act_deterministic(x), actions[i])
        lp, en, v = single.evaluate(x, actions[i])
        torch.testing.assert_close(lp, logp[i])
        torch.testing.assert_close(en, ent[i])
        torch.testing.assert_close(v, values[i])


def test_agents_start_different_and_learn_independently():
    torch.manual_seed(0)
    agents = BatchedActorCritic(DISCRETE, 2)
    w = agents.actor.weights[0]
    assert not torch.equal(w[0], w[1])  # each agent its own initialisation
    obs = torch.randn(2, 7, 4)
    # A loss on agent 0 alone leaves agent 1's gradients exactly zero.
    agents.value(obs)[0].sum().backward()
    for p in agents.parameters():
        if p.grad is not None:
            assert torch.count_nonzero(p.grad[1]) == 0


def test_per_agent_gradient_clipping():
    a = torch.nn.Parameter(torch.zeros(2, 3))
    b = torch.nn.Parameter(torch.zeros(2, 1))
    a.grad = torch.tensor([[3.0, 0.0, 0.0], [0.1, 0.0, 0.0]])
    b.grad = torch.tensor([[4.0], [0.0]])
    norms = per_agent_clip_grad_norm_([a, b], max_norm=1.0)
    torch.testing.assert_close(norms, torch.tensor([5.0, 0.1]))
    torch.testing.assert_close(a.grad[0], torch.tensor([0.6, 0.0, 0.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(b.grad[0], torch.tensor([0.8]), atol=1e-6, rtol=0)
    torch.testing.assert_close(a.grad[1], torch.tensor([0.1, 0.0, 0.0]))  # under the limit
