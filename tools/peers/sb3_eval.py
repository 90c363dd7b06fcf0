"""The evaluation the Stable-Baselines3 peers share (``sb3_ppo.py``, ``sb3_offpolicy.py``): as
orin_rl evaluates, deterministic episodes on a gymnasium vector env, one episode an env. Runs in
the benchmark's own venv, beside the peer that imports it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


def evaluate(model, env_id: str, episodes: int, seed: int) -> list[float]:
    """The return of each of ``episodes`` deterministic episodes of ``model`` on ``env_id``."""
    env = gym.make_vec(env_id, episodes, vectorization_mode="sync")
    obs, _ = env.reset(seed=seed)
    total, done = np.zeros(episodes), np.zeros(episodes, bool)
    while not done.all():
        action, _ = model.predict(obs, deterministic=True)
        obs, reward, term, trunc, _ = env.step(action)
        total += np.where(done, 0.0, reward)
        done |= term | trunc
    env.close()
    return total.tolist()
