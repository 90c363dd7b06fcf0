"""Convolutional networks: the image encoders of the policies, and the seed's benchmark CNN.

``ImageEncoder`` is what a policy on frames sees through (chosen from the observation space by
``image_encoder_kind``), ``KeypointEncoder`` what each image of a dict observation (mjlab's camera
tasks) does; ``SeedCNNPolicy`` (3 convolutions + 2 fully connected layers on 256×256
images) is the heavier reference model of the export and runtime benchmarks (``--model
cnn-seed``).
"""

from __future__ import annotations

import math

import numpy as np
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


# Image encoders of the policies: (out_channels, kernel, stride) of each convolution, then the
# width of the fully connected feature layer.
ENCODERS: dict[str, tuple[tuple[tuple[int, int, int], ...], int]] = {
    # Mnih et al. 2015 (Nature DQN), as SB3's NatureCNN and CleanRL's Atari agents: 84×84 stacks.
    "nature": (((32, 8, 4), (64, 4, 2), (64, 3, 1)), 512),
    # Young & Tian 2019 (MinAtar): one 3×3 convolution of 16 channels, 128 hidden units.
    "small": (((16, 3, 1),), 128),
}
NATURE_MIN_SIZE = 36
"""The smallest side the Nature stack takes (8/4 → 4/2 → 3/1 leaves one pixel)."""


def channels_first(image_shape: tuple[int, ...] | list[int]) -> bool:
    """Whether a 3-D image is (C, H, W): its smallest side comes first (SB3's rule); else it
    is (H, W, C), as gymnasium's rendered frames are."""
    return int(np.argmin(image_shape)) == 0


def image_encoder_kind(obs_shape: tuple[int, ...] | list[int], dtype: str) -> str | None:
    """The encoder for an observation: ``nature`` for uint8 frames of 36 px or more a side
    (84×84 Atari stacks), ``small`` for smaller uint8 grids (MinAtar's 10×10), None for
    anything else (flat vectors go to the MLP). Frames are (C, H, W) or (H, W, C)."""
    if dtype != "uint8" or len(obs_shape) != 3:
        return None
    spatial = obs_shape[1:] if channels_first(obs_shape) else obs_shape[:2]
    return "nature" if min(spatial) >= NATURE_MIN_SIZE else "small"


class ImageEncoder(nn.Module):
    """uint8 frames (batch, C, H, W) or (batch, H, W, C) (``channels_first``), or their
    flattened rows, → (batch, features) float: scaled to [0, 1] here (x / 255, so the storage
    and the exported input stay uint8), then ReLU convolutions and one ReLU fully connected
    layer (orthogonal init, gain sqrt(2), as SB3 and CleanRL)."""

    def __init__(self, image_shape: tuple[int, ...] | list[int], kind: str):
        super().__init__()
        if kind not in ENCODERS:
            raise ValueError(f"image encoder {kind!r} not in {sorted(ENCODERS)}")
        self.image_shape = tuple(int(d) for d in image_shape)
        self.channels_last = not channels_first(self.image_shape)
        chw = self.image_shape  # (C, H, W) of the convolutions
        if self.channels_last:
            h, w, c = self.image_shape
            chw = (c, h, w)
        convs, self.features = ENCODERS[kind]
        layers: list[nn.Module] = []
        channels = chw[0]
        for out, kernel, stride in convs:
            layers += [nn.Conv2d(channels, out, kernel, stride), nn.ReLU()]
            channels = out
        self.convs = nn.Sequential(*layers, nn.Flatten())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *chw)).shape[1]
        self.fc = nn.Sequential(nn.Linear(flat, self.features), nn.ReLU())
        for layer in (*self.convs, *self.fc):
            if isinstance(layer, (nn.Conv2d, nn.Linear)):
                nn.init.orthogonal_(layer.weight, math.sqrt(2.0))
                nn.init.zeros_(layer.bias)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """(batch, features) of uint8 ``frames`` (any float dtype is scaled the same way)."""
        x = frames.reshape(-1, *self.image_shape)
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)  # (batch, H, W, C) -> (batch, C, H, W)
        x = x.to(self.fc[0].weight.dtype) * (1.0 / 255.0)  # (batch, C, H, W) in [0, 1]
        return self.fc(self.convs(x))


KEYPOINT_CONVS = ((16, 5, 2), (32, 3, 2))
"""(out_channels, kernel, stride) of mjlab's vision encoder (its Yam camera tasks' ``cnn_cfg``)."""


class KeypointEncoder(nn.Module):
    """uint8 frames (batch, C, H, W) or (batch, H, W, C) → (batch, 2 × channels) float: mjlab's
    ``SpatialSoftmaxCNN`` as its camera tasks configure it (``KEYPOINT_CONVS``, ELU, zero padding
    as rsl_rl's ``CNN`` computes it, torch's default init), then a spatial soft-argmax (Levine
    et al. 2016): each last feature map's expected (x, y) position in [-1, 1], interleaved.
    Frames are scaled x / 255 here, so the storage and the exported input stay uint8.
    """

    def __init__(self, image_shape: tuple[int, ...] | list[int], temperature: float = 1.0):
        super().__init__()
        self.image_shape = tuple(int(d) for d in image_shape)
        self.channels_last = not channels_first(self.image_shape)
        c, h, w = self.image_shape
        if self.channels_last:
            h, w, c = self.image_shape
        layers: list[nn.Module] = []
        for out, kernel, stride in KEYPOINT_CONVS:
            pad_h, pad_w = (_same_padding(n, kernel, stride) for n in (h, w))
            layers += [nn.Conv2d(c, out, kernel, stride, (pad_h, pad_w)), nn.ELU()]
            h, w = ((n + 2 * pad - kernel) // stride + 1 for n, pad in ((h, pad_h), (w, pad_w)))
            c = out
        self.convs = nn.Sequential(*layers)
        pos_x, pos_y = torch.meshgrid(torch.linspace(-1.0, 1.0, h), torch.linspace(-1.0, 1.0, w),
                                      indexing="ij")  # fmt: skip
        self.register_buffer("pos_x", pos_x.reshape(1, 1, -1))
        self.register_buffer("pos_y", pos_y.reshape(1, 1, -1))
        self.temperature = temperature
        self.features = 2 * c

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        """(batch, 2 × channels) keypoints of uint8 ``frames`` (a float dtype is scaled the same
        way)."""
        x = frames.reshape(-1, *self.image_shape)
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)  # (batch, H, W, C) -> (batch, C, H, W)
        x = self.convs(x.to(self.convs[0].weight.dtype) * (1.0 / 255.0))  # (batch, C', H', W')
        weights = torch.softmax(x.flatten(2) / self.temperature, dim=-1)  # (batch, C', H' W')
        xs, ys = (weights * self.pos_x).sum(-1), (weights * self.pos_y).sum(-1)
        return torch.stack([xs, ys], dim=-1).flatten(1)  # (batch, 2 C'): x0, y0, x1, y1, ...


def _same_padding(size: int, kernel: int, stride: int) -> int:
    """rsl_rl's ``CNN`` padding of one side (its ``_compute_padding``, dilation 1)."""
    return math.ceil((stride * (size // stride) - size - stride + kernel) / 2)
