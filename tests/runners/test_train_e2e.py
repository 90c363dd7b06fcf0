"""End to end through the real CLI in subprocesses: solve CartPole, resume after SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from orin_rl.checkpoint import load_checkpoint
from orin_rl.runners.logger import read_metrics


def orin_rl(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def _train_cartpole(tmp_path: Path, device: str, timeout: int) -> tuple[Path, dict, str]:
    """``orin-rl train --env CartPole-v1`` (its preset) on ``device``: (run folder, summary,
    what it printed)."""
    run = tmp_path / "run"
    proc = orin_rl("--env", "CartPole-v1", "--device", device, "--out", str(run))
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err
    return run, json.loads((run / "summary.json").read_text()), out


def test_cartpole_solves_from_defaults(tmp_path):
    """`orin-rl train --env CartPole-v1` (its preset) reaches eval >= 475 on 20 fresh episodes."""
    run, summary, out = _train_cartpole(tmp_path, "cpu", 300)
    assert summary["eval_episodes"] == 20
    assert summary["eval_return_mean"] >= 475, summary
    for name in ("config.yaml", "checkpoint.pt", "metrics.jsonl", "curve.png", "summary.json"):
        assert (run / name).is_file(), name
    assert list((run / "tb").glob("events.out.tfevents.*")), "no TensorBoard events"
    state = load_checkpoint(run / "checkpoint.pt")
    assert state["global_step"] == summary["total_steps"]
    records = read_metrics(run / "metrics.jsonl")
    assert records and all("losses/policy" in r and "steps_per_s" in r for r in records)
    # CartPole pays 1 a step: each episode's return is its length, so the two windows' means
    # (the last 100 episodes each) are the same number wherever episodes have ended
    ended = [r for r in records if "charts/episode_return_mean" in r]
    assert ended and all(
        r["charts/episode_length_mean"] == r["charts/episode_return_mean"] for r in ended
    )
    assert "solved" in out


def test_resume_after_sigterm_continues_steps_and_metrics(tmp_path):
    run = tmp_path / "run"
    common = ["--set", "train.stop_at_threshold=false", "--set", "train.eval_every=0"]
    proc = orin_rl(
        "--env",
        "CartPole-v1",
        "--device",
        "cpu",
        "--total-steps",
        "25600",
        "--out",
        str(run),
        "--set",
        "train.checkpoint_every=2",
        "--set",
        "train.eval_episodes=2",
        *common,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(read_metrics(run / "metrics.jsonl")) < 6:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err

    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] and summary["stop_reason"] == "SIGTERM"
    state = load_checkpoint(run / "checkpoint.pt")
    stopped_at = state["global_step"]
    assert 6 * 256 <= stopped_at < 25600
    assert read_metrics(run / "metrics.jsonl")[-1]["global_step"] == stopped_at

    proc = orin_rl("--resume", str(run))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    records = read_metrics(run / "metrics.jsonl")
    iterations = [r["iteration"] for r in records]
    assert iterations == list(range(1, 101)), "metrics must continue without gaps or repeats"
    assert [r["global_step"] for r in records] == [256 * i for i in iterations]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["total_steps"] == 25600 and not summary["interrupted"]
    assert load_checkpoint(run / "checkpoint.pt")["algo"]["iteration"] == 100


def test_checkpoint_loads_with_weights_only(tmp_path):
    from orin_rl.checkpoint import save_checkpoint

    save_checkpoint({"w": torch.ones(2)}, tmp_path / "c.pt")
    assert torch.load(tmp_path / "c.pt", weights_only=True)["w"].sum() == 2
    assert os.stat(tmp_path / "c.pt").st_mode & 0o077 == 0, "checkpoints are owner-only"
    assert not [p for p in Path(tmp_path).iterdir() if p.name.endswith(".tmp")]


@pytest.mark.gpu
def test_cuda_training_runs(tmp_path):
    run, summary, _ = _train_cartpole(tmp_path, "cuda", 600)
    assert summary["device"].startswith("cuda") and summary["buffer_placement"] == "device"
    records = read_metrics(run / "metrics.jsonl")
    assert all(r["gpu/allocated_mb"] > 0 for r in records)
    assert summary["eval_return_mean"] >= 475, summary
