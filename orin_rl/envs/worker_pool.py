"""Rollout workers (``env.vectorization=workers``): processes that each own a block of the envs
and can run a whole rollout themselves, writing it into shared memory.

gymnasium's AsyncVectorEnv exchanges one message per env and step with the main process, which
also acts: with CPU physics most of a rollout is that exchange and the policy's batched step in
one Python thread. Here each worker holds a gymnasium ``SyncVectorEnv`` of its envs (the same
envs, seeds, SAME_STEP auto-reset and episode statistics as the gym backend) and takes two kinds
of command:

- ``step``: one step of its envs with the actions in the pool's shared step block; this is the
  VecEnv contract, so every path that steps a VecEnv works on the pool;
- ``run``: a *program* (a picklable callable, ``program(local)``) that runs in the worker over
  its :class:`LocalEnvs`; the rollout program (``runners.worker_rollouts``) acts with the
  worker's numpy copy of the policy and writes each transition into the rollout storage, so a
  rollout of T steps costs one message each way per worker, not T.

Workers are forked: they share what the main process has imported, and attach to shared
memory blocks (``buffers.shared``) by name.
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import traceback
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from orin_rl.buffers.shared import SharedBlock
from orin_rl.envs.base import EnvError, EnvOptions, StepResult, VecEnv
from orin_rl.envs.gym_env import (
    env_actions,
    final_observations,
    finished_episodes,
    make_gym_vector,
)

log = logging.getLogger(__name__)


@dataclass
class LocalStep:
    """One step of a worker's envs, numpy arrays with a leading (envs of this worker,) axis."""

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray


class LocalEnvs:
    """A worker's envs, ``lo:hi`` of the pool's: what a program sees."""

    def __init__(self, vec: gym.vector.VectorEnv, lo: int, hi: int, rng: np.random.Generator):
        self.vec = RecordEpisodeStatistics(vec)
        self.lo, self.hi = lo, hi
        self.rng = rng
        """The worker's own generator (its actions' draws), seeded from the env seed."""
        self.action_space = vec.single_action_space
        self.obs: np.ndarray = np.zeros((hi - lo, *vec.single_observation_space.shape), np.float32)
        """The current (float32) observation of each env."""
        self.episodes: list[tuple[float, int]] = []

    def reset(self, seed: int | None) -> np.ndarray:
        obs, _ = self.vec.reset(seed=None if seed is None else seed + self.lo)
        self.obs = np.asarray(obs, dtype=np.float32)
        return self.obs

    def step(self, actions: np.ndarray) -> LocalStep:
        """Step every env (actions clipped or cast as the gym backend does)."""
        act = env_actions(self.action_space, actions, self.hi - self.lo)
        obs, reward, terminated, truncated, info = self.vec.step(act)
        returns, lengths = finished_episodes(info)
        self.episodes.extend(zip(returns, lengths, strict=True))
        final_obs = final_observations(obs, info)
        self.obs = np.asarray(obs, dtype=np.float32)
        return LocalStep(self.obs, reward.astype(np.float32), terminated, truncated,
                         np.asarray(final_obs, dtype=np.float32))  # fmt: skip


def _limit_threads() -> None:
    """One BLAS thread a worker: the workers already fill the cores."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # a dependency; without it BLAS may start a thread pool per worker
        return
    threadpool_limits(1)


def _worker(index: int, lo: int, hi: int, make: dict[str, Any], conn: Any,
            step_block: SharedBlock, seed: int) -> None:  # fmt: skip
    """A worker's loop: build its envs, then answer commands until ``close``."""
    _limit_threads()
    torch.set_num_threads(1)
    try:
        local = LocalEnvs(make_gym_vector(num_envs=hi - lo, **make), lo, hi,
                          np.random.default_rng([seed, index]))  # fmt: skip
    except Exception as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        return
    conn.send(("ok", None))
    blk = step_block.arrays
    while True:
        try:
            command, arg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            return
        if command == "close":
            local.vec.close()
            conn.send(("ok", None))
            return
        try:
            result = None
            if command == "reset":
                local.reset(arg)
            elif command == "step":
                step = local.step(blk["actions"][lo:hi])
                for name in ("reward", "terminated", "truncated", "final_obs"):
                    blk[name][lo:hi] = getattr(step, name)
            elif command == "run":
                result = arg(local)
            else:
                raise EnvError(f"unknown worker command {command!r}")
            blk["obs"][lo:hi] = local.obs
            episodes, local.episodes = local.episodes, []
            conn.send(("ok", (result, episodes)))
        except Exception:
            conn.send(("error", traceback.format_exc(limit=-4)))


class WorkerVecEnv(VecEnv):
    """The VecEnv over rollout workers; ``run``/``start``/``wait`` give them programs."""

    runs_programs: ClassVar[bool] = True
    """Programs run in the workers (``start``, ``wait``): a rollout needs no message a step."""

    def __init__(self, env_id: str, num_envs: int, device: torch.device | str,
                 options: EnvOptions):  # fmt: skip
        o = options
        make = {"env_id": env_id, "vectorization": "sync", "max_episode_steps":
                o.max_episode_steps, "env_kwargs": o.kwargs, "wrappers": o.wrappers}  # fmt: skip
        probe = make_gym_vector(num_envs=1, **make)  # the spaces, and its errors, here
        self.observation_space = probe.single_observation_space
        self.action_space = probe.single_action_space
        self.spec = probe.spec
        probe.close()
        space = self.observation_space
        if not (isinstance(space, gym.spaces.Box) and np.issubdtype(space.dtype, np.floating)):
            raise EnvError(f"{env_id}: rollout workers take float Box observations, not {space}; "
                           "use --vectorization async")  # fmt: skip
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.timeout_s = o.worker_timeout_s
        self.seed: int | None = o.seed
        count = min(num_envs, o.num_workers or os.cpu_count() or 1)
        bounds = np.linspace(0, num_envs, count + 1).round().astype(int)
        self.blocks = [(int(a), int(b)) for a, b in itertools.pairwise(bounds)]
        discrete = isinstance(self.action_space, gym.spaces.Discrete)
        obs_shape = tuple(space.shape)
        self.step_block = SharedBlock({
            "actions": ((num_envs,) if discrete else (num_envs, *self.action_space.shape),
                        np.int64 if discrete else np.float32),
            "obs": ((num_envs, *obs_shape), np.float32),
            "final_obs": ((num_envs, *obs_shape), np.float32),
            "reward": ((num_envs,), np.float32),
            "terminated": ((num_envs,), np.bool_),
            "truncated": ((num_envs,), np.bool_),
        })  # fmt: skip
        self._returns: list[float] = []
        self._lengths: list[int] = []
        self._pending: str | None = None
        self._unsent: set[int] = set()
        ctx = multiprocessing.get_context("fork")
        self.conns, self.processes = [], []
        for i, (lo, hi) in enumerate(self.blocks):
            parent, child = ctx.Pipe()
            process = ctx.Process(
                target=_worker, name=f"orin-rl-worker-{i}", daemon=True,
                args=(i, lo, hi, make, child, self.step_block, o.seed or 0),
            )  # fmt: skip
            process.start()
            child.close()
            self.conns.append(parent)
            self.processes.append(process)
        try:
            self._gather("start")
        except EnvError:
            self.close()
            raise
        log.info("%d rollout workers for %d envs", len(self.blocks), num_envs)

    @property
    def num_workers(self) -> int:
        return len(self.blocks)

    # ------------------------------------------------------------------ messaging
    def _send(self, command: str, arg: Any = None) -> None:
        if self._pending is not None:
            raise EnvError(f"workers are still running {self._pending!r}; wait() for it first")
        self._unsent = set()
        for i, conn in enumerate(self.conns):
            try:
                conn.send((command, arg))
            except (BrokenPipeError, ConnectionError, EOFError):
                self._unsent.add(i)  # a dead worker; _gather names it
        self._pending = command

    def _gather(self, command: str) -> list[Any]:
        """Every worker's answer to ``command``; an EnvError naming the failed ones."""
        results, errors = [], []
        for i, conn in enumerate(self.conns):
            if i in self._unsent:
                errors.append(f"worker {i} died ({command})")
                continue
            if not conn.poll(self.timeout_s):
                alive = self.processes[i].is_alive()
                errors.append(f"worker {i} {'did not answer' if alive else 'died'} "
                              f"({command}, {self.timeout_s:g} s)")  # fmt: skip
                continue
            try:
                status, payload = conn.recv()
            except (EOFError, ConnectionError):
                errors.append(f"worker {i} died ({command})")
                continue
            if status == "error":
                errors.append(f"worker {i}: {payload.strip().splitlines()[-1]}")
                log.debug("worker %d failed:\n%s", i, payload)
                continue
            if payload is not None:
                result, episodes = payload
                for ret, length in episodes:
                    self._returns.append(ret)
                    self._lengths.append(length)
                payload = result
            results.append(payload)
        self._pending = None
        if errors:
            raise EnvError(f"rollout workers failed: {'; '.join(errors)}; check the environment, "
                           "or use --vectorization sync to debug")  # fmt: skip
        return results

    def start(self, program: Any) -> None:
        """Run ``program(local)`` in every worker, without waiting."""
        self._send("run", program)

    def wait(self) -> list[Any]:
        """The results of the running program, worker by worker."""
        return self._gather("run")

    def run(self, program: Any) -> list[Any]:
        """``start`` then ``wait``."""
        self.start(program)
        return self.wait()

    # ------------------------------------------------------------------ VecEnv verbs
    def _tensor(self, name: str) -> torch.Tensor:
        return torch.from_numpy(self.step_block[name].copy()).to(self.device)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every env (seeded ``seed, seed+1, ...`` as the gym backend)."""
        if seed is None:
            seed, self.seed = self.seed, None
        self._send("reset", seed)
        self._gather("reset")
        return self._tensor("obs")

    def observe(self) -> torch.Tensor:
        """The current observation (after a reset, step or program)."""
        return self._tensor("obs")

    def step(self, actions: torch.Tensor) -> StepResult:
        """One step of every env through the shared step block."""
        np.copyto(self.step_block["actions"], actions.detach().cpu().numpy(), casting="unsafe")
        self._send("step")
        self._gather("step")
        return StepResult(
            obs=self._tensor("obs"),
            reward=self._tensor("reward"),
            terminated=self._tensor("terminated"),
            truncated=self._tensor("truncated"),
            final_obs=self._tensor("final_obs"),
        )

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        returns, lengths = self._returns, self._lengths
        self._returns, self._lengths = [], []
        return returns, lengths

    def close(self) -> None:
        """Stop the workers (terminating any that do not stop) and free the step block."""
        if not self.processes:
            return
        for conn, process in zip(self.conns, self.processes, strict=True):
            try:
                if process.is_alive() and self._pending is None:
                    conn.send(("close", None))
            except (BrokenPipeError, OSError):
                pass
        for process in self.processes:
            process.join(timeout=2.0 if self._pending is None else 0.1)
            if process.is_alive():
                process.terminate()
                process.join(timeout=1.0)
        for conn in self.conns:
            conn.close()
        self.processes, self.conns = [], []
        self.step_block.close()
