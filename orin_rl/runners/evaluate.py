"""Deterministic evaluation of a policy on fresh episodes."""

from __future__ import annotations

import numpy as np
import torch

from orin_rl import envs
from orin_rl.models import ActorCritic


@torch.inference_mode()
def evaluate(
    policy: ActorCritic,
    env_id: str,
    episodes: int,
    seed: int,
    device: torch.device,
    max_episode_steps: int | None = None,
) -> list[float]:
    """Returns of ``episodes`` fresh episodes under the deterministic policy (argmax / mean).

    One sub-environment per episode, each counted once, so short episodes are not over-sampled.
    """
    returns: list[float] = []
    while len(returns) < episodes:
        n = min(episodes - len(returns), 32)
        env = envs.make(env_id, n, device, max_episode_steps=max_episode_steps)
        try:
            obs = env.reset(seed=seed + len(returns))
            total = np.zeros(n)
            done = np.zeros(n, dtype=bool)
            while not done.all():
                actions = policy.act_deterministic(policy.normalize(obs))
                step = env.step(actions)
                total += np.where(done, 0.0, step.reward.cpu().numpy())
                done |= (step.terminated | step.truncated).cpu().numpy()
                obs = step.obs
            returns.extend(total.tolist())
        finally:
            env.close()
    return returns
