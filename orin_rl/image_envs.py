"""Pixel environments as the policies take them: uint8 (C, H, W) frames (torch-free).

Config ``env.wrappers`` entries (``orin_rl.image_envs:atari``, ``orin_rl.image_envs:minatar``)
used by training, evaluation and ``orin-rl run`` alike, so every stage sees the same frames.

- ``atari``: gymnasium's ``AtariPreprocessing`` (no-op starts, frame skip with a max-pool of the
  last two frames, grey 84×84) and ``FrameStackObservation`` (the last 4 frames): (4, 84, 84)
  uint8. The ALE env itself must be made with ``frameskip=1`` (``env.kwargs``): the wrapper
  skips.
- ``minatar``: MinAtar's (10, 10, C) bool grid as (C, 10, 10) uint8 of 0 and 255, so the
  encoder's x / 255 gives MinAtar's 0/1 channels.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np


def atari(
    env: gym.Env,
    frame_skip: int = 4,
    screen_size: int = 84,
    stack: int = 4,
    noop_max: int = 30,
    terminal_on_life_loss: bool = False,
) -> gym.Env:
    """The usual Atari preprocessing (Machado et al. 2018's v5 env underneath, sticky actions
    kept): (stack, screen_size, screen_size) uint8 frames."""
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        terminal_on_life_loss=terminal_on_life_loss,
        grayscale_obs=True,
    )
    return gym.wrappers.FrameStackObservation(env, stack)


class MinAtarFrames(gym.ObservationWrapper):
    """MinAtar's (10, 10, C) bool channels → (C, 10, 10) uint8 in {0, 255}."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        h, w, c = env.observation_space.shape
        self.observation_space = gym.spaces.Box(0, 255, (c, h, w), np.uint8)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """(C, H, W) uint8 of one (H, W, C) bool grid."""
        return np.ascontiguousarray(np.moveaxis(observation, -1, 0)).astype(np.uint8) * 255


def minatar(env: gym.Env) -> gym.Env:
    """MinAtar's grid as uint8 (C, 10, 10) frames (``MinAtarFrames``)."""
    return MinAtarFrames(env)
