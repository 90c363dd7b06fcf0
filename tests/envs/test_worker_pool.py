"""Rollout workers (``vectorization=workers``) step gymnasium's envs exactly as the gym backend
does, and name the worker that failed."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch

from orin_rl import envs
from orin_rl.envs import EnvError

FIELDS = ("obs", "reward", "terminated", "truncated", "final_obs")


def _actions(env, rng):
    space = env.action_space
    if hasattr(space, "n"):
        return torch.as_tensor(rng.integers(0, space.n, env.num_envs))
    # beyond the bounds: both sides must clip the same way
    return torch.as_tensor(rng.uniform(-3, 3, (env.num_envs, *space.shape)), dtype=torch.float32)


@pytest.mark.parametrize(("env_id", "workers"), [("CartPole-v1", 2), ("Pendulum-v1", 3)])
def test_each_step_is_the_gym_backends_step(env_id, workers):
    """Same seeds, same actions: every output of 60 steps equal, time limits and terminations
    included (5 envs over 2 or 3 workers of unequal size), and the same finished episodes."""
    pool = envs.make(env_id, 5, seed=3, vectorization="workers", max_episode_steps=17,
                     num_workers=workers)  # fmt: skip
    ref = envs.make(env_id, 5, seed=3, vectorization="sync", max_episode_steps=17)
    try:
        assert pool.num_workers == workers
        assert torch.equal(pool.reset(), ref.reset())
        rng = np.random.default_rng(0)
        ended = 0
        for _ in range(60):
            actions = _actions(pool, rng)
            ours, theirs = pool.step(actions), ref.step(actions)
            for name in FIELDS:
                assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
            ended += int((ours.terminated | ours.truncated).sum())
        assert ended >= 10
        r1, l1 = pool.pop_episode_stats()
        r2, l2 = ref.pop_episode_stats()
        assert sorted(zip(r1, l1, strict=True)) == sorted(zip(r2, l2, strict=True))
    finally:
        pool.close()
        ref.close()


def _raises_in_the_second_worker(local):
    if local.lo > 0:
        raise ValueError("boom in a program")
    return local.hi - local.lo


def test_a_programs_error_names_its_worker_and_the_pool_goes_on():
    pool = envs.make("CartPole-v1", 4, seed=0, vectorization="workers", num_workers=2)
    try:
        pool.reset()
        with pytest.raises(EnvError, match=r"worker 1: ValueError: boom in a program"):
            pool.run(_raises_in_the_second_worker)
        assert pool.run(_count) == [2, 2]  # still answering
    finally:
        pool.close()


def _count(local):
    return local.hi - local.lo


def test_a_dead_worker_is_named_not_waited_for():
    pool = envs.make("CartPole-v1", 4, seed=0, vectorization="workers", num_workers=2,
                     worker_timeout_s=5.0)  # fmt: skip
    try:
        pool.reset()
        os.kill(pool.processes[1].pid, signal.SIGKILL)
        pool.processes[1].join(5)
        with pytest.raises(EnvError, match=r"worker 1 died"):
            pool.step(torch.zeros(4, dtype=torch.int64))
    finally:
        pool.close()
    assert pool.processes == []


def test_an_unknown_env_fails_in_the_main_process_with_its_message():
    with pytest.raises(EnvError, match="NoSuchEnv"):
        envs.make("NoSuchEnv-v0", 2, vectorization="workers")
