"""What a GPU-native task gives the fused rollout kernel (``rollout.py``): its sizes and its
dynamics as two Numba CUDA device functions, which the kernel calls once per env and step
(cartpole.py is the one task so far).

The kernel keeps each env's state in a row of a float32 shared-memory array ``state`` of shape
(envs per block, ``obs_dim``); the state is the observation (what the policy reads and the
buffer stores). ``e`` is the env's row there, ``rand`` the iteration's (steps, envs,
``1 + reset_uniforms``) uniform draws, ``t`` the step and ``g`` the env's index across agents:
``rand[t, g, 0]`` draws the action, ``rand[t, g, 1:]`` are the task's.

- ``reset(state, e, rand, t, g)``: write a fresh initial state into ``state[e]`` from the
  uniforms ``rand[t, g, 1 + i]``, ``i < reset_uniforms``.
- ``step(state, e, a) -> (reward, terminated)``: advance ``state[e]`` in place by action ``a``
  (an integer below ``num_actions``); the float32 reward and whether the episode terminated.
  The kernel counts the time limit, resets ended episodes and keeps the episode statistics.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class DeviceTask(NamedTuple):
    """A task whose dynamics run inside the fused rollout kernel (module docstring)."""

    task_id: str
    """The env's ``fused_task`` (``VecEnv.fused_task``) this implements."""
    obs_dim: int
    num_actions: int
    reset_uniforms: int
    """Uniform draws a reset takes."""
    reset: Any
    """Device function ``reset(state, e, rand, t, g)``."""
    step: Any
    """Device function ``step(state, e, a) -> (reward, terminated)``."""
