"""Running observation normaliser whose statistics live in the module's state_dict."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn


class ObsNormalizer(nn.Module):
    """Running mean/variance of observations (float64 stats, Chan's parallel update).

    ``forward`` returns ``clamp((x - mean) / sqrt(var + eps), -clip, clip)``; ``update`` folds a
    batch into the statistics. Export folds the same arithmetic into the ONNX graph.
    """

    def __init__(self, shape: tuple[int, ...], eps: float = 1e-8, clip: float = 10.0):
        super().__init__()
        self.eps = eps
        self.clip = clip
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.tensor(0.0, dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a (batch, *shape) batch into the running statistics."""
        x = x.to(torch.float64)
        batch_mean = x.mean(dim=0)
        batch_var = x.var(dim=0, unbiased=False)
        batch_count = x.shape[0]
        delta = batch_mean - self.mean
        total = self.count + batch_count
        # Chan et al.: combine (mean, M2) of two samples.
        m2 = (
            self.var * self.count
            + batch_var * batch_count
            + delta.square() * self.count * batch_count / total
        )
        self.mean += delta * batch_count / total
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` with the current statistics (no update)."""
        scale = torch.rsqrt(self.var + self.eps).to(x.dtype)
        return ((x - self.mean.to(x.dtype)) * scale).clamp(-self.clip, self.clip)


class EmpiricalNormalizer(nn.Module):
    """rsl_rl's ``EmpiricalNormalization`` (5.4): ``(x - mean) / (std + eps)``, eps 1e-2 on the
    std (not under the root), no clip.

    ``update`` merges a batch's statistics into the running ones with the parallel-variance
    formula, weighted by sample counts (the first update replaces the initial mean 0, var 1).
    Statistics keep the module's float dtype and a 64-bit count, as rsl_rl's do; the
    arithmetic is rsl_rl's, line for line (tests/algorithms/test_rsl_rl_lockstep.py).
    """

    def __init__(self, dim: int, eps: float = 1e-2):
        super().__init__()
        self.eps = eps
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("var", torch.ones(dim))
        self.register_buffer("std", torch.ones(dim))
        self.register_buffer("count", torch.tensor(0, dtype=torch.long))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Fold a (batch, dim) batch into the running statistics."""
        batch = x.shape[0]
        self.count += batch
        rate = batch / self.count  # a device tensor: no host read (CUDA graphs)
        batch_var = torch.var(x, dim=0, unbiased=False)
        batch_mean = torch.mean(x, dim=0)
        delta = batch_mean - self.mean
        self.mean += rate * delta
        # Var <- Var + rate * (Var_b - Var + delta * (mean_b - mean_new))
        self.var += rate * (batch_var - self.var + delta * (batch_mean - self.mean))
        torch.sqrt(self.var, out=self.std)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` (batch, dim) with the current statistics (no update)."""
        return (x - self.mean.to(x.dtype)) / (self.std.to(x.dtype) + self.eps)


class RewardNormalizer(nn.Module):
    """Rewards divided by the running std of the discounted return (the statistic of
    Stable-Baselines3's ``VecNormalize`` and gymnasium's ``NormalizeReward``), then clipped.

    Per env the return ``G_t = gamma * G_{t-1} + r_t`` restarts at episode ends; its running
    variance (float64, Chan's update, over every env's G of each step) gives the scale:
    ``clamp(r / sqrt(Var[G] + eps), -clip, clip)``. Unlike SB3 (which starts from a variance of
    1 with a weight of 1e-4) the statistics start empty: with a single env the first rewards
    meet a variance near 0 and are clipped. With ``groups`` > 1 the envs split into
    that many equal consecutive blocks (agents) with statistics of their own.
    """

    def __init__(
        self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8, groups: int = 1
    ):
        super().__init__()
        if num_envs % groups:
            raise ValueError(f"{num_envs} envs do not split into {groups} equal groups")
        self.gamma, self.clip, self.eps, self.groups = gamma, clip, eps, groups
        shape = (groups,) if groups > 1 else ()
        self.stats = ObsNormalizer(shape, eps=eps, clip=math.inf)
        self.register_buffer("returns", torch.zeros(num_envs, dtype=torch.float64))

    def _per_group(self, x: torch.Tensor) -> torch.Tensor:
        """(num_envs,) -> (envs per group, groups) samples of the group statistics."""
        return x.view(self.groups, -1).transpose(0, 1) if self.groups > 1 else x

    @torch.no_grad()
    def forward(
        self,
        reward: torch.Tensor,
        episode_end: torch.Tensor,
        gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Scale one step's (num_envs,) rewards and fold the returns into the statistics;
        ``gather`` stacks every rank's returns (a distributed run keeps one statistic)."""
        self.returns.mul_(self.gamma).add_(reward.to(torch.float64))
        samples = self._per_group(self.returns)
        self.stats.update(gather(samples) if gather is not None else samples)
        scale = torch.rsqrt(self.stats.var + self.eps)
        if self.groups > 1:
            scale = scale.repeat_interleave(reward.shape[0] // self.groups)
        self.returns.masked_fill_(episode_end, 0.0)
        return (reward * scale.to(reward.dtype)).clamp(-self.clip, self.clip)


class Normalization:
    """Where a policy normalises its observations and with which statistics: the one object
    the learner, the runners, the export and the deploy wrapper ask (``policy.normalization``).

    ``where`` comes from the spec (``profile.normalization``): ``none``, ``before_networks``
    (``before``: one clipped ``ObsNormalizer`` over the whole observation; the rollout stores
    normalised observations) or ``inside_networks`` (rsl_rl's: ``actor`` and ``critic``
    ``EmpiricalNormalizer``s over their groups, or a dict observation's encoders over its vector
    keys; the rollout stores raw observations). The normalisers stay the policy's own modules
    (its state_dict names them); this object holds references to them, not copies.
    """

    def __init__(
        self,
        where: str,
        before: ObsNormalizer | None = None,
        actor: EmpiricalNormalizer | None = None,
        critic: EmpiricalNormalizer | None = None,
        actor_part: slice = slice(None),
        encoders: tuple[nn.Module, nn.Module] | None = None,
    ):
        self.where = where
        self.before = before
        """The normaliser before the networks (``before_networks``), else None."""
        self._actor, self._critic, self._part, self._encoders = actor, critic, actor_part, encoders

    @property
    def inside(self) -> bool:
        """Whether the networks normalise their own (raw) inputs."""
        return self.where == "inside_networks"

    def actor(self, x: torch.Tensor) -> torch.Tensor:
        """The actor's flat input through its own normaliser (inside; else as it is)."""
        return x if self._actor is None else self._actor(x)

    def critic(self, x: torch.Tensor) -> torch.Tensor:
        """The critic's flat input through its own normaliser (inside; else as it is)."""
        return x if self._critic is None else self._critic(x)

    @torch.no_grad()
    def update_inside(self, flat: torch.Tensor, critic_part: slice) -> None:
        """Fold raw observations into the networks' normalisers: (batch, row) rows for a dict
        observation's encoders, else (batch, features) split into the actor's and critic's."""
        if self._encoders is not None:
            for encoder in self._encoders:
                encoder.update_normalizer(flat)
            return
        self._actor.update(flat[:, self._part])
        self._critic.update(flat[:, critic_part])

    def actor_affine(self) -> tuple[torch.Tensor, torch.Tensor, float | None] | None:
        """The deployed actor's normalisation over its (flat) input: (mean, divisor, None) for
        rsl_rl's ``(x - mean) / (std + eps)``, (mean, scale, clip) for ``clip((x - mean) *
        scale, ±clip)``; None where there is none (or an encoder normalises inside)."""
        if self._actor is not None:
            return self._actor.mean, self._actor.std + self._actor.eps, None
        if self.before is None:
            return None
        scale = torch.rsqrt(self.before.var + self.before.eps).flatten()[self._part]
        return self.before.mean.flatten()[self._part], scale, float(self.before.clip)

    def describe(self) -> dict[str, Any] | None:
        """The bundle's ``normalizer`` entry (policy.json) of the actor's normalisation, folded
        into the exported graph (the encoders' frames' x / 255 is the encoder's own)."""
        if self._encoders is not None:
            return {"folded_into_graph": True, "inputs": self._encoders[0].describe_inputs()}
        if self._actor is not None:  # rsl_rl's: (x - mean) / (std + eps), no clip
            return {"folded_into_graph": True, "formula": "(x - mean) / (std + eps)",
                    "mean": self._actor.mean.tolist(), "std": self._actor.std.tolist(),
                    "eps": self._actor.eps, "clip": None}  # fmt: skip
        if self.before is None:
            return None
        norm = self.before
        return {
            "folded_into_graph": True,
            "mean": norm.mean.flatten()[self._part].tolist(),
            "var": norm.var.flatten()[self._part].tolist(),
            "formula": "clip((x - mean) / sqrt(var + eps), -clip, clip)",
            "eps": norm.eps,
            "clip": norm.clip,
        }
