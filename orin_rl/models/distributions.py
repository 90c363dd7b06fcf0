"""Action distributions written as plain tensor maths.

``torch.distributions`` validates arguments and builds objects on every call (slow on a small
CPU) and does not export to ONNX; these heads compute the same quantities directly.
"""

from __future__ import annotations

import math

import torch

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


class Categorical:
    """Categorical over the last axis of ``logits`` (batch, num_actions)."""

    def __init__(self, logits: torch.Tensor):
        self.log_probs = torch.log_softmax(logits, dim=-1)

    def sample(self) -> torch.Tensor:
        """(*batch,) int64 actions (any number of leading axes)."""
        if self.log_probs.is_cuda:
            # Gumbel-max: argmax(log p - log(-log U)) ~ Categorical(p); one fused, sync-free
            # draw that a CUDA graph can capture.
            u = torch.rand_like(self.log_probs).clamp_(min=1e-20)
            return (self.log_probs - torch.log(-torch.log(u))).argmax(-1)
        probs = self.log_probs.exp()  # multinomial takes 2-D: flatten the leading axes
        flat = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1)
        return flat.view(probs.shape[:-1])

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """(batch,) log pi(a)."""
        return self.log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        """(batch,) -sum p log p."""
        return -(self.log_probs.exp() * self.log_probs).sum(-1)

    def mode(self) -> torch.Tensor:
        """(batch,) most likely action."""
        return self.log_probs.argmax(-1)


class DiagGaussian:
    """Independent Gaussians over the last axis: ``mean`` (batch, dim), ``log_std`` (dim,)."""

    def __init__(self, mean: torch.Tensor, log_std: torch.Tensor, std: torch.Tensor | None = None):
        self.mean = mean
        self.log_std = log_std.expand_as(mean)
        self.std = (log_std.exp() if std is None else std).expand_as(mean)
        """(batch, dim); given where the std is the parameter (rsl_rl's), not exp(log std)."""

    def sample(self) -> torch.Tensor:
        """(batch, dim) reparameterised sample."""
        return self.mean + self.std * torch.randn_like(self.mean)

    def log_prob(self, actions: torch.Tensor) -> torch.Tensor:
        """(batch,) sum over dims of log N(a; mean, std)."""
        z = (actions - self.mean) * torch.exp(-self.log_std)
        return (-0.5 * z.square() - self.log_std - LOG_SQRT_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        """(batch,) sum over dims of 0.5 + log(sqrt(2 pi) std)."""
        return (0.5 + LOG_SQRT_2PI + self.log_std).sum(-1)

    def mode(self) -> torch.Tensor:
        """(batch, dim) the mean."""
        return self.mean


def gaussian_kl(
    old_mean: torch.Tensor, old_std: torch.Tensor, mean: torch.Tensor, std: torch.Tensor
) -> torch.Tensor:
    """(batch,) KL(N(old_mean, old_std) || N(mean, std)) summed over the last axis (exact, as
    ``torch.distributions.kl_divergence`` of two Normals: what rsl_rl's adaptive schedule reads).

    0.5 * (r + ((old_mean - mean) / std)^2 - 1 - log r), r = (old_std / std)^2, per dimension.
    """
    var_ratio = (old_std / std).square()
    t1 = ((old_mean - mean) / std).square()
    return (0.5 * (var_ratio + t1 - 1 - var_ratio.log())).sum(-1)
