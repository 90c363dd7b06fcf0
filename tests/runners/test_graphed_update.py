"""The PPO update as one CUDA graph per rollout buffer (``ppo.graph_update``, a CUDA learner
whose envs step on the host): where it applies, and that a replayed update is the eager one,
on each of the overlapped path's two buffers."""

from __future__ import annotations

import copy
import logging
import math
from types import SimpleNamespace

import pytest
import torch

from orin_rl import config as C
from orin_rl.algorithms import PPO
from orin_rl.buffers import RolloutBuffer
from orin_rl.config import PPOConfig
from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.runners import make_runner
from orin_rl.runners.graphs import GraphedUpdate
from orin_rl.runners.logger import read_metrics
from orin_rl.runners.paths import update_graph_blocker

CUDA = torch.device("cuda")


def _cfg(*overrides: str) -> C.Config:
    return C.apply_overrides(C.Config(), list(overrides))


class TestWhereItApplies:
    def test_each_reason_is_named_and_a_plain_cuda_learner_has_none(self):
        cuda, host = CUDA, SimpleNamespace(graph_safe=False, has_own_graphs=False)
        assert update_graph_blocker(_cfg(), host, cuda, False) is None
        cases = [
            (_cfg("ppo.graph_update=off"), host, cuda, False, "ppo.graph_update=off"),
            (_cfg(), host, torch.device("cpu"), False, "not on a CUDA device"),
            (
                _cfg(),
                SimpleNamespace(graph_safe=True, has_own_graphs=False),
                cuda,
                False,
                "step on the GPU",
            ),
            (
                _cfg(),
                SimpleNamespace(graph_safe=False, has_own_graphs=True),
                cuda,
                False,
                "on the GPU",
            ),
            (_cfg("ppo.target_kl=0.02"), host, cuda, False, "ppo.target_kl"),
            (_cfg("train.precision=fp16"), host, cuda, False, "fp16"),
            (_cfg(), host, cuda, True, "distributed"),
        ]
        for cfg, env, device, dist, reason in cases:
            assert reason in update_graph_blocker(cfg, env, device, dist)

    def test_a_cpu_learner_updates_op_by_op(self, tmp_path, caplog):
        cfg = _cfg("env.env_id=CartPole-v1", "env.num_envs=2", "ppo.num_steps=8",
                   "train.device=cpu", "train.total_steps=16", "train.tensorboard=false")  # fmt: skip
        with caplog.at_level(logging.INFO):
            runner = make_runner(cfg, tmp_path / "run", progress=False)
        try:
            assert runner.algo.graphed_update is None
            assert runner.algo.capturable is False
        finally:
            runner.env.close()


def _buffer() -> RolloutBuffer:
    return RolloutBuffer(8, 4, (5,), (2,), torch.float32, CUDA, "device", 4)


def _ppo(seed: int) -> PPO:
    torch.manual_seed(seed)
    spec = PolicySpec([5], "continuous", 2, hidden_sizes=[32, 32], normalize_obs=False)
    cfg = PPOConfig(num_steps=8, num_minibatches=4, num_epochs=3, max_grad_norm=0.5)
    return PPO(ActorCritic(spec).to(CUDA), _buffer(), cfg, 10, CUDA, capturable=True)


def _fill(buffer: RolloutBuffer, gen: torch.Generator) -> None:
    """A finished rollout of fresh random numbers (what the workers' finish leaves)."""
    for name in ("obs", "actions", "values", "advantages", "returns"):
        t = getattr(buffer, name)
        t.copy_(torch.randn(t.shape, generator=gen, device="cpu"))
    buffer.logprobs.copy_(-torch.rand(buffer.logprobs.shape, generator=gen) - 1.0)
    buffer.step = buffer.num_steps


@pytest.mark.gpu
def test_replays_are_the_eager_update_on_each_of_two_buffers():
    """Two learners from the same weights and seeds, one eager, one graphed, over updates that
    alternate between two buffers refilled with new data each time (the overlapped path): the
    same losses and weights after every update (warm-up, captures, replays)."""
    eager, graphed = _ppo(0), _ppo(0)
    graphed.graphed_update = GraphedUpdate(graphed)
    buffers = {id(a): [a.buffer, _buffer()] for a in (eager, graphed)}
    gen = torch.Generator().manual_seed(1)
    for update in range(6):
        data = gen.get_state()
        stats = {}
        for algo in (eager, graphed):
            gen.set_state(data)
            algo.buffer = buffers[id(algo)][update % 2]
            _fill(algo.buffer, gen)
            torch.manual_seed(100 + update)  # the minibatch shuffles
            stats[id(algo)] = algo.update()
        torch.cuda.synchronize()
        assert stats[id(eager)] == pytest.approx(stats[id(graphed)], rel=1e-5, abs=1e-7), update
        for a, b in zip(eager.policy.parameters(), graphed.policy.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    assert len(graphed.graphed_update.graphs) == 2 and graphed.graphed_update.failed is None
    # A checkpoint load replaces the optimizer's moments: the graphs are taken again, and
    # the moments a later checkpoint saves are the ones the updates moved.
    for algo in (eager, graphed):
        algo.load_state_dict(copy.deepcopy(algo.state_dict()))
        for update in range(2):
            _fill(algo.buffer, torch.Generator().manual_seed(7 + update))
            torch.manual_seed(200 + update)
            algo.update()
    saved = [a.optimizer.state_dict()["state"] for a in (eager, graphed)]
    for index, moments in saved[0].items():
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(moments[key], saved[1][index][key], rtol=1e-5, atol=1e-7)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "vectorization, overlap",
    [("workers", False), ("workers", True), ("sync", True)],
    ids=["workers", "workers-overlap", "collector-thread-overlap"],
)
def test_a_run_trains_as_the_op_by_op_update_does(tmp_path, vectorization, overlap):
    """Pendulum on CPU physics, a CUDA learner (rollout workers, or the collector thread of
    ``runners.overlap``): the run with the graphed update logs the same losses, iteration by
    iteration, as the run with ``ppo.graph_update=off``."""
    runs = {}
    # The collector thread and the update draw from one CUDA generator in an order the threads
    # decide: that run is checked for its graphs and finite losses, not against the other.
    modes = ("auto",) if vectorization == "sync" else ("auto", "off")
    for mode in modes:
        cfg = _cfg("env.env_id=Pendulum-v1", "env.num_envs=4",
                   f"env.vectorization={vectorization}",
                   "env.num_workers=2", "ppo.num_steps=32", "ppo.num_minibatches=4",
                   "ppo.num_epochs=2", "train.device=cuda", "train.total_steps=768",
                   "train.eval_every=0", "train.eval_episodes=1", "train.tensorboard=false",
                   "train.stop_at_threshold=false", f"train.overlap={str(overlap).lower()}",
                   f"ppo.graph_update={mode}")  # fmt: skip
        runner = make_runner(cfg, tmp_path / mode, progress=False)
        runner.learn()
        if mode == "auto":
            assert runner.algo.graphed_update is not None
            assert len(runner.algo.graphed_update.graphs) == (2 if overlap else 1)
        runs[mode] = read_metrics(tmp_path / mode / "metrics.jsonl")
    assert len(runs["auto"]) == 6
    assert all(math.isfinite(r["losses/value"]) for r in runs["auto"])
    for a, b in zip(runs["auto"], runs.get("off", runs["auto"]), strict=True):
        assert a["losses/value"] == pytest.approx(b["losses/value"], rel=1e-4, abs=1e-6)
        assert a["losses/policy"] == pytest.approx(b["losses/policy"], rel=1e-3, abs=1e-6)
