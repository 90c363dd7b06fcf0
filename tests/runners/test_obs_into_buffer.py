"""Gym envs writing straight into the rollout buffer (host storage here, managed on Orin): the
same training as the copying path, and the learner really acts on the buffer's own memory."""

from __future__ import annotations

import pytest
import torch

from orin_rl import config as config_mod
from orin_rl.algorithms import PPO
from orin_rl.buffers import memory
from orin_rl.checkpoint import load_checkpoint
from orin_rl.config import Config
from orin_rl.runners import train
from orin_rl.runners.logger import read_metrics
from orin_rl.runners.on_policy import OnPolicyRunner


def _cfg(**over) -> Config:
    cfg = Config()
    values = {
        "env.env_id": "CartPole-v1", "env.num_envs": 3, "env.max_episode_steps": 30,
        "ppo.num_steps": 16, "ppo.num_minibatches": 2, "ppo.num_epochs": 2,
        "ppo.hidden_sizes": [16, 16], "train.device": "cpu", "train.total_steps": 240,
        "train.eval_every": 0, "train.eval_episodes": 2, "train.log_every": 1,
        "train.tensorboard": False, "train.seed": 11,
        **over,
    }  # fmt: skip
    for key, value in values.items():
        config_mod.set_value(cfg, key, value)
    return cfg


def _copying(monkeypatch):
    """The path without staging: every output copied to the learner's device, then stored."""

    def off(self):
        self.obs_into_buffer = False

    monkeypatch.setattr(OnPolicyRunner, "_make_obs_into_buffer", off)


@pytest.mark.parametrize("normalize_obs", [False, True])
def test_same_training_as_the_copying_path(tmp_path, monkeypatch, normalize_obs):
    """Bit for bit: losses of every iteration and the final parameters (truncations included,
    so final observations are valued from the staged storage)."""
    over = {"ppo.normalize_obs": normalize_obs}
    truncations = []
    original = PPO.process_env_step

    def count(self, step):
        truncations.append(int((step.truncated & ~step.terminated).sum()))
        return original(self, step)

    monkeypatch.setattr(PPO, "process_env_step", count)
    direct = train(_cfg(**over), tmp_path / "direct", progress=False)
    assert sum(truncations) > 0, "the runs must cross a truncation (a final obs is valued)"
    assert direct["obs_into_buffer"] is True
    _copying(monkeypatch)
    copied = train(_cfg(**over), tmp_path / "copied", progress=False)
    assert copied["obs_into_buffer"] is False
    keys = ("losses/policy", "losses/value", "losses/approx_kl", "charts/episode_return_mean")
    rows = [[r.get(k) for k in keys] for r in read_metrics(tmp_path / "direct" / "metrics.jsonl")]
    want = [[r.get(k) for k in keys] for r in read_metrics(tmp_path / "copied" / "metrics.jsonl")]
    assert rows == want and len(rows) == 5
    a = load_checkpoint(tmp_path / "direct" / "checkpoint.pt")["algo"]["policy"]
    b = load_checkpoint(tmp_path / "copied" / "checkpoint.pt")["algo"]["policy"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_policy_acts_on_the_buffer_s_own_memory(tmp_path, monkeypatch):
    """Within a rollout, step t's observation is buffer slot t itself (t >= 1; slot 0 comes
    from the previous rollout's last step), so storing it copies nothing."""
    seen: list[tuple[int, bool]] = []
    original = PPO.act

    def act(self, obs):
        slot = self.buffer.obs[self.buffer.step]
        seen.append((self.buffer.step, obs.data_ptr() == slot.data_ptr()))
        return original(self, obs)

    monkeypatch.setattr(PPO, "act", act)
    summary = train(_cfg(**{"train.total_steps": 96}), tmp_path / "run", progress=False)
    assert summary["obs_into_buffer"] is True
    assert len(seen) == 32
    assert all(same == (t >= 1) for t, same in seen), seen


@pytest.mark.gpu
def test_managed_buffer_on_cuda_takes_the_envs_writes(tmp_path, monkeypatch):
    """A CUDA learner with managed storage (auto on Orin; asked for here): the observation the
    policy reads is managed memory by the driver's own account, and CartPole trains."""
    checked = []
    original = PPO.act

    def act(self, obs):
        t = self.buffer.step
        checked.append(memory.query_managed(obs.data_ptr()))
        if t >= 1:  # in the buffer's own slot, not in the env's (also managed) storage
            checked.append(obs.data_ptr() == self.buffer.obs[t].data_ptr())
        return original(self, obs)

    monkeypatch.setattr(PPO, "act", act)
    over = {"train.device": "cuda", "buffer.placement": "managed", "train.total_steps": 96}
    summary = train(_cfg(**over), tmp_path / "run", progress=False)
    assert summary["buffer_placement"] == "managed" and summary["obs_into_buffer"] is True
    assert checked and all(c is True for c in checked)


@pytest.mark.gpu
def test_device_storage_keeps_the_copying_path(tmp_path):
    """Not host-writable (a device buffer on a CUDA learner): no staging."""
    summary = train(_cfg(**{"train.device": "cuda", "buffer.placement": "device"}),
                    tmp_path / "run", progress=False)  # fmt: skip
    assert summary["obs_into_buffer"] is False
