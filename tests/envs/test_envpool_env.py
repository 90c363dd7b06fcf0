"""The envpool backend's adapter (``orin_rl.envs.envpool_env``): envpool's NEXT_STEP steps passed
through, whole games counted without the reset steps, a new seed a new pool. The adapter is
checked here on gymnasium's own NEXT_STEP vector env (envpool's gymnasium API; envpool has no
wheel for this box's Python), and on envpool's Atari where envpool is installed (the GPU
machine: tools/bench_atari.py's call)."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode

from orin_rl import envs
from orin_rl.envs.base import EnvError
from orin_rl.envs.envpool_env import EnvpoolVecEnv

HAS_ENVPOOL = importlib.util.find_spec("envpool") is not None


class Recorded:
    """gymnasium's vector env with its own episode statistics (which leave NEXT_STEP's reset
    steps out), remembering each step's info."""

    def __init__(self, num_envs: int, seed: int | None):
        vec = gym.make_vec("CartPole-v1", num_envs, vectorization_mode="sync",
                           vector_kwargs={"autoreset_mode": AutoresetMode.NEXT_STEP})  # fmt: skip
        self.env = gym.wrappers.vector.RecordEpisodeStatistics(vec)
        self.env.reset(seed=seed)
        self.seed = seed
        self.infos: list[dict] = []
        self.num_envs = num_envs
        self.single_observation_space = vec.single_observation_space
        self.single_action_space = vec.single_action_space

    def reset(self):
        return self.env.reset()

    def step(self, actions):
        out = self.env.step(actions)
        self.infos.append(out[-1])
        return out

    def close(self):
        self.env.close()


def _adapter(num_envs=3, seed=5):
    made: list[Recorded] = []

    def make_pool(s):
        made.append(Recorded(num_envs, s))
        return made[-1]

    return EnvpoolVecEnv(make_pool, "cpu", 500, seed), made


def test_games_are_counted_as_gymnasium_counts_them_without_the_reset_steps():
    env, made = _adapter()
    env.reset()
    rng = np.random.default_rng(0)
    ended_before = torch.zeros(env.num_envs, dtype=torch.bool)
    got_returns, got_lengths = [], []
    for _ in range(300):
        step = env.step(torch.from_numpy(rng.integers(0, 2, env.num_envs)))
        assert torch.equal(step.info["resetting"], ended_before)  # the step after an end resets
        assert torch.equal(step.final_obs, step.obs)  # the ending step's own last observation
        ended_before = step.terminated | step.truncated
        r, n = env.pop_episode_stats()
        got_returns += r
        got_lengths += n
    expected_r, expected_n = [], []
    for info in made[-1].infos:
        if "episode" in info:
            done = info["_episode"]
            expected_r += info["episode"]["r"][done].tolist()
            expected_n += info["episode"]["l"][done].tolist()
    assert len(got_returns) >= 10
    assert got_returns == pytest.approx(expected_r)
    assert got_lengths == expected_n


def test_a_new_seed_makes_a_new_pool_and_the_same_seed_keeps_it():
    env, made = _adapter(seed=5)
    first = env.reset()
    assert [p.seed for p in made] == [5]
    env.reset(seed=5)
    assert len(made) == 1
    again = env.reset(seed=9)
    assert [p.seed for p in made] == [5, 9]
    assert first.shape == again.shape == (3, 4)


def test_without_envpool_the_backend_says_what_to_install():
    if HAS_ENVPOOL:
        pytest.skip("envpool is installed here")
    with pytest.raises(EnvError, match=r"pip install 'orin-rl\[envpool\]'"):
        envs.make("Pong-v5", 2, backend="envpool")


@pytest.mark.skipif(not HAS_ENVPOOL, reason="envpool is not installed (Python >= 3.12)")
def test_envpool_pong_frames_and_an_evaluation_batch_of_whole_games():
    env = envs.make("Pong-v5", 2, backend="envpool", seed=1,
                    env_kwargs={"episodic_life": True, "reward_clip": True})  # fmt: skip
    obs = env.reset()
    assert obs.shape == (2, 4, 84, 84) and obs.dtype == torch.uint8
    for _ in range(5):
        step = env.step(torch.zeros(2, dtype=torch.int64))
    assert step.obs.shape == (2, 4, 84, 84)
    env.close()
    evaluation = envs.make("Pong-v5", 2, backend="envpool", evaluation=True,
                           env_kwargs={"episodic_life": True, "reward_clip": True})  # fmt: skip
    assert not evaluation._pool.config["episodic_life"]
    assert not evaluation._pool.config["reward_clip"]
    assert evaluation.max_episode_steps == 27000
    evaluation.close()
