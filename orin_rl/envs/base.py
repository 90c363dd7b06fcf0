"""The VecEnv contract every environment backend implements (docs/design.md)."""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

import gymnasium as gym
import torch

from orin_rl.errors import OrinError


class EnvError(OrinError, ValueError):
    """An environment cannot be created or used as asked."""


@dataclass
class EnvOptions:
    """What ``envs.make`` hands a backend besides the id, batch size and device; each backend
    uses the options that apply to it and refuses ones it cannot honour."""

    seed: int | None = None
    """The first ``reset()`` without a seed seeds the envs with seed, seed + 1, ..."""
    vectorization: str = "sync"
    """gymnasium: ``sync``, ``async`` (worker processes) or ``workers`` (rollout workers,
    ``envs.worker_pool``)."""
    max_episode_steps: int | None = None
    """Override of the time limit."""
    worker_timeout_s: float = 60.0
    """gymnasium async: a worker that does not answer a step within this is reported."""
    kwargs: dict[str, Any] | None = None
    """Keyword arguments of each env's constructor (config ``env.kwargs``)."""
    wrappers: list[str | dict[str, Any]] | None = None
    """Config ``env.wrappers`` entries applied to each env."""
    evaluation: bool = False
    """The batch evaluates a policy: backends with an evaluation configuration (mjlab's
    play mode: no randomisation) use it."""
    random_episode_start: bool = False
    """Each world's first episode after ``reset()`` starts at a random step of the time limit
    (config ``env.random_episode_start``; mjlab only, refused by the config elsewhere)."""
    num_workers: int = 0
    """Rollout workers (``vectorization=workers``); 0: one a CPU core, at most one an env."""


@dataclass
class StepResult:
    """One batched step. Every tensor has the env's device and a leading (num_envs,) axis.

    ``obs`` is what the policy sees next: for a sub-environment whose episode ended at this step
    it is already the first observation of its next episode (auto-reset). ``final_obs`` holds
    the true last observation of the ended episodes, for bootstrapping on truncation.
    """

    obs: torch.Tensor
    """(num_envs, *obs_shape) observations after the step (reset ones where an episode ended)."""
    reward: torch.Tensor
    """(num_envs,) float32 rewards."""
    terminated: torch.Tensor
    """(num_envs,) bool: the episode reached a terminal state (no bootstrap)."""
    truncated: torch.Tensor
    """(num_envs,) bool: the episode was cut by a time limit (bootstrap from final_obs)."""
    final_obs: torch.Tensor
    """(num_envs, *obs_shape): the true final observation where an episode ended, else obs."""
    info: dict[str, Any] = field(default_factory=dict)
    """Backend-specific extras (the raw gymnasium info for the gym backend)."""

    def __iter__(self):
        # Unpacks like gymnasium: obs, reward, terminated, truncated, info.
        return iter((self.obs, self.reward, self.terminated, self.truncated, self.info))


class VecEnv(ABC):
    """A batch of environments with auto-reset and torch tensors on ``device``.

    Besides the four verbs, a backend declares what else it can do; the runners read these
    declarations and never probe an environment's type or private members (as rsl_rl's
    ``VecEnv`` declares every attribute its runner touches). The defaults are the plainest
    environment: it steps on the host and offers nothing extra.
    """

    num_envs: int
    device: torch.device
    observation_space: gym.Space
    """Space of a single environment's observation."""
    action_space: gym.Space
    """Space of a single environment's action."""

    graph_safe: ClassVar[bool] = False
    """A step runs on ``device`` with no host read and no data-dependent Python branch, so a
    whole iteration can be captured in a CUDA graph (``train.cuda_graphs``)."""
    writes_into_storage: ClassVar[bool] = False
    """``stage_outputs(placement)`` and ``step(actions, obs_out=...)`` are implemented: the
    environment writes its outputs into host-writable storage the learner reads in place."""
    eval_physics: ClassVar[str | None] = None
    """Set where the physics is not gymnasium's own (e.g. ``mujoco_warp``): periodic
    evaluations then run on a batch of this backend, and the final verdict also runs the
    deterministic policy on gymnasium's env as the deployed-physics check."""
    gymnasium_twin: ClassVar[bool] = False
    """gymnasium has this task under the same id (MuJoCo Warp's locomotion tasks): a run on
    other physics ends with a check of its policy on gymnasium's env."""
    obs_groups: dict[str, list[int]] | None = None
    """Asymmetric actor-critic: where the ``actor`` and ``critic`` inputs lie in the flat
    observation, [start, stop) (mjlab's observation groups); None: both read all of it."""
    final_obs_needed: bool = True
    """The learner reads ``final_obs`` (set False by a runner that does not: an env may then
    skip computing it and return the next observation there)."""
    runs_programs: ClassVar[bool] = False
    """The envs are rollout workers that can run a whole rollout themselves
    (``envs.worker_pool``, ``runners.worker_rollouts``)."""
    num_workers: int | None = None
    """How many worker processes step the envs (None: none, the envs step in this process)."""
    dtype: torch.dtype = torch.float32
    """The dtype of the observations and of the env's own float state."""
    fused_task: ClassVar[str | None] = None
    """The task id the fused PPO kernels implement for this class (``algorithms.fused``), which
    then also read its ``state``, ``elapsed`` and ``stats`` tensors; None: no fused kernels."""

    @abstractmethod
    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every environment; return (num_envs, *obs_shape) observations."""

    @abstractmethod
    def step(self, actions: torch.Tensor) -> StepResult:
        """Step every environment with a (num_envs, *action_shape) batch of actions."""

    @abstractmethod
    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of the episodes completed since the last call."""

    @abstractmethod
    def close(self) -> None:
        """Release workers and resources."""

    def get_state(self) -> dict[str, Any] | None:
        """Everything the next steps depend on, as checkpoint-safe values, so a resumed run
        continues exactly; None where the backend cannot capture it (then a resume starts
        fresh episodes)."""
        return None

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what ``get_state`` returned."""
        raise EnvError(f"{type(self).__name__} cannot restore an environment state")

    def task_state(self) -> dict[str, Any] | None:
        """What a task's curricula hold (a robot task's step counter, terrain levels), kept in
        the checkpoint beside ``get_state`` for a backend whose episodes cannot be: a resume
        with fresh episodes keeps the curricula where they were. None where there is none."""
        return None

    def load_task_state(self, state: dict[str, Any]) -> None:
        """Restore what ``task_state`` returned."""
        raise EnvError(f"{type(self).__name__} keeps no task state")

    def observe(self) -> torch.Tensor:
        """The (num_envs, *obs_shape) observation of the current state, without stepping (the
        fused kernels step the state themselves)."""
        raise EnvError(f"{type(self).__name__} cannot observe without stepping")

    def pop_log(self) -> dict[str, float]:
        """Task-defined scalars logged since the last call (the mean of each), under the task's
        own names (mjlab's ``Episode_Reward/*``, ``Metrics/*``); the runner adds them to
        metrics.jsonl and TensorBoard."""
        return {}

    def capture_scope(self) -> contextlib.AbstractContextManager:
        """Entered around a CUDA-graph capture of a whole iteration (``runners.graphs``): an env
        whose kernels come from another library (MuJoCo Warp) tells it about the capture."""
        return contextlib.nullcontext()

    has_own_graphs: ClassVar[bool] = False
    """``use_graphs`` captures the backend's own step (and says why where it does not)."""

    def use_graphs(self) -> dict[str, Any] | None:
        """Run the backend's own step as CUDA graphs where the whole iteration cannot be
        captured (``train.cuda_graphs`` with an env that is not ``graph_safe``): what will be
        captured and what stays eager, or None when the backend has no graphs of its own."""
        return None

    def graph_report(self) -> dict[str, Any] | None:
        """After ``use_graphs``: what ran as CUDA graphs and what stayed eager."""
        return None

    def compile(self) -> bool:
        """``torch.compile`` the backend's own step maths where it has some (``train.compile``);
        False when there is nothing to compile."""
        return False
