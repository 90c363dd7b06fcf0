"""PPO loss pieces against hand-computed values, and one update on a real rollout."""

from __future__ import annotations

import math
from typing import ClassVar

import pytest
import torch

from orin_rl.algorithms.ppo import PPO, approx_kl, clipped_surrogate_loss, value_loss
from orin_rl.buffers import RolloutBuffer
from orin_rl.config import PPOConfig
from orin_rl.envs import make
from orin_rl.models import ActorCritic, PolicySpec


class TestSurrogate:
    def test_hand_computed(self):
        # ratios r = [1.5, 0.5, 1.1], advantages A = [1, 1, -2], eps = 0.2
        # per sample max(-A r, -A clip(r)): max(-1.5, -1.2) = -1.2; max(-0.5, -0.8) = -0.5;
        # max(2.2, 2.2) = 2.2  → mean = (-1.2 - 0.5 + 2.2) / 3 = 0.1666…
        old = torch.zeros(3)
        new = torch.log(torch.tensor([1.5, 0.5, 1.1]))
        adv = torch.tensor([1.0, 1.0, -2.0])
        assert clipped_surrogate_loss(new, old, adv, 0.2).item() == pytest.approx(0.5 / 3, rel=1e-6)

    def test_ratio_one_is_minus_mean_advantage(self):
        adv = torch.tensor([0.3, -1.2, 2.0])
        lp = torch.tensor([-0.1, -2.0, -0.7])
        assert clipped_surrogate_loss(lp, lp, adv, 0.2).item() == pytest.approx(-adv.mean().item())


class TestValueLoss:
    def test_unclipped(self):
        v, r = torch.tensor([1.0, 2.0]), torch.tensor([0.0, 4.0])
        assert value_loss(v, v, r, None).item() == pytest.approx(0.5 * (1 + 4) / 2)

    def test_clipped_takes_the_pessimistic_error(self):
        # old 0, new 1.0, return 1.0, clip 0.2: unclipped error 0, clipped value 0.2 → error 0.64
        v, old, r = torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([1.0])
        assert value_loss(v, old, r, 0.2).item() == pytest.approx(0.5 * 0.64)


def test_approx_kl_hand_computed():
    # log r = [ln 2, 0] → mean((2 - 1) - ln 2, 0) = (1 - ln 2) / 2
    kl = approx_kl(torch.tensor([math.log(2.0), 0.0]), torch.zeros(2))
    assert kl.item() == pytest.approx((1 - math.log(2.0)) / 2)


class TestUpdate:
    def _algo(self, **overrides):
        cfg = PPOConfig(num_steps=16, num_epochs=2, num_minibatches=2, **overrides)
        env = make("CartPole-v1", 4, seed=0)
        spec = PolicySpec.from_spaces(env.observation_space, env.action_space)
        policy = ActorCritic(spec)
        buffer = RolloutBuffer(16, 4, (4,), (), torch.int64, "cpu", "host", 2)
        return env, PPO(policy, buffer, cfg, num_iterations=10, device=torch.device("cpu"))

    def _rollout(self, env, algo):
        obs = env.reset()
        for _ in range(16):
            step = env.step(algo.act(obs))
            algo.process_env_step(step)
            obs = step.obs
        algo.compute_returns(obs)

    def test_update_changes_parameters_and_reports_losses(self):
        torch.manual_seed(0)
        env, algo = self._algo()
        self._rollout(env, algo)
        before = [p.detach().clone() for p in algo.policy.parameters()]
        stats = algo.update()
        assert set(stats) >= {"losses/policy", "losses/value", "losses/entropy", "losses/approx_kl"}
        assert all(math.isfinite(v) for v in stats.values())
        assert stats["losses/epochs"] == 2
        assert any(
            not torch.equal(a, b) for a, b in zip(before, algo.policy.parameters(), strict=True)
        )
        assert algo.buffer.step == 0 and algo.iteration == 1

    def test_per_minibatch_advantages_are_normalised_in_the_loss_not_over_the_rollout(self):
        """``ppo.normalize_advantage_per_minibatch`` (SB3's, rsl_rl's per_mini_batch): the
        rollout keeps its raw GAE advantages, and the surrogate takes each minibatch's
        advantages normalised on their own, (a - mean) / (std + 1e-8) with the unbiased std,
        as a float64 reference computes them."""
        torch.manual_seed(0)
        env, raw = self._algo(normalize_advantage=False)
        self._rollout(env, raw)
        torch.manual_seed(0)
        env, algo = self._algo(normalize_advantage_per_minibatch=True)
        self._rollout(env, algo)
        assert torch.equal(algo.buffer.advantages, raw.buffer.advantages)  # not the rollout's

        n = 32
        obs, actions = algo.buffer.obs.flatten(0, 1)[:n], algo.buffer.actions.flatten(0, 1)[:n]
        adv = algo.buffer.advantages.flatten()[:n] * 3.0 + 1.5  # mean and scale far from 0, 1
        old_logprobs = algo.buffer.logprobs.flatten()[:n] + 0.1 * torch.randn(n)
        values, returns = algo.buffer.values.flatten()[:n], algo.buffer.returns.flatten()[:n]
        _, pg_loss, *_ = algo.minibatch_losses(obs, actions, old_logprobs, adv, values, returns)
        a64 = adv.double()
        normed = (a64 - a64.mean()) / (a64.std(unbiased=True) + 1e-8)
        with torch.no_grad():
            logprobs, _, _ = algo.policy.evaluate(obs, actions)
        want = clipped_surrogate_loss(logprobs.double(), old_logprobs.double(), normed, 0.2)
        assert pg_loss.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-7)

    def test_lr_anneals_linearly(self):
        _, algo = self._algo(learning_rate=1e-3)
        algo.iteration = 5
        assert algo.learning_rate() == pytest.approx(5e-4)

    @pytest.mark.parametrize(
        ("kl", "want"),
        [(0.05, 1e-3 / 1.5), (0.001, 1.5e-3), (0.01, 1e-3), (0.0, 1e-3)],
        ids=["above 2x: / 1.5", "below half: x 1.5", "in band: kept", "zero: kept"],
    )
    def test_adaptive_learning_rate_follows_rsl_rls_rule(self, kl, want):
        """desired_kl 0.01: KL > 0.02 divides by 1.5, 0 < KL < 0.005 multiplies by 1.5."""
        _, algo = self._algo(learning_rate=1e-3, anneal_lr=False, desired_kl=0.01)
        algo._adapt_learning_rate(torch.tensor(kl))
        assert algo.learning_rate() == pytest.approx(want, rel=1e-6)

    def test_adaptive_learning_rate_stays_within_its_bounds(self):
        _, algo = self._algo(learning_rate=9e-3, anneal_lr=False, desired_kl=0.01)
        algo._adapt_learning_rate(torch.tensor(1e-4))
        assert algo.learning_rate() == pytest.approx(1e-2)  # 1.35e-2 capped
        algo.optimizer.param_groups[0]["lr"].fill_(1.2e-5)
        algo._adapt_learning_rate(torch.tensor(1.0))
        assert algo.learning_rate() == pytest.approx(1e-5)  # 8e-6 floored

    def test_adaptive_learning_rate_moves_during_an_update_and_is_logged(self):
        """A huge desired_kl: every minibatch's KL is below half of it. The first of the 4
        minibatch steps sees the behaviour policy itself (KL exactly 0: kept, as in rsl_rl),
        the other 3 multiply the rate by 1.5; the log shows the end value, and the next
        iteration starts from it (anneal_lr off)."""
        torch.manual_seed(0)
        env, algo = self._algo(learning_rate=1e-4, anneal_lr=False, desired_kl=10.0)
        self._rollout(env, algo)
        stats = algo.update()
        assert stats["charts/learning_rate"] == pytest.approx(1e-4 * 1.5**3, rel=1e-5)
        assert algo.set_learning_rate() == pytest.approx(1e-4 * 1.5**3, rel=1e-5)

    @pytest.mark.parametrize("mode", ["final_obs", "value"])
    def test_a_time_out_bootstraps_from_what_timeout_bootstrap_names(self, mode):
        """final_obs: V(the state the episode reached); value (rsl_rl's): V(the observation
        the step started from), the value stored with the step; a termination: nothing."""
        from orin_rl.envs.base import StepResult

        torch.manual_seed(0)
        _, algo = self._algo(timeout_bootstrap=mode)
        obs = torch.randn(4, 4)
        algo.act(obs)
        started = algo.transition.values.clone()
        final = torch.randn(4, 4) * 3
        step = StepResult(
            obs=torch.randn(4, 4),
            reward=torch.zeros(4),
            terminated=torch.tensor([False, False, True, False]),
            truncated=torch.tensor([True, True, False, False]),
            final_obs=final,
        )
        algo.process_env_step(step)
        want = started if mode == "value" else algo.values_of(final)
        got = algo.buffer.bootstrap_values[0]
        torch.testing.assert_close(got[:2], want[:2])
        assert torch.equal(got[2:], torch.zeros(2))

    def test_compiled_update_takes_the_eager_steps(self, monkeypatch):
        """ppo.compile_update: the minibatch loss traced whole (fullgraph: a graph break is an
        error) and its backward through AOTAutograd; the same rollout gives the same losses
        and parameters as the eager update. aot_eager here (no C++ compiler needed): the
        tracing, not inductor's code generation, is what this box can check."""
        from torch._dynamo import lookup_backend

        graphs = []

        def backend(gm, example_inputs):  # aot_eager, counting the graphs it is handed
            graphs.append(gm)
            return lookup_backend("aot_eager")(gm, example_inputs)

        torch._dynamo.reset()
        monkeypatch.setattr(PPO, "compile_backend", staticmethod(backend))
        results = []
        for compiled in (False, True):
            torch.manual_seed(0)
            env, algo = self._algo(compile_update=compiled, ent_coef=0.01)
            self._rollout(env, algo)
            stats = algo.update()
            results.append((stats, [p.detach().clone() for p in algo.policy.parameters()]))
        (eager, eager_params), (comp, comp_params) = results
        assert len(graphs) == 1  # one graph for all 4 minibatch steps: no break, no recompile
        assert comp == pytest.approx(eager, rel=1e-5, abs=1e-7)
        for a, b in zip(eager_params, comp_params, strict=True):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)

    def test_target_kl_stops_early(self):
        torch.manual_seed(0)
        env, algo = self._algo(target_kl=1e-12, learning_rate=1e-2)
        self._rollout(env, algo)
        assert algo.update()["losses/epochs"] == 1


@pytest.mark.parametrize("max_grad_norm", [1e9, 0.05], ids=["unclipped", "clipped"])
def test_many_agents_step_gives_each_agent_its_own_ppo_gradient(rng, max_grad_norm):
    """The shared minibatch step on K stacked agents leaves, for each agent, the gradient a
    single-agent PPO step computes on that agent's minibatch (loss summed over agents, clipped
    per agent)."""
    from orin_rl.algorithms.ppo_multi import MultiAgentPPO
    from orin_rl.buffers import Batch
    from orin_rl.models.batched import BatchedActorCritic

    k, mb = 3, 16
    spec = PolicySpec([4], "discrete", 2, hidden_sizes=[8, 8])
    cfg = PPOConfig(num_steps=4, num_minibatches=1, max_grad_norm=max_grad_norm, ent_coef=0.01)
    multi_policy = BatchedActorCritic(spec, k)
    singles = [multi_policy.agent(i) for i in range(k)]
    device = torch.device("cpu")

    def buffer(envs):
        return RolloutBuffer(4, envs, (4,), (), torch.int64, device, "host", 1)

    multi = MultiAgentPPO(multi_policy, buffer(2 * k), cfg, 10, device)
    single_algos = [PPO(p, buffer(2), cfg, 10, device) for p in singles]
    data = {
        "obs": torch.from_numpy(rng.normal(size=(k, mb, 4)).astype("float32")),
        "actions": torch.from_numpy(rng.integers(0, 2, (k, mb))),
        "logprobs": torch.from_numpy(rng.normal(-0.7, 0.1, (k, mb)).astype("float32")),
        "values": torch.from_numpy(rng.normal(size=(k, mb)).astype("float32")),
        "advantages": torch.from_numpy(rng.normal(size=(k, mb)).astype("float32")),
        "returns": torch.from_numpy(rng.normal(size=(k, mb)).astype("float32")),
    }
    multi._minibatch_step(Batch(**data))
    for i, algo in enumerate(single_algos):
        algo._minibatch_step(Batch(**{name: v[i] for name, v in data.items()}))
        for net in ("actor", "critic"):
            batched, single = getattr(multi_policy, net), getattr(singles[i], net)
            for layer, (w, b) in enumerate(zip(batched.weights, batched.biases, strict=True)):
                torch.testing.assert_close(w.grad[i].T, single[2 * layer].weight.grad)
                torch.testing.assert_close(b.grad[i, 0], single[2 * layer].bias.grad)


class TestRslRlMode:
    """``ppo.rsl_rl`` (mjlab's preset): the network and the step as rsl_rl 5.4 makes them."""

    SPEC: ClassVar[dict] = dict(
        obs_shape=[6], action_kind="continuous", action_dim=2, hidden_sizes=[8, 4],
        activation="elu", obs_groups={"actor": [0, 4], "critic": [0, 6]},
        init_log_std=math.log(0.5))  # fmt: skip

    def _ppo(self, rsl_rl: bool) -> PPO:
        policy = ActorCritic(PolicySpec(**self.SPEC, rsl_rl=rsl_rl))
        buffer = RolloutBuffer(4, 2, (6,), (2,), torch.float32, "cpu", "host", 1)
        cfg = PPOConfig(rsl_rl=rsl_rl, max_grad_norm=1.0)
        return PPO(policy, buffer, cfg, 1, torch.device("cpu"))

    def test_torch_default_init_and_a_learned_std(self):
        """Layers as ``nn.Linear`` makes them (no orthogonal init, no 0.01 output gain), the
        std itself learned (not its log), starting at exp(init_log_std)."""
        torch.manual_seed(0)
        policy = ActorCritic(PolicySpec(**self.SPEC, rsl_rl=True))
        torch.manual_seed(0)
        want = [torch.nn.Linear(i, o) for i, o in ((4, 8), (8, 4), (4, 2), (6, 8), (8, 4), (4, 1))]
        got = [m for m in [*policy.actor, *policy.critic] if isinstance(m, torch.nn.Linear)]
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)
        assert not hasattr(policy, "log_std")
        dist = policy.distribution(torch.zeros(3, 6))
        assert torch.allclose(dist.log_std.exp(), torch.full((3, 2), 0.5))
        assert torch.allclose(policy.std, torch.full((2,), 0.5))

    def test_actor_and_critic_gradients_are_clipped_each_on_its_own(self):
        """Each to max_grad_norm (a global clip would leave the smaller one far below it);
        Adam's eps is torch's default, 1e-8."""
        for rsl_rl in (True, False):
            ppo = self._ppo(rsl_rl)
            critic = {id(p) for p in ppo.policy.critic.parameters()}
            for p in ppo.policy.parameters():
                p.grad = torch.full_like(p, 10.0 if id(p) in critic else 1.0)
            ppo.clip_gradients()
            norms = [
                torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in group]))
                for group in (
                    [p for p in ppo.policy.parameters() if id(p) not in critic],
                    list(ppo.policy.critic.parameters()),
                )
            ]
            if rsl_rl:
                assert all(abs(float(n) - 1.0) < 1e-5 for n in norms), norms
                assert ppo.optimizer.param_groups[0]["eps"] == 1e-8
            else:
                assert abs(float(torch.linalg.vector_norm(torch.stack(norms))) - 1.0) < 1e-5
                assert float(norms[0]) < 0.2


class TestDecoupledClip:
    """``PPO.use_proximal_policy`` (``train.overlap_correction=decoupled``) against a float64
    reference of Hilton et al. 2021's decoupled loss, on fresh random inputs:
    mean(w * max(-A r, -A clip(r, 1 - eps, 1 + eps))), r = pi / pi_prox,
    w = min(pi_prox / pi_behaviour, c), pi_prox the learner's policy before the update's steps.

    Mutations, each of which failed this class (put back one at a time): the advantages not
    weighted (``buffer.advantages.mul_`` dropped); the weight not truncated
    (``behaviour_weights`` returning the bare ratio); the stored log-probabilities not
    replaced by the proximal ones (``behaviour.copy_(prox)`` dropped); the weight inverted
    (``behaviour - prox``); the rsl_rl exact KL's means left the behaviour's.
    """

    T, N, OBS, ACT, CLIP = 8, 6, 5, 3, 0.2

    @pytest.fixture(autouse=True)
    def float64(self):
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        yield
        torch.set_default_dtype(before)

    def _algo(self, rng, weight_clip, rsl_rl=False, **cfg):
        torch.manual_seed(int(rng.integers(2**31)))
        cfg = PPOConfig(num_steps=self.T, num_minibatches=1, clip_coef=self.CLIP, ent_coef=0.0,
                        vf_coef=0.0, behaviour_weight_clip=weight_clip, rsl_rl=rsl_rl, **cfg)  # fmt: skip
        spec = PolicySpec([self.OBS], "continuous", self.ACT, hidden_sizes=[16], rsl_rl=rsl_rl)
        buffer = RolloutBuffer(self.T, self.N, (self.OBS,), (self.ACT,), torch.float64, "cpu",
                               "host", 1, keep_action_means=rsl_rl, float_dtype=torch.float64)  # fmt: skip
        algo = PPO(ActorCritic(spec), buffer, cfg, 10, torch.device("cpu"))
        algo.decoupled = True

        def normal(*shape, scale=1.0):
            return torch.from_numpy(rng.normal(scale=scale, size=shape))

        buffer.obs.copy_(normal(self.T, self.N, self.OBS))
        buffer.actions.copy_(normal(self.T, self.N, self.ACT))
        buffer.logprobs.copy_(self._prox(algo) + normal(self.T, self.N, scale=0.7))
        buffer.advantages.copy_(normal(self.T, self.N))
        buffer.step = self.T
        return algo  # the behaviour policy: the learner's, a noisy update behind

    def _prox(self, algo) -> torch.Tensor:
        """(T, N) log pi_prox of the stored actions: the learner's policy now."""
        buffer = algo.buffer
        with torch.no_grad():
            obs, actions = buffer.obs.flatten(0, 1), buffer.actions.flatten(0, 1)
            return algo.policy.evaluate(obs, actions)[0].view(self.T, self.N)

    @pytest.mark.parametrize("weight_clip", [1.5, None], ids=["truncated", "untruncated"])
    def test_the_update_path_equals_the_float64_reference(self, rng, weight_clip):
        """The loss and its gradient, after the policy moved away from the proximal one."""
        algo = self._algo(rng, weight_clip)
        buffer, policy = algo.buffer, algo.policy
        obs, actions = buffer.obs.reshape(-1, self.OBS), buffer.actions.reshape(-1, self.ACT)
        behaviour = buffer.logprobs.flatten().clone()
        advantages = buffer.advantages.flatten().clone()
        prox = self._prox(algo).flatten()
        algo.use_proximal_policy()
        with torch.no_grad():  # as gradient steps would: pi moves off pi_prox
            for p in policy.parameters():
                p.add_(torch.from_numpy(rng.normal(scale=0.05, size=tuple(p.shape))))

        # the reference, written out
        logprobs = policy.evaluate(obs, actions)[0]
        ratio = torch.exp(logprobs - prox)
        weights = torch.exp(prox - behaviour)
        if weight_clip is not None:
            assert (weights > weight_clip).any() and (weights < weight_clip).any()
            weights = torch.minimum(weights, torch.tensor(weight_clip))
        clipped = torch.clamp(ratio, 1 - self.CLIP, 1 + self.CLIP)
        assert (clipped != ratio).any() and (clipped == ratio).any()
        reference = (weights * torch.max(-advantages * ratio, -advantages * clipped)).mean()
        want = torch.autograd.grad(reference, list(policy.parameters()), allow_unused=True)

        mb = next(iter(buffer.minibatches(1)))
        loss, pg_loss, *_ = algo.minibatch_losses(
            mb.obs, mb.actions, mb.logprobs, mb.advantages, mb.values, mb.returns
        )
        got = torch.autograd.grad(loss, list(policy.parameters()), allow_unused=True)
        torch.testing.assert_close(pg_loss, reference.detach(), rtol=1e-12, atol=1e-12)
        for g, w in zip(got, want, strict=True):
            if w is None:
                assert g is None or not g.any()
            else:
                torch.testing.assert_close(g, w, rtol=1e-10, atol=1e-12)

    def test_it_logs_the_behaviour_kl_and_the_truncated_fraction(self, rng):
        algo = self._algo(rng, 1.5)
        behaviour = algo.buffer.logprobs.clone()
        prox = self._prox(algo)
        algo.use_proximal_policy()
        stats = algo.finish_update(1, 1, 0.0)
        log_ratio = prox - behaviour
        assert stats["losses/behaviour_kl"] == pytest.approx(
            (log_ratio.exp() - 1 - log_ratio).mean().item(), rel=1e-6
        )
        assert stats["losses/behaviour_weight_clipped"] == pytest.approx(
            (log_ratio.exp() > 1.5).double().mean().item(), rel=1e-6
        )

    def test_rsl_rls_exact_kl_is_taken_against_the_proximal_gaussian(self, rng):
        """With rsl_rl's exact KL, the proximal policy's means replace the stored ones: before
        any step the KL of the first minibatch is 0 (it was the behaviour's otherwise)."""
        algo = self._algo(rng, 2.0, rsl_rl=True)
        means = rng.normal(size=(self.T, self.N, self.ACT))
        algo.buffer.action_means.copy_(torch.from_numpy(means))
        algo.use_proximal_policy()
        algo._behaviour_std = algo.policy.std.detach()
        mb = next(iter(algo.buffer.minibatches(1)))
        out = algo.minibatch_losses(mb.obs, mb.actions, mb.logprobs, mb.advantages, mb.values,
                                    mb.returns, mb.action_means, algo._behaviour_std)  # fmt: skip
        assert out[4].item() == pytest.approx(0.0, abs=1e-12)

    def test_proximal_values_recompute_gae_with_the_learners_critic(self, rng):
        """``ppo.proximal_values``: advantages and returns are GAE's with the learner's values,
        written out here (the behaviour's V(last obs) and time-out bootstraps kept), then
        normalised and weighted. Mutations, each failed this test: the values not recomputed;
        the last step bootstrapped from the new V(s_T-1) instead of the stored V(last obs)."""
        gamma, lam = 0.9, 0.8
        algo = self._algo(rng, 1.5, proximal_values=True, gamma=gamma, gae_lambda=lam)
        buffer = algo.buffer
        T, N = self.T, self.N
        buffer.rewards.copy_(torch.from_numpy(rng.normal(size=(T, N))))
        ended = torch.from_numpy(rng.random((T, N)) < 0.2)
        terminated = ended & torch.from_numpy(rng.random((T, N)) < 0.5)
        buffer.episode_end.copy_(ended)
        buffer.terminated.copy_(terminated)
        buffer.bootstrap_values.copy_(torch.from_numpy(rng.normal(size=(T, N))) * ~terminated)
        buffer.values.copy_(torch.from_numpy(rng.normal(size=(T, N))))  # the behaviour critic's
        last = torch.from_numpy(rng.normal(size=N))
        algo.compute_returns(last_values=last)
        behaviour = buffer.logprobs.clone()
        prox = self._prox(algo)
        with torch.no_grad():
            values = algo.policy.value(buffer.obs.flatten(0, 1)).view(T, N)

        advantages = torch.zeros(T, N)  # GAE, written out
        following = torch.zeros(N)
        for t in reversed(range(T)):
            next_v = values[t + 1] if t + 1 < T else last
            next_v = torch.where(ended[t], buffer.bootstrap_values[t], next_v)
            delta = buffer.rewards[t] + gamma * next_v * ~terminated[t] - values[t]
            following = delta + gamma * lam * ~ended[t] * following
            advantages[t] = following
        normalised = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        weights = torch.clamp(torch.exp(prox - behaviour), max=1.5)

        algo.use_proximal_policy()
        torch.testing.assert_close(buffer.values, values, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(buffer.returns, advantages + values, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(buffer.advantages, weights * normalised, rtol=1e-6, atol=1e-8)
