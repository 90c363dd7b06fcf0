"""Faults injected for real, in subprocesses: SIGKILL, SIGINT, a full disk, dying env workers,
and bad files wherever a file enters."""

from __future__ import annotations

import contextlib
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from orin_rl import cli
from orin_rl.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from orin_rl.envs import EnvError, make
from orin_rl.runners.logger import read_metrics

CLI_TRAIN = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress"]
TRAIN = [*CLI_TRAIN, "--env", "CartPole-v1", "--device", "cpu",
         "--set", "train.stop_at_threshold=false", "--set", "train.eval_every=0",
         "--set", "train.eval_episodes=1", "--set", "train.checkpoint_every=1",
         "--set", "train.tensorboard=false"]  # fmt: skip


def resume(run: Path) -> list[str]:
    """The command that resumes the run in ``run``."""
    return [*CLI_TRAIN, "--resume", str(run)]


def wait_for(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        time.sleep(0.05)


def test_sigkill_at_random_moments_always_leaves_a_loadable_checkpoint(tmp_path):
    """checkpoint_every=1 writes one per iteration; kill -9 lands at random points, often mid-write."""
    run = tmp_path / "run"
    rng = random.Random(os.getpid())
    proc = subprocess.Popen(
        [*TRAIN, "--total-steps", "200000", "--out", str(run)], stderr=subprocess.PIPE
    )
    wait_for(lambda: (run / "checkpoint.pt").exists())
    steps = []
    for _ in range(4):
        time.sleep(rng.uniform(0.05, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        state = load_checkpoint(run / "checkpoint.pt")  # never torn: old or new, complete
        steps.append(state["global_step"])
        proc = subprocess.Popen(resume(run), stderr=subprocess.PIPE)
        # resume continues from the checkpoint it loaded, never from before it
        wait_for(lambda s=steps[-1]: load_checkpoint(run / "checkpoint.pt")["global_step"] > s)
    # A kill in the middle of a write leaves save_checkpoint's temp file behind (rare at these
    # random moments, so one is planted): the next resume removes it, and a clean stop leaves
    # none of its own.
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    (run / ".checkpoint.pt.killed.tmp").write_bytes(b"half a checkpoint")
    proc = subprocess.Popen(resume(run), stderr=subprocess.PIPE)
    last = load_checkpoint(run / "checkpoint.pt")["global_step"]
    wait_for(lambda: load_checkpoint(run / "checkpoint.pt")["global_step"] > last)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert not list(run.glob(".checkpoint.pt.*.tmp"))
    records = read_metrics(run / "metrics.jsonl")
    global_steps = [r["global_step"] for r in records]
    assert global_steps == sorted(set(global_steps)), "each iteration logged once, in order"


def test_sigint_writes_a_final_checkpoint_and_summary(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [*TRAIN, "--total-steps", "200000", "--out", str(run)], stderr=subprocess.PIPE
    )
    wait_for(lambda: len(read_metrics(run / "metrics.jsonl")) >= 3)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 130
    summary = __import__("json").loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "SIGINT" and summary["interrupted"]
    assert load_checkpoint(run / "checkpoint.pt")["global_step"] == summary["total_steps"]


def _limit_file_size(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_full_disk_names_the_path_and_keeps_the_previous_checkpoint(tmp_path):
    run = tmp_path / "run"
    ok = subprocess.run(
        [*TRAIN, "--total-steps", "512", "--out", str(run)], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    before = (run / "checkpoint.pt").read_bytes()
    # A file-size limit below one checkpoint: the next checkpoint write hits the "full disk".
    limit = len(before) // 2
    proc = subprocess.run(
        resume(run),
        capture_output=True,
        text=True,
        preexec_fn=_limit_file_size(limit),
        timeout=120,
    )
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(err) == 1 and str(run) in err[0] and "Traceback" not in proc.stderr
    assert (run / "checkpoint.pt").read_bytes() == before, "the previous checkpoint must survive"
    assert not list(run.glob(".checkpoint.pt.*.tmp")), "no partial temp file left behind"


class Exploding(gym.Env):
    """Raises on its 5th step (worker 1 only) or kills its own process (``die=True``)."""

    observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, die: bool = False):
        self.die, self.t = die, 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t == 5 and self.np_random_seed == 101:  # the env seeded 100 + 1: worker 1
            if self.die:
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("sensor cable unplugged")
        return np.zeros(2, np.float32), 0.0, False, False, {}


gym.register("OrinTestExploding-v0", entry_point=Exploding)
gym.register("OrinTestDying-v0", entry_point=Exploding, kwargs={"die": True})


@pytest.mark.parametrize(
    ("env_id", "message"),
    [
        ("OrinTestExploding-v0", r"worker\(s\) \[1\] raised RuntimeError: sensor cable unplugged"),
        ("OrinTestDying-v0", r"worker\(s\) \[1\] died"),
    ],
)
def test_async_env_worker_failure_names_the_worker(env_id, message):
    env = make(env_id, 3, vectorization="async", seed=100, worker_timeout_s=5.0)
    try:
        env.reset()
        with pytest.raises(EnvError, match=message):
            for _ in range(6):
                env.step(torch.zeros(3, dtype=torch.int64))
    finally:
        with contextlib.suppress(Exception):
            env.close()


def _write_truncated(path: Path) -> None:
    save_checkpoint({"x": torch.ones(3)}, path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _write_npy(path: Path) -> None:
    with open(path, "wb") as f:
        np.save(f, np.arange(3))


BAD_CHECKPOINTS = {
    "empty": lambda path: path.write_bytes(b""),
    "truncated": _write_truncated,
    "random bytes": lambda path: path.write_bytes(os.urandom(4096)),
    "numpy .npy": _write_npy,
    "plain torch tensor": lambda path: torch.save(torch.ones(2), path),
}


@pytest.mark.parametrize("kind", sorted(BAD_CHECKPOINTS))
def test_bad_checkpoint_files_are_refused(tmp_path, kind, capsys):
    bad = tmp_path / "run" / "checkpoint.pt"
    bad.parent.mkdir()
    BAD_CHECKPOINTS[kind](bad)
    with pytest.raises(CheckpointError):
        load_checkpoint(bad)
    assert cli.main(["-q", "train", "--resume", str(bad.parent)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "checkpoint" in err


def test_pickled_code_in_a_checkpoint_never_runs(tmp_path):
    """weights_only=True refuses arbitrary objects: a malicious pickle is an error, not code."""
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (marker,))

    path = tmp_path / "checkpoint.pt"
    torch.save({"format": "orin_rl.checkpoint/1", "evil": Evil()}, path)
    with pytest.raises(CheckpointError):
        load_checkpoint(path)
    assert not marker.exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_resume_reproduces_the_uninterrupted_run_exactly(tmp_path, sig):
    """Same seed, same config: an interrupted-and-resumed run logs the same losses and returns,
    iteration for iteration, as a run that was never interrupted (CPU, one torch thread)."""
    common = ["--total-steps", str(24 * 256), "--set", "ppo.normalize_obs=true"]
    straight = tmp_path / "straight"
    ok = subprocess.run([*TRAIN, *common, "--out", str(straight)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    run = tmp_path / "interrupted"
    proc = subprocess.Popen([*TRAIN, *common, "--out", str(run)], stderr=subprocess.PIPE)
    wait_for(lambda: len(read_metrics(run / "metrics.jsonl")) >= 5)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    stopped_at = load_checkpoint(run / "checkpoint.pt")["global_step"]
    assert 0 < stopped_at < 24 * 256
    resumed = subprocess.run(resume(run), capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    keys = (
        "global_step",
        "losses/policy",
        "losses/value",
        "losses/entropy",
        "losses/approx_kl",
        "charts/episode_return_mean",
    )
    expected = [{k: r.get(k) for k in keys} for r in read_metrics(straight / "metrics.jsonl")]
    got = [{k: r.get(k) for k in keys} for r in read_metrics(run / "metrics.jsonl")]
    assert got == expected
    a = load_checkpoint(straight / "checkpoint.pt")["algo"]["policy"]
    b = load_checkpoint(run / "checkpoint.pt")["algo"]["policy"]
    assert all(torch.equal(a[k], b[k]) for k in a)
