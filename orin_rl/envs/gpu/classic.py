"""gymnasium's classic-control tasks as batched torch environments.

Each class reproduces ``gymnasium/envs/classic_control`` (gymnasium 1.x): same constants,
integrator, reward, termination, time limit and observation layout; ``state`` columns are
gymnasium's ``env.unwrapped.state``.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from orin_rl.envs.gpu.base import TorchVecEnv


def _box(low, high) -> gym.spaces.Box:
    return gym.spaces.Box(np.array(low, np.float32), np.array(high, np.float32), dtype=np.float32)


class CartPole(TorchVecEnv):
    """CartPole-v1: state (x, x_dot, theta, theta_dot); explicit Euler, tau = 0.02."""

    env_id = "CartPole-v1"
    fused_task = "CartPole-v1"  # algorithms/fused/cartpole.py implements these dynamics
    max_episode_steps_default = 500
    state_dim = 4
    _reset_low = (-0.05,) * 4
    _reset_high = (0.05,) * 4
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    total_mass = masspole + masscart
    polemass_length = masspole * length
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    observation_space = _box(
        [-4.8, -np.inf, -2 * theta_threshold, -np.inf], [4.8, np.inf, 2 * theta_threshold, np.inf]
    )
    action_space = gym.spaces.Discrete(2)

    def _dynamics(self, state, actions):
        x, x_dot, theta, theta_dot = state.unbind(-1)
        force = torch.where(actions == 1, self.force_mag, -self.force_mag).to(state.dtype)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + self.polemass_length * theta_dot.square() * sintheta) / self.total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta.square() / self.total_mass)
        )
        xacc = temp - self.polemass_length * thetaacc * costheta / self.total_mass
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * xacc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * thetaacc
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold)
        reward = torch.ones_like(x)  # 1 per step, the falling step included
        return torch.stack((x, x_dot, theta, theta_dot), -1), reward, terminated

    def _observe(self, state):
        return state.clone()


class Acrobot(TorchVecEnv):
    """Acrobot-v1 ("book" dynamics): state (theta1, theta2, dtheta1, dtheta2), one RK4 step of
    dt = 0.2 per action, angles wrapped to [-pi, pi], velocities bounded."""

    env_id = "Acrobot-v1"
    fused_task = "Acrobot-v1"  # algorithms/fused/acrobot.py implements these dynamics
    max_episode_steps_default = 500
    state_dim = 4
    _reset_low, _reset_high = (-0.1,) * 4, (0.1,) * 4
    dt = 0.2
    m1 = m2 = l1 = 1.0
    lc1 = lc2 = 0.5
    inertia = 1.0
    max_vel_1, max_vel_2 = 4 * math.pi, 9 * math.pi
    observation_space = _box(
        [-1, -1, -1, -1, -max_vel_1, -max_vel_2], [1, 1, 1, 1, max_vel_1, max_vel_2]
    )
    action_space = gym.spaces.Discrete(3)

    def _sample_reset(self):
        # gymnasium draws the start state in float64 and stores it as float32.
        return super()._sample_reset().float().to(self.dtype)

    def _dsdt(self, s: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
        m1, m2, l1, lc1, lc2, i1 = self.m1, self.m2, self.l1, self.lc1, self.lc2, self.inertia
        g = 9.8
        theta1, theta2, dtheta1, dtheta2 = s.unbind(-1)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta2)) + i1 + i1
        d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta2)) + i1
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * torch.sin(theta2)
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * torch.sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2)
            + phi2
        )
        ddtheta2 = (
            torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * torch.sin(theta2) - phi2
        ) / (m2 * lc2**2 + i1 - d2**2 / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), -1)

    def _dynamics(self, state, actions):
        torque = actions.to(state.dtype) - 1.0  # AVAIL_TORQUE = [-1, 0, +1]
        dt, dt2 = self.dt, self.dt / 2.0
        k1 = self._dsdt(state, torque)
        k2 = self._dsdt(state + dt2 * k1, torque)
        k3 = self._dsdt(state + dt2 * k2, torque)
        k4 = self._dsdt(state + dt * k3, torque)
        ns = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        theta1, theta2 = _wrap(ns[:, 0]), _wrap(ns[:, 1])
        dtheta1 = ns[:, 2].clamp(-self.max_vel_1, self.max_vel_1)
        dtheta2 = ns[:, 3].clamp(-self.max_vel_2, self.max_vel_2)
        terminated = -torch.cos(theta1) - torch.cos(theta2 + theta1) > 1.0
        reward = torch.where(terminated, 0.0, -1.0).to(state.dtype)
        return torch.stack((theta1, theta2, dtheta1, dtheta2), -1), reward, terminated

    def _observe(self, state):
        t1, t2, d1, d2 = state.unbind(-1)
        return torch.stack((torch.cos(t1), torch.sin(t1), torch.cos(t2), torch.sin(t2), d1, d2), -1)


def _wrap(x: torch.Tensor) -> torch.Tensor:
    """gymnasium's ``wrap(x, -pi, pi)``: shift by 2 pi until inside (x == +-pi stays)."""
    for _ in range(2):  # one RK4 step moves an angle by < 2 pi, so two passes always suffice
        x = torch.where(x > math.pi, x - 2 * math.pi, x)
        x = torch.where(x < -math.pi, x + 2 * math.pi, x)
    return x


class Pendulum(TorchVecEnv):
    """Pendulum-v1 (g = 10): state (theta, theta_dot); never terminates, 200-step limit."""

    env_id = "Pendulum-v1"
    max_episode_steps_default = 200
    state_dim = 2
    _reset_low = (-math.pi, -1.0)
    _reset_high = (math.pi, 1.0)
    max_speed, max_torque, dt, g, m, length = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0
    observation_space = _box([-1, -1, -8], [1, 1, 8])
    action_space = gym.spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)

    def _dynamics(self, state, actions):
        th, thdot = state.unbind(-1)
        u = actions.reshape(-1).to(state.dtype).clamp(-self.max_torque, self.max_torque)
        angle = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
        costs = angle.square() + 0.1 * thdot.square() + 0.001 * u.square()
        g, m, length, dt = self.g, self.m, self.length, self.dt
        newthdot = thdot + (3 * g / (2 * length) * torch.sin(th) + 3.0 / (m * length**2) * u) * dt
        newthdot = newthdot.clamp(-self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        terminated = torch.zeros_like(th, dtype=torch.bool)
        return torch.stack((newth, newthdot), -1), -costs, terminated

    def _observe(self, state):
        th, thdot = state.unbind(-1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), -1)


class _MountainCarBase(TorchVecEnv):
    state_dim = 2
    _reset_low = (-0.6, 0.0)
    _reset_high = (-0.4, 0.0)
    min_position, max_position, max_speed, goal_velocity = -1.2, 0.6, 0.07, 0.0

    def _move(self, position, velocity, accel):
        velocity = (velocity + accel).clamp(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp(self.min_position, self.max_position)
        velocity = torch.where((position == self.min_position) & (velocity < 0), 0.0, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        return position, velocity, terminated

    def _observe(self, state):
        return state.clone()


class MountainCar(_MountainCarBase):
    """MountainCar-v0: state (position, velocity); -1 per step, 200-step limit."""

    env_id = "MountainCar-v0"
    fused_task = "MountainCar-v0"  # algorithms/fused/mountain_car.py implements these dynamics
    max_episode_steps_default = 200
    goal_position, force, gravity = 0.5, 0.001, 0.0025
    observation_space = _box([-1.2, -0.07], [0.6, 0.07])
    action_space = gym.spaces.Discrete(3)

    def _dynamics(self, state, actions):
        position, velocity = state.unbind(-1)
        accel = (actions.to(state.dtype) - 1) * self.force + torch.cos(3 * position) * (
            -self.gravity
        )
        position, velocity, terminated = self._move(position, velocity, accel)
        reward = torch.full_like(position, -1.0)
        return torch.stack((position, velocity), -1), reward, terminated


class MountainCarContinuous(_MountainCarBase):
    """MountainCarContinuous-v0: +100 at the goal, -0.1 * action^2 per step, 999-step limit."""

    env_id = "MountainCarContinuous-v0"
    max_episode_steps_default = 999
    goal_position, power = 0.45, 0.0015
    observation_space = _box([-1.2, -0.07], [0.6, 0.07])
    action_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)

    def _dynamics(self, state, actions):
        position, velocity = state.unbind(-1)
        action = actions.reshape(-1).to(state.dtype)
        force = action.clamp(-1.0, 1.0)
        accel = force * self.power - 0.0025 * torch.cos(3 * position)
        position, velocity, terminated = self._move(position, velocity, accel)
        # The penalty uses the action as given (gymnasium squares the unclipped action).
        reward = torch.where(terminated, 100.0, 0.0).to(state.dtype) - 0.1 * action.square()
        return torch.stack((position, velocity), -1), reward, terminated
