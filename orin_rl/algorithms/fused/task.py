"""What a GPU-native task gives the fused rollout kernel (``rollout.py``): its sizes and its
dynamics as Numba CUDA device functions, which the kernel calls once per env and step
(cartpole.py, mountain_car.py and acrobot.py; tasks.py registers them by ``task_id``).

The kernel keeps each env's state in a row of a float32 shared-memory array ``state`` of shape
(envs per block, ``state_dim``), loaded from and stored back to the env's ``state`` tensor, and
its observation (what the policy reads and the buffer stores) in a row of a second one, ``obs``
(envs per block, ``obs_dim``), which ``observe`` writes from the state. ``e`` is the env's row
there, ``rand`` the iteration's (steps, envs, ``1 + reset_uniforms``) uniform draws, ``t`` the
step and ``g`` the env's index across agents: ``rand[t, g, 0]`` draws the action,
``rand[t, g, 1:]`` are the task's.

- ``reset(state, e, rand, t, g)``: write a fresh initial state into ``state[e]`` from the
  uniforms ``rand[t, g, 1 + i]``, ``i < reset_uniforms``.
- ``step(state, e, a) -> (reward, terminated)``: advance ``state[e]`` in place by action ``a``
  (an integer below ``num_actions``); the float32 reward and whether the episode terminated.
- ``observe(state, e, obs)``: write the observation of ``state[e]`` into ``obs[e]`` (a copy
  where the state is the observation: ``copy_observe`` builds that one).

``clamp`` is a device helper the tasks share.

The kernel counts the time limit, resets ended episodes and keeps the episode statistics.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from numba import cuda


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
    state_dim: int
    """Floats of an env's state (the env's ``state`` columns)."""
    observe: Any
    """Device function ``observe(state, e, obs)``."""


@cuda.jit(device=True, inline=True)
def clamp(x, low, high):
    """``x`` bounded to [low, high] (torch's ``clamp``; the builtins ``min`` and ``max`` do not
    compile for two floats in a CUDA device function)."""
    if x < low:
        return low
    return high if x > high else x


def copy_observe(dim: int) -> Any:
    """``observe`` of a task whose state is its observation: the ``dim`` floats copied."""

    @cuda.jit(device=True, inline=True)
    def observe(state, e, obs):
        """The observation of row ``e``: the state itself."""
        for i in range(dim):
            obs[e, i] = state[e, i]

    return observe
