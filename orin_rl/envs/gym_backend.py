"""The ``gym`` backend's factory (``orin_rl.envs.backends``): gymnasium's vector envs, or the
rollout workers' pool for ``vectorization=workers``."""

from __future__ import annotations

import torch

from orin_rl.envs.base import EnvOptions, VecEnv
from orin_rl.envs.gym_env import make_gym
from orin_rl.envs.worker_pool import WorkerVecEnv


def make_vec_env(
    env_id: str, num_envs: int, device: torch.device | str, options: EnvOptions
) -> VecEnv:
    """A gymnasium ``sync``/``async`` vector env as a VecEnv, or rollout workers."""
    o = options
    if o.vectorization == "workers":
        return WorkerVecEnv(env_id, num_envs, device, o)
    env = make_gym(env_id, num_envs, device, o.vectorization, o.max_episode_steps,
                   o.worker_timeout_s, o.kwargs, o.wrappers)  # fmt: skip
    env.seed = o.seed
    return env
