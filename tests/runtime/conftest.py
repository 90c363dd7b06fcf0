"""A trained-for-a-moment CartPole run with an exported bundle, shared by the runtime tests."""

from __future__ import annotations

import pytest

from orin_rl import config as C
from orin_rl.export.onnx import export_bundle
from orin_rl.runners import train


@pytest.fixture(scope="session")
def run_with_bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("rt") / "run"
    cfg = C.apply_overrides(
        C.Config(),
        [
            "env.num_envs=4",
            "ppo.num_steps=64",
            "train.total_steps=512",
            "train.eval_episodes=1",
            "train.tensorboard=false",
            "ppo.normalize_obs=true",
        ],
    )
    train(cfg, out, progress=False)
    export_bundle(out, out / "bundle", parity_observations=128)
    return out
