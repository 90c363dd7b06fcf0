"""The ``envpool`` backend (``orin_rl.envs.backends``): envpool's batched C++ environments (its
Atari games with their preprocessing in C++: no-op starts, 4-frame skip with max-pooling, 84x84
grey frames, a stack of 4) as a VecEnv, the envs CleanRL's ``ppo_atari_envpool`` trains on.

envpool resets an ended env on the *next* step (gymnasium's NEXT_STEP auto-reset): that step
ignores its action, returns the first observation of the new episode with reward 0, and is a
transition the game never made. An envpool pool in synchronous mode cannot reset a subset of
its envs within the ending step, so this adapter passes envpool's steps through as they are
(``autoreset_next_step``): at the ending step ``obs`` is the episode's last observation (also
``final_obs``); the step after it is the reset step. The learner then trains on one such step
per episode, as CleanRL's envpool scripts do (a Pong game is 800-5,000 steps). The episode
statistics leave the reset steps out and count whole games: with ``episodic_life`` a lost life
ends a training episode, and a game's return (the unclipped score, envpool's
``info["reward"]``) is reported when its last life is lost, as CleanRL reports it.

Seeds are fixed when envpool makes its pool: ``reset(seed)`` with a new seed makes a new pool.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from orin_rl.envs.base import EnvError, EnvOptions, StepResult, VecEnv

INSTALL_HINT = "install envpool: pip install 'orin-rl[envpool]' (Python 3.12 or newer)"
TRAINING_ONLY = ("episodic_life", "reward_clip")
"""envpool options that shape learning, not the game: an evaluation batch plays whole,
unclipped games (as gymnasium's ``env.train_wrappers`` are training-only)."""


class EnvpoolVecEnv(VecEnv):
    """A pool made by ``make_pool(seed)`` (envpool's gymnasium API: ``reset() -> (obs, info)``,
    ``step(actions) -> (obs, reward, terminated, truncated, info)``, NEXT_STEP auto-reset) as a
    VecEnv on ``device``."""

    eval_physics: ClassVar[str | None] = "envpool"
    autoreset_next_step: ClassVar[bool] = True

    def __init__(
        self,
        make_pool: Callable[[int | None], Any],
        device: torch.device | str,
        max_episode_steps: int,
        seed: int | None = None,
    ):
        self._make_pool = make_pool
        self._pool_seed = seed
        self._pool = make_pool(seed)
        pool = self._pool
        self.num_envs = int(pool.num_envs)
        self.device = torch.device(device)
        self.observation_space = pool.single_observation_space
        self.action_space = pool.single_action_space
        if not isinstance(self.action_space, gym.spaces.Discrete):
            raise EnvError(f"the envpool backend takes discrete actions, not {self.action_space}")
        self.max_episode_steps = max_episode_steps
        self.seed: int | None = None
        n = self.num_envs
        self._return = np.zeros(n, np.float64)
        self._length = np.zeros(n, np.int64)
        self._resetting = np.zeros(n, bool)  # ended last step: this step is envpool's reset
        self._returns: list[float] = []
        self._lengths: list[int] = []
        self._pinned: torch.Tensor | None = None

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        """The batch on the device, through one pinned host buffer (the copy is asynchronous;
        the next step's host read of the actions has waited for it before it is reused)."""
        if self.device.type != "cuda":
            return torch.from_numpy(np.array(obs))
        if self._pinned is None or self._pinned.shape != obs.shape:
            self._pinned = torch.empty(obs.shape, dtype=torch.from_numpy(obs[:0]).dtype,
                                       pin_memory=True)  # fmt: skip
        self._pinned.numpy()[...] = obs
        return self._pinned.to(self.device, non_blocking=True)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every env; a ``seed`` other than the pool's makes a new pool with it."""
        if seed is None:
            seed, self.seed = self.seed, None
        if seed is not None and seed != self._pool_seed:
            self._pool.close()
            self._pool, self._pool_seed = self._make_pool(seed), seed
        obs, _ = self._pool.reset()
        self._return[:] = 0.0
        self._length[:] = 0
        self._resetting[:] = False
        return self._obs(obs)

    def step(self, actions: torch.Tensor) -> StepResult:
        """One step of every env (see the module's note on envpool's reset steps)."""
        act = actions.detach().reshape(self.num_envs).to("cpu", torch.int32).numpy()
        obs, reward, terminated, truncated, info = self._pool.step(act)
        raw = np.asarray(info.get("reward", reward), np.float64)  # unclipped (reward_clip)
        counted = ~self._resetting
        self._return += np.where(counted, raw, 0.0)
        self._length += counted
        ended = np.asarray(terminated) | np.asarray(truncated)
        lives = info.get("lives")
        game_over = ended if lives is None else ended & (np.asarray(lives) == 0)
        if game_over.any():
            self._returns.extend(self._return[game_over].tolist())
            self._lengths.extend(self._length[game_over].tolist())
            self._return[game_over] = 0.0
            self._length[game_over] = 0
        self._resetting = ended
        obs_t = self._obs(obs)
        return StepResult(
            obs=obs_t,
            reward=torch.from_numpy(np.asarray(reward, np.float32)).to(self.device),
            terminated=torch.from_numpy(np.asarray(terminated, bool)).to(self.device),
            truncated=torch.from_numpy(np.asarray(truncated, bool)).to(self.device),
            final_obs=obs_t,
            info={"resetting": torch.from_numpy(~counted)},
        )

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """Scores and lengths (agent steps) of the games finished since the last call."""
        returns, lengths = self._returns, self._lengths
        self._returns, self._lengths = [], []
        return returns, lengths

    def close(self) -> None:
        """Close the pool (its threads)."""
        self._pool.close()


def make_vec_env(
    env_id: str, num_envs: int, device: torch.device | str, options: EnvOptions
) -> VecEnv:
    """``num_envs`` envs of envpool's ``env_id`` (e.g. ``Pong-v5``) with ``options.kwargs``
    passed to ``envpool.make`` (``episodic_life``, ``reward_clip``, ``num_threads``, ...);
    an evaluation batch leaves out the training-only ones."""
    if importlib.util.find_spec("envpool") is None:
        raise EnvError(f"{env_id}: the envpool backend needs envpool, which is not installed: "
                       f"{INSTALL_HINT}")  # fmt: skip
    import envpool

    if options.wrappers:
        raise EnvError("env.wrappers: envpool preprocesses in C++; its options go in "
                       "env.kwargs (e.g. {episodic_life: true, reward_clip: true})")  # fmt: skip
    if options.vectorization != "sync":
        raise EnvError(f"env.vectorization={options.vectorization}: the envpool backend runs "
                       "its own threads (env.kwargs num_threads); use sync")  # fmt: skip
    if env_id not in envpool.list_all_envs():
        raise EnvError(f"{env_id!r} is not an envpool task (envpool.list_all_envs() lists them, "
                       "e.g. Pong-v5, Breakout-v5)")  # fmt: skip
    kwargs = dict(options.kwargs or {})
    if options.evaluation:
        for key in TRAINING_ONLY:
            kwargs.pop(key, None)
    steps = options.max_episode_steps
    if steps is not None:
        kwargs["max_episode_steps"] = steps
    spec_steps = envpool.make_spec(env_id, **kwargs).config.max_episode_steps

    def make_pool(seed: int | None) -> Any:
        extra = {} if seed is None else {"seed": int(seed)}
        return envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, **kwargs, **extra)

    return EnvpoolVecEnv(make_pool, device, int(spec_steps), options.seed)
