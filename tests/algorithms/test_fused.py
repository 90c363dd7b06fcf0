"""The fused PPO kernels against the general path, on fresh random inputs.

Without a GPU the kernels run in Numba's CUDA simulator (small shapes and thread counts); on
the H200 the same tests run them on the device at the production thread counts. References are
float64: the torch env (CartPole, and MountainCar and Acrobot for the other tasks), the torch
policy and PPO._minibatch_step + torch's Adam.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys

import pytest
import torch

from orin_rl import config as C
from orin_rl.algorithms import PPO, fused
from orin_rl.algorithms.ppo_multi import MultiAgentPPO
from orin_rl.buffers import Batch, RolloutBuffer
from orin_rl.envs.gpu.classic import (
    Acrobot,
    CartPole,
    MountainCar,
    MountainCarContinuous,
    Pendulum,
)
from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models.batched import BatchedActorCritic
from tests.algorithms.test_fused_ptx import _nvvm_available
from tests.conftest import HAS_CUDA

DEVICE = torch.device("cuda" if HAS_CUDA else "cpu")
THREADS = None if HAS_CUDA else (16, 32)  # the simulator runs every thread in Python


def _setup(rng, num_agents, num_envs, num_steps, hidden, activation="tanh", minibatches=2,
           max_steps=500, env_cls=CartPole, **ppo):  # fmt: skip
    torch.manual_seed(int(rng.integers(2**31)))
    cfg = C.Config()
    cfg.env.num_envs = num_envs
    cfg.ppo.num_steps = num_steps
    cfg.ppo.num_minibatches = minibatches
    cfg.ppo.hidden_sizes = list(hidden)
    cfg.ppo.activation = activation
    for key, value in ppo.items():
        setattr(cfg.ppo, key, value)
    env = env_cls(num_agents * num_envs, DEVICE, max_episode_steps=max_steps)
    env.reset(seed=int(rng.integers(2**31)))
    spec = PolicySpec.from_spaces(env.observation_space, env.action_space,
                                  hidden_sizes=list(hidden), activation=activation)  # fmt: skip
    policy = BatchedActorCritic(spec, num_agents) if num_agents > 1 else ActorCritic(spec)
    policy = policy.to(DEVICE)
    for p in policy.parameters():  # bigger than the orthogonal init: actions vary, values too
        p.data.copy_(torch.randn_like(p) * 0.5)
    buf = RolloutBuffer(num_steps, num_agents * num_envs, env.observation_space.shape, (),
                        torch.int64, DEVICE, "auto", minibatches)  # fmt: skip
    cls = MultiAgentPPO if num_agents > 1 else PPO
    algo = cls(policy, buf, cfg.ppo, 10, DEVICE)
    return cfg, env, policy, buf, algo


@torch.no_grad()
def _forward64(policy, obs, num_agents):
    """(logits, values) in float64 of raw (K*N, D) observations."""
    p64 = copy.deepcopy(policy).double()
    x = obs.double()
    if num_agents > 1:
        x = x.view(num_agents, -1, x.shape[-1])
        logits, values = p64.actor(x), p64.critic(x).squeeze(-1)
        return logits.flatten(0, 1), values.flatten()
    return p64.actor(x), p64.critic(x).squeeze(-1)


def _reset_states(env, u):
    """The states a reset draws from the uniforms ``u`` (envs, reset uniforms) as the kernels
    take them: one a state variable whose range is not a point, in order."""
    low, high = (torch.tensor(b, dtype=torch.float64) for b in (env._reset_low, env._reset_high))
    cols, i = [], 0
    for lo, hi in zip(low, high, strict=True):
        cols.append(lo + (hi - lo) * u[:, i] if hi > lo else lo.expand(u.shape[0]))
        i += int(hi > lo)
    return torch.stack(cols, -1)


def _reference_rollout(policy, env, rand, num_agents, num_steps, gamma, lam):
    """The general path's semantics in float64, the torch env's dynamics (``env``'s class):
    actions by inverse CDF of the same uniforms, resets from the same uniforms."""
    sim = type(env)(env.num_envs, "cpu", dtype=torch.float64)
    state = env.state.double().cpu().clone()
    elapsed = env.elapsed.cpu().clone()
    ep_ret = env.stats.episode_return.cpu().clone()
    rand = rand.double().cpu()
    out = {k: [] for k in ("obs", "actions", "logprobs", "values", "rewards", "terminated",
                           "episode_end", "bootstrap")}  # fmt: skip
    ep_len = env.stats.episode_length.cpu().clone()
    last_ret = torch.zeros(env.num_envs, dtype=torch.float64)
    last_len = torch.zeros(env.num_envs, dtype=torch.int64)
    cpu_policy = copy.deepcopy(policy).cpu()
    for t in range(num_steps):
        obs = sim._observe(state)
        logits, values = _forward64(cpu_policy, obs, num_agents)
        logp_all = torch.log_softmax(logits, -1)
        cdf = logp_all.exp().cumsum(-1)
        actions = (rand[t, :, :1] >= cdf).sum(-1).clamp(max=logits.shape[-1] - 1)
        nxt, reward, term = sim._dynamics(state, actions)
        elapsed = elapsed + 1
        trunc = elapsed >= env.max_episode_steps
        done = term | trunc
        _, v_final = _forward64(cpu_policy, sim._observe(nxt), num_agents)
        out["obs"].append(obs)
        out["actions"].append(actions)
        out["logprobs"].append(logp_all.gather(-1, actions[:, None]).squeeze(-1))
        out["values"].append(values)
        out["rewards"].append(reward)
        out["terminated"].append(term)
        out["episode_end"].append(done)
        out["bootstrap"].append(torch.where(trunc & ~term, v_final, 0.0))
        ep_ret = ep_ret + reward
        ep_len = ep_len + 1
        last_ret = torch.where(done, ep_ret, last_ret)
        last_len = torch.where(done, ep_len, last_len)
        ep_ret = torch.where(done, 0.0, ep_ret)
        ep_len = torch.where(done, 0, ep_len)
        reset = _reset_states(sim, rand[t, :, 1:])
        state = torch.where(done[:, None], reset, nxt)
        elapsed = torch.where(done, 0, elapsed)
    ref = {k: torch.stack(v) for k, v in out.items()}
    _, last_v = _forward64(cpu_policy, sim._observe(state), num_agents)
    adv = torch.zeros(num_steps, env.num_envs, dtype=torch.float64)
    carry = torch.zeros(env.num_envs, dtype=torch.float64)
    for t in reversed(range(num_steps)):
        nv = last_v if t == num_steps - 1 else ref["values"][t + 1]
        nv = torch.where(ref["episode_end"][t], ref["bootstrap"][t], nv)
        bootstrap = torch.where(ref["terminated"][t], 0.0, gamma * nv)
        delta = ref["rewards"][t] + bootstrap - ref["values"][t]
        carry = delta + torch.where(ref["episode_end"][t], 0.0, gamma * lam * carry)
        adv[t] = carry
    ref.update(advantages=adv, returns=adv + ref["values"], state=state, elapsed=elapsed,
               last_ret=last_ret, last_len=last_len, ep_ret=ep_ret, ep_len=ep_len)  # fmt: skip
    return ref


@pytest.mark.parametrize(
    "num_agents,num_envs,hidden,activation",
    [(1, 3, (8, 6), "tanh"), (2, 5, (6, 8), "relu")],  # 5 envs: a partly filled second block
)
def test_rollout_kernel_matches_the_torch_env_and_policy(rng, num_agents, num_envs, hidden,
                                                         activation):  # fmt: skip
    steps = 9
    cfg, env, policy, buf, algo = _setup(rng, num_agents, num_envs, steps, hidden, activation,
                                         minibatches=1, max_steps=5)  # fmt: skip
    n = env.num_envs
    # Some envs start near the edge (terminations), some part-way into an episode (truncations
    # at different steps, bootstrapped from V(final observation)).
    env.state[: n // 2, 2] = 0.2
    env.state[: n // 2, 3] = 1.5
    env.elapsed.copy_(torch.as_tensor(rng.integers(0, 5, n)))
    env.stats.episode_return.copy_(env.elapsed.double())
    run = fused.FusedPPO(algo, env, cfg, fused_update=False, threads=THREADS)
    start = {"state": env.state.clone(), "elapsed": env.elapsed.clone(),
             "ret": env.stats.episode_return.clone()}  # fmt: skip
    run.rollout()
    rand = run.rand.clone()
    env.state.copy_(start["state"])
    env.elapsed.copy_(start["elapsed"])
    env.stats.episode_return.copy_(start["ret"])
    ref = _reference_rollout(policy, env, rand, num_agents, steps, cfg.ppo.gamma,
                             cfg.ppo.gae_lambda)  # fmt: skip
    got = {k: getattr(buf, k).cpu() for k in ("obs", "actions", "logprobs", "values",
                                              "terminated", "episode_end", "advantages",
                                              "returns")}  # fmt: skip
    assert ref["terminated"].any() and (ref["episode_end"] & ~ref["terminated"]).any()
    assert torch.equal(got["actions"], ref["actions"])
    assert torch.equal(got["terminated"], ref["terminated"])
    assert torch.equal(got["episode_end"], ref["episode_end"])
    for name in ("obs", "logprobs", "values", "advantages", "returns"):
        torch.testing.assert_close(got[name].double(), ref[name], atol=2e-4, rtol=1e-4,
                                   msg=name)  # fmt: skip
    torch.testing.assert_close(buf.bootstrap_values.cpu().double(), ref["bootstrap"],
                               atol=2e-4, rtol=1e-4)  # fmt: skip
    assert buf.rewards.cpu().eq(1.0).all()


def test_rollout_kernel_advances_the_env_and_its_episode_stats(rng):
    # 10 steps of a 4-step time limit: every env finishes two episodes and starts a third.
    cfg, env, policy, _, algo = _setup(rng, 1, 3, 10, (8, 8), minibatches=1, max_steps=4)
    run = fused.FusedPPO(algo, env, cfg, fused_update=False, threads=THREADS)
    state, elapsed, ret = env.state.clone(), env.elapsed.clone(), env.stats.episode_return.clone()
    run.rollout()
    kernel_state, kernel_elapsed = env.state.cpu().clone(), env.elapsed.cpu().clone()
    running = env.stats.episode_return.cpu().clone()
    returns, lengths = env.pop_episode_stats()
    env.state.copy_(state)
    env.elapsed.copy_(elapsed)
    env.stats.episode_return.copy_(ret)
    ref = _reference_rollout(policy, env, run.rand, 1, 10, cfg.ppo.gamma, cfg.ppo.gae_lambda)
    torch.testing.assert_close(kernel_state.double(), ref["state"], atol=1e-5, rtol=1e-5)
    assert torch.equal(kernel_elapsed, ref["elapsed"])
    assert len(returns) == 3 and returns == ref["last_ret"].tolist()
    assert lengths == [int(r) for r in returns]
    assert torch.equal(running, ref["ep_ret"])
    assert env.pop_episode_stats() == ([], [])  # popped once


def _mountain_car_edges(env):
    """Half the envs just short of the goal, moving on (they terminate at once), the last one
    driving into the left wall (stopped there)."""
    env.state[: env.num_envs // 2] = torch.tensor([0.47, 0.04])
    env.state[-1] = torch.tensor([-1.19, -0.05])


def _acrobot_edges(env):
    """Half the envs with the tip above the bar (they terminate at once), the last one turning
    past pi (wrapped) too fast (its velocity bounded) in the last step of its episode."""
    env.state[: env.num_envs // 2] = torch.tensor([2.6, 0.1, 0.5, 0.0])
    env.state[-1] = torch.tensor([3.1, 0.0, 2.0, 30.0])
    env.elapsed[-1] = 4


@pytest.mark.parametrize(
    "env_cls,edges,num_agents,num_envs",
    [(MountainCar, _mountain_car_edges, 2, 3), (Acrobot, _acrobot_edges, 1, 5)],
)
def test_rollout_kernel_matches_the_torch_env_on_the_other_tasks(rng, env_cls, edges, num_agents,
                                                                 num_envs):  # fmt: skip
    """MountainCar-v0 and Acrobot-v1 (its observation not its state) in the rollout kernel
    against the torch env's dynamics and the torch policy, float64, as CartPole above."""
    steps = 9
    cfg, env, policy, buf, algo = _setup(rng, num_agents, num_envs, steps, (8, 6), minibatches=1,
                                         max_steps=5, env_cls=env_cls)  # fmt: skip
    env.elapsed.copy_(torch.as_tensor(rng.integers(0, 5, env.num_envs)))
    edges(env)
    env.stats.episode_return.copy_(-env.elapsed.double())
    env.stats.episode_length.copy_(env.elapsed)
    run = fused.FusedPPO(algo, env, cfg, fused_update=False, threads=THREADS)
    assert run.task is fused.TASKS[env_cls.env_id]
    start = {"state": env.state.clone(), "elapsed": env.elapsed.clone(),
             "ret": env.stats.episode_return.clone(), "len": env.stats.episode_length.clone()}  # fmt: skip
    run.rollout()
    env.state.copy_(start["state"])
    env.elapsed.copy_(start["elapsed"])
    env.stats.episode_return.copy_(start["ret"])
    env.stats.episode_length.copy_(start["len"])
    ref = _reference_rollout(policy, env, run.rand.clone(), num_agents, steps, cfg.ppo.gamma,
                             cfg.ppo.gae_lambda)  # fmt: skip
    got = {k: getattr(buf, k).cpu() for k in ("obs", "actions", "logprobs", "values", "rewards",
                                              "terminated", "episode_end", "advantages",
                                              "returns")}  # fmt: skip
    assert ref["terminated"].any() and (ref["episode_end"] & ~ref["terminated"]).any()
    assert got["obs"].shape[-1] == env.observation_space.shape[0]
    for name in ("actions", "terminated", "episode_end"):
        assert torch.equal(got[name], ref[name]), name
    assert torch.equal(got["rewards"].double(), ref["rewards"])
    for name in ("obs", "logprobs", "values", "advantages", "returns"):
        torch.testing.assert_close(got[name].double(), ref[name], atol=2e-4, rtol=1e-4,
                                   msg=name)  # fmt: skip
    torch.testing.assert_close(buf.bootstrap_values.cpu().double(), ref["bootstrap"],
                               atol=2e-4, rtol=1e-4)  # fmt: skip


@pytest.mark.parametrize("env_cls", [MountainCar, Acrobot])
def test_rollout_kernel_advances_the_other_tasks_and_their_episode_stats(rng, env_cls):
    # 10 steps of a 4-step time limit: every env finishes two episodes and starts a third.
    cfg, env, policy, _, algo = _setup(rng, 1, 3, 10, (8, 8), minibatches=1, max_steps=4,
                                       env_cls=env_cls)  # fmt: skip
    run = fused.FusedPPO(algo, env, cfg, fused_update=False, threads=THREADS)
    stats = env.stats
    before = [t.clone() for t in (env.state, env.elapsed, stats.episode_return,
                                  stats.episode_length)]  # fmt: skip
    run.rollout()
    kernel_state, kernel_elapsed = env.state.cpu().clone(), env.elapsed.cpu().clone()
    running = stats.episode_return.cpu().clone(), stats.episode_length.cpu().clone()
    returns, lengths = env.pop_episode_stats()
    for live, saved in zip((env.state, env.elapsed, stats.episode_return, stats.episode_length),
                           before, strict=True):  # fmt: skip
        live.copy_(saved)
    ref = _reference_rollout(policy, env, run.rand, 1, 10, cfg.ppo.gamma, cfg.ppo.gae_lambda)
    assert kernel_state.shape == (3, env_cls.state_dim)
    torch.testing.assert_close(kernel_state.double(), ref["state"], atol=1e-5, rtol=1e-5)
    assert torch.equal(kernel_elapsed, ref["elapsed"])
    assert len(returns) == 3 and returns == ref["last_ret"].tolist()
    assert lengths == ref["last_len"].tolist() == [4, 4, 4]
    assert returns == [-4.0] * 3  # -1 a step: no episode reaches its goal from a reset
    assert torch.equal(running[0], ref["ep_ret"]) and torch.equal(running[1], ref["ep_len"])
    assert env.pop_episode_stats() == ([], [])  # popped once


def random_rollout(rng, policy, buf, num_agents, epochs):
    """Fill ``buf`` with fresh random transitions of ``policy``'s agents; returns a random
    permutation (epochs, agents, samples) of each agent's samples."""
    steps, kn = buf.num_steps, buf.num_envs
    g = torch.Generator().manual_seed(int(rng.integers(2**31)))
    obs = torch.randn(steps, kn, 4, generator=g)
    actions = torch.randint(0, 2, (steps, kn), generator=g)
    logits, values = _forward64(policy, obs.view(-1, 4).to(DEVICE), num_agents)
    logp = torch.log_softmax(logits, -1).gather(-1, actions.view(-1, 1).to(DEVICE)).view(steps, kn)
    # Old log-probs near the current ones: ratios both inside and outside the clip range.
    buf.obs.copy_(obs)
    buf.actions.copy_(actions)
    buf.logprobs.copy_(logp.float().cpu() + 0.3 * torch.randn(steps, kn, generator=g))
    buf.values.copy_(
        values.view(steps, kn).float().cpu() + 0.4 * torch.randn(steps, kn, generator=g)
    )
    buf.advantages.copy_(torch.randn(steps, kn, generator=g) * 2 + 0.5)
    buf.returns.copy_(torch.randn(steps, kn, generator=g))
    samples = steps * kn // num_agents
    return torch.stack([torch.stack([torch.randperm(samples, generator=g)
                                     for _ in range(num_agents)]) for _ in range(epochs)])  # fmt: skip


def _reference_update(policy, buf, cfg, num_agents, perm, lr, steps_before=0):
    """PPO._minibatch_step and torch's Adam, float64, one agent at a time, on the same
    permutation; returns (the agents' parameters, their last minibatch's raw gradients,
    the mean loss terms)."""
    t, kn = buf.num_steps, buf.num_envs
    n = kn // num_agents
    params, grads, sums = [], [], torch.zeros(5, dtype=torch.float64)
    for k in range(num_agents):
        agent = (policy.agent(k) if num_agents > 1 else copy.deepcopy(policy)).cpu().double()
        ref_buf = RolloutBuffer(t, n, (4,), (), torch.int64, "cpu", "host", cfg.num_minibatches)
        algo = PPO(agent, ref_buf, cfg, 10, torch.device("cpu"))
        algo.optimizer.param_groups[0]["lr"] = lr
        if steps_before:  # an optimizer that took steps (its moments zero): bias corrections
            for p in agent.parameters():
                algo.optimizer.state[p] = {"step": torch.tensor(float(steps_before)),
                                           "exp_avg": torch.zeros_like(p),
                                           "exp_avg_sq": torch.zeros_like(p)}  # fmt: skip
        cols = slice(k * n, (k + 1) * n)
        data = {name: getattr(buf, name)[:, cols].cpu().reshape(t * n, *getattr(buf, name).shape[2:])
                for name in ("obs", "actions", "logprobs", "values", "advantages", "returns")}  # fmt: skip
        data = {k_: (v.double() if v.is_floating_point() else v) for k_, v in data.items()}
        if cfg.normalize_advantage:
            a = data["advantages"]
            data["advantages"] = (a - a.mean()) / (a.std() + 1e-8)
        raw = {}  # the last raw gradient, before clip_grad_norm_ scales it
        original = algo.clip_gradients

        def clip_and_keep(raw=raw, original=original, agent=agent):
            raw["g"] = [p.grad.detach().clone() for p in fused.module_params(agent)]
            original()

        algo.clip_gradients = clip_and_keep
        mb = t * n // cfg.num_minibatches
        for epoch in range(cfg.num_epochs):
            for j in range(cfg.num_minibatches):
                idx = perm[epoch, k, j * mb : (j + 1) * mb].cpu()
                batch = Batch(**{name: v[idx] for name, v in data.items()})
                sums += torch.stack(algo._minibatch_step(batch)).detach() / num_agents
        params.append([p.detach().clone() for p in fused.module_params(agent)])
        grads.append(raw["g"])
    return params, grads, sums


def _agent_tensors(policy, num_agents, k):
    agent = policy.agent(k) if num_agents > 1 else policy
    return [p.detach().cpu().double() for p in fused.module_params(agent)]


@pytest.mark.parametrize(
    "num_agents,hidden,activation,clip_value_loss,parts,steps_before",
    [
        (1, (8, 6), "tanh", True, 3, 0),
        (1, (6, 8), "tanh", False, 5, 0),  # the sum's four-way loop and its tail
        (2, (6, 8), "relu", False, 1, 0),
        (2, (8, 6), "tanh", True, 2, 7),
    ],
)
def test_update_kernel_matches_ppo_minibatch_steps_and_adam(rng, num_agents, hidden, activation,
                                                            clip_value_loss, parts,
                                                            steps_before):  # fmt: skip
    """A minibatch of 12 samples: in one block (chunks of 8 and 4), or split over 2 or 3
    blocks per agent whose partial gradients the apply kernel sums; Adam's bias corrections
    from step 1, or after 7 earlier steps (the step count the kernels read from the device)."""
    steps, envs = 6, 4
    cfg, env, policy, buf, algo = _setup(
        rng, num_agents, envs, steps, hidden, activation, minibatches=2, num_epochs=2,
        ent_coef=0.05, clip_value_loss=clip_value_loss, clip_coef=0.2, max_grad_norm=0.5,
    )  # fmt: skip
    run = fused.FusedPPO(algo, env, cfg, fused_update=True, threads=THREADS, parts=parts)
    assert run.parts == parts
    perm = random_rollout(rng, policy, buf, num_agents, epochs=2)
    ref_policy = copy.deepcopy(policy)
    ref_buf_fields = {n: getattr(buf, n).clone() for n in ("obs", "actions", "logprobs", "values",
                                                             "advantages", "returns")}  # fmt: skip
    lr = 0.01
    run.adam_steps = steps_before
    num_updates, epochs = run.update(lr, perm=perm)
    assert (num_updates, epochs) == (4, 2)
    for name, value in ref_buf_fields.items():
        getattr(buf, name).copy_(value)  # the kernel normalised the advantages in place
    ref_params, ref_grads, ref_sums = _reference_update(ref_policy, buf, cfg.ppo, num_agents,
                                                        perm, lr, steps_before)  # fmt: skip
    assert (ref_sums[4] > 0) and (ref_sums[4] < 4)  # some samples clipped, not all
    grad = run.grad.cpu().double()
    for k in range(num_agents):
        got = _agent_tensors(policy, num_agents, k)
        for i, (a, b) in enumerate(zip(got, ref_params[k], strict=True)):
            torch.testing.assert_close(a, b, atol=2e-4, rtol=1e-3, msg=f"agent {k} tensor {i}")
        # the kernel's last raw gradient, tensor by tensor in its flat layout
        layout = fused.param_layout(4, *hidden, 2)
        start = 0
        for i, ((n_in, n_out), ref_g) in enumerate(zip(layout, ref_grads[k], strict=True)):
            size = max(n_in, 1) * n_out
            block = grad[start + k * size : start + (k + 1) * size]
            if n_in and num_agents > 1:
                block = block.view(n_in, n_out).T  # (K, in, out) stacks, Linear is (out, in)
            torch.testing.assert_close(block.reshape(ref_g.shape), ref_g, atol=1e-5, rtol=1e-4,
                                       msg=f"grad {i}")  # fmt: skip
            start += num_agents * size
    torch.testing.assert_close(algo._loss_sums.cpu().double(), ref_sums, atol=1e-4, rtol=1e-4)


def test_flat_buffer_is_what_the_modules_see(rng):
    cfg, env, policy, _, algo = _setup(rng, 3, 2, 4, (8, 6))
    before = {k: v.clone() for k, v in policy.state_dict().items()}
    run = fused.FusedPPO(algo, env, cfg, fused_update=True, threads=THREADS)
    after = policy.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # values kept
    run.flat.add_(1.0)
    assert all(torch.equal(before[k] + 1.0, policy.state_dict()[k]) for k in before)
    assert sum(p.numel() for p in policy.parameters()) == run.flat.numel()


def test_blocker_names_what_is_missing():
    cfg = C.Config()
    cfg.ppo.fused = "auto"
    env = CartPole(2, "cpu")
    spec = PolicySpec.from_spaces(env.observation_space, env.action_space)
    policy = ActorCritic(spec)
    assert fused.blocker(cfg, env, policy, torch.device("cpu"), False) == (
        "the learner is not on CUDA"
    )
    cuda = torch.device("cuda")
    assert fused.blocker(cfg, env, policy, cuda, False) is None
    assert fused.blocker(cfg, env, policy, cuda, True) == "a distributed run"
    cfg.train.precision = "bf16"
    assert fused.blocker(cfg, env, policy, cuda, False) == "precision bf16"
    cfg.train.precision = "fp32"
    cfg.buffer.placement = "pinned"
    assert "buffer placement pinned" in fused.blocker(cfg, env, policy, cuda, False)
    cfg.buffer.placement = "auto"
    assert "float64" in fused.blocker(cfg, CartPole(2, "cpu", dtype=torch.float64), policy,
                                      cuda, False)  # fmt: skip
    cfg.ppo.fused = "off"
    assert fused.blocker(cfg, env, policy, cuda, False) == "ppo.fused is off"
    cfg.ppo.fused = "auto"
    cfg.env.num_envs, cfg.ppo.num_steps, cfg.ppo.num_minibatches = 4096, 128, 4
    assert cfg.ppo.fused_grads == "kernel"  # the default until the GEMMs have run on a GPU
    assert "131072 samples per agent" in fused.update_blocker(cfg, spec)
    cfg.ppo.fused_grads = "auto"
    # auto: a minibatch the gradient kernel does not take is the GEMMs', still fused
    assert fused.update_blocker(cfg, spec) is None
    assert fused.grads_path(cfg, spec) == "gemm"
    cfg.ppo.fused_grads = "kernel"  # the kernel or torch's update, as before the GEMMs
    assert "131072 samples per agent" in fused.update_blocker(cfg, spec)
    cfg.env.num_envs = 4
    assert fused.update_blocker(cfg, spec) is None
    assert fused.grads_path(cfg, spec) == "kernel"
    cfg.ppo.fused_grads = "auto"
    assert fused.grads_path(cfg, spec) == "kernel"
    cfg.ppo.fused_grads = "gemm"
    assert fused.grads_path(cfg, spec) == "gemm"
    cfg.ppo.compile_update = True  # torch's update, compiled, behind the fused rollout
    assert "compile_update" in fused.update_blocker(cfg, spec)
    assert fused.blocker(cfg, env, policy, cuda, False) is None


def test_blocker_takes_the_registered_tasks_and_names_the_rest():
    cfg = C.Config()
    cfg.ppo.fused = "auto"
    cfg.env.backend = "gpu"
    cuda = torch.device("cuda")

    def blocker(env):
        cfg.env.env_id = env.env_id
        spec = PolicySpec.from_spaces(env.observation_space, env.action_space)
        return fused.blocker(cfg, env, ActorCritic(spec), cuda, False)

    assert set(fused.TASKS) == {"CartPole-v1", "MountainCar-v0", "Acrobot-v1"}
    for cls in (CartPole, MountainCar, Acrobot):
        env = cls(2, "cpu")
        task = fused.TASKS[cls.fused_task]
        assert task.task_id == cls.env_id
        sizes = (env.observation_space.shape[0], cls.state_dim, env.action_space.n)
        assert (task.obs_dim, task.state_dim, task.num_actions) == sizes
        assert blocker(env) is None, cls.env_id
    for cls in (Pendulum, MountainCarContinuous):  # a Gaussian head in no kernel
        assert cls.fused_task is None
        assert blocker(cls(2, "cpu")) == (
            f"continuous actions ({cls.env_id}): the fused kernels' policy head is categorical"
        )

    class Unfused(CartPole):
        fused_task = None

    assert blocker(Unfused(2, "cpu")) == (
        "the fused kernels cover CartPole-v1, MountainCar-v0, Acrobot-v1 on the gpu backend, "
        "not CartPole-v1 (gpu)"
    )
    with pytest.raises(ValueError, match="no fused kernels for 'Pendulum-v1'"):
        fused.device_task("Pendulum-v1")


def test_kernels_are_built_per_task():
    """The rollout kernel of each task: the in-process cache keys on it (Numba's disk cache on
    the device functions the kernel captures)."""
    mc = fused.TASKS["MountainCar-v0"]
    twin = mc._replace(task_id="MountainCar-twin")
    shape = (2, 8, 6, 3, "tanh", False, 1, 4, 16, 32)
    a = fused.build_kernels(*shape, mc, cache=False)
    assert fused.build_kernels(*shape, mc, cache=False) is a
    assert fused.build_kernels(*shape, twin, cache=False).rollout is not a.rollout
    with pytest.raises(ValueError, match="Acrobot-v1 has 6 observations and 3 actions"):
        fused.build_kernels(*shape, fused.TASKS["Acrobot-v1"], cache=False)


PTX_SCRIPT = """
import re, sys
import numba.cuda.dispatcher as dispatcher
from numba import cuda, types as T

class Device:  # device functions ask the current device for its compute capability
    compute_capability = (8, 7)

dispatcher.get_current_device = lambda: Device()
from orin_rl.algorithms import fused

def arr(dtype, ndim):
    return T.Array(dtype, ndim, "C")

f1, f2, f3 = arr(T.float32, 1), arr(T.float32, 2), arr(T.float32, 3)
i1, d1, b1, b2 = arr(T.int64, 1), arr(T.float64, 1), arr(T.boolean, 1), arr(T.boolean, 2)
sig = (f1, f2, i1, d1, i1, d1, i1, b1, f3, f3, arr(T.int64, 2), f2, f2, f2, b2, b2, f2, f2, f2,
       f2, T.float32, T.float32, T.int64, T.int64, T.int64)
for task_id in sys.argv[1:]:
    task = fused.TASKS[task_id]
    kernels = fused.build_kernels(task.obs_dim, 64, 64, task.num_actions, "tanh", False, 1, 8,
                                  fused.ROLLOUT_THREADS, fused.UPDATE_THREADS, task, cache=False)
    ptx, _ = cuda.compile_ptx(kernels.rollout.py_func, sig, cc=Device.compute_capability)
    pattern = r"\\.shared \\.align \\d+ \\.b8 \\w+\\[(\\d+)\\]"
    print(task_id, sum(int(n) for n in re.findall(pattern, ptx)))
"""


@pytest.mark.skipif(not _nvvm_available(), reason="libNVVM not installed (CPU-only torch)")
def test_the_other_tasks_rollout_kernels_compile_for_cuda():
    """The simulator runs Python that the CUDA compiler may refuse (the builtin ``max`` of two
    floats, say): the new tasks' rollout kernels for sm_87 (Orin), 64x64, within 48 KiB of
    static shared memory (test_fused_ptx.py compiles CartPole's every kernel)."""
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0"}
    tasks = ["MountainCar-v0", "Acrobot-v1"]
    proc = subprocess.run([sys.executable, "-c", PTX_SCRIPT, *tasks], env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    shared = dict(line.split() for line in proc.stdout.splitlines() if line.split()[0] in tasks)
    assert shared.keys() == set(tasks)
    assert all(int(n) <= 48 * 1024 for n in shared.values()), shared


def test_kernels_compile_uncached_where_numba_cannot_cache(rng, monkeypatch, caplog):
    """A read-only install with no writable cache folder: Numba refuses cache=True when the
    kernels are defined; they are built without the cache, and the log says how to keep them."""
    real = fused.build_kernels
    asked = []

    def no_locator(*args, cache=None):
        asked.append(cache)
        if cache is not False:
            raise RuntimeError("cannot cache function 'rollout': no locator available for file")
        return real(*args, cache=cache)

    monkeypatch.setattr(fused, "build_kernels", no_locator)
    cfg, env, _, _, algo = _setup(rng, 1, 2, 4, (8, 6))
    with caplog.at_level("WARNING"):
        run = fused.FusedPPO(algo, env, cfg, fused_update=True, threads=THREADS)
    assert asked == [None, False] and run.kernels.grads is not None
    assert "set NUMBA_CACHE_DIR to a writable folder" in caplog.text
    monkeypatch.setattr(fused, "build_kernels", lambda *a, cache=None: 1 / 0)
    with pytest.raises(ZeroDivisionError):  # any other failure is not swallowed
        fused.FusedPPO(algo, env, cfg, fused_update=True, threads=THREADS)
