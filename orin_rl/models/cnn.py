"""The seed's CNN policy: 3 convolutions + 2 fully connected layers on 256×256 images.

Used as a heavier reference model by the export and runtime benchmarks (``--model cnn-seed``).
"""

from __future__ import annotations

import torch
from torch import nn


class SeedCNNPolicy(nn.Module):
    """(batch, channels, 256, 256) float images → (batch, num_actions) action logits.

    Nature-DQN layout: 8×8/4 → 4×4/2 → 3×3/1 convolutions (32, 64, 64 channels), then 512
    hidden units.
    """

    def __init__(self, channels: int = 3, num_actions: int = 6, size: int = 256):
        super().__init__()
        self.input_shape = (channels, size, size)
        self.features = nn.Sequential(
            nn.Conv2d(channels, 32, 8, stride=4),
            nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.features(torch.zeros(1, *self.input_shape)).shape[1]
        self.head = nn.Sequential(nn.Linear(flat, 512), nn.ReLU(), nn.Linear(512, num_actions))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(obs))
