"""PPO for K independent agents at once (``--num-agents K``), e.g. seeds of one sweep.

The env batch holds K * num_envs envs, agent k owning columns [k * num_envs, (k+1) * num_envs).
The verbs are PPO's; what changes is the shape: every tensor gains a leading agent axis, the
advantages are normalised per agent, minibatches are drawn per agent, the loss is the sum of
the agents' PPO losses (so each agent's gradient is its own) and gradients are clipped per agent.
"""

from __future__ import annotations

from typing import Any

import torch

from orin_rl.algorithms.ppo import PPO
from orin_rl.buffers import Batch
from orin_rl.models.batched import BatchedActorCritic, per_agent_clip_grad_norm_


class MultiAgentPPO(PPO):
    """PPO over a ``BatchedActorCritic``; the trainer sees the same four verbs."""

    def __init__(self, policy: BatchedActorCritic, *args: Any, **kwargs: Any):
        """``PPO``'s arguments (no ``dist_ctx``: the agents learn in one process)."""
        super().__init__(policy, *args, **kwargs)
        self.num_agents = policy.num_agents
        self.envs_per_agent = self.buffer.num_envs // self.num_agents
        self.value_all_final_obs = True  # a subset of envs would not split into agents
        # Means over (K, mb) times K = the sum of the agents' own PPO losses, so each agent's
        # gradient is that of its own loss.
        self.loss_scale = float(self.num_agents)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        """(K * N, ...) -> (K, N, ...)."""
        return x.view(self.num_agents, self.envs_per_agent, *x.shape[1:])

    def _as_batch(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(K * N, ...) rows as (K, N, ...): each agent its own."""
        return tuple(self._split(t) for t in tensors)

    # ----------------------------------------------------------------- rollout verbs
    @torch.inference_mode()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Sample every agent's actions for (K * N, *obs_shape) observations."""
        obs = self.policy.normalize(self._split(obs), update=True)  # (K, N, *obs)
        with self.autocast:
            actions, logprobs, values = self.policy.act(obs)
        t = self.transition
        t.obs, t.actions = obs.flatten(0, 1), actions.flatten(0, 1)
        t.logprobs, t.values = logprobs.flatten(), values.flatten()
        return t.actions

    def values_of(self, obs: torch.Tensor) -> torch.Tensor:
        """(K * N,) values of raw (K * N, *obs_shape) observations, each by its own agent."""
        with self.autocast:
            return self.policy.value(self.policy.normalize(self._split(obs))).flatten()

    def normalize_advantages(self) -> None:
        """Advantages normalised within each agent's rollout (one group of columns each)."""
        self.buffer.normalize_advantages(groups=self.num_agents)

    # ------------------------------------------------------------------ update verb
    def _agent_major(self, name: str) -> torch.Tensor:
        """Buffer field (T, K * N, ...) as (K, T * N, ...)."""
        x = getattr(self.buffer, name)
        t, k = x.shape[0], self.num_agents
        x = x.view(t, k, self.envs_per_agent, *x.shape[2:]).transpose(0, 1)
        return x.reshape(k, t * self.envs_per_agent, *x.shape[3:])

    def update_steps(self) -> tuple[int, int]:
        """Epochs of per-agent minibatches; no host reads (capturable)."""
        cfg = self.cfg
        sums = self._loss_sums
        sums.zero_()
        names = ("obs", "actions", "logprobs", "values", "advantages", "returns")
        data = {n: self._agent_major(n) for n in names}
        k, samples = data["logprobs"].shape
        mb = samples // cfg.num_minibatches
        rows = torch.arange(k, device=data["logprobs"].device).unsqueeze(1)
        num_updates = 0
        for _ in range(cfg.num_epochs):
            perm = torch.argsort(torch.rand(k, samples, device=rows.device), dim=1)
            for j in range(cfg.num_minibatches):
                idx = perm[:, j * mb : (j + 1) * mb]  # (K, mb): each agent its own samples
                batch = Batch(**{n: v[rows, idx] for n, v in data.items()})  # (K, mb, ...)
                sums += torch.stack(self._minibatch_step(batch)).detach()
                num_updates += 1
        return num_updates, cfg.num_epochs

    def clip_gradients(self) -> None:
        """Each agent's gradient norm clipped on its own (no agent limits another)."""
        per_agent_clip_grad_norm_(self._params, self.cfg.max_grad_norm)
