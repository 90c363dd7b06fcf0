"""Learning algorithms (the trainer calls only their verbs)."""

from orin_rl.algorithms.ppo import PPO

__all__ = ["PPO"]
