"""The pixel presets run as defined: Atari Pong and Breakout (ale-py's ROMs, the Nature encoder
on (4, 84, 84) uint8 stacks) and MinAtar (the small encoder), PPO and MinAtar's DQN, each for
one short iteration. Whether MinAtar learns is a benchmark (tools/bench_pixels.py), not a test."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from orin_rl import config as config_mod
from orin_rl.algorithms import PPO
from orin_rl.algorithms.dqn import DQN
from orin_rl.config import Config
from orin_rl.config.presets import preset_overrides
from orin_rl.runners import train
from tests.conftest import require_pixels

SHORT = {"train.device": "cpu", "train.eval_every": 0, "train.eval_episodes": 1,
         "train.tensorboard": False, "train.seed": 3}  # fmt: skip
ATARI_CUT = {"env.max_episode_steps": 400}
"""An untrained policy that never fires leaves Breakout's ball unlaunched until v5's 27k-step
limit: the final evaluation's one game then took most of a test's 40 s."""


def _config(env_id: str, algo: str = "ppo", **extra) -> Config:
    overrides = {**preset_overrides(env_id, algo), **SHORT, **extra}
    return config_mod.apply_overrides(
        Config(), [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    )


def _spy_policy(monkeypatch, cls) -> dict:
    seen: dict = {}
    update = cls.update

    def spy(self):
        seen["spec"] = self.policy.spec
        seen["fields"] = set(getattr(self, "replay", None).specs) if cls is DQN else None
        return update(self)

    monkeypatch.setattr(cls, "update", spy)
    return seen


@pytest.mark.parametrize("game", ["Pong", "Breakout"])
def test_atari_preset_trains_an_iteration(tmp_path, monkeypatch, game):
    require_pixels("ale_py", "ale-py is in the pixels extra")
    require_pixels("cv2", "AtariPreprocessing needs OpenCV (the pixels extra)")
    seen = _spy_policy(monkeypatch, PPO)
    cfg = _config(f"ALE/{game}-v5", **ATARI_CUT, **{"env.num_envs": 2, "ppo.num_steps": 16,
                                       "ppo.num_minibatches": 2, "train.total_steps": 32})  # fmt: skip
    summary = train(cfg, tmp_path / "run", progress=False)
    spec = seen["spec"]
    assert (spec.obs_shape, spec.obs_dtype, spec.encoder) == ([4, 84, 84], "uint8", "nature")
    assert summary["total_steps"] == 32 and summary["obs_into_buffer"] is True
    assert summary["eval_episodes"] == 1


def test_minatar_dqn_preset_trains(tmp_path, monkeypatch):
    require_pixels("minatar", "MinAtar is in the pixels extra")
    seen = _spy_policy(monkeypatch, DQN)
    cfg = _config("MinAtar/Breakout-v1", "dqn",
                  **{"dqn.learning_starts": 64, "train.total_steps": 256})  # fmt: skip
    train(cfg, tmp_path / "run", progress=False)
    spec = seen["spec"]
    assert (spec.obs_shape, spec.obs_dtype, spec.encoder) == ([4, 10, 10], "uint8", "small")
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert state["algo"]["grad_steps"] > 0


def test_atari_dqn_preset_keeps_frames_once_on_real_stacks(tmp_path, monkeypatch):
    """ale-py's frames through AtariPreprocessing and FrameStackObservation are a stack moving
    one frame a step, padded with its first frame when a training episode starts, after a
    game's reset or a lost life (every insert rebuilds the stack from the stored frames and
    compares), so the replay keeps one frame a transition, no stack. Breakout, random play:
    lives are lost within the run."""
    require_pixels("ale_py", "ale-py is in the pixels extra")
    require_pixels("cv2", "AtariPreprocessing needs OpenCV (the pixels extra)")
    seen = _spy_policy(monkeypatch, DQN)
    ends = []
    step = DQN.process_env_step
    monkeypatch.setattr(DQN, "process_env_step",
                        lambda self, s: ends.append(bool(s.terminated.any())) or step(self, s))  # fmt: skip
    cfg = _config("ALE/Breakout-v5", "dqn", **ATARI_CUT, **{"dqn.learning_starts": 64, "dqn.buffer_size": 512,
                                              "train.total_steps": 600})  # fmt: skip
    train(cfg, tmp_path / "run", progress=False)
    assert any(ends)  # a life lost: a training episode ended, the next one's stack padded
    assert seen["spec"].encoder == "nature"
    assert not {"obs", "next_obs"} & set(seen["fields"]) and "frame" in seen["fields"]
    state = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    assert state["algo"]["grad_steps"] > 0


def test_a_lost_life_ends_a_training_episode_and_the_game_goes_on():
    """The Atari presets' training wrappers: a lost life ends the episode, ``reset`` goes on
    with the same game (lives kept, the stack padded with one frame), a game over starts a
    new game; the evaluation's wrappers play the whole game as one episode."""
    require_pixels("ale_py", "ale-py is in the pixels extra")
    require_pixels("cv2", "AtariPreprocessing needs OpenCV (the pixels extra)")
    from orin_rl.envs.factory import make_env

    cfg = _config("ALE/Breakout-v5")
    env_config = {"kwargs": cfg.env.kwargs, "wrappers": cfg.env.train_wrappers}
    env = make_env("ALE/Breakout-v5", env_config)
    ale = env.unwrapped.ale
    env.reset(seed=0)
    lives, episodes = [ale.lives()], 0
    while episodes < 2:
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            episodes += 1
            lives.append(ale.lives())
            frame = ale.getEpisodeFrameNumber()
            obs, _ = env.reset()
            assert ale.getEpisodeFrameNumber() > frame  # the same game, a no-op further
            assert all(np.array_equal(obs[0], o) for o in obs)  # a fresh stack
    assert lives == [5, 4, 3]
    while ale.lives() > 0 or not (terminated or truncated):
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
    env.reset()
    assert ale.lives() == 5  # a game over: a new game

    whole = make_env("ALE/Breakout-v5", {"kwargs": cfg.env.kwargs, "wrappers": cfg.env.wrappers})
    whole.reset(seed=0)
    start = whole.unwrapped.ale.lives()
    terminated = truncated = False
    while not (terminated or truncated):
        _, _, terminated, truncated, _ = whole.step(whole.action_space.sample())
    assert start == 5 and whole.unwrapped.ale.lives() == 0
