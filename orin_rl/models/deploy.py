"""The deployed form of a policy: observation in, deterministic action out (torch module).

Exported to ONNX by ``orin_rl.export`` and run directly by the runtime's PyTorch backend.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from orin_rl.models.actor_critic import ActorCritic


class DeterministicPolicy(nn.Module):
    """What runs on the robot: raw observation → normalised → actor → action.

    Discrete: outputs ``action`` (int64, argmax) and ``logits`` (Q values for DQN). Continuous:
    ``action`` (the Gaussian mean, clipped to the action bounds when ``clip_actions``; for a
    squashed SAC actor the bounds-scaled tanh of the mean). A dict observation's policy takes one
    input per actor key (``keys``, in that order: uint8 frames, float32 states), its encoder
    normalising and scaling them inside.
    """

    def __init__(self, policy: ActorCritic, clip_actions: bool = True, fp16: bool = False):
        super().__init__()
        spec = policy.spec
        self.discrete = spec.action_kind == "discrete"
        self.fp16 = fp16
        self.keys = list(spec.obs_groups["actor"]) if spec.obs_layout is not None else None
        """A dict observation's actor keys: the inputs of ``forward``, in order (None: one)."""
        # A copy: .half() converts in place and must not touch the trained policy.
        self.actor = copy.deepcopy(policy.actor).float()
        if fp16:
            self.actor = self.actor.half()
        affine = policy.normalization.actor_affine() if self.keys is None else None
        self.has_norm = affine is not None
        self.norm_clip: float | None = None
        shape = spec.deploy_obs_shape
        if affine is not None:  # the actor's part: rsl_rl's (x - mean) / (std + eps), unclipped,
            mean, factor, self.norm_clip = affine  # or clip((x - mean) * scale, ±clip)
            self.register_buffer("obs_mean", mean.float().reshape(shape))
            name = "obs_div" if self.norm_clip is None else "obs_scale"
            self.register_buffer(name, factor.float().reshape(shape))
        self.squash = spec.squash
        self.action_dim = spec.action_dim
        if self.squash:  # SAC: action = low + (tanh(mean) + 1) / 2 * (high - low)
            low = torch.tensor(spec.action_low, dtype=torch.float32)
            high = torch.tensor(spec.action_high, dtype=torch.float32)
            self.register_buffer("squash_mid", (high + low) / 2)
            self.register_buffer("squash_half", (high - low) / 2)
        self.clip_actions = (
            clip_actions and not self.discrete and not self.squash and spec.action_low is not None
        )
        if self.clip_actions:
            self.register_buffer("low", torch.tensor(spec.action_low, dtype=torch.float32))
            self.register_buffer("high", torch.tensor(spec.action_high, dtype=torch.float32))

    def forward(self, *inputs: torch.Tensor):
        if self.keys is not None:  # a dict observation: (batch, *shape) per actor key
            parts = dict(zip(self.keys, inputs, strict=True))
            if self.fp16:
                parts = {k: v.half() if v.is_floating_point() else v for k, v in parts.items()}
            return self._head(self.actor(parts).float())
        x = inputs[0]
        if self.has_norm and self.norm_clip is None:
            x = (x - self.obs_mean) / self.obs_div
        elif self.has_norm:
            x = torch.clamp((x - self.obs_mean) * self.obs_scale, -self.norm_clip, self.norm_clip)
        x = x.flatten(1)
        if self.fp16:
            x = x.half()
        return self._head(self.actor(x).float())

    def _head(self, out: torch.Tensor):
        """The action (and the logits) from the actor's float32 output."""
        if self.discrete:
            return out.argmax(-1), out
        if self.squash:  # inside the bounds by construction: no clip
            return self.squash_mid + torch.tanh(out[:, : self.action_dim]) * self.squash_half
        if self.clip_actions:
            out = torch.minimum(torch.maximum(out, self.low), self.high)
        return out
