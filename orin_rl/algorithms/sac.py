"""Soft Actor-Critic (Haarnoja et al., 2018) with twin critics and a learned temperature."""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from orin_rl.algorithms.offpolicy import OffPolicyAlgorithm
from orin_rl.config import SACConfig
from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models.actor_critic import mlp
from orin_rl.models.cnn import ImageEncoder

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def polyak_update_(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- tau * online + (1 - tau) * target, parameter by parameter, in place."""
    with torch.no_grad():
        t = list(target.parameters())
        torch._foreach_lerp_(t, list(online.parameters()), tau)


class QNetwork(nn.Module):
    """Q(s, a) for continuous actions: an MLP over the concatenation.

    ``dropout`` > 0 and ``layer_norm`` give DroQ's critic (Hiraoka et al., 2021): each hidden
    layer is Linear → Dropout → LayerNorm → ReLU, which keeps Q estimates stable at the high
    update-to-data ratios online learning on a robot needs (Smith et al., 2022: UTD 20).

    ``image``: (frame shape, encoder kind) for image observations: the uint8 frames go through
    an ``ImageEncoder`` of this network's own (trained by the critic's loss, Polyak-averaged
    into the target with the rest), its features concatenated with the action. The actor has
    its own encoder (``ActorCritic``), as Stable-Baselines3's SAC keeps them apart by default.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        hidden: list[int],
        dropout: float = 0.0,
        layer_norm: bool = False,
        image: tuple[tuple[int, ...], str] | None = None,
    ):
        super().__init__()
        self.encoder = ImageEncoder(*image) if image is not None else None
        if self.encoder is not None:
            obs_dim = self.encoder.features
        if not dropout and not layer_norm:
            self.net = mlp(obs_dim + action_dim, hidden, 1, "relu", 1.0)
        else:
            layers: list[nn.Module] = []
            last = obs_dim + action_dim
            for width in hidden:
                linear = nn.Linear(last, width)
                nn.init.orthogonal_(linear.weight, math.sqrt(2.0))
                nn.init.zeros_(linear.bias)
                layers.append(linear)
                if dropout:
                    layers.append(nn.Dropout(dropout))
                if layer_norm:
                    layers.append(nn.LayerNorm(width))
                layers.append(nn.ReLU())
                last = width
            head = nn.Linear(last, 1)
            nn.init.orthogonal_(head.weight, 1.0)
            nn.init.zeros_(head.bias)
            self.net = nn.Sequential(*layers, head)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(1) if self.encoder is None else self.encoder(obs)
        return self.net(torch.cat([x, actions], -1)).squeeze(-1).float()


def squashed_gaussian(
    actor_out: torch.Tensor,
    action_mid: torch.Tensor,
    action_half: torch.Tensor,
    deterministic: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """SAC's policy head: (action in the bounds, log pi(action|obs)) from the actor's
    (mean, log std) output; reparameterised, so gradients flow through the sample.
    ``deterministic`` returns the squashed mean (its log-probability is not meaningful);
    ``generator`` draws the noise from a generator of its own (an actor thread's)."""
    mean, log_std = actor_out.float().chunk(2, dim=-1)
    # Soft clamp of log std into [LOG_STD_MIN, LOG_STD_MAX] (keeps gradients).
    log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
    std = log_std.exp()
    if deterministic:
        u = mean
    else:
        noise = (
            torch.randn_like(mean)
            if generator is None
            else torch.randn(mean.shape, generator=generator, dtype=mean.dtype, device=mean.device)
        )
        u = mean + std * noise
    squashed = torch.tanh(u)
    # log N(u; mean, std) minus the log-determinant of a = mid + half * tanh(u).
    logp = (-0.5 * ((u - mean) / std).square() - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    logp = logp - torch.log(action_half * (1 - squashed.square()) + 1e-6).sum(-1)
    return action_mid + action_half * squashed, logp


class SAC(OffPolicyAlgorithm):
    """Tanh-squashed Gaussian actor (``policy.actor`` outputs mean and log std), twin Q
    critics with Polyak targets, automatic entropy tuning, optional prioritized replay."""

    loss_names = ("critic", "actor", "alpha", "entropy", "q_mean")

    def __init__(self, spec: PolicySpec, cfg: SACConfig, num_envs: int, device, placement,
                 log_every: int, graphs: bool = False, precision: str = "fp32"):  # fmt: skip
        super().__init__(spec, cfg, num_envs, device, placement, log_every,
                         graphs=graphs, precision=precision)  # fmt: skip
        self.policy = ActorCritic(spec).to(device)  # its actor is the SAC actor
        obs_dim = math.prod(spec.obs_shape)
        image = (tuple(spec.obs_shape), spec.encoder) if spec.encoder is not None else None
        critic = (obs_dim, spec.action_dim, list(cfg.hidden_sizes), cfg.critic_dropout,
                  cfg.critic_layer_norm, image)  # fmt: skip
        self.q1, self.q2 = QNetwork(*critic).to(device), QNetwork(*critic).to(device)
        self.q1_target, self.q2_target = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        for p in (*self.q1_target.parameters(), *self.q2_target.parameters()):
            p.requires_grad_(False)
        lr = cfg.learning_rate
        # Fused Adam: one kernel per step instead of a loop over parameters (small networks);
        # capturable keeps its step counters on the device for the CUDA graph.
        adam = {"lr": lr, "fused": True, "capturable": graphs}
        self.actor_opt = torch.optim.Adam(self.policy.actor.parameters(), **adam)
        critic_params = [*self.q1.parameters(), *self.q2.parameters()]
        self.critic_opt = torch.optim.Adam(critic_params, **adam)
        self.log_alpha = torch.tensor(math.log(cfg.init_alpha), device=device, requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], **adam)
        self.target_entropy = (
            cfg.target_entropy if cfg.target_entropy is not None else -float(spec.action_dim)
        )
        low = torch.tensor(spec.action_low, dtype=torch.float32, device=device)
        high = torch.tensor(spec.action_high, dtype=torch.float32, device=device)
        self.action_mid, self.action_half = (high + low) / 2, (high - low) / 2

    # ----------------------------------------------------------------- policy
    def sample_action(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample: (action in the bounds, log pi(action|obs))."""
        out = self.policy.actor(obs.flatten(1))  # fp32 head under autocast
        return squashed_gaussian(out, self.action_mid, self.action_half)

    @torch.inference_mode()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Uniform random actions until learning_starts, then samples from the policy."""
        if self.env_steps < self.cfg.learning_starts:
            u = torch.rand((len(obs), self.spec.action_dim), device=obs.device)
            actions = self.action_mid.to(obs.device) + self.action_half.to(obs.device) * (2 * u - 1)
        else:
            actions, _ = self.sample_action(obs.to(self.device))
        self._last = (obs, actions)
        return actions

    @property
    def alpha(self) -> torch.Tensor:
        """Entropy temperature exp(log_alpha)."""
        return self.log_alpha.detach().exp()

    # ----------------------------------------------------------------- one gradient step
    def _step(self, batch) -> tuple[torch.Tensor, ...]:
        cfg = self.cfg
        obs, actions, next_obs = batch["obs"], batch["actions"], batch["next_obs"]
        weights = self._weights(batch)
        scaler = self.scaler
        with torch.no_grad(), self.autocast:
            next_actions, next_logp = self.sample_action(next_obs)
            next_q = torch.min(
                self.q1_target(next_obs, next_actions), self.q2_target(next_obs, next_actions)
            )
        # y = r + gamma^k (1 - terminated) (min Q'(s', a') - alpha log pi(a'|s')), in fp32
        target = batch["rewards"] + batch["discounts"] * (1 - batch["terminated"]) * (
            next_q - self.alpha * next_logp
        )
        with self.autocast:
            q1, q2 = self.q1(obs, actions), self.q2(obs, actions)
        per_sample = F.mse_loss(q1, target, reduction="none") + F.mse_loss(
            q2, target, reduction="none"
        )
        critic_loss = (per_sample * weights).mean() if weights is not None else per_sample.mean()
        self.critic_opt.zero_grad(set_to_none=not self.graphs)
        scaler.scale(critic_loss).backward()
        scaler.step(self.critic_opt)
        self._update_priorities(batch, 0.5 * ((q1 - target).abs() + (q2 - target).abs()))

        with self.autocast:
            new_actions, logp = self.sample_action(obs)
            q_new = torch.min(self.q1(obs, new_actions), self.q2(obs, new_actions))
        actor_loss = (self.alpha * logp - q_new).mean()
        self.actor_opt.zero_grad(set_to_none=not self.graphs)
        scaler.scale(actor_loss).backward()
        scaler.step(self.actor_opt)

        # J(alpha) = E[-alpha (log pi + target_entropy)]; log alpha keeps alpha positive.
        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        if cfg.autotune_alpha:
            self.alpha_opt.zero_grad(set_to_none=not self.graphs)
            scaler.scale(alpha_loss).backward()
            scaler.step(self.alpha_opt)
        scaler.update()
        polyak_update_(self.q1_target, self.q1, cfg.tau)
        polyak_update_(self.q2_target, self.q2, cfg.tau)
        return (
            critic_loss.detach(),
            actor_loss.detach(),
            alpha_loss.detach(),
            -logp.detach().mean(),
            q1.detach().mean(),
        )

    def _extra_stats(self) -> dict[str, float]:
        if self.iteration % self.log_every:
            return {}
        return {"charts/alpha": float(self.alpha)}

    # ----------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        """Networks, targets, optimizers, temperature, counters (and the buffer if asked)."""
        return {
            "policy": self.policy.state_dict(),
            "q1": self.q1.state_dict(),
            "q2": self.q2.state_dict(),
            "q1_target": self.q1_target.state_dict(),
            "q2_target": self.q2_target.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "replay": self._buffer_state(),
            **self._counters(),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` saved."""
        self.policy.load_state_dict(state["policy"])
        for name in ("q1", "q2", "q1_target", "q2_target"):
            getattr(self, name).load_state_dict(state[name])
        for name in ("actor_opt", "critic_opt", "alpha_opt"):
            getattr(self, name).load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self._load_counters(state)
