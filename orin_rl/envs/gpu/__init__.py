"""GPU-native batched environments: torch tensor ops on CUDA or the CPU (``backend="gpu"``)."""

from __future__ import annotations

import torch

from orin_rl.envs.gpu.base import TorchVecEnv
from orin_rl.envs.gpu.classic import (
    Acrobot,
    CartPole,
    MountainCar,
    MountainCarContinuous,
    Pendulum,
)

REGISTRY: dict[str, type[TorchVecEnv]] = {
    cls.env_id: cls for cls in (CartPole, Acrobot, Pendulum, MountainCar, MountainCarContinuous)
}

__all__ = ["REGISTRY", "TorchVecEnv", "make_gpu"]


def make_gpu(
    env_id: str,
    num_envs: int,
    device: torch.device | str = "cpu",
    max_episode_steps: int | None = None,
    seed: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> TorchVecEnv:
    """A GPU-native ``env_id`` batch; unknown ids raise an error listing the available ones."""
    from orin_rl.envs.gym_env import EnvError

    if env_id not in REGISTRY:
        raise EnvError(
            f"{env_id!r} has no GPU-native implementation; available: "
            f"{', '.join(sorted(REGISTRY))} (use --env-backend gym for the others)"
        )
    return REGISTRY[env_id](num_envs, device, dtype, max_episode_steps, seed)
