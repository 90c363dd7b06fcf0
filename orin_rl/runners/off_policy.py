"""The off-policy runner: SAC or DQN over a replay buffer.

An iteration is ``train_freq`` env steps (summed over the envs) stored in the replay buffer,
then a round of ``gradient_steps`` updates on batches sampled from it.
"""

from __future__ import annotations

import logging

import gymnasium as gym
import torch

from orin_rl import distributed
from orin_rl.algorithms.dqn import DQN
from orin_rl.algorithms.sac import SAC
from orin_rl.errors import OrinError
from orin_rl.models import PolicySpec
from orin_rl.runners.base import Runner
from orin_rl.runners.graphs import nvtx_range

log = logging.getLogger(__name__)


class OffPolicyRunner(Runner):
    """SAC (continuous actions) or DQN (discrete) with its replay buffer."""

    def _rollout_steps(self) -> int:
        cfg = self.cfg
        return max(1, getattr(cfg, cfg.train.algo).train_freq // cfg.env.num_envs)

    def _build(self) -> None:
        """The algorithm owns both networks and the replay storage."""
        cfg = self.cfg
        if self.dist.enabled:
            raise distributed.DistributedError(f"--nproc is PPO-only; {cfg.train.algo} runs in one")
        sub = getattr(cfg, cfg.train.algo)
        space = self.env.action_space
        if cfg.train.algo == "sac" and not isinstance(space, gym.spaces.Box):
            raise OrinError(f"SAC needs continuous actions; {cfg.env.env_id} has {space}: use dqn")
        if cfg.train.algo == "dqn" and not isinstance(space, gym.spaces.Discrete):
            raise OrinError(f"DQN needs discrete actions; {cfg.env.env_id} has {space}: use sac")
        self.policy_spec = PolicySpec.from_spaces(
            self.env.observation_space,
            space,
            hidden_sizes=list(sub.hidden_sizes),
            activation="relu",
            squash=cfg.train.algo == "sac",
        )
        if self.policy_spec.obs_layout is not None:
            raise OrinError(f"{cfg.env.env_id} gives a dict observation (images and states): "
                            "train it with --algo ppo; SAC and DQN take one array")  # fmt: skip
        common = (self.policy_spec, sub, cfg.env.num_envs, self.device, cfg.buffer.placement,
                  cfg.train.log_every)  # fmt: skip
        if cfg.train.algo == "sac":
            graphs = cfg.train.cuda_graphs
            if graphs and (self.device.type != "cuda" or cfg.sac.prioritized):
                log.warning(
                    "CUDA graphs off: %s; running eagerly",
                    "the learner is not on a CUDA device"
                    if self.device.type != "cuda"
                    else "prioritized replay updates the sum-tree outside the graph",
                )
                graphs = False
            self.algo = SAC(*common, graphs=graphs, precision=cfg.train.precision)
        else:
            self.algo = DQN(
                *common, total_steps=cfg.train.total_steps, precision=cfg.train.precision
            )
        self.policy = self.algo.policy
        self.buffer = self.algo.replay

    def _iterate(self, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """``rollout_steps`` env steps into the replay buffer, then a round of updates."""
        algo, nvtx = self.algo, self.cfg.train.nvtx
        with nvtx_range("rollout", nvtx):
            for _ in range(self.rollout_steps):
                actions = algo.act(obs)
                step = self.env.step(actions)
                algo.process_env_step(step)
                obs = step.obs
        with nvtx_range("update", nvtx):
            losses = algo.update()
        return obs, losses
