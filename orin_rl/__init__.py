"""orin_rl: reinforcement learning on the robot's own computer."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["EvalResult", "Policy", "__version__", "evaluate_policy", "load_policy"]


def __getattr__(name: str) -> Any:
    """``load_policy``, ``Policy``, ``evaluate_policy`` and ``EvalResult``, imported on first
    use, so ``import orin_rl`` stays light (no torch, no onnxruntime). Plain ``from ... import``
    statements, which the layout test (``tests/test_layout.py``) reads."""
    if name in ("load_policy", "Policy"):
        from orin_rl import policy

        return getattr(policy, name)
    if name in ("evaluate_policy", "EvalResult"):
        from orin_rl import evaluation

        return getattr(evaluation, name)
    raise AttributeError(f"module 'orin_rl' has no attribute {name!r}")
