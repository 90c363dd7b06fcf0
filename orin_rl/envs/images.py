"""Pixel environments as the policies take them: uint8 (C, H, W) frames (torch-free).

Config ``env.wrappers`` entries (``orin_rl.envs.images:atari``, ``:minatar``, ``:rendered``;
``orin_rl.image_envs:...``, the module's former name, still works) used by training, evaluation
and ``orin-rl run`` alike, so every stage sees the same frames.

- ``atari``: gymnasium's ``AtariPreprocessing`` (no-op starts, frame skip with a max-pool of the
  last two frames, grey 84×84) and ``FrameStackObservation`` (the last 4 frames): (4, 84, 84)
  uint8. The ALE env itself must be made with ``frameskip=1`` (``env.kwargs``): the wrapper
  skips.
- ``minatar``: MinAtar's (10, 10, C) bool grid as (C, 10, 10) uint8 of 0 and 255, so the
  encoder's x / 255 gives MinAtar's 0/1 channels.
- ``rendered``: a state-based env's rendered frames (``render_mode: rgb_array`` in
  ``env.kwargs``) as its observation, resized, RGB (H, W, 3) or grey, optionally stacked: a
  policy from pixels on a classic-control or MuJoCo task.
  With ``episodic_life`` (the Atari presets' ``env.train_wrappers``: training only), a lost
  life ends the training episode and the game goes on (``EpisodicLife``), inside the stack, so
  the next episode's stack starts padded with its first frame as after a reset.
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
    episodic_life: bool = False,
) -> gym.Env:
    """The usual Atari preprocessing (Machado et al. 2018's v5 env underneath, sticky actions
    kept): (stack, screen_size, screen_size) uint8 frames; ``episodic_life``: ``EpisodicLife``
    between the preprocessing and the stack (training envs)."""
    env = gym.wrappers.AtariPreprocessing(
        env,
        noop_max=noop_max,
        frame_skip=frame_skip,
        screen_size=screen_size,
        terminal_on_life_loss=terminal_on_life_loss,
        grayscale_obs=True,
    )
    if episodic_life:
        env = EpisodicLife(env)
    return gym.wrappers.FrameStackObservation(env, stack)


def rendered(env: gym.Env, size: int = 84, grey: bool = False, stack: int = 1) -> gym.Env:
    """The env's rendered frames (made with ``render_mode="rgb_array"``) in place of its
    observation, resized to ``size`` x ``size``: (size, size, 3) uint8 RGB, (size, size, 1)
    grey, or with ``grey`` a stack of ``stack`` of them, (stack, size, size) (gymnasium's
    AddRenderObservation, ResizeObservation, GrayscaleObservation, FrameStackObservation):
    each a shape the image encoders take."""
    if stack > 1 and not grey:
        raise ValueError("rendered: a stack of RGB frames has 4 axes, which no image encoder "
                         "takes; stack grey frames (grey: true) or set stack: 1")  # fmt: skip
    env = gym.wrappers.AddRenderObservation(env, render_only=True)
    env = gym.wrappers.ResizeObservation(env, (size, size))
    if grey:
        env = gym.wrappers.GrayscaleObservation(env, keep_dim=stack == 1)
    return gym.wrappers.FrameStackObservation(env, stack) if stack > 1 else env


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


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (``terminated``) while the game goes on: ``reset`` after it
    takes one no-op step instead of a new game (Mnih et al. 2015; SB3's and CleanRL's
    ``EpisodicLifeEnv``, which their Atari agents train with). For training envs only
    (``atari(episodic_life=True)`` in ``env.train_wrappers``): an evaluation plays whole games.

    The learner then sees a lost life as the end of its future rewards; the episode returns
    the training logs are those of one life, not of a game."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        if not hasattr(env.unwrapped, "ale"):
            raise TypeError(f"episodic_life: {env.unwrapped} is not an ALE game (no lives)")
        self.lives = 0
        self.game_over = True

    def _lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())

    def step(self, action):
        """The game's step; ``terminated`` also when a life was lost."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self._lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs):
        """A new game after a game over, else the same game one no-op step on."""
        if self.game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the no-op ended the game
                obs, info = self.env.reset(**kwargs)
        self.game_over = False
        self.lives = self._lives()
        return obs, info
