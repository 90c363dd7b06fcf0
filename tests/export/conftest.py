"""Tiny trained run folders (a few iterations: parity does not need a good policy)."""

from __future__ import annotations

import pytest

from orin_rl import config as C
from orin_rl.runners import train


def _run(tmp_path_factory, env_id: str, normalize: bool, *extra: str):
    out = tmp_path_factory.mktemp(f"{env_id}-{normalize}") / "run"
    cfg = C.apply_overrides(
        C.Config(),
        [
            f"env.env_id={env_id}",
            "env.num_envs=4",
            "ppo.num_steps=64",
            "train.total_steps=512",
            "train.eval_episodes=1",
            "train.tensorboard=false",
            f"ppo.normalize_obs={str(normalize).lower()}",
            *extra,
        ],
    )
    train(cfg, out, progress=False)
    return out


@pytest.fixture(scope="session")
def cartpole_run(tmp_path_factory):
    return _run(tmp_path_factory, "CartPole-v1", normalize=False)


@pytest.fixture(scope="session")
def cartpole_norm_run(tmp_path_factory):
    return _run(tmp_path_factory, "CartPole-v1", normalize=True)


@pytest.fixture(scope="session")
def pendulum_norm_run(tmp_path_factory):
    return _run(tmp_path_factory, "Pendulum-v1", normalize=True)


@pytest.fixture(scope="session")
def pendulum_run(tmp_path_factory):
    return _run(tmp_path_factory, "Pendulum-v1", normalize=False)


@pytest.fixture(scope="session")
def pendulum_rsl_norm_run(tmp_path_factory):
    """rsl_rl's learner (mjlab's preset): its normalisers inside the actor and the critic."""
    return _run(tmp_path_factory, "Pendulum-v1", True, "ppo.rsl_rl=true")
