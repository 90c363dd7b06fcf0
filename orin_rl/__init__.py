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


def lazy_attributes(package: str, table: dict[str, str]) -> Any:
    """A module ``__getattr__`` for ``package`` that imports each name of ``table`` (name ->
    the module defining it) on first use."""

    def __getattr__(name: str) -> Any:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib

        return getattr(importlib.import_module(module), name)

    return __getattr__


__getattr__ = lazy_attributes("orin_rl", _LAZY)
