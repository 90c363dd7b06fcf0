"""The trainer on the fused kernels (ppo.fused): chosen and logged, exact resume, a clear error
when demanded where it cannot run. On a CPU box the kernels run in Numba's CUDA simulator."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys

import pytest
import torch

from orin_rl import config as config_mod
from orin_rl.algorithms import fused
from orin_rl.config import Config
from orin_rl.errors import OrinError
from orin_rl.runners import on_policy as trainer_mod
from orin_rl.runners import train
from orin_rl.runners.logger import read_metrics
from orin_rl.runners.on_policy import OnPolicyRunner as Trainer
from tests.conftest import HAS_CUDA


@pytest.fixture
def small_threads(monkeypatch):
    if not HAS_CUDA:  # the simulator runs every thread as a Python thread
        monkeypatch.setattr(fused, "ROLLOUT_THREADS", 16)
        monkeypatch.setattr(fused, "UPDATE_THREADS", 32)


def _cfg(**over) -> Config:
    cfg = Config()
    values = {
        "env.env_id": "CartPole-v1", "env.backend": "gpu", "env.num_envs": 2,
        "ppo.num_steps": 8, "ppo.num_minibatches": 2, "ppo.num_epochs": 2,
        "ppo.hidden_sizes": [8, 8], "ppo.ent_coef": 0.01, "ppo.fused": "on",
        "train.device": "cuda" if HAS_CUDA else "cpu", "train.total_steps": 32,
        "train.eval_every": 0, "train.eval_episodes": 2, "train.log_every": 1,
        "train.checkpoint_every": 1, "train.tensorboard": False,
        **over,
    }  # fmt: skip
    for key, value in values.items():
        config_mod.set_value(cfg, key, value)
    return cfg


def test_fused_run_trains_logs_and_says_which_path(tmp_path, small_threads, caplog):
    with caplog.at_level("INFO"):
        summary = train(_cfg(), tmp_path / "run", progress=False)
    assert summary["fused"] == "rollout+update" and summary["fused_grads"] == "kernel"
    assert "fused PPO kernels: the rollout in one kernel, the update in" in caplog.text
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["global_step"] for r in records] == [16, 32]
    for r in records:
        assert all(math.isfinite(r[f"losses/{k}"]) for k in ("policy", "value", "entropy"))
        assert 0.0 < r["losses/entropy"] <= math.log(2) + 1e-6
        assert r["losses/epochs"] == 2
    assert any("charts/episode_return_mean" in r for r in records)  # episodes were counted


def test_fused_gemm_run_trains_and_says_so(tmp_path, small_threads, caplog):
    with caplog.at_level("INFO"):
        summary = train(_cfg(**{"ppo.fused_grads": "gemm"}), tmp_path / "run", progress=False)
    assert summary["fused"] == "rollout+update" and summary["fused_grads"] == "gemm"
    assert "the update's gradients by batched GEMMs (ppo.fused_grads=gemm)" in caplog.text
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["global_step"] for r in records] == [16, 32]
    assert all(0.0 < r["losses/entropy"] <= math.log(2) + 1e-6 for r in records)


def test_auto_gives_the_gemms_a_minibatch_the_gradient_kernel_does_not_take(
    tmp_path, small_threads, monkeypatch, caplog
):
    """``auto``: a minibatch over the kernel's limit is fused all the same, its gradients by
    batched GEMMs (with ``kernel``, the default until a GPU run, it goes to torch's update).
    The limit is lowered to keep the run small: 8 samples a minibatch against 4."""
    monkeypatch.setattr(fused, "MAX_FUSED_MINIBATCH", 4)
    with caplog.at_level("INFO"):
        summary = train(_cfg(**{"ppo.fused_grads": "auto"}), tmp_path / "run", progress=False)
    assert summary["fused"] == "rollout+update" and summary["fused_grads"] == "gemm"
    assert "the update's gradients by batched GEMMs (ppo.fused_grads=auto)" in caplog.text


@pytest.mark.parametrize("grads", ["auto", "gemm"])
def test_interrupted_fused_run_resumes_exactly(tmp_path, small_threads, monkeypatch, grads):
    """SIGTERM after the first iteration, resume: the same losses as a run never interrupted,
    so the fused Adam moments, the parameters, the envs and the RNG all came back (the gradient
    kernel's update, and the batched GEMMs'). Two iterations: the second is the resumed one
    (the kernels run in Numba's simulator on the CPU: each iteration costs seconds)."""
    over = {"ppo.fused_grads": grads}
    straight = train(_cfg(**over), tmp_path / "straight", progress=False)
    assert straight["fused"] == "rollout+update"
    original = Trainer._iterate
    calls = []

    def iterate_then_signal(self, obs):
        out = original(self, obs)
        calls.append(1)
        if len(calls) == 1:
            signal.raise_signal(signal.SIGTERM)  # the trainer finishes the iteration and saves
        return out

    monkeypatch.setattr(Trainer, "_iterate", iterate_then_signal)
    first = train(_cfg(**over), tmp_path / "cut", progress=False)
    assert first["interrupted"] and first["total_steps"] == 16
    monkeypatch.setattr(Trainer, "_iterate", original)
    train(_cfg(**over), tmp_path / "cut", resume=True, progress=False)
    keys = ("global_step", "losses/policy", "losses/value", "losses/approx_kl")
    want = [{k: r[k] for k in keys} for r in read_metrics(tmp_path / "straight" / "metrics.jsonl")]
    got = [{k: r[k] for k in keys} for r in read_metrics(tmp_path / "cut" / "metrics.jsonl")]
    assert got == want
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=False)["algo"]
    b = torch.load(tmp_path / "cut" / "checkpoint.pt", weights_only=False)["algo"]
    assert all(torch.equal(a["policy"][k], b["policy"][k]) for k in a["policy"])


def test_fused_on_names_what_is_missing(tmp_path):
    with pytest.raises(OrinError, match=r"ppo\.fused=on, but continuous actions \(Pendulum-v1\)"):
        Trainer(_cfg(**{"env.env_id": "Pendulum-v1"}), tmp_path / "run", progress=False)


def test_auto_keeps_the_general_path_on_a_cpu_learner(tmp_path):
    cfg = _cfg(**{"ppo.fused": "auto", "train.device": "cpu"})
    t = Trainer(cfg, tmp_path / "run", progress=False)
    assert t.fused is None and t._fused_path() is None


def test_with_the_kernel_asked_for_big_minibatches_keep_torchs_update(tmp_path, small_threads,
                                                                      monkeypatch):  # fmt: skip
    monkeypatch.setattr(fused, "MAX_FUSED_MINIBATCH", 4)  # 8 steps x 2 envs / 2 = 8 samples
    cfg = _cfg(**{"train.total_steps": 32, "ppo.fused_grads": "kernel"})
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["fused"] == "rollout"
    assert trainer_mod  # the module under test


@pytest.mark.gpu
def test_a_compiled_update_is_captured_and_steps_as_the_eager_one(tmp_path, monkeypatch):
    """ppo.compile_update behind the fused rollout, the iteration in one CUDA graph: inductor's
    kernels are captured and replayed, and the losses follow torch's eager update's (the first
    iteration's to float32 rounding: inductor sums in another order)."""
    monkeypatch.setattr(fused, "MAX_FUSED_MINIBATCH", 64)  # torch's update in both runs
    runs = {}
    for compiled in (False, True):
        cfg = _cfg(**{"ppo.compile_update": compiled, "train.cuda_graphs": True,
                      "ppo.fused_grads": "kernel",  # beyond the kernel: torch's, not GEMMs
                      "env.num_envs": 64, "ppo.num_steps": 32, "ppo.num_minibatches": 2,
                      "ppo.hidden_sizes": [64, 64], "train.total_steps": 64 * 32 * 4})  # fmt: skip
        summary = train(cfg, tmp_path / f"run{compiled}", progress=False)
        assert summary["fused"] == "rollout" and summary["cuda_graphs"]
        runs[compiled] = read_metrics(tmp_path / f"run{compiled}" / "metrics.jsonl")
    eager, comp = runs[False], runs[True]
    assert [r["global_step"] for r in comp] == [r["global_step"] for r in eager]
    for key in ("losses/policy", "losses/value", "losses/entropy", "losses/approx_kl"):
        assert comp[0][key] == pytest.approx(eager[0][key], rel=1e-3, abs=1e-6), key
        assert all(math.isfinite(r[key]) for r in comp)


@pytest.mark.parametrize("broken", ["rollout", "launch_update", "after_the_update"])
def test_auto_falls_back_to_the_general_path_when_the_kernels_fail(tmp_path, monkeypatch,
                                                                   caplog, broken):  # fmt: skip
    """ppo.fused=auto (the default) on a machine whose Numba cannot compile (no libNVVM, a
    numpy it does not support): the first iteration's failure is logged and the run goes on
    on the general path, exactly as a ppo.fused=off run does, even when the failure comes
    after the rollout kernel ran (envs stepped, buffer filled, draws taken) or after the
    update's Adam steps (weights changed); ppo.fused=on lets the error through."""
    keys = ("global_step", "losses/policy", "losses/value", "losses/approx_kl")
    off = train(_cfg(**{"ppo.fused": "off"}), tmp_path / "off", progress=False)
    assert off["fused"] is None
    want = [{k: r[k] for k in keys} for r in read_metrics(tmp_path / "off" / "metrics.jsonl")]

    def fail(self, *args, **kwargs):
        raise RuntimeError("libNVVM cannot be found\nmore detail")

    real_update = fused.FusedPPO.launch_update

    def update_then_fail(self, *args, **kwargs):
        real_update(self, *args, **kwargs)
        fail(self)

    if broken == "launch_update":  # the real rollout kernel runs first
        monkeypatch.setattr(fused.FusedPPO, "launch_update", fail)
    elif broken == "after_the_update":
        monkeypatch.setattr(fused.FusedPPO, "launch_update", update_then_fail)
    else:
        monkeypatch.setattr(fused.FusedPPO, "rollout", fail)
    monkeypatch.setattr(fused, "blocker", lambda *a: None)  # a CPU learner passes as CUDA
    with caplog.at_level("WARNING"):
        summary = train(_cfg(**{"ppo.fused": "auto"}), tmp_path / "auto", progress=False)
    assert summary["fused"] is None
    assert "fused PPO kernels failed on their first iteration (RuntimeError: libNVVM" in caplog.text
    got = [{k: r[k] for k in keys} for r in read_metrics(tmp_path / "auto" / "metrics.jsonl")]
    assert got == want and [r["global_step"] for r in got] == [16, 32]
    with pytest.raises(RuntimeError, match="libNVVM"):
        train(_cfg(**{"ppo.fused": "on"}), tmp_path / "on", progress=False)


CACHED_RUN = """
import sys
from pathlib import Path
from orin_rl import config as config_mod
from orin_rl.config import Config
from orin_rl.runners import train
cfg = Config()
for key, value in {values!r}.items():
    config_mod.set_value(cfg, key, value)
summary = train(cfg, Path(sys.argv[1]), progress=False)
assert summary["fused"] == "rollout+update", summary
"""


@pytest.mark.gpu
def test_a_second_process_loads_the_kernels_from_the_disk_cache(tmp_path):
    """The first run compiles the five kernels and saves them; a second process finds them
    all: it compiles nothing, so it writes nothing into the cache."""
    cache = tmp_path / "cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "NUMBA_ENABLE_CUDASIM": "0",
           "ORIN_RL_KERNEL_CACHE": "1"}  # fmt: skip
    values = {"env.env_id": "CartPole-v1", "env.backend": "gpu", "env.num_envs": 4,
              "ppo.num_steps": 16, "ppo.fused": "on", "train.device": "cuda",
              "train.total_steps": 128, "train.eval_every": 0, "train.eval_episodes": 1,
              "train.tensorboard": False}  # fmt: skip
    script = CACHED_RUN.format(values=values)

    def run(name):
        subprocess.run([sys.executable, "-c", script, str(tmp_path / name)], env=env,
                       check=True, timeout=600)  # fmt: skip
        return {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}

    first = run("a")
    indexes = [p.name for p in first if p.suffix == ".nbi"]
    for kernel in ("rollout", "prepare", "grads", "reduce", "apply"):
        assert any(f".{kernel}-" in name for name in indexes), (kernel, indexes)
    assert run("b") == first
