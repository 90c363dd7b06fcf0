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


def _run_fixture(name: str, env_id: str, normalize: bool, *extra: str, doc: str | None = None):
    """A session fixture ``name``: the folder of one tiny run (``_run``'s arguments)."""

    def run(tmp_path_factory):
        return _run(tmp_path_factory, env_id, normalize, *extra)

    run.__name__, run.__doc__ = name, doc
    return pytest.fixture(scope="session", name=name)(run)


cartpole_run = _run_fixture("cartpole_run", "CartPole-v1", False)
cartpole_norm_run = _run_fixture("cartpole_norm_run", "CartPole-v1", True)
pendulum_norm_run = _run_fixture("pendulum_norm_run", "Pendulum-v1", True)
pendulum_run = _run_fixture("pendulum_run", "Pendulum-v1", False)
pendulum_rsl_norm_run = _run_fixture(
    "pendulum_rsl_norm_run",
    "Pendulum-v1",
    True,
    "ppo.rsl_rl=true",
    doc="rsl_rl's learner (mjlab's preset): its normalisers inside the actor and the critic.",
)
