"""``TorchVecEnv``: batched environments written as torch tensor ops (CUDA or CPU).

Everything a step does is tensor arithmetic with no host read and no data-dependent Python
branch, so a step can be captured in a CUDA graph: dynamics, time limit, auto-reset (a reset
state is drawn for every env and selected where an episode ended) and episode statistics,
which stay on the device until ``pop_episode_stats`` reads them once per log.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import gymnasium as gym
import torch

from orin_rl.envs.base import EnvError, StepResult, VecEnv


class EpisodeStats:
    """Returns and lengths of finished episodes, counted on the device (no host read, so a
    step that records them can be captured in a CUDA graph); read once per log by ``pop``."""

    def __init__(self, num_envs: int, device: torch.device):
        kw: dict[str, Any] = {"device": device}
        self.episode_return = torch.zeros(num_envs, dtype=torch.float64, **kw)
        self.episode_length = torch.zeros(num_envs, dtype=torch.int64, **kw)
        self._last_return = torch.zeros(num_envs, dtype=torch.float64, **kw)
        self._last_length = torch.zeros(num_envs, dtype=torch.int64, **kw)
        self._finished = torch.zeros(num_envs, dtype=torch.bool, **kw)

    def restart(self) -> None:
        """Every env starts a new episode (after a full reset)."""
        self.episode_return.zero_()
        self.episode_length.zero_()

    def record(self, reward: torch.Tensor, done: torch.Tensor) -> None:
        """Add one step's (num_envs,) rewards; close the episodes where ``done``."""
        self.episode_return += reward
        self.episode_length += 1
        self._last_return.copy_(torch.where(done, self.episode_return, self._last_return))
        self._last_length.copy_(torch.where(done, self.episode_length, self._last_length))
        self._finished |= done
        self.episode_return.masked_fill_(done, 0.0)
        self.episode_length.masked_fill_(done, 0)

    def pop(self) -> tuple[list[float], list[int]]:
        """The latest finished episode's return and length of each env that finished one since
        the last call (one host read; an env that finished several reports its last)."""
        finished = self._finished.clone()
        self._finished.zero_()
        return self._last_return[finished].tolist(), self._last_length[finished].tolist()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The running episodes' return and length (CPU copies, for checkpoints)."""
        return {
            "episode_return": self.episode_return.to("cpu", copy=True),
            "episode_length": self.episode_length.to("cpu", copy=True),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned."""
        self.episode_return.copy_(state["episode_return"])
        self.episode_length.copy_(state["episode_length"])


class DeviceState(VecEnv):
    """Envs whose whole dynamic state is a few device tensors, an ``EpisodeStats`` and a
    ``torch.Generator``: what they all keep (made here, then the subclass's own ``_build``),
    their reseeding and ``get_state`` / ``set_state`` (exact resume)."""

    env_id: ClassVar[str]
    max_episode_steps_default: int
    """The time limit where ``max_episode_steps`` is not given."""

    def __init__(
        self,
        num_envs: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        max_episode_steps: int | None = None,
        seed: int | None = None,
    ):
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.dtype = dtype
        self.spec = gym.spec(self.env_id)
        self.max_episode_steps = max_episode_steps or self.max_episode_steps_default
        self.seed = seed
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed(0 if seed is None else seed)
        self.elapsed = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.stats = EpisodeStats(num_envs, self.device)
        self._build()

    @abstractmethod
    def _build(self) -> None:
        """The subclass's own set-up, after the attributes ``__init__`` sets."""

    def _reseed(self, seed: int | None) -> None:
        """A full reset's seeding: from ``seed``, else from the constructor's seed, which only
        the first reset uses; neither: the generator runs on."""
        seed = seed if seed is not None else self.seed
        if seed is not None:
            self.generator.manual_seed(seed)
            self.seed = None

    @abstractmethod
    def _state_tensors(self) -> dict[str, torch.Tensor]:
        """The live tensors a step carries to the next, by name (the first one's shape is
        checked on restore)."""

    def get_state(self) -> dict[str, Any]:
        """Everything the next steps depend on, as CPU copies."""
        saved: dict[str, Any] = {
            name: t.to("cpu", copy=True) for name, t in self._state_tensors().items()
        }
        return {**saved, **self.stats.state_dict(), "generator": self.generator.get_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what ``get_state`` returned (into the same tensors)."""
        tensors = self._state_tensors()
        first = next(iter(tensors))
        if tuple(state[first].shape) != tuple(tensors[first].shape):
            raise EnvError(
                f"environment state {tuple(state[first].shape)} does not match these "
                f"{self.num_envs} {self.env_id} envs"
            )
        for name, tensor in tensors.items():
            tensor.copy_(state[name])
        self.stats.load_state_dict(state)
        self.generator.set_state(state["generator"])


class TorchVecEnv(DeviceState):
    """Base class: a subclass defines the spaces, ``_dynamics``, ``_observe`` and ``_reset_low``
    / ``_reset_high`` (uniform reset bounds per state variable).

    ``state`` is a (num_envs, state_dim) tensor laid out like gymnasium's
    ``env.unwrapped.state``; it may be written (``env.state[i] = ...``) to set up a situation.
    Observations and rewards have the env's ``dtype`` (float32 unless float64 is asked for, as
    the equivalence tests do).
    """

    env_id: ClassVar[str]
    max_episode_steps_default: ClassVar[int]
    state_dim: ClassVar[int]
    observation_space: gym.spaces.Box
    action_space: gym.Space
    graph_safe: ClassVar[bool] = True
    """Tensor ops only: a step can be captured in a CUDA graph."""

    def _build(self) -> None:
        kw = {"dtype": self.dtype, "device": self.device}
        self.state = torch.zeros(self.num_envs, self.state_dim, **kw)
        self._reset_bounds = (
            torch.tensor(self._reset_low, **kw),
            torch.tensor(self._reset_high, **kw),
        )

    # ------------------------------------------------------------------ subclass hooks
    _reset_low: ClassVar[tuple[float, ...]]
    _reset_high: ClassVar[tuple[float, ...]]

    @abstractmethod
    def _dynamics(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(next state, reward, terminated) for every env; no host reads."""

    @abstractmethod
    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        """(num_envs, obs_dim) observations of ``state``."""

    # ------------------------------------------------------------------ VecEnv contract
    def _sample_reset(self) -> torch.Tensor:
        low, high = self._reset_bounds
        u = torch.rand(
            self.num_envs,
            self.state_dim,
            generator=self.generator,
            device=self.device,
            dtype=self.dtype,
        )
        return low + (high - low) * u

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every env (seeding the env's generator when ``seed`` or ``self.seed`` is set)."""
        self._reseed(seed)
        self.state.copy_(self._sample_reset())
        self.elapsed.zero_()
        self.stats.restart()
        return self._observe(self.state)

    def step(self, actions: torch.Tensor) -> StepResult:
        """Step every env; ended episodes are reset in the same step (``final_obs`` keeps the
        true last observation)."""
        next_state, reward, terminated = self._dynamics(self.state, actions.to(self.device))
        self.elapsed += 1
        # gymnasium's TimeLimit: truncated whenever the limit is reached, terminal or not.
        truncated = self.elapsed >= self.max_episode_steps
        done = terminated | truncated
        final_obs = self._observe(next_state)
        self.stats.record(reward, done)
        self.elapsed.masked_fill_(done, 0)
        self.state.copy_(torch.where(done.unsqueeze(-1), self._sample_reset(), next_state))
        obs = self._observe(self.state)
        return StepResult(obs, reward, terminated, truncated, final_obs)

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """See ``EpisodeStats.pop``."""
        return self.stats.pop()

    def observe(self) -> torch.Tensor:
        """The observation of the current ``state``."""
        return self._observe(self.state)

    def compile(self) -> bool:
        """``torch.compile`` the dynamics (the many small element-wise kernels of a step)."""
        self._dynamics = torch.compile(self._dynamics)  # type: ignore[method-assign]
        return True

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {"state": self.state, "elapsed": self.elapsed}

    def close(self) -> None:
        """Nothing to release (no workers)."""
