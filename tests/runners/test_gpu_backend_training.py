"""Training on GPU-native environments: on the CPU here, on CUDA (graphs, AMP) on the H200."""

from __future__ import annotations

import json

import pytest
import torch

from orin_rl import config as config_mod
from orin_rl.config import Config
from orin_rl.config.presets import preset_overrides
from orin_rl.runners import train
from orin_rl.runners.logger import read_metrics
from tests.runners.test_train_e2e import orin_rl


def _cartpole(device: str, **train_fields) -> Config:
    preset = [f"{k}={json.dumps(v)}" for k, v in preset_overrides("CartPole-v1").items()]
    cfg = config_mod.apply_overrides(Config(), preset)
    cfg.env.backend = "gpu"
    cfg.train.device = device
    cfg.train.tensorboard = False
    for key, value in train_fields.items():
        setattr(cfg.train, key, value)
    return cfg


def test_cartpole_solves_on_gpu_native_envs_on_cpu(tmp_path):
    """The torch envs on the CPU learner train CartPole to the threshold (AMP path included)."""
    run = tmp_path / "run"
    proc = orin_rl(
        "--env", "CartPole-v1", "--env-backend", "gpu", "--device", "cpu",
        "--out", str(run),
    )  # fmt: skip
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_backend"] == "gpu"
    assert summary["eval_return_mean"] >= 475, summary  # verdict on gymnasium's own CartPole


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_mixed_precision_updates_run_on_cpu(tmp_path, precision):
    """Autocast (+ GradScaler for fp16) code paths on CPU torch; losses finite, returns rise."""
    cfg = _cartpole("cpu", precision=precision, total_steps=5_120, eval_episodes=2)
    cfg.train.stop_at_threshold = False
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["precision"] == precision and summary["total_steps"] == 5_120
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert all(torch.isfinite(torch.tensor(r["losses/value"])) for r in records)
    first, last = records[0], records[-1]
    assert last["charts/episode_return_mean"] > first["charts/episode_return_mean"]


def test_cuda_graphs_fall_back_with_a_reason_on_cpu(tmp_path, caplog):
    cfg = _cartpole("cpu", cuda_graphs=True, total_steps=1_280, eval_episodes=1)
    with caplog.at_level("WARNING"):
        summary = train(cfg, tmp_path / "run", progress=False)
    assert "CUDA graphs off: the learner is not on a CUDA device" in caplog.text
    assert summary["cuda_graphs"] is False


@pytest.mark.gpu
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_cuda_cartpole_solves(tmp_path, precision, graphs):
    """The general path (the fused kernels would take the fp32 rows otherwise)."""
    cfg = _cartpole("cuda", precision=precision, cuda_graphs=graphs)
    cfg.ppo.fused = "off"
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["cuda_graphs"] is graphs and summary["fused"] is None
    assert summary["eval_return_mean"] >= 475, summary


@pytest.mark.gpu
def test_graph_replay_trains_like_the_eager_loop(tmp_path):
    """Same seed, same kernels, same RNG draws: the graphed run follows the eager one (on the
    H200 the two 4-env runs also ended with the same evaluation, 280.8 +- 37.2)."""
    runs = {}
    for graphs in (False, True):
        cfg = _cartpole("cuda", cuda_graphs=graphs, eval_every=0)
        cfg.ppo.fused = "off"
        cfg.train.total_steps = 10 * cfg.batch_size
        cfg.train.stop_at_threshold = False
        train(cfg, tmp_path / str(graphs), progress=False)
        runs[graphs] = read_metrics(tmp_path / str(graphs) / "metrics.jsonl")
    eager, graphed = runs[False], runs[True]
    assert len(eager) == len(graphed) == 10
    for a, b in zip(eager, graphed, strict=True):
        assert a["losses/value"] == pytest.approx(b["losses/value"], rel=1e-4, abs=1e-6)
        assert a.get("charts/episode_return_mean") == pytest.approx(
            b.get("charts/episode_return_mean"), rel=1e-4
        )


def test_num_agents_trains_independent_agents_and_exports_the_best(tmp_path):
    """`--num-agents 3`: one batched run, per-agent results, and the checkpoint loads as the
    best agent's ActorCritic (what export uses)."""
    from orin_rl.checkpoint import load_policy

    cfg = _cartpole("cpu", num_agents=3, total_steps=3 * 2_560, eval_episodes=4)
    cfg.train.stop_at_threshold = False
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["num_agents"] == 3 and len(summary["agents"]) == 3
    returns = [a["eval_return_mean"] for a in summary["agents"]]
    assert summary["best_agent"] == returns.index(max(returns))
    assert summary["eval_return_mean"] == pytest.approx(sum(returns) / 3)
    assert len(set(returns)) > 1 or returns[0] >= 475  # independent agents differ (or all solved)
    policy, spec, _ = load_policy(tmp_path / "run")
    assert spec.action_kind == "discrete" and policy.actor[0].weight.shape == (64, 4)


def _purejaxrl(cfg: Config) -> None:
    cfg.ppo.num_steps, cfg.ppo.num_epochs, cfg.ppo.num_minibatches = 128, 4, 4
    cfg.ppo.learning_rate, cfg.ppo.ent_coef = 2.5e-4, 0.01
    cfg.ppo.gamma, cfg.ppo.gae_lambda = 0.99, 0.95
    cfg.train.eval_every, cfg.train.stop_at_threshold = 0, False


@pytest.mark.gpu
@pytest.mark.parametrize(
    "num_envs,graphs,grads,path",
    [
        (4, False, "auto", "rollout+update"),
        (4, True, "auto", "rollout+update"),
        (4096, False, "auto", "rollout+update"),
        (4096, True, "auto", "rollout+update"),
        (4096, True, "kernel", "rollout"),
    ],
)
def test_cuda_cartpole_solves_on_the_fused_kernels(tmp_path, num_envs, graphs, grads, path):
    """PureJaxRL's settings (the benchmark's rows): 4 envs run every kernel, 4096 envs the
    fused rollout with the batched-GEMM gradients (ppo.fused_grads=auto) or, with the gradient
    kernel asked for, torch's update; eager and in a CUDA graph."""
    steps = 500_000 if num_envs == 4 else num_envs * 128 * 100
    cfg = _cartpole("cuda", cuda_graphs=graphs, total_steps=steps)
    cfg.env.num_envs = num_envs
    cfg.ppo.fused = "auto"
    cfg.ppo.fused_grads = grads
    _purejaxrl(cfg)
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["fused"] == path
    assert summary["cuda_graphs"] is graphs
    assert summary["eval_return_mean"] >= 475, summary


@pytest.mark.gpu
@pytest.mark.parametrize("fused,grads", [("off", "auto"), ("auto", "auto"), ("auto", "gemm")])
def test_many_agents_solve_on_graphs_and_on_the_fused_kernels(tmp_path, fused, grads):
    """16 agents with PureJaxRL's CartPole settings (the benchmark's 512-agent row), on the
    gradient kernel (auto) and on the batched GEMMs. The CPU preset is tuned for one agent's
    wall time: with it, 16 agents' mean fell short of 475 in 1e5 steps on the H200 (some seeds
    are slow), so it is not what this test asks."""
    cfg = _cartpole("cuda", num_agents=16, cuda_graphs=True, total_steps=500_000)
    cfg.env.num_envs = 4
    cfg.ppo.fused = fused
    cfg.ppo.fused_grads = grads
    _purejaxrl(cfg)
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["cuda_graphs"] is True and len(summary["agents"]) == 16
    assert summary["fused"] == (None if fused == "off" else "rollout+update")
    assert summary["eval_return_mean"] >= 475, summary
