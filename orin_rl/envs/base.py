"""The VecEnv contract every environment backend implements (DESIGN.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym
import torch


@dataclass
class StepResult:
    """One batched step. Every tensor has the env's device and a leading (num_envs,) axis.

    ``obs`` is what the policy sees next: for a sub-environment whose episode ended at this step
    it is already the first observation of its next episode (auto-reset). ``final_obs`` holds
    the true last observation of the ended episodes, for bootstrapping on truncation.
    """

    obs: torch.Tensor
    """(num_envs, *obs_shape) observations after the step (reset ones where an episode ended)."""
    reward: torch.Tensor
    """(num_envs,) float32 rewards."""
    terminated: torch.Tensor
    """(num_envs,) bool: the episode reached a terminal state (no bootstrap)."""
    truncated: torch.Tensor
    """(num_envs,) bool: the episode was cut by a time limit (bootstrap from final_obs)."""
    final_obs: torch.Tensor
    """(num_envs, *obs_shape): the true final observation where an episode ended, else obs."""
    info: dict[str, Any] = field(default_factory=dict)
    """Backend-specific extras (the raw gymnasium info for the gym backend)."""

    def __iter__(self):
        # Unpacks like gymnasium: obs, reward, terminated, truncated, info.
        return iter((self.obs, self.reward, self.terminated, self.truncated, self.info))


@runtime_checkable
class VecEnv(Protocol):
    """A batch of environments with auto-reset and torch tensors on ``device``."""

    num_envs: int
    device: torch.device
    observation_space: gym.Space
    """Space of a single environment's observation."""
    action_space: gym.Space
    """Space of a single environment's action."""

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every environment; return (num_envs, *obs_shape) observations."""

    def step(self, actions: torch.Tensor) -> StepResult:
        """Step every environment with a (num_envs, *action_shape) batch of actions."""

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of the episodes completed since the last call."""

    def close(self) -> None:
        """Release workers and resources."""
