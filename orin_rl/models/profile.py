"""The PPO profiles: orin_rl's generic PPO and rsl_rl's (``ppo.rsl_rl``), each difference named.

``ppo.rsl_rl`` (set by the mjlab presets) is read here and in the configuration's checks, nowhere
else: the network, the learner and the numpy policy ask the profile what to do, and a policy's
spec carries which profile built it (its ``rsl_rl`` field, kept under that name in checkpoints
and bundles). docs/rsl_rl.md holds each difference against rsl_rl 5.4.2's source and
tests/algorithms/test_rsl_rl_lockstep.py holds the rsl_rl profile to rsl_rl step for step.

Torch-free: a plain description.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class PPOProfile:
    """What a PPO learner and its network do where rsl_rl and the generic PPO part."""

    name: Literal["generic", "rsl_rl"]
    layer_init: Literal["orthogonal", "torch_default"]
    """``orthogonal``: gain sqrt(2) on hidden layers, 0.01 on the actor's head, 1 on the
    critic's, zero biases (CleanRL, SB3); ``torch_default``: nn.Linear's own (rsl_rl)."""
    std: Literal["log_std", "clamped_std"]
    """The Gaussian's learned parameter: its log (``log_std``) or the std itself, clamped to
    [1e-6, 1e6] when used (rsl_rl's ``scalar`` std: Adam moves it linearly)."""
    normalizers: Literal["before_networks", "inside_networks"]
    """With ``normalize_obs``: one running normaliser before both networks, clipped
    (``ObsNormalizer``), the rollout storing normalised observations; or one inside the actor
    and one inside the critic, each over its own group, unclipped (``EmpiricalNormalizer``), the
    rollout storing raw observations."""
    adam_eps: float
    """Adam's epsilon."""
    exact_kl: bool
    """The adaptive learning rate's KL: the exact KL of the stored behaviour Gaussian and the
    current one (continuous actions), not the sample estimate."""
    one_minibatch_order: bool
    """One permutation an update (every epoch the same minibatches in the same order), not one
    an epoch."""
    clip_each_network: bool
    """Clip the critic's gradient norm and the rest's each on its own, not their global norm."""


GENERIC = PPOProfile(
    name="generic",
    layer_init="orthogonal",
    std="log_std",
    normalizers="before_networks",
    adam_eps=1e-5,
    exact_kl=False,
    one_minibatch_order=False,
    clip_each_network=False,
)
RSL_RL = dataclasses.replace(
    GENERIC, name="rsl_rl", layer_init="torch_default", std="clamped_std",
    normalizers="inside_networks", adam_eps=1e-8, exact_kl=True, one_minibatch_order=True,
    clip_each_network=True,
)  # fmt: skip


def of_config(ppo: Any) -> PPOProfile:
    """The profile a ``PPOConfig`` (``ppo.rsl_rl``) asks for."""
    return RSL_RL if ppo.rsl_rl else GENERIC


def of_spec(spec: Any) -> PPOProfile:
    """The profile that built a policy: its ``PolicySpec``, or the spec's dict (a bundle's, a
    checkpoint's, the numpy policy's)."""
    flag = spec.get("rsl_rl") if isinstance(spec, dict) else spec.rsl_rl
    return RSL_RL if flag else GENERIC


def spec_fields(profile: PPOProfile) -> dict[str, bool]:
    """What a ``PolicySpec`` keeps of the profile (its saved form)."""
    return {"rsl_rl": profile.name == "rsl_rl"}


def normalization(spec: Any) -> Literal["none", "before_networks", "inside_networks"]:
    """Where a policy of ``spec`` (a ``PolicySpec`` or its dict) normalises its observations:
    nowhere (``normalize_obs`` off, or an image encoder scaling its own frames), before the
    networks, or inside each network (a dict observation's: in its encoders)."""
    get = spec.get if isinstance(spec, dict) else lambda k: getattr(spec, k)
    if not get("normalize_obs") or get("encoder") is not None:
        return "none"
    return of_spec(spec).normalizers
