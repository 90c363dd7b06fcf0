"""SAC and DQN: hand-computed updates, n-step returns, prioritized replay, end-to-end runs."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from orin_rl.algorithms.dqn import DQN
from orin_rl.algorithms.offpolicy import NStepAccumulator
from orin_rl.algorithms.sac import SAC, polyak_update_
from orin_rl.buffers import PrioritizedReplayBuffer
from orin_rl.checkpoint import load_checkpoint
from orin_rl.config import DQNConfig, SACConfig
from orin_rl.export.onnx import export_bundle
from orin_rl.models import PolicySpec
from tests.runners.test_train_e2e import orin_rl

CPU = torch.device("cpu")


def _dqn(precision: str = "fp32", **kw) -> DQN:
    spec = PolicySpec.from_spaces(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2),
                                  hidden_sizes=[8], activation="relu")  # fmt: skip
    return DQN(spec, DQNConfig(**kw), 1, CPU, "auto", 1, total_steps=1000,
               precision=precision)  # fmt: skip


def _sac(precision: str = "fp32", **kw) -> SAC:
    spec = PolicySpec.from_spaces(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)),
                                  hidden_sizes=[8], activation="relu", squash=True)  # fmt: skip
    return SAC(spec, SACConfig(**kw), 1, CPU, "auto", 1, precision=precision)


def _fill(algo, n: int, rng: np.random.Generator) -> None:
    discrete = algo.spec.action_kind == "discrete"
    algo.replay.add({
        "obs": torch.from_numpy(rng.normal(size=(n, 3))).float(),
        "actions": torch.from_numpy(rng.integers(0, 2, n)) if discrete
        else torch.from_numpy(rng.uniform(-2, 2, (n, 1))).float(),
        "rewards": torch.from_numpy(rng.normal(size=n)).float(),
        "next_obs": torch.from_numpy(rng.normal(size=(n, 3))).float(),
        "terminated": torch.from_numpy(rng.integers(0, 2, n)).float(),
        "discounts": torch.full((n,), 0.9),
    })  # fmt: skip


def test_polyak_update_by_hand():
    online, target = nn.Linear(2, 1), nn.Linear(2, 1)
    before = [p.detach().clone() for p in target.parameters()]
    polyak_update_(target, online, 0.1)
    for t, o, b in zip(target.parameters(), online.parameters(), before, strict=True):
        torch.testing.assert_close(t, 0.1 * o + 0.9 * b)


def test_sac_temperature_step_by_hand(rng):
    """J(alpha) = -log_alpha * (mean log pi + target_entropy): the first Adam step moves
    log_alpha by lr against the sign of dJ/dlog_alpha = -(mean log pi + target_entropy)."""
    torch.manual_seed(0)
    sac = _sac(init_alpha=0.5, learning_rate=0.01, target_entropy=-1.0)
    _fill(sac, 64, rng)
    batch = sac.replay.sample(32)
    start = sac.log_alpha.item()
    # Replay the update's draws: one for the next actions, then the actor's own sample.
    torch.manual_seed(0)
    torch.randn(32, 1)
    with torch.no_grad():
        _, logp = sac.sample_action(batch["obs"])
    grad = -(logp.mean().item() + -1.0)
    torch.manual_seed(0)
    sac._step(batch)
    assert start == pytest.approx(math.log(0.5))
    # Adam's first step is lr * g / (|g| + eps), i.e. lr * sign(g).
    assert sac.log_alpha.item() == pytest.approx(start - 0.01 * math.copysign(1, grad), abs=1e-6)


def test_sac_targets_follow_by_polyak_and_actions_stay_in_bounds(rng):
    sac = _sac(tau=0.25)
    _fill(sac, 64, rng)
    old_target = [p.clone() for p in sac.q1_target.parameters()]
    sac._step(sac.replay.sample(32))
    for t, o, b in zip(sac.q1_target.parameters(), sac.q1.parameters(), old_target, strict=True):
        torch.testing.assert_close(t, 0.25 * o + 0.75 * b)
    actions, logp = sac.sample_action(torch.randn(1000, 3) * 10)
    assert actions.abs().max() <= 2.0 and torch.isfinite(logp).all()
    det = sac.policy.act_deterministic(torch.randn(100, 3) * 10)
    assert det.abs().max() <= 2.0


def test_double_dqn_target_and_hard_copy_by_hand(rng):
    dqn = _dqn(gamma=0.9, target_update_every=2, learning_rate=1e-3)
    _fill(dqn, 16, rng)
    batch = dqn.replay.sample(8)
    with torch.no_grad():
        online_next = dqn.q(batch["next_obs"])
        target_next = dqn.q_target(batch["next_obs"])
    # y_i = r_i + discount_i (1 - term_i) Q_target(s'_i, argmax_a Q(s'_i, a))
    a_star = online_next.argmax(-1)
    expected = (
        batch["rewards"]
        + batch["discounts"] * (1 - batch["terminated"]) * target_next[torch.arange(8), a_star]
    )
    q_before = dqn.q(batch["obs"]).gather(-1, batch["actions"].unsqueeze(-1)).squeeze(-1)
    loss, _ = dqn._step(batch)
    huber = torch.nn.functional.smooth_l1_loss(q_before, expected)
    assert float(loss) == pytest.approx(float(huber.detach()), rel=1e-5)
    # Not yet copied after one step, copied after the second (target_update_every=2).
    assert not torch.equal(dqn.q_target[0].weight, dqn.q[0].weight)
    dqn.grad_steps += 1
    dqn._step(batch)
    assert torch.equal(dqn.q_target[0].weight, dqn.q[0].weight)


def test_epsilon_schedule():
    dqn = _dqn(exploration_fraction=0.5, exploration_initial_eps=1.0, exploration_final_eps=0.1)
    assert dqn.epsilon() == 1.0
    dqn.env_steps = 250  # half of the 500-step decay
    assert dqn.epsilon() == pytest.approx(0.55)
    dqn.env_steps = 10_000
    assert dqn.epsilon() == pytest.approx(0.1)


def test_n_step_returns_by_hand():
    """n=3, gamma=0.5, one env: rewards 1, 2, 4, 8 then the episode terminates at step 5."""
    acc = NStepAccumulator(3, 0.5)
    out = []
    rewards = [1.0, 2.0, 4.0, 8.0, 16.0]
    for t, r in enumerate(rewards):
        end = t == 4
        out.append(acc.push(
            torch.tensor([[float(t)]]), torch.tensor([t]), torch.tensor([r]),
            torch.tensor([[float(t + 1)]]), torch.tensor([end]), torch.tensor([end]),
        ))  # fmt: skip
    got = [(int(o["actions"][i]), float(o["rewards"][i]), float(o["next_obs"][i, 0]),
            float(o["discounts"][i]), float(o["terminated"][i]))
           for o in out for i in range(len(o["actions"]))]  # fmt: skip
    assert got == [
        (0, 1 + 0.5 * 2 + 0.25 * 4, 3.0, 0.125, 0.0),  # full window at t=2
        (1, 2 + 0.5 * 4 + 0.25 * 8, 4.0, 0.125, 0.0),
        (2, 4 + 0.5 * 8 + 0.25 * 16, 5.0, 0.125, 1.0),  # the end flushes the window
        (3, 8 + 0.5 * 16, 5.0, 0.25, 1.0),
        (4, 16.0, 5.0, 0.5, 1.0),
    ]


def test_prioritized_dqn_updates_priorities(rng):
    dqn = _dqn(prioritized=True, batch_size=8)
    assert isinstance(dqn.replay, PrioritizedReplayBuffer)
    _fill(dqn, 32, rng)
    total_before = float(dqn.replay.total_priority)
    assert total_before == pytest.approx(32.0)  # every new transition gets max priority 1
    batch = dqn.replay.sample(8)
    dqn._step(batch)
    leaves = dqn.replay.tree[dqn.replay.tree_capacity + batch.indices]
    assert float(dqn.replay.total_priority) != pytest.approx(total_before)
    assert not torch.allclose(leaves, torch.ones_like(leaves))  # |TD error|^alpha now


def test_sac_solves_pendulum_and_exports(tmp_path):
    """`orin-rl train --algo sac --env Pendulum-v1` (its preset) reaches eval >= -200; the
    bundle's action is the scaled tanh of the mean and matches PyTorch through ONNX Runtime."""
    run = tmp_path / "run"
    proc = orin_rl("--env", "Pendulum-v1", "--algo", "sac", "--device", "cpu", "--out", str(run))
    _, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["algo"] == "sac" and summary["eval_return_mean"] >= -200, summary
    result = export_bundle(run)  # raises when ONNX Runtime and PyTorch disagree
    import onnxruntime as ort

    from orin_rl.checkpoint import load_policy

    policy, _, _ = load_policy(run)
    obs = np.random.default_rng(0).normal(size=(64, 3)).astype(np.float32) * 3
    session = ort.InferenceSession(str(result.bundle_dir / "policy.onnx"))
    (onnx_action,) = session.run(None, {session.get_inputs()[0].name: obs})
    with torch.no_grad():
        train_action = policy.act_deterministic(torch.from_numpy(obs)).numpy()
    np.testing.assert_allclose(onnx_action, train_action, atol=1e-5)
    assert np.abs(onnx_action).max() <= 2.0


def test_dqn_solves_cartpole_with_prioritized_replay_and_resumes_with_buffer(tmp_path):
    run = tmp_path / "run"
    proc = orin_rl("--env", "CartPole-v1", "--algo", "dqn", "--device", "cpu", "--out", str(run),
                   "--set", "dqn.prioritized=true", "--set", "dqn.save_buffer=true")  # fmt: skip
    _, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["algo"] == "dqn" and summary["eval_return_mean"] >= 475, summary
    state = load_checkpoint(run / "checkpoint.pt")
    stored = state["algo"]["replay"]["size"]
    assert stored == min(summary["total_steps"], 100_000)
    export_bundle(run)
    # Resume (a few more steps): the buffer comes back with what it held.
    from orin_rl.runners import make_runner

    trainer = make_runner(None, run, resume=True, progress=False)
    assert len(trainer.algo.replay) == stored
    trainer.env.close()


@pytest.mark.gpu
def test_sac_solves_gpu_native_pendulum_with_cuda_graphs(tmp_path):
    run = tmp_path / "run"
    proc = orin_rl("--env", "Pendulum-v1", "--algo", "sac", "--device", "cuda", "--env-backend",
                   "gpu", "--cuda-graphs", "--out", str(run))  # fmt: skip
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-2000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["cuda_graphs"] is True and summary["buffer_placement"] == "device"
    assert summary["eval_return_mean"] >= -200, summary


def test_gradient_step_is_the_graph_replay_with_graphs_else_eager(rng, monkeypatch):
    """``gradient_step`` (the trainer's and the online learner's one step) takes the CUDA
    graph under graphs; a spy stands in for the graph, which needs a GPU."""
    taken = []
    monkeypatch.setattr(SAC, "_graphed_step", lambda self, batch: taken.append(len(batch["obs"]))
                        or torch.zeros(4))  # fmt: skip
    sac = _sac(batch_size=16)
    _fill(sac, 64, rng)
    assert sac.gradient_step().shape == (len(sac.loss_names),) and taken == []  # eager
    sac.graphs = True
    sac.gradient_step()
    assert taken == [16]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("make", [_sac, _dqn], ids=["sac", "dqn"])
def test_mixed_precision_updates_run_and_stay_finite(make, precision, rng):
    """Autocast around the networks (+ GradScaler for fp16) on CPU torch: losses finite and
    the parameters move."""
    algo = make(precision=precision)
    assert algo.autocast.fast_dtype == {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    assert algo.scaler.is_enabled() == (precision == "fp16")
    _fill(algo, 128, rng)
    before = [p.detach().clone() for p in algo.policy.actor.parameters()]
    for _ in range(3):
        losses = algo._step(algo.replay.sample(32))
    assert all(torch.isfinite(x).all() for x in losses)
    moved = [not torch.equal(a, b) for a, b in zip(before, algo.policy.actor.parameters(),
                                                    strict=True)]  # fmt: skip
    assert any(moved)


@pytest.mark.parametrize(
    ("env_id", "algo", "message"),
    [
        (
            "CartPole-v1",
            "sac",
            "SAC needs continuous actions; CartPole-v1 has Discrete(2): use dqn",
        ),
        ("Pendulum-v1", "dqn", "DQN needs discrete actions"),
    ],
)
def test_algorithm_that_does_not_fit_the_env_is_one_line_and_leaves_no_folder(
    tmp_path, env_id, algo, message
):
    run = tmp_path / "run"
    proc = orin_rl("--env", env_id, "--algo", algo, "--device", "cpu", "--out", str(run))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not run.exists()
