"""PPO on MuJoCo Warp physics: the trainer, presets, evaluation, resume; CUDA graphs on the H200."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys

import pytest
import torch

if os.environ.get("ORIN_RL_REQUIRE_SIM") != "1":
    pytest.importorskip("mujoco_warp", reason="needs the sim extra: pip install -e '.[sim]'")

from orin_rl import config as config_mod
from orin_rl.checkpoint import load_checkpoint
from orin_rl.config import Config
from orin_rl.config.presets import preset_overrides
from orin_rl.runners import train
from orin_rl.runners.logger import read_metrics
from tests.reliability.test_faults import wait_for

# Hopper on MuJoCo Warp's CPU device, as small as a run can be.
SMALL = {
    "env.backend": "gpu",
    "env.num_envs": 4,
    "env.max_episode_steps": 30,
    "ppo.num_steps": 8,
    "ppo.num_minibatches": 2,
    "ppo.num_epochs": 2,
    "ppo.hidden_sizes": [32, 32],
    "train.device": "cpu",
    "train.eval_episodes": 2,
    "train.log_every": 1,
    "train.tensorboard": False,
}


def _config(env_id: str = "Hopper-v5", backend: str = "gpu", **extra) -> Config:
    overrides = {**preset_overrides(env_id, "ppo", backend), **SMALL, **extra}
    return config_mod.apply_overrides(
        Config(), [f"{k}={json.dumps(v)}" for k, v in overrides.items()]
    )


def test_gpu_presets_are_chosen_by_backend():
    from orin_rl.config.presets import GPU_PRESETS, PRESETS

    for env_id in ("Hopper-v5", "Humanoid-v5"):
        assert preset_overrides(env_id, "ppo", "gpu") == {
            "env.env_id": env_id,
            **GPU_PRESETS[env_id],
        }
        assert preset_overrides(env_id, "ppo", "gym") == {"env.env_id": env_id, **PRESETS[env_id]}
    assert preset_overrides("CartPole-v1", "ppo", "gpu") == preset_overrides("CartPole-v1")


def test_many_agents_on_gpu_physics_finish_with_per_agent_results(tmp_path):
    """--num-agents with a MuJoCo Warp env: evaluated per agent (on gymnasium), summary written."""
    cfg = _config(**{"train.num_agents": 2, "train.total_steps": 32, "ppo.normalize_reward": True})
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["num_agents"] == 2 and len(summary["agents"]) == 2
    assert "gym_eval_return_mean" not in summary


def test_resume_without_env_state_restarts_the_reward_returns(tmp_path):
    """Fresh episodes after a resume must not inherit the saved discounted returns."""
    from orin_rl.checkpoint import save_checkpoint
    from orin_rl.runners import make_runner, run_folder

    run = tmp_path / "run"
    train(_config(**{"train.total_steps": 32}), run, progress=False)
    state = load_checkpoint(run / "checkpoint.pt")
    assert state["algo"]["reward_normalizer"]["returns"].abs().sum() > 0
    state["env_state"] = None  # as an async gym env or another rank would have it
    save_checkpoint(state, run / "checkpoint.pt")
    longer = run_folder.resume_state(run, ["train.total_steps=64"])  # it finished at 32
    resumed = make_runner(None, run, resume=True, progress=False, state=longer)
    assert torch.all(resumed.algo.reward_normalizer.returns == 0)
    resumed.env.close()


def test_run_evaluates_on_its_physics_and_on_gymnasium(tmp_path):
    """A GPU-physics run is evaluated on MuJoCo Warp (periodic and final) and, once more at
    the end, on gymnasium's CPU MuJoCo; the reward normaliser is saved with the policy."""
    cfg = _config(**{"train.total_steps": 64, "train.eval_every": 1})
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["env_backend"] == "gpu" and summary["eval_physics"] == "mujoco_warp"
    assert math.isfinite(summary["eval_return_mean"])
    assert math.isfinite(summary["gym_eval_return_mean"])
    assert summary["eval_time_s"] > 0
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["iteration"] for r in records] == [1, 2] and "eval/return_mean" in records[0]
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert ckpt["algo"]["reward_normalizer"]["stats.count"] > 0


def test_max_wall_s_ends_a_run_with_a_final_evaluation(tmp_path):
    cfg = _config(**{"train.total_steps": 10_000_000, "train.max_wall_s": 0.01})
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["stop_reason"] == "max_wall_s" and summary["iterations"] == 1
    assert summary["eval_return_mean"] is not None


def test_mujoco_warp_run_resumes_exactly(tmp_path):
    """SIGTERM mid-run, resume: the same losses and returns as a run never interrupted (the
    env's qpos, qvel, warm start and previous position are in the checkpoint)."""
    args = [
        sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress", "--env", "Hopper-v5",
        *[a for k, v in SMALL.items() for a in ("--set", f"{k}={json.dumps(v)}")],
        "--set", "train.total_steps=256", "--set", "train.checkpoint_every=1",
        "--set", "train.eval_every=0", "--set", "ppo.normalize_obs=true",
        "--set", "ppo.normalize_reward=true",
    ]  # fmt: skip
    straight = tmp_path / "straight"
    ok = subprocess.run([*args, "--out", str(straight)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    run = tmp_path / "interrupted"
    proc = subprocess.Popen([*args, "--out", str(run)], stderr=subprocess.PIPE)
    wait_for(lambda: len(read_metrics(run / "metrics.jsonl")) >= 2)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    assert 0 < load_checkpoint(run / "checkpoint.pt")["global_step"] < 256
    resumed = subprocess.run(
        [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress", "--resume", str(run)],
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    keys = ("global_step", "losses/policy", "losses/value", "charts/episode_return_mean")
    expected = [{k: r.get(k) for k in keys} for r in read_metrics(straight / "metrics.jsonl")]
    got = [{k: r.get(k) for k in keys} for r in read_metrics(run / "metrics.jsonl")]
    assert got == expected


@pytest.mark.gpu
def test_hopper_under_cuda_graphs_follows_the_eager_run(tmp_path):
    """A short Hopper run with the whole PPO iteration (MuJoCo Warp steps included) in one
    CUDA graph: captured, finite, and close to the eager run of the same seed (MuJoCo Warp's
    contact lists are built with atomics, so the two drift apart slowly, not bit for bit)."""
    runs = {}
    for graphs in (False, True):
        cfg = _config(
            **{
                "train.device": "cuda",
                "train.cuda_graphs": graphs,
                "env.num_envs": 512,
                "env.max_episode_steps": 1000,
                "ppo.num_steps": 16,
                "train.total_steps": 4 * 512 * 16,
                "train.eval_episodes": 8,
                "train.log_every": 1,
            }
        )
        summary = train(cfg, tmp_path / str(graphs), progress=False)
        assert summary["cuda_graphs"] is graphs
        runs[graphs] = read_metrics(tmp_path / str(graphs) / "metrics.jsonl")
    assert len(runs[False]) == len(runs[True]) == 4
    for a, b in zip(runs[False], runs[True], strict=True):
        assert math.isfinite(b["losses/value"])
        assert a["losses/value"] == pytest.approx(b["losses/value"], rel=5e-2, abs=1e-3)
        assert a["charts/episode_return_mean"] == pytest.approx(
            b["charts/episode_return_mean"], rel=5e-2
        )
