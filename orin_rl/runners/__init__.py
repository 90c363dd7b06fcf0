"""Runners: the training loop, checkpoints, metrics and evaluation."""

from orin_rl.runners.trainer import RunFolderError, Trainer, train

__all__ = ["RunFolderError", "Trainer", "train"]
