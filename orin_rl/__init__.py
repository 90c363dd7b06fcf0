"""orin_rl: reinforcement learning on the robot's own computer."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# Loaded on first use, so ``import orin_rl`` stays light (no torch, no onnxruntime).
_LAZY = {
    "load_policy": "orin_rl.policy",
    "Policy": "orin_rl.policy",
    "evaluate_policy": "orin_rl.evaluation",
    "EvalResult": "orin_rl.evaluation",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'orin_rl' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
