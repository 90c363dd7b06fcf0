"""MountainCar-v0 inside the fused rollout kernel: gymnasium's constants and dynamics in float32
as the device functions of a ``DeviceTask`` (task.py), the kernel-side twin of
``orin_rl.envs.gpu.classic.MountainCar`` (same float32 operations in the same order).

The state (position, velocity) is the observation (``observe`` copies it); every step rewards
-1; the episode terminates once position >= 0.5 with velocity >= 0; a reset draws the position
uniformly from [-0.6, -0.4) (one uniform) and starts at rest.
"""

from __future__ import annotations

import math

from numba import cuda

from orin_rl.algorithms.fused.shapes import F32, ONE, ZERO
from orin_rl.algorithms.fused.task import DeviceTask, clamp, copy_observe

FORCE, NEG_GRAVITY, THREE = F32(0.001), F32(-0.0025), F32(3.0)
MIN_POSITION, MAX_POSITION, MAX_SPEED = F32(-1.2), F32(0.6), F32(0.07)
NEG_MAX_SPEED = F32(-0.07)
GOAL_POSITION, GOAL_VELOCITY = F32(0.5), F32(0.0)
RESET_LOW = F32(-0.6)
RESET_SPAN = F32(-0.4) - F32(-0.6)  # the torch env's high - low, in float32
MINUS_ONE = -ONE


@cuda.jit(device=True, inline=True)
def reset(state, e, rand, t, g):
    """A fresh state in row ``e``: the position from the uniform ``rand[t, g, 1]``, at rest."""
    state[e, 0] = RESET_LOW + RESET_SPAN * rand[t, g, 1]
    state[e, 1] = ZERO


@cuda.jit(device=True, inline=True)
def step(state, e, a):
    """One step of row ``e`` by action ``a`` (push left, none, right); (reward, terminated)."""
    position, velocity = state[e, 0], state[e, 1]
    push = -FORCE if a == 0 else (ZERO if a == 1 else FORCE)  # (a - 1) * force, exactly
    accel = push + math.cos(THREE * position) * NEG_GRAVITY
    velocity = clamp(velocity + accel, NEG_MAX_SPEED, MAX_SPEED)
    position = clamp(position + velocity, MIN_POSITION, MAX_POSITION)
    if position == MIN_POSITION and velocity < ZERO:  # stopped by the left wall
        velocity = ZERO
    terminated = position >= GOAL_POSITION and velocity >= GOAL_VELOCITY
    state[e, 0], state[e, 1] = position, velocity
    return MINUS_ONE, terminated


MOUNTAIN_CAR = DeviceTask("MountainCar-v0", obs_dim=2, num_actions=3, reset_uniforms=1,
                          reset=reset, step=step, state_dim=2, observe=copy_observe(2))  # fmt: skip
