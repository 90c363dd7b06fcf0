"""``SharedBlock``: the rollout workers' shared memory and the learner's views of it. The
mapped view (``device_tensor``, an integrated GPU's no-copy path) runs on the H200 here: a
discrete GPU maps registered host memory too."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from orin_rl import config as C
from orin_rl.buffers import memory
from orin_rl.buffers.shared import SharedBlock
from orin_rl.runners import make_runner
from orin_rl.runners.logger import read_metrics

LAYOUT = {"obs": ((6, 4, 3), np.float32), "actions": ((6, 4), np.int64), "flag": ((5,), np.bool_)}


def test_a_view_on_the_cpu_is_the_segment_and_a_worker_attaches_to_it():
    import pickle

    block = SharedBlock(LAYOUT)
    try:
        other = pickle.loads(pickle.dumps(block))  # what a worker process gets
        other["obs"][2, 1] = [1.0, 2.0, 3.0]
        assert block.tensor("obs")[2, 1].tolist() == [1.0, 2.0, 3.0]
        with pytest.raises(memory.PlacementError, match="mapped=True"):
            block.device_tensor("obs")
        other.close()
    finally:
        block.close()


@pytest.mark.gpu
def test_the_mapped_view_reads_what_the_host_writes_with_no_copy():
    """Each field's CUDA tensor equals the host array copied to the GPU, after the host
    writes again (no copy was taken at registration), and a GPU write lands in host memory."""
    rng = np.random.default_rng()
    block = SharedBlock(LAYOUT)
    device = torch.device("cuda")
    try:
        block.register(device, mapped=True)
        views = {key: block.device_tensor(key) for key in LAYOUT}
        for _ in range(2):
            block["obs"][:] = rng.normal(size=LAYOUT["obs"][0])
            block["actions"][:] = rng.integers(-5, 5, LAYOUT["actions"][0])
            block["flag"][:] = rng.random(5) > 0.5
            for key, view in views.items():
                assert view.is_cuda and view.dtype == block.tensor(key).dtype
                assert torch.equal(view, block.tensor(key).to(device)), key
        before = block["obs"].copy()
        views["obs"].mul_(2.0)
        torch.cuda.synchronize()
        assert np.array_equal(block["obs"], 2.0 * before)
    finally:
        block.close()


@pytest.mark.gpu
def test_rollout_workers_train_the_same_on_the_mapped_path_as_on_the_copies(
    tmp_path, monkeypatch, caplog
):
    """The learner on the H200 told it is an integrated GPU reads the workers' blocks mapped
    (Orin's path); the same seed on the copy path logs the same losses and returns."""
    runs = {}
    for integrated in (False, True):
        monkeypatch.setattr(memory, "is_integrated", lambda device, flag=integrated: flag)
        cfg = C.apply_overrides(C.Config(), [
            "env.env_id=Pendulum-v1", "env.num_envs=4", "env.vectorization=workers",
            "env.num_workers=2", "ppo.num_steps=32", "ppo.num_minibatches=2", "ppo.num_epochs=2",
            "train.device=cuda", "train.total_steps=512", "train.eval_every=0",
            "train.eval_episodes=1", "train.tensorboard=false", "train.stop_at_threshold=false",
            "ppo.graph_update=off"])  # fmt: skip
        run = tmp_path / str(integrated)
        with caplog.at_level(logging.INFO):
            runner = make_runner(cfg, run, progress=False)
        assert runner.worker_rollouts.mapped is integrated
        runner.learn()
        runs[integrated] = read_metrics(run / "metrics.jsonl")
    assert "mapped into the GPU, no copy" in caplog.text
    assert len(runs[True]) == len(runs[False]) == 4
    for a, b in zip(runs[True], runs[False], strict=True):
        assert a["losses/value"] == pytest.approx(b["losses/value"], rel=1e-4, abs=1e-6)
        assert a.get("charts/episode_return_mean") == pytest.approx(
            b.get("charts/episode_return_mean"), rel=1e-4
        )
