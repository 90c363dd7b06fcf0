"""The encoder of a dict observation (images and states): rsl_rl 5's ``CNNModel`` latent.

A network's keys (its role's ``PolicySpec.obs_groups``: mjlab's ``("actor", "camera")``) become
one feature vector: the vector keys concatenated, through rsl_rl's normaliser where the spec
asks (``EmpiricalNormalizer`` over those values only: the frames are scaled by x / 255 in their
encoder), then each image key through its own ``KeypointEncoder`` (mjlab's vision encoder: two
convolutions, then each feature map's expected position; a few thousand weights, where
``ImageEncoder``'s dense layer over a 32×32 frame's pixels has millions). The encoder is the
first module of the actor's and of the critic's ``Sequential``, as a single-image policy's is,
and takes the rows of ``obs_layout`` (training) or a dict of one tensor per key (the exported
model's inputs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from orin_rl.models import profile as profiles
from orin_rl.models.cnn import KeypointEncoder
from orin_rl.models.normalizer import EmpiricalNormalizer
from orin_rl.obs_layout import ObsLayout

ROLES = ("actor", "critic")


def dict_spec_fields(space: gym.spaces.Dict, groups: dict[str, list] | None) -> dict[str, Any]:
    """``PolicySpec`` fields of a dict observation space: the row of bytes (``obs_shape``,
    uint8), its ``obs_layout``, and the keys each role reads (``groups``; None: every key)."""
    layout = ObsLayout.from_space(space)
    keys = list(layout.parts)
    groups = {role: list(keys) for role in ROLES} if groups is None else groups
    for role in ROLES:
        unknown = [k for k in groups.get(role, ()) if k not in layout.parts]
        if role not in groups or unknown or not groups[role]:
            raise ValueError(f"the {role}'s observation keys {groups.get(role)} are not among the "
                             f"dict observation's {keys}")  # fmt: skip
    floats = [p.key for p in layout.parts.values() if len(p.shape) == 3 and not p.image]
    if floats:
        raise ValueError(
            f"observation key(s) {floats} are float images: images travel as uint8 (0-255; the "
            "encoder scales x / 255); cast them in the environment"
        )
    return {
        "obs_shape": [layout.row_bytes],
        "obs_dtype": "uint8",
        "obs_layout": layout.to_spec(),
        "obs_groups": {role: list(groups[role]) for role in ROLES},
    }


class MultiInputEncoder(nn.Module):
    """One role's keys of a dict observation → (batch, features): the vector keys (normalised
    where asked), then each image key's ``KeypointEncoder`` features.

    Args:
        layout: the observation's ``ObsLayout``.
        keys: the keys this network reads.
        normalize: rsl_rl's normaliser over the vector keys.
    """

    def __init__(self, layout: ObsLayout, keys: list[str], normalize: bool):
        super().__init__()
        self.layout = layout
        self.keys = list(keys)
        parts = [layout.parts[k] for k in self.keys]
        self.vector_keys = [p.key for p in parts if not p.image]
        self.image_keys = [p.key for p in parts if p.image]
        self.vector_dim = sum(p.size for p in parts if not p.image)
        self.images = nn.ModuleDict({p.key: KeypointEncoder(p.shape) for p in parts if p.image})
        self.normalizer = (
            EmpiricalNormalizer(self.vector_dim) if normalize and self.vector_dim else None
        )
        self.features = self.vector_dim + sum(e.features for e in self.images.values())
        """Width of the feature vector the MLP reads."""

    def split(self, obs: torch.Tensor | Mapping[str, torch.Tensor]) -> Mapping[str, torch.Tensor]:
        """This network's keys of ``obs``: rows of bytes (batch, row_bytes), or a dict."""
        return obs if isinstance(obs, Mapping) else self.layout.unpack(obs, self.keys)

    def vectors(self, parts: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(batch, vector_dim): the vector keys, concatenated in order (raw; float32, or the
        half precision an fp16 deployed model is fed)."""
        return torch.cat([_floating(parts[k].flatten(1)) for k in self.vector_keys], dim=-1)

    def forward(self, obs: torch.Tensor | Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(batch, features) of ``obs`` (rows of bytes, or one tensor per key)."""
        parts = self.split(obs)
        latent = []
        if self.vector_keys:
            x = self.vectors(parts)
            latent.append(x if self.normalizer is None else self.normalizer(x))
        latent += [self.images[k](parts[k]) for k in self.image_keys]
        return torch.cat(latent, dim=-1) if len(latent) > 1 else latent[0]

    def describe_inputs(self) -> dict[str, Any]:
        """How each key is taken, for ``policy.json``: rsl_rl's normaliser over the vector keys
        concatenated (each key its own slice of its statistics; None without one), x / 255 for
        the frames."""
        described: dict[str, Any] = {}
        start, norm = 0, self.normalizer
        for key in self.vector_keys:
            part = slice(start, start + self.layout.parts[key].size)
            start = part.stop
            described[key] = None
            if norm is not None:
                described[key] = {
                    "formula": "(x - mean) / (std + eps)",
                    "mean": norm.mean[part].tolist(),
                    "std": norm.std[part].tolist(),
                    "eps": norm.eps,
                    "clip": None,
                }
        for key in self.image_keys:
            described[key] = {"formula": "x / 255", "input_dtype": "uint8"}
        return described

    @torch.no_grad()
    def update_normalizer(self, obs: torch.Tensor) -> None:
        """Fold raw rows (batch, row_bytes) into the vector keys' normaliser (where there is
        one)."""
        if self.normalizer is not None:
            self.normalizer.update(self.vectors(self.split(obs)))


def encoders(spec: Any) -> tuple[MultiInputEncoder, MultiInputEncoder]:
    """The actor's and the critic's encoders of a dict-observation ``PolicySpec``; what they
    cannot take is one line saying what to change."""
    if profiles.normalization(spec) == "before_networks":
        raise ValueError(
            "normalize_obs with a dict observation: its rows hold uint8 frames, so the running "
            "normaliser sits inside the networks, over the vector keys (rsl_rl's): set "
            "ppo.rsl_rl true, or ppo.normalize_obs false"
        )
    if getattr(spec, "share_encoder", False):
        raise ValueError("share_encoder with a dict observation: the actor and the critic read "
                         "keys of their own; set ppo.share_encoder false")  # fmt: skip
    layout = ObsLayout.from_spec(spec.obs_layout or [])
    groups = spec.obs_groups or {}
    return (
        MultiInputEncoder(layout, groups["actor"], spec.normalize_obs),
        MultiInputEncoder(layout, groups["critic"], spec.normalize_obs),
    )


def _floating(x: torch.Tensor) -> torch.Tensor:
    return x if x.is_floating_point() else x.float()
