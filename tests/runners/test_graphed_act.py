"""The policy's act as one CUDA graph each env step (``train.cuda_graphs`` with envs stepping
on the host, ``runners.graphs.GraphedAct``): where it applies, and that a replay acts as the
policy does on the observation it was given."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

from orin_rl import config as C
from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.runners import make_runner
from orin_rl.runners.graphs import GraphedAct
from orin_rl.runners.paths import act_graph_blocker

CUDA = torch.device("cuda")


def _cfg(*overrides: str) -> C.Config:
    return C.apply_overrides(C.Config(), list(overrides))


def test_each_reason_is_named_and_a_plain_cuda_learner_has_none():
    def normalized(where: str) -> SimpleNamespace:
        return SimpleNamespace(normalization=SimpleNamespace(where=where))

    plain = normalized("none")
    assert act_graph_blocker(_cfg(), plain, CUDA, False) is None
    cases = [
        (_cfg(), plain, torch.device("cpu"), False, "not on a CUDA device"),
        (_cfg(), normalized("before_networks"), CUDA, False, "normaliser"),
        (_cfg(), normalized("inside_networks"), CUDA, False, "normaliser"),
        (_cfg("train.precision=bf16"), plain, CUDA, False, "train.precision=bf16"),
        (_cfg("train.num_agents=2"), plain, CUDA, False, "num_agents"),
        (_cfg(), plain, CUDA, True, "distributed"),
        (_cfg("train.overlap=true"), plain, CUDA, False, "--overlap"),
    ]  # fmt: skip
    for cfg, policy, device, dist, reason in cases:
        assert reason in act_graph_blocker(cfg, policy, device, dist)


def test_a_cpu_learner_acts_eagerly(tmp_path):
    cfg = _cfg("env.env_id=CartPole-v1", "env.num_envs=2", "ppo.num_steps=8", "train.device=cpu",
               "train.total_steps=16", "train.tensorboard=false", "train.cuda_graphs=true")  # fmt: skip
    runner = make_runner(cfg, tmp_path / "run", progress=False)
    try:
        assert runner.algo.graphed_act is None
    finally:
        runner.env.close()


@pytest.mark.gpu
def test_a_replay_acts_as_the_policy_on_the_observation_it_was_given():
    torch.manual_seed(0)
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    spec = PolicySpec.from_spaces(space, gym.spaces.Discrete(6), hidden_sizes=[],
                                  share_encoder=True)  # fmt: skip
    policy = ActorCritic(spec).to(CUDA)
    graphed = GraphedAct(policy.act)
    with torch.inference_mode():
        for i in range(GraphedAct.WARM_UP + 3):
            obs = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8, device=CUDA)
            actions, logp, values = graphed(obs)
            if i >= GraphedAct.WARM_UP:
                assert graphed.graph is not None and graphed.failed is None
            expected_logp, _, expected_values = policy.evaluate(obs, actions)
            torch.testing.assert_close(logp, expected_logp)
            torch.testing.assert_close(values, expected_values)


@pytest.mark.gpu
def test_a_host_env_run_with_cuda_graphs_acts_in_a_graph(tmp_path, caplog):
    cfg = _cfg("env.env_id=CartPole-v1", "env.num_envs=4", "ppo.num_steps=16",
               "train.device=cuda", "train.total_steps=128", "train.tensorboard=false",
               "train.cuda_graphs=true")  # fmt: skip
    with caplog.at_level(logging.INFO):
        runner = make_runner(cfg, tmp_path / "run", progress=False)
        try:
            runner.learn()
            graphed = runner.algo.graphed_act
            assert graphed is not None and graphed.graph is not None and graphed.failed is None
            summary = json.loads((tmp_path / "run" / "summary.json").read_text())
            assert summary["act_graph"] is True
        finally:
            runner.env.close()
    assert "the policy's act runs as one each env step" in caplog.text


@pytest.mark.gpu
def test_a_failed_capture_leaves_act_eager_and_the_random_draws_working():
    """An act that reads the host inside (``.item()``) cannot be captured: the capture fails
    once, the act runs eagerly from then on, and torch's CUDA generator draws as before (a
    failed capture left it in capture mode: ``orin_rl.capture`` takes it out)."""
    calls = []

    def act(obs):
        calls.append(obs.shape)
        sample = torch.rand(obs.shape[0], device=obs.device)
        if sample.sum().item() < 0:  # a host read: a capture of this fails
            raise AssertionError("unreachable")
        return sample

    graphed = GraphedAct(act)
    obs = torch.zeros(4, 3, device=CUDA)
    for _ in range(GraphedAct.WARM_UP + 2):
        out = graphed(obs)
        assert out.shape == (4,)
    assert graphed.graph is None and graphed.failed is not None
    assert torch.rand(3, device=CUDA).shape == (3,)  # the generator draws outside a capture
