"""A custom environment for orin_rl (docs/custom_env.md): walk a point to a goal on a line.

    orin-rl train --env goal_seek:GoalSeek-v0 --env-kwargs '{"size": 8}'

run from this folder (or with it on PYTHONPATH): orin_rl imports ``goal_seek``, which
registers ``GoalSeek-v0`` with gymnasium, then makes it with ``gymnasium.make``.
"""

from __future__ import annotations

from typing import ClassVar

import gymnasium as gym
import numpy as np


class GoalSeekEnv(gym.Env):
    """A point on cells 0..size-1 steps left or right to a goal cell.

    Observation: (position, goal) / (size - 1), float32 in [0, 1]. Actions: 0 left, 1 right.
    Reward: -0.1 a step, +1 on reaching the goal, which ends the episode.
    """

    metadata: ClassVar[dict] = {"render_modes": ["rgb_array"], "render_fps": 8}

    def __init__(self, size: int = 8, render_mode: str | None = None):
        if size < 2:
            raise ValueError(f"size must be at least 2, got {size}")
        self.size = size
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.pos = self.goal = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.pos, self.goal], dtype=np.float32) / (self.size - 1)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)  # seeds self.np_random
        self.pos, self.goal = (int(v) for v in self.np_random.choice(self.size, 2, replace=False))
        return self._obs(), {}

    def step(self, action):
        self.pos = int(np.clip(self.pos + (1 if int(action) == 1 else -1), 0, self.size - 1))
        reached = self.pos == self.goal
        return self._obs(), 1.0 if reached else -0.1, reached, False, {}

    def render(self) -> np.ndarray:
        """An RGB frame (32 x 32 * size): the goal green, the point white."""
        frame = np.zeros((32, 32 * self.size, 3), dtype=np.uint8)
        frame[:, 32 * self.goal : 32 * (self.goal + 1), 1] = 160
        frame[8:24, 32 * self.pos + 8 : 32 * self.pos + 24] = 255
        return frame


class ScaleReward(gym.RewardWrapper):
    """A wrapper with an argument, for config ``env.wrappers``: rewards times ``scale``."""

    def __init__(self, env: gym.Env, scale: float = 1.0):
        super().__init__(env)
        self.scale = scale

    def reward(self, reward: float) -> float:
        return self.scale * reward


gym.register(id="GoalSeek-v0", entry_point=GoalSeekEnv, max_episode_steps=50)
