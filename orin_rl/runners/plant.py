"""The Plant protocol: what an online actor (or ``orin-rl run``'s loop) drives.

A plant is a robot or a simulator standing in for one: ``reset``, ``send`` an action,
``receive`` the feedback one period later. Adapters (``plant_udp.py``, your own) import this
module, never a training loop.
"""

from __future__ import annotations

import abc
import threading
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from orin_rl.errors import OrinError


class OnlineError(OrinError, RuntimeError):
    """An online run cannot start or continue (plant, config, a thread that died)."""


@dataclass
class Feedback:
    """What the plant reports after an action has acted for one period."""

    obs: np.ndarray
    """The observation now."""
    reward: float
    """Reward of the last action."""
    terminated: bool
    """The episode ended in a terminal state (no bootstrapping past it)."""
    truncated: bool
    """The episode was cut (time limit, operator): bootstrapping continues past it."""


class Plant(abc.ABC):
    """What the actor drives: a robot, or a simulator standing in for one.

    An adapter for a real robot implements ``reset``, ``send`` and ``receive`` (an adapter
    missing one cannot be made: Python names the method), and ``close`` where it holds
    something; the actor calls them from
    its real-time thread, the watchdog calls ``send`` (with the safe action) from another, so
    ``send`` must be safe to call from two threads (the actor holds ``lock`` around its own
    ``send`` calls, the watchdog takes it with a timeout).

    Attributes:
        observation_space: gymnasium Box of one observation.
        action_space: gymnasium Box of one action.
    """

    observation_space: gym.spaces.Box
    action_space: gym.spaces.Box

    def __init__(self) -> None:
        self.lock = threading.Lock()

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start an episode (move to the start pose, wait for the operator, ...) and return
        the first observation. Runs outside the deadline accounting."""

    @abc.abstractmethod
    def send(self, action: np.ndarray) -> None:
        """Apply ``action`` now (non-blocking: a robot's motors take it from here)."""

    @abc.abstractmethod
    def receive(self) -> Feedback:
        """The feedback one period after the last ``send``: observation, reward, episode end."""

    def close(self) -> None:  # noqa: B027 - optional: a plant holding nothing closes nothing
        """Release the plant (sockets, motors off)."""


class GymPlant(Plant):
    """A gymnasium env stepped in real time: ``send`` steps it at once, ``receive`` returns
    that step's outcome when the next tick reads it (the control loop sleeps to the rate in
    between, as a robot's period would pass)."""

    def __init__(
        self,
        env_id: str,
        max_episode_steps: int | None = None,
        env_config: dict[str, Any] | None = None,
    ):
        super().__init__()
        from orin_rl.envs.factory import make_env

        config = dict(env_config or {})
        if max_episode_steps is not None:
            config["max_episode_steps"] = max_episode_steps
        self.env = make_env(env_id, config)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self._feedback: Feedback | None = None

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self.env.reset(seed=seed)
        self._feedback = None
        return np.asarray(obs, dtype=np.float32)

    def send(self, action: np.ndarray) -> None:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        self._feedback = Feedback(
            np.asarray(obs, dtype=np.float32), float(reward), bool(terminated), bool(truncated)
        )

    def receive(self) -> Feedback:
        if self._feedback is None:
            raise OnlineError("receive() before any send() in this episode")
        return self._feedback

    def close(self) -> None:
        self.env.close()
