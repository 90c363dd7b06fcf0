"""orin_rl: reinforcement learning on the robot's own computer."""

__version__ = "0.1.0"
