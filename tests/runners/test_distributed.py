"""Two gloo processes on the CPU (the NCCL run is on the two-GPU H200 machine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from orin_rl import distributed
from orin_rl.buffers import ops
from tests.runners.test_train_e2e import orin_rl


def test_two_gloo_ranks_solve_with_bit_identical_parameters(tmp_path):
    """`--nproc 2` trains CartPole to the threshold; after every update both ranks' parameters
    hash the same (ORIN_RL_CHECK_SYNC makes each rank all-gather a sha256 and fail on a
    difference); then a resume with another world size is refused with the way out."""
    run = tmp_path / "run"
    env = {**os.environ, "ORIN_RL_CHECK_SYNC": "1"}
    proc = orin_rl("--env", "CartPole-v1", "--device", "cpu", "--nproc", "2", "--out", str(run),
                   env=env)  # fmt: skip
    _, err = proc.communicate(timeout=400)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["backend"] == "gloo"
    assert summary["param_sync_checks"] == summary["iterations"] > 0
    assert len(summary["per_rank_steps_per_s"]) == 2
    assert summary["eval_return_mean"] >= 475, summary
    assert summary["total_steps"] == summary["iterations"] * 2 * 8 * 32  # both ranks' steps

    resumed = subprocess.run(
        [sys.executable, "-m", "orin_rl.cli", "train", "--resume", str(run)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert resumed.returncode == 2
    assert "trained with 2 processes, this resume has 1; resume with --nproc 2" in resumed.stderr


def test_helpers_in_a_single_process_group(tmp_path):
    """The collectives' arithmetic, checked in a one-rank gloo group against plain torch."""
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        x = torch.randn(1000) * 3 + 2
        y = x.clone()
        distributed.all_reduce_sum_(y)
        assert torch.equal(x, y)  # one rank: the sum is itself
        lin = torch.nn.Linear(3, 2)
        lin(torch.randn(4, 3)).sum().backward()
        before = [p.grad.clone() for p in lin.parameters()]
        distributed.average_gradients(list(lin.parameters()), 1)
        assert all(torch.equal(a, p.grad) for a, p in zip(before, lin.parameters(), strict=True))
        assert distributed.any_rank([True, False], torch.device("cpu")) == [True, False]
        distributed.check_identical(lin, 1)
    finally:
        dist.destroy_process_group()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_nccl_ranks_solve_on_gpu_native_envs(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "ORIN_RL_CHECK_SYNC": "1"}
    proc = orin_rl("--env", "CartPole-v1", "--device", "cuda", "--env-backend", "gpu",
                   "--nproc", "2", "--out", str(run), env=env)  # fmt: skip
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["backend"] == "nccl" and summary["param_sync_checks"] > 0
    assert summary["eval_return_mean"] >= 475, summary


def test_torchrun_launches_the_train_module(tmp_path):
    """`torchrun --nproc-per-node 2 -m orin_rl.train ...` (the launcher --nproc wraps) runs a
    short two-rank gloo training; rank 0 writes the run folder."""
    run = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "orin_rl.train", "--env", "CartPole-v1", "--device", "cpu", "--total-steps",
         "2048", "--no-progress", "--out", str(run), "--set", "train.eval_episodes=2"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["total_steps"] == 2048


@pytest.mark.parametrize("bad", ["0", "-2"])
def test_nproc_below_one_is_one_line(tmp_path, bad):
    proc = subprocess.run(
        [sys.executable, "-m", "orin_rl.cli", "train", "--nproc", bad, "--out", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"orin-rl train: error: --nproc must be positive, got {bad}"
    assert not (tmp_path / "r").exists()


def test_overlap_with_nproc_is_one_line_before_torchrun(tmp_path):
    """Exit 1, the error twice and ~40 lines of torchrun before (issue 41, item 5)."""
    proc = subprocess.run(
        [sys.executable, "-m", "orin_rl.cli", "train", "--nproc", "2", "--overlap", "--out",
         str(tmp_path / "r")], capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "orin-rl train: error: --overlap runs in one process: drop --overlap or --nproc"
    ]
    assert not (tmp_path / "r").exists()


def _two_rank_worker(rank: int, store: str, out: str) -> None:
    """One of two gloo ranks with its own gradients, advantages and rows; writes its results."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        gen = torch.Generator().manual_seed(100 + rank)  # each rank different data
        lin = torch.nn.Linear(3, 2)
        with torch.no_grad():  # same weights, different gradients
            for p in lin.parameters():
                p.fill_(0.5)
        lin(torch.randn(5, 3, generator=gen)).square().sum().backward()
        own_grads = [p.grad.clone() for p in lin.parameters()]
        distributed.average_gradients(list(lin.parameters()), 2)
        adv = torch.randn(1, 50, generator=gen) * (1 + rank) + 3 * rank
        own_adv = adv.clone()
        ops.normalize_(adv, all_reduce=distributed.all_reduce_sum_)  # what distributed PPO does
        rows = distributed.all_gather_rows(torch.full((2, 3), float(rank)), 2)
        flags = distributed.any_rank([rank == 1, False], torch.device("cpu"))
        torch.save(
            {"own_grads": own_grads, "grads": [p.grad for p in lin.parameters()],
             "own_adv": own_adv, "adv": adv, "rows": rows, "flags": flags},
            f"{out}-{rank}.pt",
        )  # fmt: skip
    finally:
        dist.destroy_process_group()


def test_collectives_across_two_ranks_with_different_data(tmp_path):
    """Two gloo processes, each with its own gradients and advantages: the averaged gradients
    are the mean of the two (a missing division by the world size doubles them), advantages
    are normalised with the statistics of both ranks' samples, rows are stacked in rank order."""
    import torch.multiprocessing as mp

    out = str(tmp_path / "result")
    mp.start_processes(
        _two_rank_worker, args=(str(tmp_path / "store"), out), nprocs=2, start_method="spawn"
    )
    r0, r1 = (torch.load(f"{out}-{r}.pt", weights_only=True) for r in (0, 1))
    for g0, g1, own0, own1 in zip(r0["grads"], r1["grads"], r0["own_grads"], r1["own_grads"],
                                  strict=True):  # fmt: skip
        assert not torch.allclose(own0, own1)  # the ranks really differed
        assert torch.allclose(g0, (own0 + own1) / 2) and torch.equal(g0, g1)
    both = torch.cat((r0["own_adv"], r1["own_adv"]), dim=1)
    mean, std = both.mean(), both.std()
    assert torch.allclose(r0["adv"], (r0["own_adv"] - mean) / (std + 1e-8), atol=1e-5)
    assert torch.allclose(r1["adv"], (r1["own_adv"] - mean) / (std + 1e-8), atol=1e-5)
    assert torch.equal(r0["rows"], torch.tensor([[0.0] * 3] * 2 + [[1.0] * 3] * 2))
    assert r0["flags"] == r1["flags"] == [True, False]


def _leaving_worker(rank: int, store: str, out: str) -> None:
    """Rank 0 is slow to finish (an evaluation): it arrives at shutdown only once rank 1 has
    (a file says so), and half a second later; both call shutdown as the trainer does."""
    import time
    from pathlib import Path

    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    distributed.gather_floats(float(rank), 2, torch.device("cpu"))  # the last collective
    first = Path(f"{out}-rank1-arrived")
    if rank == 0:
        while not first.exists():
            time.sleep(0.01)
        time.sleep(0.5)  # time enough for rank 1 to leave, were it not held
    arrived = time.time()
    if rank == 1:
        first.touch()
    distributed.shutdown(wait_for_peers=True)
    torch.save({"arrived": arrived, "left": time.time()}, f"{out}-{rank}.pt")


def test_ranks_leave_the_group_together(tmp_path):
    """After a normal end, a rank that finished first waits in shutdown for rank 0: no rank
    tears the group down while a peer is still in it (the window of a rare libstdc++ abort).
    Rank 1 arriving first is set up by a file, not by a 0.5 s margin between the two
    processes' clocks (which a loaded box could break). Mutation: no barrier in shutdown ->
    rank 1 leaves before rank 0 arrives, fails."""
    import torch.multiprocessing as mp

    out = str(tmp_path / "left")
    mp.start_processes(
        _leaving_worker, args=(str(tmp_path / "store"), out), nprocs=2, start_method="spawn"
    )
    r0, r1 = (torch.load(f"{out}-{r}.pt", weights_only=True) for r in (0, 1))
    assert r1["arrived"] < r0["arrived"]  # rank 1 was done first (the file orders them) ...
    assert r1["left"] >= r0["arrived"]  # ... and left only once rank 0 was there too
