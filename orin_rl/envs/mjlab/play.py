"""One world of an mjlab task's play configuration, for evaluation and the control loop.

``MjlabGymEnv`` is what ``orin-rl eval`` steps (a gymnasium ``Env``); ``MjlabDriver`` is ``orin-rl
run``'s sensor and actuator. Both observe what the deployed policy takes: the actor group, or a
camera task's actor keys (a dict of numpy arrays, the frames uint8: ``mjlab.images``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from orin_rl.envs.base import EnvOptions
from orin_rl.envs.mjlab import MjlabVecEnv


class MjlabGymEnv(gym.Env):
    """One world of an mjlab task's play configuration as a gymnasium ``Env``: the actor
    group's observation in (a camera task's: a dict of the actor's keys), the policy's raw
    action out (the task's action terms scale and offset it, as in training). What ``orin-rl
    eval`` and ``orin-rl run`` step.

    ``reset(seed=...)`` reseeds mjlab; a step that ends an episode returns the terminal
    observation and, in ``info["log"]``, what the task logged during the episode (the mean of
    each: ``Metrics/twist/error_vel_xy`` is the velocity-tracking error); the next ``reset()``
    without a seed returns the first observation of the episode the world already began.
    A camera task has no terminal observation (``MjlabVecEnv.final_obs_needed``): its episode
    ends with the next episode's first.
    """

    def __init__(
        self,
        env_id: str,
        env_config: dict[str, Any] | None = None,
        device: str = "cpu",
        seed: int = 0,
    ):
        steps = (env_config or {}).get("max_episode_steps")
        # seeded at the build: the task's startup events (friction, masses) draw then
        options = EnvOptions(seed=seed, max_episode_steps=steps, evaluation=True)
        self.vec = MjlabVecEnv(env_id, 1, device, options)
        self.images = self.vec.images
        if self.images is not None:
            self.observation_space: gym.Space = self.images.actor_space()
        else:
            self._actor = slice(*self.vec.obs_groups["actor"])
            width = self._actor.stop - self._actor.start
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (width,), np.float32)
        self.action_space = self.vec.action_space
        self._next: torch.Tensor | None = None

    def _actor_obs(self, obs: torch.Tensor) -> np.ndarray | dict[str, np.ndarray]:
        if self.images is not None:
            return self.images.actor_obs(obs[0])
        return obs[0, self._actor].cpu().numpy().astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None or self._next is None:
            obs = self.vec.reset(seed=seed)
            self.vec.pop_log()  # what the reset logged belongs to no episode of this one
        else:
            obs = self._next
        self._next = None
        return self._actor_obs(obs), {}

    def step(self, action):
        step = self.vec.step(torch.as_tensor(action, dtype=torch.float32).reshape(1, -1))
        terminated, truncated = bool(step.terminated[0]), bool(step.truncated[0])
        info: dict[str, Any] = {}
        obs = step.obs
        if terminated or truncated:
            obs, self._next = step.final_obs, step.obs
            info["log"] = self.vec.pop_log()
        return self._actor_obs(obs), float(step.reward[0]), terminated, truncated, info

    def close(self) -> None:
        self.vec.close()


class MjlabDriver:
    """One world of an mjlab task as the control loop's sensor and actuator (``orin-rl run
    --env Mjlab-...``); reports falls (terminations other than the time limit) and the task's
    velocity-tracking error (``Metrics/twist/error_vel_xy``, mean over the episodes).

    The world's step is part of each tick (``actuate``), so it is warmed up before the first
    tick; on CUDA it runs as CUDA graphs where the graphed step is enabled (``use_graphs``)."""

    def __init__(
        self,
        env_id: str,
        seed: int = 0,
        env_config: dict[str, Any] | None = None,
        device: str = "cpu",
    ):
        self.env = MjlabGymEnv(env_id, env_config, device, seed)
        if torch.device(device).type == "cuda":
            self.env.vec.use_graphs()  # a world of one is launch-bound: its step as graphs
        # Warm-up outside the loop's ticks (kernel loads, the graphs' captures, with and
        # without a reset), then the seeded reset starts the world exactly where it would have.
        self.env.reset(seed=seed)
        self.env.vec.warm_up()
        obs, _ = self.env.reset(seed=seed)
        self.obs = {k: v[None] for k, v in obs.items()} if isinstance(obs, dict) else obs[None]
        self.returns: list[float] = []
        self.episode_ends: list[int] = []
        """Ticks (0-based) whose step ended an episode (the world's reset ran in them)."""
        self._ticks = 0
        self.falls = 0
        self._ret = 0.0
        self._errors: list[float] = []
        commands = self.env.vec.env.command_manager
        self.tracks_velocity = any(
            hasattr(commands.get_term(name), "vel_command_b") for name in commands.active_terms
        )
        """A velocity-tracking (locomotion) task: its early episode ends are falls."""

    def sensor(self) -> np.ndarray | dict[str, np.ndarray]:
        """(1, actor_dim) observation the policy acts on (a camera task's: a dict of (1, ...)
        arrays, one a key)."""
        return self.obs

    def actuate(self, action: np.ndarray) -> None:
        """Step the world with ``action`` (1, action_dim)."""
        obs, reward, terminated, truncated, info = self.env.step(action[0])
        self._ret += reward
        self._ticks += 1
        if terminated or truncated:
            self.episode_ends.append(self._ticks - 1)
            self.returns.append(self._ret)
            self._ret = 0.0
            self.falls += int(terminated and not truncated)
            if "Metrics/twist/error_vel_xy" in info["log"]:
                self._errors.append(info["log"]["Metrics/twist/error_vel_xy"])
            obs, _ = self.env.reset()
        if isinstance(obs, dict):
            for key, value in obs.items():
                self.obs[key][0] = value
        else:
            self.obs[0] = obs

    def report(self) -> dict[str, Any]:
        """Falls and the tracking error of the finished episodes (what ``orin-rl run`` adds)."""
        error = float(np.mean(self._errors)) if self._errors else None
        return {
            "falls": self.falls,
            "tracks_velocity": self.tracks_velocity,
            "tracking_error_vel_xy": error,
            "episode_end_ticks": self.episode_ends,
        }
