"""Deterministic evaluation of a policy on fresh episodes."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from orin_rl import envs
from orin_rl.models import ActorCritic
from orin_rl.models.batched import BatchedActorCritic
from orin_rl.runners.progress import EvalWatch


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
    watch: EvalWatch | None = None,
) -> list[float]:
    """Returns of ``episodes`` fresh episodes under the deterministic policy (argmax / mean).

    One sub-environment per episode, each counted once, so short episodes are not over-sampled.
    Sub-environment k of a batch starts from ``seed + (episodes before it) + k``. Stopped
    (``watch``): the returns of the episodes that had finished.
    """
    watch = watch or EvalWatch()
    watch.begin(episodes, "episode")
    returns: list[float] = []
    while len(returns) < episodes and not watch.stopped:
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
            while not done.all() and not watch.stopped:
                actions = policy.act_deterministic(policy.normalize(obs))
                step = env.step(actions)
                total += np.where(done, 0.0, step.reward.cpu().numpy())
                ended = (step.terminated | step.truncated).cpu().numpy() & ~done
                done |= ended
                watch.advance(int(ended.sum()))
                obs = step.obs
            returns.extend(total[done].tolist())  # all of them unless stopped
        finally:
            env.close()
    return returns


@torch.inference_mode()
def evaluate_batch(
    policy: ActorCritic, env: Any, seed: int, watch: EvalWatch | None = None
) -> list[float]:
    """First-episode returns of every env of a GPU-native batch ``env`` under the deterministic
    policy (one episode per env, one host read at the end). Stopped (``watch``): the returns of
    the episodes that had finished."""
    watch = watch or EvalWatch()
    watch.begin(env.max_episode_steps, "step")
    obs = env.reset(seed=seed)
    total = torch.zeros(env.num_envs, dtype=torch.float64, device=env.device)
    done = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)
    for t in range(env.max_episode_steps):  # every first episode ends by the time limit
        if watch.stopped:
            return total[done].tolist()
        step = env.step(policy.act_deterministic(policy.normalize(obs)))
        total += torch.where(done, 0.0, step.reward.double())
        done |= step.terminated | step.truncated
        obs = step.obs
        watch.advance(1)
        if t % 50 == 49 and bool(done.all()):  # early policies fall fast: stop when all did
            watch.advance(env.max_episode_steps - t - 1)
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
    watch: EvalWatch | None = None,
) -> list[list[float]]:
    """Per agent of ``policy``, the returns of ``episodes`` fresh deterministic episodes.

    With a GPU-native implementation of ``env_id`` all K * episodes episodes run as one batch
    on ``device`` (one host read at the end); otherwise each agent runs on gymnasium in turn.
    Stopped (``watch``): per agent, the returns of the episodes that had finished.
    """
    from orin_rl.envs.gpu import REGISTRY, make_gpu

    k = policy.num_agents
    watch = watch or EvalWatch()
    if env_id not in REGISTRY or env_kwargs or wrappers:  # those make gymnasium envs
        watch.begin(k * episodes, "episode")
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
                watch,
            )
            for i in range(k)
        ]
    env = make_gpu(env_id, k * episodes, device, max_episode_steps, seed=seed)
    watch.begin(env.max_episode_steps, "step")
    obs = env.reset()
    total = torch.zeros(k * episodes, dtype=torch.float64, device=env.device)
    done = torch.zeros(k * episodes, dtype=torch.bool, device=env.device)
    for _ in range(env.max_episode_steps):  # every first episode ends by the time limit
        if watch.stopped:
            pairs = zip(total.view(k, episodes), done.view(k, episodes), strict=True)
            return [t[d].tolist() for t, d in pairs]
        per_agent = obs.view(k, episodes, *obs.shape[1:])
        actions = policy.act_deterministic(policy.normalize(per_agent)).flatten(0, 1)
        step = env.step(actions)
        total += torch.where(done, 0.0, step.reward.double())
        done |= step.terminated | step.truncated
        obs = step.obs
        watch.advance(1)
    return total.view(k, episodes).tolist()
