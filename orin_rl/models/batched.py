"""K independent actor-critics evaluated as one batched program (``--num-agents K``).

Each agent's weights are a slice of stacked parameters, (K, in, out) per layer, and a layer is
one ``baddbmm`` for all agents. The agents share nothing but the kernels: their gradients,
Adam moments (Adam is element-wise), normaliser statistics and clipping are their own.
Agent k's networks are initialised exactly as an ``ActorCritic`` would be, and
``agent_state_dict(k)`` gives back a plain ``ActorCritic`` state dict for export.
"""

from __future__ import annotations

import torch
from torch import nn

from orin_rl.models import profile as profiles
from orin_rl.models.actor_critic import (
    ACTIVATIONS,
    ActorCritic,
    PolicySpec,
    SampledPolicy,
    at_least_fp32,
)
from orin_rl.models.distributions import Categorical, DiagGaussian
from orin_rl.models.normalizer import Normalization, ObsNormalizer


class BatchedMLP(nn.Module):
    """K MLPs of one architecture; input (K, B, in) -> (K, B, out)."""

    def __init__(self, mlps: list[nn.Sequential], activation: str):
        super().__init__()
        linears = [[m[i] for m in mlps] for i in range(0, len(mlps[0]), 2)]  # Linear, act, ...
        self.weights = nn.ParameterList(
            nn.Parameter(torch.stack([lin.weight.detach().T for lin in layer])) for layer in linears
        )  # (K, in, out) per layer
        self.biases = nn.ParameterList(
            nn.Parameter(torch.stack([lin.bias.detach() for lin in layer]).unsqueeze(1))
            for layer in linears
        )  # (K, 1, out) per layer
        self.act = ACTIVATIONS[activation]()

    def forward(self, x: torch.Tensor, layers: slice = slice(None)) -> torch.Tensor:
        """Run ``layers`` (all by default) on (K, B, in)."""
        pairs = list(zip(self.weights, self.biases, strict=True))
        last = len(pairs) - 1
        for i, (w, b) in list(enumerate(pairs))[layers]:
            x = torch.baddbmm(b, x, w)
            if i < last:
                x = self.act(x)
        return x

    def agent_state_dict(self, k: int, prefix: str) -> dict[str, torch.Tensor]:
        """Agent k's layers under ``nn.Sequential`` names (``prefix.0.weight`` ...)."""
        out = {}
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            out[f"{prefix}.{2 * i}.weight"] = w[k].T.contiguous()
            out[f"{prefix}.{2 * i}.bias"] = b[k, 0].clone()
        return out


class BatchedActorCritic(SampledPolicy, nn.Module):
    """``num_agents`` ActorCritics; observations and actions are (K, B, ...): ``act`` and
    ``evaluate`` (``SampledPolicy``) give each result with leading (K, B)."""

    def __init__(self, spec: PolicySpec, num_agents: int):
        super().__init__()
        self.spec = spec
        self.num_agents = num_agents
        members = [ActorCritic(spec) for _ in range(num_agents)]
        self.discrete = members[0].discrete
        self.actor = BatchedMLP([m.actor for m in members], spec.activation)
        self.critic = BatchedMLP([m.critic for m in members], spec.activation)
        if not self.discrete:
            self.log_std = nn.Parameter(torch.stack([m.log_std.detach() for m in members]))
        # Statistics shaped (K, *obs_shape): a (B, K, *obs_shape) batch updates every agent.
        where = profiles.normalization(spec)
        if where == "inside_networks":
            raise ValueError("rsl_rl's normalisers with many agents: set train.num_agents 1")
        self.obs_normalizer = (
            ObsNormalizer((num_agents, *spec.obs_shape), clip=spec.obs_clip)
            if where == "before_networks"
            else None
        )
        self.normalization = Normalization(where, self.obs_normalizer)
        """Each agent's statistics, before the networks (``obs_normalizer``), or none."""

    def normalize(self, obs: torch.Tensor, update: bool = False) -> torch.Tensor:
        """(K, B, *obs) -> normalised with each agent's own running statistics."""
        if self.obs_normalizer is None:
            return obs
        per_step = obs.transpose(0, 1)  # (B, K, *obs): batch first, as the normaliser expects
        if update:
            self.obs_normalizer.update(per_step)
        return self.obs_normalizer(per_step).transpose(0, 1)

    def distribution(self, obs: torch.Tensor) -> Categorical | DiagGaussian:
        """Action distribution over (K, B) for normalised ``obs``."""
        out = at_least_fp32(self.actor(obs.flatten(2)))
        if self.discrete:
            return Categorical(out)
        return DiagGaussian(out, self.log_std.unsqueeze(1))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """(K, B) values; under autocast the value head stays fp32."""
        x = obs.flatten(2)
        if not torch.is_autocast_enabled(x.device.type):
            return self.critic(x).squeeze(-1)
        hidden = self.critic(x, slice(None, -1))
        with torch.autocast(x.device.type, enabled=False):
            return self.critic(hidden.float(), slice(-1, None)).squeeze(-1)

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """The distributions' modes, (K, B, ...)."""
        return self.distribution(obs).mode()

    def agent_state_dict(self, k: int) -> dict[str, torch.Tensor]:
        """Agent k as an ``ActorCritic(spec)`` state dict."""
        state = {
            **self.actor.agent_state_dict(k, "actor"),
            **self.critic.agent_state_dict(k, "critic"),
        }
        if not self.discrete:
            state["log_std"] = self.log_std[k].detach().clone()
        if self.obs_normalizer is not None:
            n = self.obs_normalizer
            state["obs_normalizer.mean"] = n.mean[k].clone()
            state["obs_normalizer.var"] = n.var[k].clone()
            state["obs_normalizer.count"] = n.count.clone()
        return state

    def agent(self, k: int) -> ActorCritic:
        """Agent k as a standalone ``ActorCritic`` (same device)."""
        policy = ActorCritic(self.spec).to(next(self.parameters()).device)
        policy.load_state_dict(self.agent_state_dict(k))
        return policy


def per_agent_clip_grad_norm_(params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip each agent's gradient (the k-th slice of every stacked parameter) to ``max_norm``.

    Returns the (K,) norms before clipping. No host read.
    """
    grads = [p.grad for p in params if p.grad is not None]
    sq = torch.stack([g.square().flatten(1).sum(1) for g in grads]).sum(0)  # (K,)
    norms = sq.sqrt()
    coef = (max_norm / (norms + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))
    return norms
