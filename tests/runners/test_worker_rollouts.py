"""Rollouts collected by the rollout workers themselves (``env.vectorization=workers``): what
they write is the envs' true transitions under the published policy, written into the very
storage the update reads, and ``--overlap`` over them lags by one rollout (its ratio clipped
against the learner's weights, the decoupled clip, unless ``train.overlap_correction=off``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from orin_rl import config as C
from orin_rl import envs
from orin_rl.runners import make_runner
from tests.runners.conftest import SHORT_CPU_PPO

SMALL = [
    "env.num_envs=4",
    "env.vectorization=workers",
    "env.num_workers=2",
    "env.max_episode_steps=12",  # time-outs inside a rollout: bootstrap values
    *SHORT_CPU_PPO,
]


def _runner(tmp_path, *extra, iterations=3, env_id="Pendulum-v1", name="run"):
    cfg = C.apply_overrides(C.Config(), [*SMALL, f"env.env_id={env_id}",
                                         f"train.total_steps={iterations * 64}", *extra])  # fmt: skip
    return make_runner(cfg, tmp_path / name, progress=False)


def test_the_workers_write_the_true_transitions_of_the_published_policy(tmp_path):
    """One rollout by the workers, checked against gymnasium replaying the stored actions from
    the same seeds (rewards, flags, raw observations) and against the torch policy on the
    stored observations (log-probabilities, values, the final-observation bootstrap)."""
    torch.manual_seed(0)
    runner = _runner(tmp_path, "ppo.normalize_obs=true")
    policy, workers = runner.policy, runner.worker_rollouts
    with torch.no_grad():  # statistics the workers must normalise with
        policy.obs_normalizer.update(torch.randn(32, 3, dtype=torch.float64) * 2)
    runner.env.reset(seed=11)
    workers.start(0)
    buffer = workers.finish(0)
    raw = torch.from_numpy(workers.blocks[0]["raw_obs"].copy())

    # The published statistics normalised what the workers stored; then the rollout was added.
    published = {k: torch.from_numpy(v) for k, v in workers.weights.arrays.items()}
    scale = torch.rsqrt(published["obs_normalizer.var"] + 1e-8).float()

    def normalise(x):
        return ((x - published["obs_normalizer.mean"].float()) * scale).clamp(-10, 10)

    ref = envs.make("Pendulum-v1", 4, seed=11, max_episode_steps=12)
    obs = ref.reset()
    with torch.no_grad():
        stats = runner.algo.policy.obs_normalizer
        for t in range(16):
            assert torch.equal(raw[t], obs)
            step = ref.step(buffer.actions[t])
            assert torch.allclose(buffer.rewards[t], step.reward)
            assert torch.equal(buffer.terminated[t], step.terminated)
            assert torch.equal(buffer.episode_end[t], step.terminated | step.truncated)
            cut = step.truncated & ~step.terminated
            expected = torch.where(cut, policy.value(normalise(step.final_obs)), 0.0)
            assert torch.allclose(buffer.bootstrap_values[t], expected, atol=1e-5)
            obs = step.obs
    assert buffer.episode_end.sum() == 4  # each env timed out once, at step 12
    assert torch.allclose(buffer.obs, normalise(raw), atol=1e-6)
    assert stats.count == 32 + 16 * 4
    with torch.no_grad():
        logp, _, values = policy.evaluate(buffer.obs.view(-1, 3), buffer.actions.view(-1, 1))
    assert torch.allclose(buffer.logprobs.view(-1), logp, atol=1e-4)
    assert torch.allclose(buffer.values.view(-1), values, atol=1e-5)
    runner.env.close()
    workers.close()


def test_the_update_reads_the_storage_the_workers_wrote(tmp_path, monkeypatch):
    """CPU learner: each buffer's tensors are views of a shared block the workers write, and
    each update trains on one of them, full."""
    torch.manual_seed(0)
    runner = _runner(tmp_path, iterations=4)
    workers = runner.worker_rollouts
    blocks = {b["obs"].ctypes.data: b for b in workers.blocks}
    for buffer, block in zip(workers.buffers, workers.blocks, strict=True):
        for name in ("obs", "actions", "logprobs", "rewards", "bootstrap_values"):
            assert getattr(buffer, name).data_ptr() == block[name].ctypes.data
    seen = []
    update = runner.algo.update

    def recording_update():
        buffer = runner.algo.buffer
        seen.append((buffer.obs.data_ptr(), buffer.step, buffer.obs.abs().sum().item()))
        return update()

    monkeypatch.setattr(runner.algo, "update", recording_update)
    runner.learn()
    assert len(seen) == 4
    assert all(ptr in blocks and step == 16 and total > 0 for ptr, step, total in seen)


def _record_kl(runner, monkeypatch, behaviour: list | None = None) -> list[float]:
    """Each update's KL of its one minibatch (and into ``behaviour``, its behaviour_kl)."""
    kls = []
    update = runner.algo.update

    def recording_update():
        stats = update()
        kls.append(stats["losses/approx_kl"])
        if behaviour is not None:
            behaviour.append(stats.get("losses/behaviour_kl"))
        return stats

    monkeypatch.setattr(runner.algo, "update", recording_update)
    return kls


def test_overlap_over_workers_lags_one_rollout_and_uses_the_stored_log_probs(tmp_path, monkeypatch):
    """With ``train.overlap_correction=off``: update 1 trains on rollout 0 (initial weights),
    update u >= 2 on the rollout collected with the weights of update u - 2: its one minibatch
    sees a KL above 0 between the stored log-probabilities and the learner's. Synchronously
    over the same workers it is 0."""
    torch.manual_seed(0)
    lr = "ppo.learning_rate=0.01"  # one update moves the policy visibly
    runner = _runner(tmp_path, "train.overlap=true", "train.overlap_correction=off", lr,
                     env_id="CartPole-v1", name="overlap")  # fmt: skip
    kls = _record_kl(runner, monkeypatch)
    runner.learn()
    assert runner.overlap.lag_log == [(0, 1), (0, 2), (1, 3)]
    assert kls[0] == pytest.approx(0.0, abs=1e-7)
    assert kls[1] > 1e-5 and kls[2] > 1e-5

    torch.manual_seed(0)
    sync = _runner(tmp_path, lr, env_id="CartPole-v1", name="sync")
    kls_sync = _record_kl(sync, monkeypatch)
    sync.learn()
    assert sync.worker_rollouts is not None
    assert all(kl == pytest.approx(0.0, abs=1e-7) for kl in kls_sync)


def test_overlap_over_workers_clips_against_the_learners_weights(tmp_path, monkeypatch):
    """The decoupled clip (the default): each update's one minibatch takes its ratio against
    the learner's weights at the update's start, so its KL is 0, while the behaviour policy
    (update u - 2's weights) is logged a KL above 0 from them from update 2 on; synchronously
    nothing is decoupled (no behaviour_kl). Mutation: ``OverlappedWorkers`` not setting
    ``learner.decoupled`` (the KL of update 2 rose above 0)."""
    torch.manual_seed(0)
    lr = "ppo.learning_rate=0.01"
    runner = _runner(tmp_path, "train.overlap=true", lr, env_id="CartPole-v1", name="overlap")
    behaviour: list = []
    kls = _record_kl(runner, monkeypatch, behaviour)
    runner.learn()
    assert runner.overlap.lag_log == [(0, 1), (0, 2), (1, 3)]
    assert all(kl == pytest.approx(0.0, abs=1e-7) for kl in kls)
    assert behaviour[0] == pytest.approx(0.0, abs=1e-7)
    assert behaviour[1] > 1e-5 and behaviour[2] > 1e-5

    torch.manual_seed(0)
    sync = _runner(tmp_path, lr, env_id="CartPole-v1", name="sync")
    behaviour_sync: list = []
    _record_kl(sync, monkeypatch, behaviour_sync)
    sync.learn()
    assert behaviour_sync == [None] * 3


def test_reward_normalisation_runs_in_time_order_as_step_by_step(tmp_path):
    """The learner scales the workers' raw rewards step by step: the same statistics and
    scaled rewards as the normaliser fed one step at a time."""
    torch.manual_seed(0)
    runner = _runner(tmp_path, "ppo.normalize_reward=true")
    workers = runner.worker_rollouts
    runner.env.reset(seed=2)
    workers.start(0)
    env_wait = runner.env.wait
    raw = {}

    def keep_raw():
        out = env_wait()
        raw["r"] = torch.from_numpy(workers.blocks[0]["rewards"].copy())
        return out

    runner.env.wait = keep_raw
    buffer = workers.finish(0)
    from orin_rl.models.normalizer import RewardNormalizer

    ref = RewardNormalizer(4, runner.cfg.ppo.gamma, runner.cfg.ppo.reward_clip)
    expected = torch.stack([ref(raw["r"][t], buffer.episode_end[t]) for t in range(16)])
    assert torch.allclose(buffer.rewards, expected)
    assert not torch.allclose(buffer.rewards, raw["r"])
    runner.env.close()
    workers.close()


def test_cartpole_solves_with_overlap_over_workers(tmp_path):
    """The CartPole preset, --overlap --vectorization workers: eval >= 475 (20 episodes)."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress", "--env",
           "CartPole-v1", "--device", "cpu", "--overlap", "--vectorization", "workers",
           "--seed", "1", "--out", str(run)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["eval_return_mean"] >= 475, summary


def test_blocked_policies_fall_back_to_stepping_through_the_workers(tmp_path, caplog):
    runner = _runner(tmp_path, "train.compile=true", env_id="CartPole-v1")
    assert runner.worker_rollouts is None
    assert "step one batch at a time: train.compile" in caplog.text
    runner.env.close()


def test_config_yaml_records_the_workers_that_ran(tmp_path):
    """More workers asked than envs: the pool runs one worker an env, and config.yaml says so (issue
    41, item 12: it kept the number asked)."""
    runner = _runner(tmp_path, "env.num_workers=7", env_id="CartPole-v1")
    try:
        assert runner.env.num_workers == runner.cfg.env.num_envs < 7
        saved = C.load(tmp_path / "run" / "config.yaml")
        assert saved.env.num_workers == runner.env.num_workers
    finally:
        runner.env.close()
