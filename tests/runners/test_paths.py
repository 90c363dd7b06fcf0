"""The one place that picks PPO's training path (``runners.paths``): the path an iteration
takes, why each path before it was not taken, logged once and kept in summary.json."""

from __future__ import annotations

import json
import logging

from orin_rl import config as C
from orin_rl.runners import make_runner

BASE = ["env.env_id=CartPole-v1", "env.num_envs=2", "ppo.num_steps=8", "train.device=cpu",
        "train.total_steps=16", "train.tensorboard=false"]  # fmt: skip


def _runner(tmp_path, *overrides: str):
    cfg = C.apply_overrides(C.Config(), [*BASE, *overrides])
    return make_runner(cfg, tmp_path / "run", progress=False)


def test_a_plain_cpu_run_is_eager_and_says_why_not_the_others(tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        runner = _runner(tmp_path)
    try:
        choice = runner.path_choice
        assert choice.path == "eager"
        assert choice.not_taken == {
            "fused": "the learner is not on CUDA",
            "graphs": "train.cuda_graphs is off",
            "worker rollouts": "the envs are not rollout workers",
            "overlap": "train.overlap is off",
        }
        runner.learn()
    finally:
        runner.env.close()
    assert caplog.text.count("training path: eager") == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["training_path"]["path"] == "eager"
    assert summary["training_path"]["not_taken"]["overlap"] == "train.overlap is off"


def test_the_first_path_whose_rule_passes_is_taken(tmp_path):
    cases = [
        (["train.overlap=true", "env.vectorization=async"], "overlap"),
        (["env.vectorization=workers", "env.num_workers=1"], "worker rollouts"),
    ]
    for overrides, path in cases:
        runner = _runner(tmp_path / path.replace(" ", "_"), *overrides)
        try:
            assert runner.path_choice.path == path
            assert path not in runner.path_choice.not_taken
        finally:
            if runner.overlap is not None:
                runner.overlap.close()
            runner.env.close()
