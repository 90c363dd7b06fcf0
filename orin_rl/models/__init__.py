"""Networks: actor-critic, action distributions, observation normaliser."""

from orin_rl.models.actor_critic import ActorCritic, PolicySpec
from orin_rl.models.normalizer import ObsNormalizer

__all__ = ["ActorCritic", "ObsNormalizer", "PolicySpec"]
