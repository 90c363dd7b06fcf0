"""mjlab's camera tasks (``Mjlab-Lift-Cube-Yam-Rgb``, ``-Depth``): images and states as one
dict observation.

A task whose rsl_rl configuration gives a network an image group (its ``obs_groups``:
``{"actor": ("actor", "camera"), "critic": ("critic", "camera")}``) is observed as a gymnasium
``Dict`` of its groups: each image group a uint8 (C, H, W) Box, each vector group a float32 Box,
packed into one row of bytes per world (``orin_rl.obs_layout``) for the learner, whose actor and
critic read the keys that configuration names (``PolicySpec.obs_groups``). mjlab's camera terms
give floats in [0, 1] (``camera_rgb``: rgb / 255, ``camera_depth``: depth / cutoff, masks 0 or
1): they are stored as round(255 x), which gives an RGB frame back exactly and depth in steps of
1/255 of the cutoff (2 mm at the Yam tasks' 0.5 m). The frames render on Warp's CPU device
(tests/envs/test_mjlab_cameras.py trains the depth task there).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from orin_rl.envs.base import EnvError
from orin_rl.obs_layout import ObsLayout


def to_uint8(frames: torch.Tensor) -> torch.Tensor:
    """mjlab's [0, 1] float frames as uint8 round(255 x) (uint8 ones as they are)."""
    if frames.dtype == torch.uint8:
        return frames
    return (frames.float().clamp(0.0, 1.0) * 255.0).round_().to(torch.uint8)


class DictObservation:
    """The groups an mjlab task's networks read, as a ``Dict`` space and its rows of bytes.

    Args:
        manager: the env's ``ObservationManager`` (built).
        env_id: for the messages.
        obs_groups: the task's rsl_rl ``obs_groups`` (role -> mjlab groups).
    """

    def __init__(self, manager: Any, env_id: str, obs_groups: dict[str, Any]):
        dims = dict(manager.group_obs_dim)
        roles = {"actor": list(obs_groups["actor"])}
        roles["critic"] = list(obs_groups.get("critic") or roles["actor"])
        keys = list(dict.fromkeys(roles["actor"] + roles["critic"]))  # in order, once each
        spaces = {}
        for key in keys:
            shape = dims.get(key)
            if shape is None or not manager.group_obs_concatenate[key] or len(shape) not in (1, 3):
                raise EnvError(
                    f"{env_id}: observation group {key!r} has shape {shape} (groups: "
                    f"{', '.join(dims)}); orin_rl's policies read vectors (n,) and images (C, H, W)"
                )
            if len(shape) == 3:
                spaces[key] = gym.spaces.Box(0, 255, tuple(shape), np.uint8)
            else:
                spaces[key] = gym.spaces.Box(-np.inf, np.inf, tuple(shape), np.float32)
        self.space = gym.spaces.Dict(spaces)
        self.layout = ObsLayout.from_space(self.space)
        self.obs_groups = roles
        """The keys the actor and the critic read (``PolicySpec.obs_groups``)."""
        self.images = [key for key, shape in spaces.items() if len(shape.shape) == 3]

    @classmethod
    def of_task(cls, manager: Any, env_id: str, rl_cfg: Any) -> DictObservation | None:
        """The dict observation of a task whose networks read an image group; None for a task
        of vector groups (the flat observation)."""
        groups = getattr(rl_cfg, "obs_groups", None) or {}
        dims = dict(manager.group_obs_dim)
        named = {g for role in ("actor", "critic") for g in groups.get(role, ())}
        if not any(len(dims.get(g, ())) == 3 for g in named):
            return None
        return cls(manager, env_id, groups)

    def pack(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(num_envs, row_bytes) uint8: mjlab's group tensors, frames as uint8."""
        values = {
            key: to_uint8(obs[key]) if key in self.images else obs[key].float()
            for key in self.layout.parts
        }
        return self.layout.pack(values)

    def actor_space(self) -> gym.spaces.Dict:
        """The deployed policy's observation: the actor's keys."""
        return gym.spaces.Dict({key: self.space[key] for key in self.obs_groups["actor"]})

    def actor_obs(self, rows: torch.Tensor) -> dict[str, np.ndarray]:
        """The actor's keys of one world's row (row_bytes,) as numpy arrays (copies)."""
        parts = self.layout.unpack(rows.cpu(), self.obs_groups["actor"])
        return {key: value.numpy().copy() for key, value in parts.items()}
