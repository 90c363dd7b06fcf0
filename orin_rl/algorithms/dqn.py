"""Double DQN (van Hasselt et al., 2016) with a target network, epsilon-greedy exploration,
optional n-step returns and prioritized replay."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from orin_rl.algorithms.offpolicy import OffPolicyAlgorithm
from orin_rl.algorithms.sac import polyak_update_
from orin_rl.config import DQNConfig
from orin_rl.models import ActorCritic, PolicySpec


class DQN(OffPolicyAlgorithm):
    """``policy.actor`` is the Q network (one output per action); export takes its argmax."""

    loss_names = ("td", "q_mean")

    def __init__(self, spec: PolicySpec, cfg: DQNConfig, num_envs: int, device, placement,
                 log_every: int, total_steps: int, precision: str = "fp32"):  # fmt: skip
        super().__init__(spec, cfg, num_envs, device, placement, log_every,
                         n_step=cfg.n_step, precision=precision)  # fmt: skip
        self.policy = ActorCritic(spec).to(device)
        self.q = self.policy.actor
        self.q_target = copy.deepcopy(self.q)
        for p in self.q_target.parameters():
            p.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=cfg.learning_rate, fused=True)
        self.total_steps = total_steps

    def epsilon(self) -> float:
        """Linear decay from initial to final over exploration_fraction * total_steps."""
        cfg = self.cfg
        span = max(cfg.exploration_fraction * self.total_steps, 1.0)
        frac = min(self.env_steps / span, 1.0)
        return cfg.exploration_initial_eps + frac * (
            cfg.exploration_final_eps - cfg.exploration_initial_eps
        )

    @torch.inference_mode()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Epsilon-greedy on Q(obs, .)."""
        greedy = self.q(obs.to(self.device).flatten(1)).argmax(-1)
        random = torch.randint(0, self.spec.action_dim, greedy.shape, device=greedy.device)
        explore = torch.rand(greedy.shape, device=greedy.device) < self.epsilon()
        actions = torch.where(explore, random, greedy)
        self._last = (obs, actions)
        return actions

    def _step(self, batch) -> tuple[torch.Tensor, ...]:
        cfg = self.cfg
        obs, actions, next_obs = batch["obs"].flatten(1), batch["actions"], self.next_obs(batch)
        with torch.no_grad(), self.autocast:
            # Double DQN: the online net picks a', the target net values it.
            best = self.q(next_obs.flatten(1)).argmax(-1, keepdim=True)
            next_q = self.q_target(next_obs.flatten(1)).float().gather(-1, best).squeeze(-1)
        # y = R^(k) + gamma^k (1 - terminated) Q'(s', argmax_a Q(s', a)), in fp32
        target = batch["rewards"] + batch["discounts"] * (1 - batch["terminated"]) * next_q
        with self.autocast:
            q_all = self.q(obs).float()
        q = q_all.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)
        per_sample = F.smooth_l1_loss(q, target, reduction="none")
        weights = self._weights(batch)
        loss = (per_sample * weights).mean() if weights is not None else per_sample.mean()
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)  # clip the true gradients
        nn.utils.clip_grad_norm_(self.q.parameters(), cfg.max_grad_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self._update_priorities(batch, q.detach() - target)
        if cfg.tau < 1.0:
            polyak_update_(self.q_target, self.q, cfg.tau)
        elif (self.grad_steps + 1) % cfg.target_update_every == 0:
            self.q_target.load_state_dict(self.q.state_dict())
        return loss.detach(), q.detach().mean()

    def _extra_stats(self) -> dict[str, float]:
        if self.iteration % self.log_every:
            return {}
        return {"charts/epsilon": self.epsilon()}

    def state_dict(self) -> dict:
        """Q network (as the policy), target, optimizer, counters (and the buffer if asked)."""
        return {
            "policy": self.policy.state_dict(),
            "q_target": self.q_target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "replay": self._buffer_state(),
            **self._counters(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` saved."""
        self.policy.load_state_dict(state["policy"])
        self.q_target.load_state_dict(state["q_target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self._load_counters(state)
