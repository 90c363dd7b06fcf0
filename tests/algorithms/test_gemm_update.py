"""The batched-GEMM gradient of the fused update (``gemm_update``) against autograd through
PPO's own loss, in float64 on fresh random inputs; and the fused update driven by it against
the float64 reference of ``test_fused`` (PPO._minibatch_step and torch's Adam, agent by agent).
"""

from __future__ import annotations

import copy

import pytest
import torch

from orin_rl import config as C
from orin_rl.algorithms import PPO, fused
from orin_rl.algorithms.gemm_update import Hyper, layers_of, minibatch_gradients
from orin_rl.algorithms.ppo_multi import MultiAgentPPO
from orin_rl.buffers import Batch, RolloutBuffer
from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models.batched import BatchedActorCritic
from tests.algorithms import test_fused as tf

CPU = torch.device("cpu")


def _policy64(num_agents: int, hidden, activation: str, g: torch.Generator):
    spec = PolicySpec([4], "discrete", 3, hidden_sizes=list(hidden), activation=activation)
    policy = BatchedActorCritic(spec, num_agents) if num_agents > 1 else ActorCritic(spec)
    policy = policy.double()
    with torch.no_grad():  # bigger than the orthogonal init: logits and values spread
        for p in policy.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.6)
    return policy


def _minibatch(policy, num_agents: int, mb: int, g: torch.Generator) -> Batch:
    """Fresh inputs; old log-probs and values near the current ones, so both sides of each
    clip occur (and the ties inside the clip range, where torch.max splits its gradient)."""
    f64 = torch.float64
    obs = torch.randn(num_agents, mb, 4, generator=g, dtype=f64)
    actions = torch.randint(0, 3, (num_agents, mb), generator=g)
    with torch.no_grad():
        x = obs if num_agents > 1 else obs[0]
        logp, _, values = policy.evaluate(x, actions if num_agents > 1 else actions[0])
    logp, values = logp.view(num_agents, mb), values.view(num_agents, mb)
    noise = lambda scale: scale * torch.randn(num_agents, mb, generator=g, dtype=f64)  # noqa: E731
    return Batch(obs, actions, logp + noise(0.3), values + noise(0.4), noise(2.0) + 0.3,
                     noise(1.0))  # fmt: skip


def _reference(policy, num_agents: int, mb: Batch, cfg: C.PPOConfig):
    """Autograd through PPO.minibatch_losses (MultiAgentPPO's for K agents): the gradient of
    each parameter and the loss terms' means over every agent's samples."""
    buf = RolloutBuffer(2, num_agents, (4,), (), torch.int64, CPU, "host", 1)
    algo = (MultiAgentPPO if num_agents > 1 else PPO)(policy, buf, cfg, 10, CPU)
    squeeze = (lambda t: t) if num_agents > 1 else (lambda t: t[0])
    loss, *terms = algo.minibatch_losses(*(squeeze(t) for t in (
        mb.obs, mb.actions, mb.logprobs, mb.advantages, mb.values, mb.returns)))  # fmt: skip
    policy.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in fused.module_params(policy)], torch.stack(terms)


@pytest.mark.parametrize(
    "num_agents,hidden,activation,clip_value_loss",
    [(1, (8, 6), "tanh", True), (3, (6, 8), "relu", False), (4, (5, 7), "tanh", True),
     (2, (7, 5), "relu", True)],
)  # fmt: skip
def test_gemm_gradient_equals_autograd_through_ppo_loss_float64(rng, num_agents, hidden,
                                                                 activation,
                                                                 clip_value_loss):  # fmt: skip
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    cfg = C.PPOConfig(clip_coef=0.2, ent_coef=0.05, vf_coef=0.7, clip_value_loss=clip_value_loss)
    policy = _policy64(num_agents, hidden, activation, g)
    mb = _minibatch(policy, num_agents, 37, g)
    ref_grads, ref_terms = _reference(policy, num_agents, mb, cfg)
    params = [p.detach() for p in fused.module_params(policy)]
    grads = [torch.full_like(p, float("nan")) for p in params]  # every element must be written
    in_major = num_agents > 1
    actor, critic = layers_of(params, in_major)
    actor_g, critic_g = layers_of(grads, in_major)
    hp = Hyper(cfg.clip_coef, cfg.ent_coef, cfg.vf_coef, cfg.clip_value_loss)
    terms = minibatch_gradients(actor, critic, mb, hp, activation == "tanh", actor_g, critic_g)
    for i, (got, want) in enumerate(zip(grads, ref_grads, strict=True)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12, msg=f"tensor {i}")
    assert 0 < ref_terms[4] < 1  # some samples clipped, not all
    means = terms.mean(0) / mb.obs.shape[1]
    torch.testing.assert_close(means[:4], ref_terms[:4], rtol=1e-10, atol=1e-12)
    # PPO counts its clipped samples in float32 (.float()): the same fraction, in float32
    torch.testing.assert_close(means[4].float(), ref_terms[4].float(), rtol=0, atol=0)


@pytest.mark.parametrize(
    "num_agents,hidden,activation,clip_value_loss,steps_before",
    [(1, (8, 6), "tanh", True, 0), (2, (6, 8), "relu", False, 7), (3, (8, 6), "tanh", True, 0)],
)
def test_fused_update_with_gemm_gradients_matches_ppo_and_adam(rng, num_agents, hidden,
                                                               activation, clip_value_loss,
                                                               steps_before):  # fmt: skip
    """The whole fused update (prepare, gathers, GEMM gradients, the apply kernel's clip and
    Adam) against PPO._minibatch_step + torch's Adam in float64, agent by agent."""
    steps, envs = 6, 4
    cfg, env, policy, buf, algo = tf._setup(
        rng, num_agents, envs, steps, hidden, activation, minibatches=2, num_epochs=2,
        ent_coef=0.05, clip_value_loss=clip_value_loss, clip_coef=0.2, max_grad_norm=0.5,
    )  # fmt: skip
    run = fused.FusedPPO(algo, env, cfg, fused_update=True, threads=tf.THREADS, grads="gemm")
    assert run.grads_path == "gemm"  # the kernel's update would match the reference too
    perm = tf.random_rollout(rng, policy, buf, num_agents, epochs=2)
    ref_policy = copy.deepcopy(policy)
    fields = {n: getattr(buf, n).clone() for n in ("obs", "actions", "logprobs", "values",
                                                     "advantages", "returns")}  # fmt: skip
    run.adam_steps = steps_before
    assert run.update(0.01, perm=perm) == (4, 2)
    for name, value in fields.items():
        getattr(buf, name).copy_(value)  # prepare normalised the advantages in place
    ref_params, _, ref_sums = tf._reference_update(ref_policy, buf, cfg.ppo, num_agents, perm,
                                                   0.01, steps_before)  # fmt: skip
    assert 0 < ref_sums[4] < 4
    for k in range(num_agents):
        got = tf._agent_tensors(policy, num_agents, k)
        for i, (a, b) in enumerate(zip(got, ref_params[k], strict=True)):
            torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3, msg=f"agent {k} tensor {i}")
    torch.testing.assert_close(algo._loss_sums.cpu().double(), ref_sums, atol=1e-4, rtol=1e-4)
