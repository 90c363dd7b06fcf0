"""VecEnv over ``gymnasium.vector``: torch tensors in and out, same-step auto-reset."""

from __future__ import annotations

import logging
import multiprocessing
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from orin_rl.buffers import memory
from orin_rl.envs.base import EnvError, StepResult, VecEnv
from orin_rl.envs.factory import (
    EnvMakeError,
    import_env_module,
    make_error_message,
    resolve_wrappers,
)

log = logging.getLogger(__name__)


class _TimedStep(gym.vector.VectorWrapper):
    """Steps an AsyncVectorEnv with a timeout: a worker that dies leaves its pipe open in its
    forked siblings, so a plain step() would wait for it forever."""

    def __init__(self, env: gym.vector.AsyncVectorEnv, timeout_s: float):
        super().__init__(env)
        self.timeout_s = timeout_s

    def step(self, actions):
        self.env.step_async(actions)
        try:
            return self.env.step_wait(timeout=self.timeout_s)
        except multiprocessing.TimeoutError:
            raise multiprocessing.TimeoutError(f"{self.timeout_s:g} s") from None


def env_actions(space: gym.Space, actions: np.ndarray, num_envs: int) -> np.ndarray:
    """A policy's actions as the vector env takes them: int64 indices for a Discrete space;
    for a Box clipped into its bounds (Gaussian samples are unbounded), like ClipAction."""
    if isinstance(space, gym.spaces.Discrete):
        return actions.astype(np.int64).reshape(num_envs)
    return np.clip(actions, space.low, space.high)


def finished_episodes(info: dict[str, Any]) -> tuple[list[float], list[int]]:
    """Returns and lengths of the episodes that ended at this step (RecordEpisodeStatistics)."""
    if "_episode" not in info:
        return [], []
    done = info["_episode"]
    return info["episode"]["r"][done].tolist(), info["episode"]["l"][done].tolist()


def final_observations(obs: np.ndarray, info: dict[str, Any]) -> np.ndarray:
    """``obs`` with the true last observation where an episode ended (SAME_STEP auto-reset
    returns the next episode's first one in ``obs``)."""
    if "_final_obs" not in info:
        return obs
    mask = info["_final_obs"]
    final_obs = obs.copy()
    final_obs[mask] = np.stack(info["final_obs"][mask])
    return final_obs


class GymVecEnv(VecEnv):
    """Adapter from a gymnasium vector env to the VecEnv contract.

    gymnasium 1.x defaults to NEXT_STEP auto-reset, where the step *after* an episode ends is a
    reset step whose action is ignored and whose reward is 0; training on it would teach the
    policy a transition that never happened. The adapter runs the vector env in SAME_STEP mode
    instead: every step is a real transition, the reset observation arrives in the same step as
    the end of the episode, and the true final observation is returned as ``final_obs`` so a
    truncated episode bootstraps from the state it really reached.
    """

    writes_into_storage: ClassVar[bool] = True

    def __init__(
        self,
        vec_env: gym.vector.VectorEnv,
        device: torch.device | str = "cpu",
        worker_timeout_s: float = 60.0,
    ):
        mode = vec_env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise EnvError(
                f"vector env uses autoreset mode {mode}; create it with "
                "vector_kwargs={'autoreset_mode': AutoresetMode.SAME_STEP} (orin_rl.envs.make does)"
            )
        if isinstance(vec_env.single_observation_space, gym.spaces.Dict):
            raise EnvError(
                f"{vec_env.spec.id if vec_env.spec else 'this env'} observes a Dict: the "
                "gymnasium adapter takes one array (dict observations come from mjlab's camera "
                "tasks); flatten it with env.wrappers: [gymnasium.wrappers:FlattenObservation]"
            )
        self._vec = vec_env
        if isinstance(vec_env, gym.vector.AsyncVectorEnv):
            vec_env = _TimedStep(vec_env, worker_timeout_s)
        self._env = RecordEpisodeStatistics(vec_env)
        self.num_envs = vec_env.num_envs
        self.device = torch.device(device)
        self.observation_space = vec_env.single_observation_space
        self.action_space = vec_env.single_action_space
        self.spec = vec_env.spec
        self._discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self._returns: list[float] = []
        self._lengths: list[int] = []
        self.seed: int | None = None
        """Seed used by the first ``reset()`` that is not given one."""
        self._staged: dict[str, memory.Storage] | None = None
        self._parity = 0

    def stage_outputs(self, placement: str) -> None:
        """Write every step's outputs into storage allocated once in ``placement`` (``host`` on a
        CPU learner, ``managed`` on a CUDA one) instead of copying them to the device.

        On an integrated GPU (Orin) the CPU then writes into the DRAM the GPU reads, and no
        host-to-device copy is made. The tensors a ``step``/``reset`` returns are views of that
        storage, valid until the second-next call (two sets alternate). Float observations are
        stored float32, uint8 frames uint8.
        """
        space = self.observation_space
        if space.dtype == np.uint8:
            obs_dtype = torch.uint8
        elif np.issubdtype(space.dtype, np.floating):
            obs_dtype = torch.float32
        else:
            raise EnvError(f"staged outputs hold float32 or uint8 observations, not {space}")
        shape = tuple(space.shape)
        n, f32 = self.num_envs, torch.float32
        layout = {"obs": (shape, obs_dtype), "final_obs": (shape, obs_dtype), "reward": ((), f32),
                  "terminated": ((), torch.bool), "truncated": ((), torch.bool)}  # fmt: skip
        self._staged = {
            name: memory.allocate((2, n, *per_env), dtype, placement, self.device)
            for name, (per_env, dtype) in layout.items()
        }

    def _slots(self) -> dict[str, tuple[np.ndarray, torch.Tensor]]:
        """This call's set of staged outputs (host array, tensor), after the write fence."""
        staged = self._staged
        if staged is None:
            raise EnvError("staged outputs need stage_outputs() first")
        memory.host_write_fence(self.device)  # no kernel may still read (or run, on Tegra)
        k, self._parity = self._parity, self._parity ^ 1
        return {name: (s.host[k], s.tensor[k]) for name, s in staged.items()}

    def _to_torch(self, array: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
        tensor = torch.from_numpy(np.asarray(array))
        if dtype is not None:
            tensor = tensor.to(dtype)
        return tensor.to(self.device, non_blocking=True)

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        if obs.dtype == np.float64:
            obs = obs.astype(np.float32)
        return self._to_torch(obs)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset all sub-environments (seeded ``seed, seed+1, ...`` when given)."""
        if seed is None:
            seed, self.seed = self.seed, None
        obs, _ = self._env.reset(seed=seed)
        if self._staged is not None:
            host, tensor = self._slots()["obs"]
            np.copyto(host, obs, casting="same_kind")
            return tensor
        return self._obs(obs)

    def step(
        self,
        actions: torch.Tensor,
        obs_out: tuple[np.ndarray, torch.Tensor] | None = None,
    ) -> StepResult:
        """Step with a batch of actions; see StepResult for the auto-reset semantics.

        ``obs_out`` (staged outputs only): a (host array, tensor) pair of one memory, e.g. the
        rollout buffer's next observation slot; the observations are written straight into it.
        """
        act = env_actions(self.action_space, actions.detach().cpu().numpy(), self.num_envs)
        try:
            obs, reward, terminated, truncated, info = self._env.step(act)
        except Exception as exc:
            error = self._worker_error(exc)
            if error is None:
                raise
            raise error from exc
        returns, lengths = finished_episodes(info)
        self._returns.extend(returns)
        self._lengths.extend(lengths)
        if self._staged is not None:
            return self._write_staged(obs, reward, terminated, truncated, info, obs_out)
        if obs_out is not None:
            raise EnvError("step(obs_out=...) needs stage_outputs() first")
        final_obs = final_observations(obs, info)
        return StepResult(
            obs=self._obs(obs),
            reward=self._to_torch(reward, torch.float32),
            terminated=self._to_torch(terminated),
            truncated=self._to_torch(truncated),
            final_obs=self._obs(final_obs),
            info=info,
        )

    def _write_staged(
        self,
        obs: np.ndarray,
        reward: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray,
        info: dict[str, Any],
        obs_out: tuple[np.ndarray, torch.Tensor] | None,
    ) -> StepResult:
        """The step's results written by the CPU into the staged storage (no device copy)."""
        slots = self._slots()
        obs_host, obs_tensor = obs_out if obs_out is not None else slots["obs"]
        np.copyto(obs_host, obs, casting="same_kind")
        final_obs = obs_tensor
        if "_final_obs" in info:
            final_host, final_obs = slots["final_obs"]
            mask = info["_final_obs"]
            np.copyto(final_host, obs, casting="same_kind")
            final_host[mask] = np.stack(info["final_obs"][mask])
        for name, value in (("reward", reward), ("terminated", terminated),
                            ("truncated", truncated)):  # fmt: skip
            np.copyto(slots[name][0], value, casting="same_kind")
        return StepResult(
            obs=obs_tensor,
            reward=slots["reward"][1],
            terminated=slots["terminated"][1],
            truncated=slots["truncated"][1],
            final_obs=final_obs,
            info=info,
        )

    def _worker_error(self, exc: Exception) -> EnvError | None:
        """An EnvError naming the failed worker(s) of an async vector env (None otherwise)."""
        vec = self._vec
        if not isinstance(vec, gym.vector.AsyncVectorEnv):
            return None
        if isinstance(exc, (EOFError, ConnectionError)):
            # The pipe closed because a worker died; give the OS a moment to reap it.
            for process in vec.processes:
                process.join(timeout=0.2)
        dead = [i for i, p in enumerate(vec.processes) if not p.is_alive()]
        if dead:
            return EnvError(
                f"environment worker(s) {dead} died ({exc.__class__.__name__}); check memory "
                "and the environment's native code, or use --vectorization sync to debug"
            )
        if isinstance(exc, multiprocessing.TimeoutError):
            return EnvError(f"environment workers did not answer within {exc}")
        raised = [i for i, pipe in enumerate(vec.parent_pipes) if pipe is None]
        return EnvError(f"environment worker(s) {raised} raised {exc.__class__.__name__}: {exc}")

    # ------------------------------------------------------------- exact resume
    def get_state(self) -> dict[str, Any] | None:
        """The environments' dynamic state as tensors and plain values (checkpoint-safe), so a
        resumed run continues exactly; None where it cannot be captured (async workers)."""
        vec = self._vec
        if not isinstance(vec, gym.vector.SyncVectorEnv):
            return None
        stats = self._env
        return {
            "envs": [_env_state(e) for e in vec.envs],
            "episode_returns": torch.from_numpy(np.array(stats.episode_returns, dtype=np.float64)),
            "episode_lengths": torch.from_numpy(np.array(stats.episode_lengths, dtype=np.int64)),
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what ``get_state`` returned (same env id and number of envs)."""
        vec = self._vec
        if not isinstance(vec, gym.vector.SyncVectorEnv) or len(state["envs"]) != len(vec.envs):
            raise EnvError("environment state does not match these environments")
        for env, env_state in zip(vec.envs, state["envs"], strict=True):
            _set_env_state(env, env_state)
        self._env.episode_returns = state["episode_returns"].numpy().copy()
        self._env.episode_lengths = state["episode_lengths"].numpy().copy()

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """Returns and lengths of the episodes completed since the last call."""
        returns, lengths = self._returns, self._lengths
        self._returns, self._lengths = [], []
        return returns, lengths

    def close(self) -> None:
        """Close the vector env and its workers (terminating them if one died or hangs)."""
        vec = self._vec
        if isinstance(vec, gym.vector.AsyncVectorEnv) and (
            vec._state != gym.vector.async_vector_env.AsyncState.DEFAULT
            or not all(p.is_alive() for p in vec.processes)
        ):
            vec.close(terminate=True)
            return
        self._env.close()


_SIMPLE = (bool, int, float, str, type(None))


def _wrappers(env: gym.Env) -> list[gym.Env]:
    chain = [env]
    while hasattr(chain[-1], "env"):
        chain.append(chain[-1].env)
    return chain


def _env_state(env: gym.Env) -> list[dict[str, Any]]:
    """Per layer (wrappers, then the raw env): its numeric attributes and its RNG state."""
    layers = []
    for layer in _wrappers(env):
        values: dict[str, Any] = {}
        for key, value in vars(layer).items():
            if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
                values[key] = torch.from_numpy(value.copy())
            elif isinstance(value, _SIMPLE):
                values[key] = value
            elif isinstance(value, np.random.Generator):
                values[key] = {"__rng__": value.bit_generator.state}
        layers.append(values)
    return layers


def _set_env_state(env: gym.Env, layers: list[dict[str, Any]]) -> None:
    for layer, values in zip(_wrappers(env), layers, strict=True):
        for key, value in values.items():
            current = getattr(layer, key, None)
            if isinstance(value, dict) and "__rng__" in value:
                rng_state = value["__rng__"]
                if not isinstance(current, np.random.Generator):  # env not reset yet
                    bit_generator = getattr(np.random, rng_state["bit_generator"])
                    current = np.random.Generator(bit_generator())
                    setattr(layer, key, current)
                current.bit_generator.state = rng_state
            elif isinstance(value, torch.Tensor):
                setattr(layer, key, value.numpy().copy())
            else:
                setattr(layer, key, value)


def make_gym(
    env_id: str,
    num_envs: int,
    device: torch.device | str = "cpu",
    vectorization: str = "sync",
    max_episode_steps: int | None = None,
    worker_timeout_s: float = 60.0,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: list[str | dict[str, Any]] | None = None,
) -> GymVecEnv:
    """Create a gymnasium vector env in SAME_STEP auto-reset mode, wrapped as a VecEnv.

    ``env_kwargs`` go to each env's constructor, ``wrappers`` (config ``env.wrappers``
    entries) wrap each env; a ``module:EnvId`` id imports ``module`` first.
    """
    vec = make_gym_vector(env_id, num_envs, vectorization, max_episode_steps, env_kwargs,
                          wrappers)  # fmt: skip
    return GymVecEnv(vec, device, worker_timeout_s)


def make_gym_vector(
    env_id: str,
    num_envs: int,
    vectorization: str = "sync",
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    wrappers: list[str | dict[str, Any]] | None = None,
) -> gym.vector.VectorEnv:
    """The gymnasium vector env of ``make_gym`` (SAME_STEP auto-reset), unwrapped; errors as
    one-line EnvErrors."""
    if vectorization not in ("sync", "async"):
        raise EnvError(f"vectorization must be 'sync' or 'async', got {vectorization!r}")
    kwargs = {"max_episode_steps": max_episode_steps} if max_episode_steps else {}
    try:
        import_env_module(env_id)
        vec = gym.make_vec(
            env_id,
            num_envs=num_envs,
            vectorization_mode=vectorization,
            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
            wrappers=resolve_wrappers(wrappers),
            **kwargs,
            **(env_kwargs or {}),
        )
    except EnvMakeError as exc:
        raise EnvError(str(exc)) from None
    except (gym.error.DependencyNotInstalled, gym.error.NamespaceNotFound) as exc:
        raise EnvError(make_error_message(env_id, exc)) from None
    except gym.error.Error as exc:
        raise EnvError(f"{env_id}: {exc}") from None
    except TypeError as exc:  # a keyword the constructor does not take
        if not env_kwargs:
            raise
        raise EnvError(f"{env_id}: {exc}; check env.kwargs / --env-kwargs") from None
    space = vec.single_action_space
    if not isinstance(space, (gym.spaces.Discrete, gym.spaces.Box)):
        vec.close()
        raise EnvError(f"{env_id}: action space {space} is not Discrete or Box")
    return vec
