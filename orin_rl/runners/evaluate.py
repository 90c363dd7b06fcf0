"""Deterministic evaluation of a policy on fresh episodes."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from orin_rl import envs
from orin_rl.models import ActorCritic
from orin_rl.models.batched import BatchedActorCritic


@torch.inference_mode()
def evaluate(
    policy: ActorCritic,
    env_id: str,
    episodes: int,
    seed: int,
    device: torch.device,
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: list[Any] | None = None,
) -> list[float]:
    """Returns of ``episodes`` fresh episodes under the deterministic policy (argmax / mean).

    One sub-environment per episode, each counted once, so short episodes are not over-sampled.
    Sub-environment k of a batch starts from ``seed + (episodes before it) + k``.
    """
    returns: list[float] = []
    while len(returns) < episodes:
        n = min(episodes - len(returns), 32)
        env = envs.make(
            env_id,
            n,
            device,
            max_episode_steps=max_episode_steps,
            env_kwargs=env_kwargs,
            wrappers=wrappers,
        )
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


@torch.inference_mode()
def evaluate_batch(policy: ActorCritic, env: Any, seed: int) -> list[float]:
    """First-episode returns of every env of a GPU-native batch ``env`` under the deterministic
    policy (one episode per env, one host read at the end)."""
    obs = env.reset(seed=seed)
    total = torch.zeros(env.num_envs, dtype=torch.float64, device=env.device)
    done = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    for t in range(env.max_episode_steps):  # every first episode ends by the time limit
        step = env.step(policy.act_deterministic(policy.normalize(obs)))
        total += torch.where(done, 0.0, step.reward.double())
        done |= step.terminated | step.truncated
        obs = step.obs
        if t % 50 == 49 and bool(done.all()):  # early policies fall fast: stop when all did
            break
    return total.tolist()


@torch.inference_mode()
def evaluate_agents(
    policy: BatchedActorCritic,
    env_id: str,
    episodes: int,
    seed: int,
    device: torch.device,
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: list[Any] | None = None,
) -> list[list[float]]:
    """Per agent of ``policy``, the returns of ``episodes`` fresh deterministic episodes.

    With a GPU-native implementation of ``env_id`` all K * episodes episodes run as one batch
    on ``device`` (one host read at the end); otherwise each agent runs on gymnasium in turn.
    """
    from orin_rl.envs.gpu import REGISTRY, make_gpu

    k = policy.num_agents
    if env_id not in REGISTRY or env_kwargs or wrappers:  # those make gymnasium envs
        return [
            evaluate(
                policy.agent(i),
                env_id,
                episodes,
                seed,
                device,
                max_episode_steps,
                env_kwargs,
                wrappers,
            )
            for i in range(k)
        ]
    env = make_gpu(env_id, k * episodes, device, max_episode_steps, seed=seed)
    obs = env.reset()
    total = torch.zeros(k * episodes, dtype=torch.float64, device=env.device)
    done = torch.zeros(k * episodes, dtype=torch.bool, device=env.device)
    for _ in range(env.max_episode_steps):  # every first episode ends by the time limit
        per_agent = obs.view(k, episodes, *obs.shape[1:])
        actions = policy.act_deterministic(policy.normalize(per_agent)).flatten(0, 1)
        step = env.step(actions)
        total += torch.where(done, 0.0, step.reward.double())
        done |= step.terminated | step.truncated
        obs = step.obs
    return total.view(k, episodes).tolist()
