"""``make()``: a VecEnv from its backend (``orin_rl.envs.backends``), and ``reward_threshold``.

Imported on first use of ``orin_rl.envs.make`` (the package itself stays light).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from orin_rl.envs import backends
from orin_rl.envs.base import EnvError, EnvOptions, VecEnv
from orin_rl.envs.factory import EnvMakeError


def make(
    env_id: str,
    num_envs: int = 1,
    device: torch.device | str = "cpu",
    seed: int | None = None,
    backend: str = "gym",
    vectorization: str = "sync",
    max_episode_steps: int | None = None,
    worker_timeout_s: float = 60.0,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: list[str | dict[str, Any]] | None = None,
    evaluation: bool = False,
    random_episode_start: bool = False,
    num_workers: int = 0,
) -> VecEnv:
    """Create ``num_envs`` copies of ``env_id`` as one VecEnv on ``device``.

    Args:
        env_id: a gymnasium id, e.g. ``CartPole-v1``.
        num_envs: batch size of the vector env.
        device: where observations and rewards are returned.
        seed: if given, the first ``reset()`` seeds the envs with ``seed, seed + 1, ...``.
        backend: a name in ``orin_rl.envs.backends``: ``gym`` (gymnasium.vector) or ``gpu``
            (GPU-native envs stepping on ``device``, see ``orin_rl.envs.gpu``).
        vectorization: ``sync``, ``async`` (worker processes) or ``workers`` (rollout
            workers that can run a whole rollout, ``envs.worker_pool``) for the gym backend.
        max_episode_steps: override of the time limit.
        worker_timeout_s: async workers that do not answer a step within this are reported.
        env_kwargs: keyword arguments for each env's constructor (gym backend).
        wrappers: config ``env.wrappers`` entries applied to each env (gym backend).
        evaluation: the batch evaluates a policy (mjlab: the task's play configuration).
        random_episode_start: first episodes start at a random step of the time limit (mjlab).
        num_workers: rollout workers (``workers`` vectorisation; 0: one a CPU core).

    A ``gym`` request for an id another backend claims (``Mjlab-*``) goes to that backend.
    """
    if num_envs <= 0:
        raise EnvError(f"num_envs must be positive, got {num_envs}")
    backend = backends.for_id(env_id, backend)
    try:
        make_vec_env = backends.factory(backend)
    except EnvMakeError as exc:
        raise EnvError(str(exc)) from None
    options = EnvOptions(seed, vectorization, max_episode_steps, worker_timeout_s, env_kwargs,
                         wrappers, evaluation, random_episode_start, num_workers)  # fmt: skip
    return make_vec_env(env_id, num_envs, device, options)


def reward_threshold(env_id: str) -> float | None:
    """gymnasium's registered ``reward_threshold`` for ``env_id`` (None if it has none)."""
    try:  # a custom module:EnvId is registered as EnvId (its module was imported by make)
        return gym.spec(env_id.split(":")[-1]).reward_threshold
    except gym.error.Error:
        return None
