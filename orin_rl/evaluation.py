"""``evaluate_policy``: returns and lengths of N seeded episodes, optionally watched or filmed.

Torch-free (a bundle's policy runs on numpy + onnxruntime). Episode ``i`` starts from
``reset(seed=seed + i)``, as the trainer's evaluation seeds its sub-environments, so the same
seeds give the same episodes: the final evaluation in ``summary.json`` used
``seed = train.seed + 2**30``. Stable-Baselines3's keywords and return values are taken too
(``n_eval_episodes``, ``return_episode_rewards``; the result unpacks as ``mean, std``), and an
SB3 VecEnv is evaluated the way SB3's own ``evaluate_policy`` counts its episodes.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import statistics
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.envs import backends as env_backends
from orin_rl.envs.factory import make_env
from orin_rl.errors import OrinError

VIDEO_HINT = "pip install 'orin-rl[video]' (moviepy to write MP4s, pygame to draw classic control)"


class EvalError(OrinError, ValueError):
    """An evaluation cannot run as asked."""


@dataclass
class EvalResult:
    """What ``evaluate_policy`` measured."""

    env_id: str
    """The environment evaluated on."""
    seed: int
    """Episode i started from ``reset(seed=seed + i)`` (an SB3 VecEnv: sub-env k's first)."""
    returns: list[float]
    """Undiscounted return of each episode."""
    lengths: list[int]
    """Steps of each episode."""
    deterministic: bool = True
    """Actions were the policy's mode (argmax / mean), not samples."""
    videos: list[str] | None = None
    """MP4 files written (``video_dir``), one per episode."""
    task_log: dict[str, float] | None = None
    """What the task logged, the mean over the episodes (mjlab: ``Metrics/twist/error_vel_xy``,
    the velocity-tracking error); None for gymnasium envs."""

    @property
    def episodes(self) -> int:
        """Number of episodes."""
        return len(self.returns)

    @property
    def return_mean(self) -> float:
        """Mean return (the trainer's ``eval_return_mean``)."""
        return statistics.fmean(self.returns)

    @property
    def return_std(self) -> float:
        """Population standard deviation of the returns (the trainer's ``eval_return_std``)."""
        return statistics.pstdev(self.returns)

    def __iter__(self) -> Iterator[float]:
        """``mean, std = evaluate_policy(...)``, as Stable-Baselines3's tuple unpacks."""
        return iter((self.return_mean, self.return_std))

    def __getitem__(self, index: int) -> float:
        """``result[0]``: the mean return, ``result[1]``: its std (SB3's tuple, indexed)."""
        return (self.return_mean, self.return_std)[index]

    def to_dict(self) -> dict[str, Any]:
        """The JSON report: ``return_mean``, ``return_std``, ``return_min``, ``return_max``,
        ``episodes``, ``lengths``, ``returns``, ``seed``, ``env_id``, ``deterministic``."""
        return {
            "env_id": self.env_id,
            "episodes": self.episodes,
            "seed": self.seed,
            "deterministic": self.deterministic,
            "return_mean": self.return_mean,
            "return_std": self.return_std,
            "return_min": min(self.returns),
            "return_max": max(self.returns),
            "length_mean": statistics.fmean(self.lengths),
            **{
                k: v
                for k, v in asdict(self).items()
                if k in ("returns", "lengths", "videos", "task_log")
            },
        }

    def write(self, path: str | Path) -> None:
        """Write ``to_dict()`` as JSON."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")


def evaluate_policy(
    policy,
    env: Any = None,
    episodes: int | None = None,
    seed: int = 0,
    deterministic: bool = True,
    render: bool = False,
    video_dir: str | Path | None = None,
    env_config: dict[str, Any] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    *,
    n_eval_episodes: int | None = None,
    return_episode_rewards: bool = False,
    on_episode: Callable[[int, int, float, int], None] | None = None,
) -> EvalResult | tuple[list[float], list[int]]:
    """Run ``episodes`` episodes of ``policy`` (an ``orin_rl.Policy``) and return what they gave.

    Args:
        policy: from ``orin_rl.load_policy``.
        env: a gymnasium id, a ``gymnasium.Env`` (used as it is), a Stable-Baselines3 VecEnv
            (used as it is, episodes counted as SB3 counts them), or None for the policy's own
            environment (made as in training: time limit, kwargs, wrappers).
        episodes: how many (default 10).
        seed: episode ``i`` starts from ``reset(seed=seed + i)``; a VecEnv is seeded once,
            ``env.seed(seed)`` (sub-env k: seed + k), and resets its sub-envs itself after that.
        deterministic: the policy's mode; False samples (run folders only).
        render: show the episodes in a window (``render_mode="human"``).
        video_dir: write one MP4 per episode here (gymnasium's ``RecordVideo``; needs moviepy).
        env_config: how to make ``env`` when it is an id (default: the policy's, when ``env``
            is its own id or None): ``max_episode_steps``, ``kwargs``, ``wrappers``.
        env_kwargs: constructor keyword arguments that replace ``env_config``'s.
        n_eval_episodes: SB3's name for ``episodes`` (give one of the two).
        return_episode_rewards: return SB3's ``(returns, lengths)`` lists instead.
        on_episode: called after each episode with (episodes done, total, its return, its
            length): progress for a caller that shows it (an mjlab episode takes seconds).

    Returns:
        An ``EvalResult`` (it unpacks as SB3's ``mean, std``), or ``(returns, lengths)`` with
        ``return_episode_rewards``.
    """
    episodes = _episode_count(episodes, n_eval_episodes)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise EvalError(
            f"seed must be an integer, got {seed!r}; Stable-Baselines3's fourth positional "
            "argument is deterministic, here it is seed: pass deterministic= by keyword"
        )
    if _is_sb3_vec_env(env):
        if render or video_dir is not None:
            raise EvalError("render / video_dir need an env id (they choose its render_mode)")
        returns, lengths = _vec_env_episodes(policy, env, episodes, seed, deterministic)
        result = EvalResult(_vec_env_id(env), seed, returns, lengths, deterministic)
    else:
        result = _evaluate_gym(policy, env, episodes, seed, deterministic, render, video_dir,
                               env_config, env_kwargs, on_episode)  # fmt: skip
    if return_episode_rewards:
        return list(result.returns), list(result.lengths)
    return result


def _episode_count(episodes: int | None, n_eval_episodes: int | None) -> int:
    if episodes is not None and n_eval_episodes is not None:
        raise EvalError(
            f"give episodes ({episodes}) or Stable-Baselines3's n_eval_episodes "
            f"({n_eval_episodes}), not both: they are the same setting"
        )
    count = next((n for n in (episodes, n_eval_episodes) if n is not None), 10)
    if count <= 0:
        raise EvalError(f"episodes must be positive, got {count}")
    return count


def _evaluate_gym(
    policy,
    env,
    episodes,
    seed,
    deterministic,
    render,
    video_dir,
    env_config,
    env_kwargs,
    on_episode=None,
) -> EvalResult:
    """Episodes on a gymnasium env (an id made here, or the caller's ``gymnasium.Env``)."""
    gym_env, env_id = _environment(policy, env, env_config, env_kwargs, render, video_dir, seed)
    try:
        returns, lengths, logs = _episodes(
            policy, gym_env, episodes, seed, deterministic, on_episode
        )
    finally:
        if gym_env is not env:  # ours to close (a caller's env stays open for the caller)
            gym_env.close()  # RecordVideo writes the last episode's file on close
    videos = None
    if video_dir is not None:
        prefix = _video_prefix(env_id)
        videos = [str(Path(video_dir) / f"{prefix}-episode-{i}.mp4") for i in range(episodes)]
    task_log = None
    if logs:
        keys = sorted({k for log in logs for k in log})
        task_log = {k: statistics.fmean(log[k] for log in logs if k in log) for k in keys}
    return EvalResult(env_id, seed, returns, lengths, deterministic, videos, task_log)


def _video_prefix(env_id: str) -> str:
    return env_id.split(":")[-1].replace("/", "-")


def _environment(
    policy, env, env_config, env_kwargs, render: bool, video_dir, seed: int = 0
) -> tuple[Any, str]:
    import gymnasium as gym

    if isinstance(env, gym.Env):
        if video_dir is not None or render:
            raise EvalError("render / video_dir need an env id (they choose its render_mode)")
        return env, env.spec.id if env.spec else type(env).__name__
    if env is not None and not isinstance(env, str):
        raise EvalError(
            f"env is a {type(env).__module__}.{type(env).__qualname__}; evaluate_policy takes "
            "a gymnasium id (str), a gymnasium.Env or a Stable-Baselines3 VecEnv (a gymnasium "
            "vector env is none of these: pass its id)"
        )
    env_id = env or policy.env_id
    if env_id is None:
        raise EvalError(f"{policy.source}: the environment is unknown; pass --env ID")
    if env_config is None:
        env_config = policy.env_config if env_id == policy.env_id else {}
    if env_backends.for_id(env_id, "gym") == "mjlab":  # one world of its play configuration
        if render or video_dir is not None or env_kwargs:
            raise EvalError("an mjlab task takes no --render, --video or --env-kwargs here")
        from orin_rl.envs.mjlab.play import MjlabGymEnv

        return MjlabGymEnv(env_id, env_config, seed=seed), env_id
    render_mode = None
    if video_dir is not None:
        if importlib.util.find_spec("moviepy") is None:
            raise EvalError(f"--video needs moviepy, which is not installed: {VIDEO_HINT}")
        render_mode = "rgb_array"
    elif render:
        render_mode = "human"
    made = make_env(env_id, env_config, render_mode, env_kwargs)
    if video_dir is not None:
        from gymnasium.wrappers import HumanRendering, RecordVideo

        made = RecordVideo(
            made, str(video_dir), episode_trigger=lambda _: True, name_prefix=_video_prefix(env_id)
        )
        if render:  # watch and film: the window shows the rgb_array frames
            made = HumanRendering(made)
    return made, env_id


def _episodes(policy, env, episodes: int, seed: int, deterministic: bool, on_episode=None):
    import gymnasium as gym

    space = env.action_space
    discrete = isinstance(space, gym.spaces.Discrete)
    returns: list[float] = []
    lengths: list[int] = []
    logs: list[dict[str, float]] = []  # what a task logs at each episode's end (mjlab)
    try:
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            total, steps, done = 0.0, 0, False
            while not done:
                action = policy.act(obs, deterministic)
                # continuous: clipped to the Box, as the training env steps it
                action = int(action) if discrete else np.clip(action, space.low, space.high)
                obs, reward, terminated, truncated, info = env.step(action)
                # As the trainer's evaluation sums them (its VecEnv hands rewards over as
                # float32): the same seeds give summary.json's figures to the last digit.
                total += float(np.float32(reward))
                steps += 1
                done = bool(terminated or truncated)
            returns.append(total)
            lengths.append(steps)
            if isinstance(info.get("log"), dict):
                logs.append(info["log"])
            if on_episode is not None:
                on_episode(i + 1, episodes, total, steps)
    except gym.error.DependencyNotInstalled as exc:  # drawing frames (pygame, mujoco renderer)
        raise EvalError(
            f"rendering needs a package that is missing ({exc}): {VIDEO_HINT}"
        ) from None
    return returns, lengths, logs


def _is_sb3_vec_env(env: Any) -> bool:
    """Duck-typed Stable-Baselines3 VecEnv: ``num_envs``, ``step_async``/``step_wait``, and not
    a gymnasium vector env (whose ``reset`` returns ``(obs, info)``; SB3's returns obs)."""
    if not all(hasattr(env, name) for name in ("num_envs", "step_async", "step_wait", "reset")):
        return False
    import gymnasium as gym

    return not isinstance(env, gym.vector.VectorEnv)


def _vec_env_id(venv) -> str:
    """The gymnasium id of an SB3 VecEnv's first sub-env, else the VecEnv's class name."""
    spec = None
    with contextlib.suppress(AttributeError, IndexError, TypeError):
        spec = venv.get_attr("spec", indices=[0])[0]
    return spec.id if spec is not None else type(venv).__name__


def _monitor_wrapped(venv) -> bool:
    """Whether SB3's ``evaluate_policy`` would read episodes from a Monitor's ``info``."""
    try:
        from stable_baselines3.common.monitor import Monitor
        from stable_baselines3.common.vec_env import VecMonitor, is_vecenv_wrapped
    except ImportError:  # a VecEnv-like without SB3: no Monitor to look for
        return False
    if is_vecenv_wrapped(venv, VecMonitor):
        return True
    env_is_wrapped = getattr(venv, "env_is_wrapped", None)
    return bool(env_is_wrapped is not None and env_is_wrapped(Monitor)[0])


def _vec_env_episodes(
    policy, venv, episodes: int, seed: int, deterministic: bool
) -> tuple[list[float], list[int]]:
    """Stable-Baselines3's ``evaluate_policy`` loop on its VecEnv.

    Sub-env k runs ``(episodes + k) // num_envs`` episodes; they are listed in the order they
    end. Where a Monitor wraps the sub-envs, an episode is counted only when its ``info`` holds
    ``"episode"`` (Atari's life-loss ``done`` is not an episode's end) and its return and length
    are read from there, as SB3 does.
    """
    n_envs = int(venv.num_envs)
    targets = np.array([(episodes + k) // n_envs for k in range(n_envs)])
    counts = np.zeros(n_envs, dtype=int)
    current_returns = np.zeros(n_envs)  # float64 sums of the VecEnv's float32 rewards, as SB3
    current_lengths = np.zeros(n_envs, dtype=int)
    monitored = _monitor_wrapped(venv)
    space = venv.action_space
    box = getattr(space, "low", None) is not None and getattr(space, "high", None) is not None
    returns: list[float] = []
    lengths: list[int] = []
    if hasattr(venv, "seed"):
        venv.seed(seed)  # used by the next reset only
    obs = venv.reset()
    while (counts < targets).any():
        action = policy.act(obs, deterministic)  # (num_envs, ...)
        if box:  # as the gymnasium path and SB3's predict: clipped to the Box
            action = np.clip(action, space.low, space.high)
        obs, rewards, dones, infos = venv.step(action)
        current_returns += rewards
        current_lengths += 1
        for k in np.flatnonzero(dones):
            if counts[k] < targets[k]:
                if not monitored:
                    returns.append(float(current_returns[k]))
                    lengths.append(int(current_lengths[k]))
                    counts[k] += 1
                elif "episode" in infos[k]:
                    returns.append(float(infos[k]["episode"]["r"]))
                    lengths.append(int(infos[k]["episode"]["l"]))
                    counts[k] += 1
            current_returns[k] = 0.0
            current_lengths[k] = 0
    return returns, lengths
