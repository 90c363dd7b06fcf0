"""Acrobot-v1 inside the fused rollout kernel: gymnasium's "book" dynamics in float32 as the
device functions of a ``DeviceTask`` (task.py), the kernel-side twin of
``orin_rl.envs.gpu.classic.Acrobot`` (same float32 operations in the same order; the torch
env's Python-float constants are folded in double as Python folds them there).

The state (theta1, theta2, dtheta1, dtheta2) gives the observation (cos theta1, sin theta1,
cos theta2, sin theta2, dtheta1, dtheta2); an action applies torque -1, 0 or +1 for one RK4
step of dt = 0.2, the angles are wrapped into [-pi, pi] and the velocities bounded. A step
rewards -1, the terminating one 0; the episode terminates once the tip is above the bar by
more than a link (-cos theta1 - cos(theta2 + theta1) > 1); a reset draws each state variable
uniformly from [-0.1, 0.1).
"""

from __future__ import annotations

import math

from numba import cuda

from orin_rl.algorithms.fused.shapes import F32, ONE, ZERO
from orin_rl.algorithms.fused.task import DeviceTask, clamp

# m1 = m2 = l1 = 1, lc1 = lc2 = 0.5, I1 = I2 = 1, g = 9.8: the products the torch env's Python
# evaluates before it meets a tensor
TWO = F32(2.0)
D1_PART, D1_BASE, D2_PART = F32(1.25), F32(0.25), F32(0.5)  # l1^2 + lc2^2, m1 lc1^2, l1 lc2
LC2_SQ, INERTIA = F32(0.25), F32(1.0)
PHI2_SCALE = F32(1.0 * 0.5 * 9.8)  # m2 lc2 g
PHI1_SCALE = F32((1.0 * 0.5 + 1.0 * 1.0) * 9.8)  # (m1 lc1 + m2 l1) g
NEG_HALF, HALF = F32(-0.5), F32(0.5)  # -m2 l1 lc2, m2 l1 lc2 (2 m2 l1 lc2 = 1)
DENOM_BASE = F32(1.0 * 0.5**2 + 1.0)  # m2 lc2^2 + I2
HALF_PI = F32(math.pi / 2.0)
DT, HALF_DT, DT_SIXTH = F32(0.2), F32(0.2 / 2.0), F32(0.2 / 6.0)
PI, TWO_PI = F32(math.pi), F32(2 * math.pi)
MAX_VEL_1, MAX_VEL_2 = F32(4 * math.pi), F32(9 * math.pi)
RESET_LOW = F32(-0.1)
RESET_SPAN = F32(0.1) - F32(-0.1)  # the torch env's high - low, in float32
MINUS_ONE = -ONE


@cuda.jit(device=True, inline=True)
def reset(state, e, rand, t, g):
    """A fresh state in row ``e`` from the uniforms ``rand[t, g, 1:5]``."""
    for i in range(4):
        state[e, i] = RESET_LOW + RESET_SPAN * rand[t, g, 1 + i]


@cuda.jit(device=True, inline=True)
def dsdt(t1, t2, w1, w2, torque):
    """The time derivative of the state (t1, t2, w1, w2) under ``torque`` (the book dynamics,
    the torch env's ``_dsdt``)."""
    c2, s2 = math.cos(t2), math.sin(t2)
    d1 = D1_BASE + (D1_PART + c2) + INERTIA + INERTIA
    d2 = (LC2_SQ + D2_PART * c2) + INERTIA
    phi2 = PHI2_SCALE * math.cos(t1 + t2 - HALF_PI)
    phi1 = NEG_HALF * (w2 * w2) * s2 - w2 * w1 * s2 + PHI1_SCALE * math.cos(t1 - HALF_PI) + phi2
    dd2 = (torque + d2 / d1 * phi1 - HALF * (w1 * w1) * s2 - phi2) / (DENOM_BASE - d2 * d2 / d1)
    dd1 = -(d2 * dd2 + phi1) / d1
    return w1, w2, dd1, dd2


@cuda.jit(device=True, inline=True)
def wrap(x):
    """gymnasium's ``wrap(x, -pi, pi)`` as the torch env's ``_wrap``: two passes."""
    for _ in range(2):
        if x > PI:
            x = x - TWO_PI
        if x < -PI:
            x = x + TWO_PI
    return x


@cuda.jit(device=True, inline=True)
def step(state, e, a):
    """One RK4 step of row ``e`` under torque ``a - 1``; (reward, terminated)."""
    t1, t2, w1, w2 = state[e, 0], state[e, 1], state[e, 2], state[e, 3]
    torque = -ONE if a == 0 else (ZERO if a == 1 else ONE)
    p1, p2, p3, p4 = dsdt(t1, t2, w1, w2, torque)
    q1, q2, q3, q4 = dsdt(t1 + HALF_DT * p1, t2 + HALF_DT * p2, w1 + HALF_DT * p3,
                          w2 + HALF_DT * p4, torque)  # fmt: skip
    r1, r2, r3, r4 = dsdt(t1 + HALF_DT * q1, t2 + HALF_DT * q2, w1 + HALF_DT * q3,
                          w2 + HALF_DT * q4, torque)  # fmt: skip
    u1, u2, u3, u4 = dsdt(t1 + DT * r1, t2 + DT * r2, w1 + DT * r3, w2 + DT * r4, torque)
    t1 = wrap(t1 + DT_SIXTH * (p1 + TWO * q1 + TWO * r1 + u1))
    t2 = wrap(t2 + DT_SIXTH * (p2 + TWO * q2 + TWO * r2 + u2))
    w1 = clamp(w1 + DT_SIXTH * (p3 + TWO * q3 + TWO * r3 + u3), -MAX_VEL_1, MAX_VEL_1)
    w2 = clamp(w2 + DT_SIXTH * (p4 + TWO * q4 + TWO * r4 + u4), -MAX_VEL_2, MAX_VEL_2)
    terminated = -math.cos(t1) - math.cos(t2 + t1) > ONE
    state[e, 0], state[e, 1], state[e, 2], state[e, 3] = t1, t2, w1, w2
    return (ZERO if terminated else MINUS_ONE), terminated


@cuda.jit(device=True, inline=True)
def observe(state, e, obs):
    """(cos t1, sin t1, cos t2, sin t2, dt1, dt2) of row ``e``."""
    t1, t2 = state[e, 0], state[e, 1]
    obs[e, 0], obs[e, 1] = math.cos(t1), math.sin(t1)
    obs[e, 2], obs[e, 3] = math.cos(t2), math.sin(t2)
    obs[e, 4], obs[e, 5] = state[e, 2], state[e, 3]


ACROBOT = DeviceTask("Acrobot-v1", obs_dim=6, num_actions=3, reset_uniforms=4, reset=reset,
                     step=step, state_dim=4, observe=observe)  # fmt: skip
