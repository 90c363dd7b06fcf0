"""CartPole-v1 inside the fused rollout kernel: gymnasium's constants and dynamics in float32
as the device functions of a ``DeviceTask`` (task.py), the kernel-side twin of
``orin_rl.envs.gpu.classic.CartPole`` (same order of operations).

The state (x, x_dot, theta, theta_dot) is the observation (``observe`` copies it); a step
rewards 1, the falling step included; a reset draws each state variable uniformly from
[-0.05, 0.05).
"""

from __future__ import annotations

import math

from numba import cuda

from orin_rl.algorithms.fused.shapes import F32, ONE
from orin_rl.algorithms.fused.task import DeviceTask, copy_observe

GRAVITY, MASSPOLE, TOTAL_MASS = F32(9.8), F32(0.1), F32(1.1)
LENGTH, POLEMASS_LENGTH, FORCE, TAU = F32(0.5), F32(0.05), F32(10.0), F32(0.02)
FOUR_THIRDS = F32(4.0 / 3.0)
THETA_LIMIT, X_LIMIT = F32(12 * 2 * math.pi / 360), F32(2.4)
RESET_LOW, RESET_SPAN = F32(-0.05), F32(0.1)


@cuda.jit(device=True, inline=True)
def reset(state, e, rand, t, g):
    """A fresh state in row ``e`` from the uniforms ``rand[t, g, 1:5]``."""
    for i in range(4):
        state[e, i] = RESET_LOW + RESET_SPAN * rand[t, g, 1 + i]


@cuda.jit(device=True, inline=True)
def step(state, e, a):
    """One step of row ``e`` by action ``a``, explicit Euler (gymnasium's order of operations);
    (reward, terminated)."""
    x, x_dot, theta, theta_dot = state[e, 0], state[e, 1], state[e, 2], state[e, 3]
    force = FORCE if a == 1 else -FORCE
    costheta = math.cos(theta)
    sintheta = math.sin(theta)
    temp = (force + POLEMASS_LENGTH * theta_dot * theta_dot * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (FOUR_THIRDS - MASSPOLE * costheta * costheta / TOTAL_MASS)
    )
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    terminated = abs(x) > X_LIMIT or abs(theta) > THETA_LIMIT
    state[e, 0], state[e, 1], state[e, 2], state[e, 3] = x, x_dot, theta, theta_dot
    return ONE, terminated


CARTPOLE = DeviceTask("CartPole-v1", obs_dim=4, num_actions=2, reset_uniforms=4, reset=reset,
                      step=step, state_dim=4, observe=copy_observe(4))  # fmt: skip
