"""Actor-critic MLP with categorical or diagonal-Gaussian action heads."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from orin_rl.models import profile as profiles
from orin_rl.models.cnn import ENCODERS, ImageEncoder, image_encoder_kind
from orin_rl.models.distributions import Categorical, DiagGaussian
from orin_rl.models.multi_input import dict_spec_fields, encoders
from orin_rl.models.normalizer import EmpiricalNormalizer, Normalization, ObsNormalizer

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


@dataclass
class PolicySpec:
    """Everything needed to rebuild the network without its environment (kept in checkpoints)."""

    obs_shape: list[int]
    """Observation shape of one environment."""
    action_kind: str
    """``discrete`` or ``continuous``."""
    action_dim: int
    """Number of actions (discrete) or action dimensions (continuous)."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden widths of both MLPs."""
    activation: str = "tanh"
    """Hidden activation name."""
    normalize_obs: bool = False
    """Whether a running observation normaliser is applied before the MLPs."""
    init_log_std: float = 0.0
    """Initial log std of the Gaussian head."""
    obs_clip: float = 10.0
    """Normalised observations are clipped to +-obs_clip."""
    action_low: list[float] | None = None
    """Lower action bounds (continuous)."""
    action_high: list[float] | None = None
    """Upper action bounds (continuous)."""
    squash: bool = False
    """Tanh-squashed Gaussian (SAC): the actor outputs (mean, log_std) and the deterministic
    action is tanh(mean) scaled to the action bounds."""
    obs_groups: dict[str, list[int]] | None = None
    """Asymmetric actor-critic: where the ``actor`` and the ``critic`` inputs lie in the flat
    observation, as [start, stop) (an env's ``VecEnv.obs_groups``); None: both read all of it.
    The deployed policy takes the actor's part only."""
    critic_hidden_sizes: list[int] | None = None
    """Hidden widths of the critic when they differ from the actor's (None: hidden_sizes)."""
    rsl_rl: bool = False
    """Built by rsl_rl's profile (``ppo.rsl_rl``): what that changes in the network (layer init,
    the std parameter, where the normalisers sit) is ``profile``'s to say."""
    obs_dtype: str = "float32"
    """The observation's dtype as stored and deployed: ``uint8`` for image frames."""
    encoder: str | None = None
    """Image encoder in front of both MLPs (``models.cnn.ENCODERS``: ``nature``, ``small``);
    None: the flat observation goes to the MLPs."""
    share_encoder: bool = False
    """With an ``encoder``: one encoder whose features both heads read (CleanRL's Atari agents,
    SB3's on-policy CnnPolicy), trained by the actor's and the critic's losses; ``act`` and
    ``evaluate`` then run it once. False: the actor and the critic each their own."""
    obs_layout: list[dict] | None = None
    """A dict observation (uint8 images and float32 states: mjlab's camera tasks): its keys'
    shapes and dtypes in row order (``obs_layout.ObsLayout.to_spec``). It travels as one row of
    bytes (``obs_shape`` [row bytes], ``obs_dtype`` uint8), ``obs_groups`` names the keys the
    actor and the critic each read, and each network's ``MultiInputEncoder`` comes first."""

    @property
    def profile(self) -> profiles.PPOProfile:
        """The PPO profile that built this policy (``models.profile``)."""
        return profiles.of_spec(self)

    def group_dim(self, role: str) -> int:
        """Input width of the ``actor`` or the ``critic`` (a dict observation: the values of
        its keys)."""
        if self.obs_groups is None:
            return int(np.prod(self.obs_shape))
        if self.obs_layout is not None:
            sizes = {e["key"]: int(np.prod(e["shape"])) for e in self.obs_layout}
            return sum(sizes[key] for key in self.obs_groups[role])
        start, stop = self.obs_groups[role]
        return stop - start

    @property
    def deploy_obs_shape(self) -> list[int]:
        """The observation the deployed policy takes: the actor's group, or the whole one."""
        return list(self.obs_shape) if self.obs_groups is None else [self.group_dim("actor")]

    @classmethod
    def from_spaces(
        cls, observation_space: gym.Space, action_space: gym.Space, **kwargs
    ) -> PolicySpec:
        """Describe a policy for single-env gymnasium spaces (a ``Dict`` of uint8 images and
        float states: ``obs_layout``; ``obs_groups`` then names each role's keys)."""
        if isinstance(observation_space, gym.spaces.Dict):
            fields = dict_spec_fields(observation_space, kwargs.pop("obs_groups", None))
            return cls.from_spaces(
                gym.spaces.Box(0, 255, tuple(fields.pop("obs_shape")), np.uint8),
                action_space,
                **kwargs,
                **fields,
            )
        if not isinstance(observation_space, gym.spaces.Box):
            raise ValueError(f"observation space {observation_space} is not a Box")
        obs_shape = list(observation_space.shape)
        if observation_space.dtype == np.uint8:  # frames: stored, learned from, deployed uint8
            kwargs.setdefault("obs_dtype", "uint8")
            kwargs.setdefault("encoder", image_encoder_kind(obs_shape, "uint8"))
        if isinstance(action_space, gym.spaces.Discrete):
            return cls(obs_shape, "discrete", int(action_space.n), **kwargs)
        if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
            return cls(
                obs_shape,
                "continuous",
                int(action_space.shape[0]),
                action_low=[float(v) for v in action_space.low],
                action_high=[float(v) for v in action_space.high],
                **kwargs,
            )
        raise ValueError(f"action space {action_space} is not Discrete or a 1-D Box")

    def to_dict(self) -> dict:
        """Plain dict (safe for ``torch.load(weights_only=True)``)."""
        return asdict(self)


def mlp(
    in_dim: int,
    hidden: list[int],
    out_dim: int,
    activation: str,
    out_gain: float,
    orthogonal: bool = True,
) -> nn.Sequential:
    """MLP with orthogonal init: sqrt(2) gain on hidden layers, ``out_gain`` on the last (with
    ``orthogonal`` off: torch's default init, as rsl_rl keeps it)."""
    init = _ortho if orthogonal else (lambda layer, gain: layer)
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden:
        layers += [init(nn.Linear(last, width), math.sqrt(2.0)), ACTIVATIONS[activation]()]
        last = width
    layers.append(init(nn.Linear(last, out_dim), out_gain))
    return nn.Sequential(*layers)


def _ortho(layer: nn.Linear, gain: float) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


class SampledPolicy:
    """``act`` and ``evaluate`` of a policy from its ``distribution`` and ``value``: written
    once for ``ActorCritic`` (batch shapes (B, ...)) and ``BatchedActorCritic`` ((K, B, ...))."""

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions: returns (actions, log-probabilities, values)."""
        dist = self.distribution(obs)
        actions = dist.sample()
        return actions, dist.log_prob(actions), self.value(obs)

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log-probabilities, entropies, values) of ``actions`` under the current policy."""
        dist = self.distribution(obs)
        return dist.log_prob(actions), dist.entropy(), self.value(obs)


class ActorCritic(SampledPolicy, nn.Module):
    """Separate actor and critic MLPs over (optionally normalised) flat observations."""

    def __init__(self, spec: PolicySpec):
        super().__init__()
        if spec.activation not in ACTIVATIONS:
            raise ValueError(f"activation {spec.activation!r} not in {sorted(ACTIVATIONS)}")
        self.spec = spec
        self.discrete = spec.action_kind == "discrete"
        out_dim = 2 * spec.action_dim if spec.squash else spec.action_dim
        critic_hidden = spec.critic_hidden_sizes or spec.hidden_sizes
        profile = spec.profile
        ortho = profile.layer_init == "orthogonal"
        actor_in, critic_in = spec.group_dim("actor"), spec.group_dim("critic")
        if spec.encoder is not None:
            _check_image_spec(spec)
            actor_in = critic_in = ENCODERS[spec.encoder][1]  # its feature width
        multi = encoders(spec) if spec.obs_layout is not None else None  # a dict observation
        if multi is not None:
            actor_in, critic_in = multi[0].features, multi[1].features
        self.actor = mlp(actor_in, spec.hidden_sizes, out_dim, spec.activation, 0.01, ortho)
        self.critic = mlp(critic_in, critic_hidden, 1, spec.activation, 1.0, ortho)
        self._shared = spec.encoder is not None and spec.share_encoder
        if spec.encoder is not None:  # the encoder first in each Sequential: whatever takes
            # ``actor`` (the deployed policy, DQN's Q, SAC's actor) takes the frames
            encoder = ImageEncoder(spec.obs_shape, spec.encoder)
            critic_encoder = encoder if self._shared else ImageEncoder(spec.obs_shape, spec.encoder)
            self.actor = nn.Sequential(encoder, *self.actor)
            self.critic = nn.Sequential(critic_encoder, *self.critic)
        if multi is not None:  # first in each Sequential, as an image encoder: rows of bytes in
            self.actor = nn.Sequential(multi[0], *self.actor)
            self.critic = nn.Sequential(multi[1], *self.critic)
        groups = spec.obs_groups if multi is None else None  # a dict's: keys, read by `multi`
        self._actor_part = slice(*groups["actor"]) if groups else slice(None)
        self._critic_part = slice(*groups["critic"]) if groups else slice(None)
        self._clamped_std = profile.std == "clamped_std"
        if not self.discrete and self._clamped_std:  # rsl_rl's: Adam moves the std linearly
            self.std = nn.Parameter(torch.full((spec.action_dim,), math.exp(spec.init_log_std)))
        elif not self.discrete:
            self.log_std = nn.Parameter(torch.full((spec.action_dim,), spec.init_log_std))
        where = profiles.normalization(spec)
        self.obs_normalizer = (
            ObsNormalizer(tuple(spec.obs_shape), clip=spec.obs_clip)
            if where == "before_networks"
            else None
        )
        """The run's one normaliser, applied before the networks (``normalize``)."""
        inside = where == "inside_networks" and multi is None  # a dict's: in its encoders
        self.actor_normalizer = EmpiricalNormalizer(actor_in) if inside else None
        """rsl_rl's: inside the actor, over the actor's group (``update_normalizers``)."""
        self.critic_normalizer = EmpiricalNormalizer(critic_in) if inside else None
        """rsl_rl's: inside the critic, over the critic's group."""
        self.normalization = Normalization(
            where, self.obs_normalizer, self.actor_normalizer, self.critic_normalizer,
            self._actor_part,
            (self.actor[0], self.critic[0]) if multi is not None and where != "none" else None,
        )  # fmt: skip
        """Where the observations are normalised, and with what: what the learner, runners,
        export and deploy wrapper ask."""

    def normalize(self, obs: torch.Tensor, update: bool = False) -> torch.Tensor:
        """Apply the observation normaliser (updating it first when ``update``); with rsl_rl's
        normalisers the observation is returned as it is (``update_normalizers`` folds it in)."""
        if self.obs_normalizer is None:
            return obs
        if update:
            self.obs_normalizer.update(obs)
        return self.obs_normalizer(obs)

    @torch.no_grad()
    def update_normalizers(self, obs: torch.Tensor) -> None:
        """Fold raw ``obs`` (batch, *obs_shape) into rsl_rl's actor and critic normalisers."""
        self.normalization.update_inside(obs.flatten(1), self._critic_part)

    def actor_input(self, obs: torch.Tensor) -> torch.Tensor:
        """(batch, actor width): the actor's part of ``obs``, through its own normaliser."""
        return self.normalization.actor(obs.flatten(1)[:, self._actor_part])

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions: (actions, log-probabilities, values); a shared encoder runs once."""
        if not self._shared:
            return super().act(obs)
        features = self.actor[0](self.actor_input(obs))
        dist = self._distribution(self.actor[1:](features))
        actions = dist.sample()
        return actions, dist.log_prob(actions), self._value(self.critic[1:], features)

    def evaluate(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log-probabilities, entropies, values) of ``actions``; a shared encoder runs once."""
        if not self._shared:
            return super().evaluate(obs, actions)
        features = self.actor[0](self.actor_input(obs))
        dist = self._distribution(self.actor[1:](features))
        return dist.log_prob(actions), dist.entropy(), self._value(self.critic[1:], features)

    def distribution(self, obs: torch.Tensor) -> Categorical | DiagGaussian:
        """Action distribution for normalised ``obs`` (batch, *obs_shape)."""
        return self._distribution(self.actor(self.actor_input(obs)))

    def _distribution(self, out: torch.Tensor) -> Categorical | DiagGaussian:
        out = at_least_fp32(out)  # fp32 heads (autocast)
        if self.discrete:
            return Categorical(out)
        if self._clamped_std:
            std = self.std.clamp(1e-6, 1e6)  # rsl_rl's std_range
            return DiagGaussian(out, std.log(), std=std)
        return DiagGaussian(out, self.log_std)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """(batch,) V(s) for normalised ``obs``; under autocast the value head stays fp32."""
        x = self.normalization.critic(obs.flatten(1)[:, self._critic_part])
        return self._value(self.critic, x)

    @staticmethod
    def _value(critic: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_autocast_enabled(x.device.type):
            return critic(x).squeeze(-1)
        hidden = critic[:-1](x)
        with torch.autocast(x.device.type, enabled=False):
            return critic[-1](hidden.float()).squeeze(-1)

    def act_deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """The distribution's mode (argmax / mean; squashed: the scaled tanh of the mean)."""
        if self.spec.squash:
            mean = at_least_fp32(self.actor(self.actor_input(obs)))[:, : self.spec.action_dim]
            return squash_to_bounds(mean, self.spec.action_low, self.spec.action_high)
        return self.distribution(obs).mode()


def _check_image_spec(spec: PolicySpec) -> None:
    """Refuse what an image encoder cannot take, saying what to change."""
    if spec.normalize_obs:
        raise ValueError(
            "normalize_obs with image observations: the encoder scales the uint8 frames "
            "(x / 255) itself; set ppo.normalize_obs false"
        )
    if spec.obs_groups is not None:
        raise ValueError("actor and critic observation groups with image observations: an "
                         "image is one observation for both")  # fmt: skip


def at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """``x`` in float32 where autocast made it half precision; float64 stays float64."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def squash_to_bounds(u: torch.Tensor, low: list[float], high: list[float]) -> torch.Tensor:
    """low + (tanh(u) + 1) / 2 * (high - low): an unbounded pre-activation into the box."""
    low_t = torch.as_tensor(low, dtype=u.dtype, device=u.device)
    high_t = torch.as_tensor(high, dtype=u.dtype, device=u.device)
    return low_t + (torch.tanh(u) + 1.0) * 0.5 * (high_t - low_t)
