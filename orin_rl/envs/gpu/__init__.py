"""GPU-native batched environments (``backend="gpu"``): classic control as torch tensor ops,
and gymnasium's MuJoCo locomotion tasks on MuJoCo Warp physics (extra ``sim``)."""

from __future__ import annotations

from typing import Any

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
"""The classic-control envs written as torch ops."""
MUJOCO_IDS: tuple[str, ...] = (
    "Hopper-v5",
    "HalfCheetah-v5",
    "Walker2d-v5",
    "Ant-v5",
    "Humanoid-v5",
)
"""The MuJoCo Warp tasks (``orin_rl.envs.gpu.mjwarp``, imported only when one is made)."""

__all__ = ["MUJOCO_IDS", "REGISTRY", "TorchVecEnv", "gpu_env_ids", "make_gpu", "make_vec_env"]


def gpu_env_ids() -> list[str]:
    """Every id ``make_gpu`` accepts."""
    return sorted(REGISTRY) + list(MUJOCO_IDS)


def make_gpu(
    env_id: str,
    num_envs: int,
    device: torch.device | str = "cpu",
    max_episode_steps: int | None = None,
    seed: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> Any:
    """A GPU-native ``env_id`` batch; unknown ids raise an error listing the available ones."""
    from orin_rl.envs.base import EnvError

    if env_id in MUJOCO_IDS:
        from orin_rl.envs.gpu.mjwarp import TASKS

        return TASKS[env_id](num_envs, device, dtype, max_episode_steps, seed)
    if env_id not in REGISTRY:
        raise EnvError(
            f"{env_id!r} has no GPU-native implementation; available: "
            f"{', '.join(gpu_env_ids())} (use --env-backend gym for the others)"
        )
    return REGISTRY[env_id](num_envs, device, dtype, max_episode_steps, seed)


def make_vec_env(env_id: str, num_envs: int, device: torch.device | str, options: Any) -> Any:
    """The ``gpu`` backend (``orin_rl.envs.backends``); ``options`` is an ``EnvOptions``, of
    which the gymnasium-only ones (vectorization, worker time-out) do not apply."""
    from orin_rl.envs.base import EnvError

    if options.kwargs or options.wrappers:
        raise EnvError(
            "env.kwargs and env.wrappers apply to gymnasium envs; the GPU-native envs take "
            "neither: drop them or use env.backend gym"
        )
    return make_gpu(env_id, num_envs, device, options.max_episode_steps, options.seed)
