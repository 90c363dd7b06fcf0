"""Environments: ``make()`` returns a VecEnv (batched torch tensors, auto-reset).

The package is light: importing it (or a torch-free module of it, as the CLI's parser imports
``backends`` and ``orin-rl run`` imports ``factory``) loads neither torch nor gymnasium. Its
names below are imported on first use. Modules: ``maker`` (``make``, ``reward_threshold``),
``base`` (the VecEnv contract), ``backends`` (the backends by name), one module or package a
backend (``gym_env``, ``gpu``, ``mjlab``, ``envpool_env``), ``factory`` (one gymnasium env as
the config says, torch-free) and ``images`` (the pixel wrappers, torch-free).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orin_rl.envs.base import EnvError, EnvOptions, StepResult, VecEnv
    from orin_rl.envs.gym_env import GymVecEnv
    from orin_rl.envs.maker import make, reward_threshold

__all__ = [
    "EnvError",
    "EnvOptions",
    "GymVecEnv",
    "StepResult",
    "VecEnv",
    "make",
    "reward_threshold",
]


def __getattr__(name: str) -> Any:
    """The names of ``__all__``, imported on first use (torch and gymnasium with them) and kept
    here after. Plain ``from ... import`` statements, which the layout test
    (``tests/test_layout.py``) reads."""
    if name in ("make", "reward_threshold"):
        from orin_rl.envs import maker as module
    elif name in ("EnvError", "EnvOptions", "StepResult", "VecEnv"):
        from orin_rl.envs import base as module
    elif name == "GymVecEnv":
        from orin_rl.envs import gym_env as module
    else:
        raise AttributeError(f"module 'orin_rl.envs' has no attribute {name!r}")
    value = getattr(module, name)
    globals()[name] = value
    return value
