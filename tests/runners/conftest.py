"""Shared pieces of the runner tests."""

from __future__ import annotations

SHORT_CPU_PPO = [
    "ppo.num_steps=16",
    "ppo.num_epochs=1",
    "ppo.num_minibatches=1",
    "train.device=cpu",
    "train.eval_every=0",
    "train.eval_episodes=1",
    "train.tensorboard=false",
    "train.stop_at_threshold=false",
]
"""Overrides of a short PPO run on the CPU: rollouts of 16 steps, one epoch of one minibatch,
no evaluation along the way (one episode at the end), no TensorBoard, no early stop."""
