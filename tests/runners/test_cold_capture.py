"""A graphed run's first iteration captured from the state the first reset produced, with no
eager iteration before it (``PPO.prepare_capture``), on the CPU with emulated graphs
(``graph_emulation``: a replay runs the recorded ops on the recorded tensors, as a CUDA graph
does): its replays train exactly as eager iterations from the same reset do."""

from __future__ import annotations

import functools
import logging

import pytest
import torch

from orin_rl import config as C
from orin_rl import distributed
from orin_rl.algorithms import PPO
from orin_rl.algorithms.ppo_multi import MultiAgentPPO
from orin_rl.buffers import RolloutBuffer
from orin_rl.envs.gpu.classic import CartPole
from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models.batched import BatchedActorCritic
from orin_rl.runners import make_runner, on_policy
from orin_rl.runners.graphs import GraphedIteration

STEPS, ENVS = 8, 4


def _learner(seed: int, max_steps: int, agents: int = 1) -> tuple[PPO, CartPole, torch.Tensor]:
    torch.manual_seed(seed)
    cfg = C.PPOConfig(num_steps=STEPS, num_minibatches=2, num_epochs=2, hidden_sizes=[8, 8])
    env = CartPole(agents * ENVS, "cpu", max_episode_steps=max_steps)
    obs = env.reset(seed=seed)
    spec = PolicySpec.from_spaces(env.observation_space, env.action_space, hidden_sizes=[8, 8])
    buf = RolloutBuffer(STEPS, agents * ENVS, (4,), (), torch.int64, "cpu", "host", 2)
    policy = BatchedActorCritic(spec, agents) if agents > 1 else ActorCritic(spec)
    cls = MultiAgentPPO if agents > 1 else PPO
    algo = cls(policy, buf, cfg, 10, torch.device("cpu"), capturable=True)
    algo.value_all_final_obs = True  # what a CUDA learner does: no boolean indexing
    return algo, env, obs


def _eager(algo: PPO, env: CartPole, obs: torch.Tensor, iterations: int) -> list[dict]:
    """The runner's eager iteration, ``iterations`` times from ``obs``."""
    torch.manual_seed(1)  # torch's generator (actions, minibatches) as the replays find it
    out = []
    for _ in range(iterations):
        for _ in range(STEPS):
            step = env.step(algo.act(obs))
            algo.process_env_step(step)
            obs = step.obs
        algo.compute_returns(obs)
        out.append(algo.update())
    return out


def _replayed(algo: PPO, env: CartPole, obs: torch.Tensor, iterations: int) -> list[dict]:
    """Capture from ``obs`` with no iteration before it, then replay as the runner does."""
    torch.manual_seed(1)
    assert algo.prepare_capture() is None
    graph = GraphedIteration(algo, env, STEPS, emulate=True)
    graph.capture(obs)
    out = []
    for _ in range(iterations):
        lr = algo.set_learning_rate()
        _, num_updates, epochs = graph.replay()
        out.append(algo.finish_update(num_updates, epochs, lr))
    return out


@pytest.mark.parametrize(
    "max_steps,agents", [(500, 1), (5, 1), (5, 2)]
)  # short episodes: time limits, the final observations' values; 2 agents: MultiAgentPPO
def test_capture_from_the_first_reset_trains_as_eager_iterations(rng, max_steps, agents):
    seed = int(rng.integers(2**31))
    eager_algo, eager_env, eager_obs = _learner(seed, max_steps, agents)
    graph_algo, graph_env, graph_obs = _learner(seed, max_steps, agents)
    assert torch.equal(eager_obs, graph_obs)
    want = _eager(eager_algo, eager_env, eager_obs, 3)
    got = _replayed(graph_algo, graph_env, graph_obs, 3)
    assert got == want  # the losses, iteration by iteration
    for a, b in zip(eager_algo.policy.parameters(), graph_algo.policy.parameters(), strict=True):
        assert torch.equal(a, b)
    state = graph_algo.optimizer.state
    assert all(float(s["step"]) == 3 * 4 for s in state.values())  # 3 updates of 4 steps
    assert torch.equal(eager_env.state, graph_env.state)


def test_without_prepare_capture_the_replays_restart_adam(rng):
    """What ``prepare_capture`` prevents: Adam's state made inside the capture is made again by
    every replay (its moments zeroed, its step count back to one)."""
    seed = int(rng.integers(2**31))
    algo, env, obs = _learner(seed, 500)
    graph = GraphedIteration(algo, env, STEPS, emulate=True)
    graph.capture(obs)
    for _ in range(2):
        lr = algo.set_learning_rate()
        _, num_updates, epochs = graph.replay()
        algo.finish_update(num_updates, epochs, lr)
    assert all(float(s["step"]) == 4 for s in algo.optimizer.state.values())


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"target_kl": 0.02}, "KL"),
        ({"desired_kl": 0.01}, "KL"),
        ({"world_size": 2}, "distributed"),
        ({"precision": "fp16"}, "torch.optim.Adam"),
    ],
)
def test_where_the_first_iteration_cannot_be_captured_cold_nothing_is_made(change, reason):
    """The runs that keep the eager warm-up: an optimizer that makes its state in its step
    (fp16's), a KL-driven schedule, a distributed run (every rank on the one known path)."""
    spec = PolicySpec([4], "discrete", 2, hidden_sizes=[8, 8])
    cfg = C.PPOConfig(num_steps=STEPS, num_minibatches=2,
                      **{k: v for k, v in change.items() if k.endswith("_kl")})  # fmt: skip
    buf = RolloutBuffer(STEPS, ENVS, (4,), (), torch.int64, "cpu", "host", 2)
    dist = distributed.Context(world_size=change.get("world_size", 1))
    algo = PPO(ActorCritic(spec), buf, cfg, 10, torch.device("cpu"),
               precision=change.get("precision", "fp32"), dist_ctx=dist)  # fmt: skip
    assert reason in algo.prepare_capture()
    assert not any(algo.optimizer.state.values())  # no state made: the eager step makes it


def test_the_runner_captures_from_the_first_reset_and_replays_its_first_iteration(
    tmp_path, monkeypatch, caplog
):
    """``OnPolicyRunner._iterate`` with graphs on (forced here, with emulated graphs and the
    learner made capturable as a CUDA one is): the first call captures from the reset's
    observations and replays; no eager iteration runs (it would open a CUDA stream)."""
    cfg = C.apply_overrides(C.Config(), [
        "env.env_id=CartPole-v1", "env.backend=gpu", "env.num_envs=4", "ppo.num_steps=8",
        "ppo.num_minibatches=2", "ppo.num_epochs=2", "ppo.hidden_sizes=[8,8]",
        "train.device=cpu", "train.total_steps=64", "train.tensorboard=false",
        "train.graph_warm_up=false",
    ])  # fmt: skip
    runner = make_runner(cfg, tmp_path / "run", progress=False)
    try:
        algo = runner.algo
        algo.capturable, algo.value_all_final_obs, runner.use_graphs = True, True, True
        for group in algo.optimizer.param_groups:  # a device tensor, as capturable makes it
            group["lr"] = torch.tensor(float(group["lr"]))
        monkeypatch.setattr(on_policy, "GraphedIteration",
                            functools.partial(GraphedIteration, emulate=True))  # fmt: skip
        eager = {"calls": 0}
        real_update = algo.update
        monkeypatch.setattr(algo, "update", lambda: eager.update(calls=eager["calls"] + 1)
                            or real_update())  # fmt: skip
        obs = runner.env.reset(seed=1)
        with caplog.at_level(logging.INFO):
            obs, first = runner._iterate(obs)
            obs, second = runner._iterate(obs)
        assert "captured one PPO iteration from the first reset" in caplog.text
        assert runner._graph is not None and eager["calls"] == 0
        assert first != second  # two replays, two updates
        assert all(float(s["step"]) == 2 * 4 for s in algo.optimizer.state.values())
    finally:
        runner.env.close()
