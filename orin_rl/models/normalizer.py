"""Running observation normaliser whose statistics live in the module's state_dict."""

from __future__ import annotations

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
