"""The actor-critic's acting half in numpy, over weights a learner publishes into shared memory.

Rollout workers (``runners.worker_rollouts``) act with it: a worker process then needs neither
torch nor the learner's device, and one step costs a few small matrix products. The maths is
:class:`~orin_rl.models.ActorCritic`'s, term for term: the observation normaliser's
``clamp((x - mean) * rsqrt(var + eps), -clip, clip)`` (or rsl_rl's ``(x - mean) / (std + 1e-2)``
inside the actor and the critic), the MLPs, the categorical or diagonal
Gaussian head (rsl_rl's clamped std too) and its log-probability.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from orin_rl.models import profile as profiles

if TYPE_CHECKING:
    from orin_rl.models import ActorCritic

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _elu(x: np.ndarray) -> np.ndarray:
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0.0)))


ACTIVATIONS: dict[str, Any] = {
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "elu": _elu,
}
"""numpy twins of ``actor_critic.ACTIVATIONS`` (torch's ReLU, Tanh, ELU with alpha 1)."""


def blocker(policy: ActorCritic) -> str | None:
    """Why ``policy`` cannot act in numpy (None: it can)."""
    spec = policy.spec
    checks = [
        (spec.squash, "a squashed (SAC) head"),
        (spec.obs_layout is not None, "a dict observation (images and states)"),
        (spec.obs_groups is not None, "actor and critic observation groups"),
        # rsl_rl's statistics fold in every env step; the workers' fold in each rollout's end
        (policy.normalization.inside, "rsl_rl's per-step normalisers"),
        (spec.activation not in ACTIVATIONS, f"activation {spec.activation}"),
        (len(spec.obs_shape) != 1, f"observations of shape {spec.obs_shape} (flat ones only)"),
        (type(policy).__name__ != "ActorCritic", f"a {type(policy).__name__}"),
    ]
    return next((why for failed, why in checks if failed), None)


def weight_layout(policy: ActorCritic) -> dict[str, tuple[tuple[int, ...], Any]]:
    """name -> (shape, dtype) of every tensor the numpy policy reads (its state_dict's)."""
    return {
        key: (tuple(value.shape), value.detach().cpu().numpy().dtype)
        for key, value in policy.state_dict().items()
        if not key.endswith("normalizer.count")
    }


def publish(policy: ActorCritic, arrays: dict[str, np.ndarray]) -> None:
    """Copy ``policy``'s weights and observation statistics into ``arrays`` (``weight_layout``)."""
    for key, value in policy.state_dict().items():
        if key in arrays:
            np.copyto(arrays[key], value.detach().cpu().numpy())


class NumpyActorCritic:
    """``ActorCritic.normalize``, ``act`` and ``value`` over the arrays of ``weight_layout``.

    Args:
        spec: the policy's ``PolicySpec.to_dict()``.
        arrays: the weights (views into shared memory: a publication changes what it reads).
    """

    EPS: ClassVar[float] = 1e-8  # ObsNormalizer's default
    RSL_EPS: ClassVar[float] = 1e-2  # EmpiricalNormalizer's (rsl_rl's)

    def __init__(self, spec: dict[str, Any], arrays: dict[str, np.ndarray]):
        self.discrete = spec["action_kind"] == "discrete"
        self.clamped_std = profiles.of_spec(spec).std == "clamped_std"
        self.clip = float(spec["obs_clip"])
        self.act_fn = ACTIVATIONS[spec["activation"]]
        self.arrays = arrays
        where = profiles.normalization(spec)
        self.normalizes = where == "before_networks"
        self.inside = where == "inside_networks"
        """rsl_rl's normalisers: ``normalize`` passes through, each network normalises."""
        self.actor = self._layers("actor")
        self.critic = self._layers("critic")

    def _layers(self, name: str) -> list[tuple[np.ndarray, np.ndarray]]:
        indices = sorted(int(k.split(".")[1]) for k in self.arrays
                         if k.startswith(f"{name}.") and k.endswith(".weight"))  # fmt: skip
        return [(self.arrays[f"{name}.{i}.weight"], self.arrays[f"{name}.{i}.bias"])
                for i in indices]  # fmt: skip

    def _mlp(self, layers: list[tuple[np.ndarray, np.ndarray]], x: np.ndarray) -> np.ndarray:
        for i, (w, b) in enumerate(layers):
            x = x @ w.T + b  # nn.Linear: x W^T + b
            if i < len(layers) - 1:
                x = self.act_fn(x)
        return x

    def normalize(self, obs: np.ndarray) -> np.ndarray:
        """(batch, obs_dim) float32 observations through the running normaliser (no update)."""
        obs = np.asarray(obs, dtype=np.float32)
        if not self.normalizes:  # none, or rsl_rl's inside the networks
            return obs
        mean, var = self.arrays["obs_normalizer.mean"], self.arrays["obs_normalizer.var"]
        scale = (1.0 / np.sqrt(var + self.EPS)).astype(np.float32)
        return np.clip((obs - mean.astype(np.float32)) * scale, -self.clip, self.clip)

    def _inside(self, name: str, x: np.ndarray) -> np.ndarray:
        """rsl_rl's ``(x - mean) / (std + eps)`` of the network ``name`` (when it has one)."""
        if not self.inside:
            return x
        mean, std = self.arrays[f"{name}_normalizer.mean"], self.arrays[f"{name}_normalizer.std"]
        return (x - mean.astype(np.float32)) / (std.astype(np.float32) + self.RSL_EPS)

    def value(self, normed: np.ndarray) -> np.ndarray:
        """(batch,) V of normalised observations."""
        return self._mlp(self.critic, self._inside("critic", normed))[:, 0]

    def log_std(self) -> np.ndarray:
        """(action_dim,) the Gaussian head's log std."""
        if self.clamped_std:
            return np.log(np.clip(self.arrays["std"], 1e-6, 1e6))
        return self.arrays["log_std"]

    def act(
        self, normed: np.ndarray, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample actions for normalised observations: (actions, log-probabilities, values)."""
        out = self._mlp(self.actor, self._inside("actor", normed)).astype(np.float32)
        if self.discrete:
            shifted = out - out.max(axis=-1, keepdims=True)
            log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
            gumbel = -np.log(-np.log(rng.uniform(1e-20, 1.0, out.shape)))
            actions = np.argmax(log_probs + gumbel, axis=-1)  # Gumbel-max: a categorical draw
            logp = np.take_along_axis(log_probs, actions[:, None], axis=-1)[:, 0]
        else:
            log_std = self.log_std().astype(np.float32)
            noise = rng.standard_normal(out.shape, dtype=np.float32)
            actions = out + np.exp(log_std) * noise
            # log N(a; mean, std), summed over dimensions; z = (a - mean) / std is the noise
            logp = (-0.5 * np.square(noise) - log_std - LOG_SQRT_2PI).sum(axis=-1)
        return actions, logp.astype(np.float32), self.value(normed).astype(np.float32)
