"""``evaluate_policy``: returns and lengths of N seeded episodes, optionally watched or filmed.

Torch-free (a bundle's policy runs on numpy + onnxruntime). Episode ``i`` starts from
``reset(seed=seed + i)``, as the trainer's evaluation seeds its sub-environments, so the same
seeds give the same episodes: the final evaluation in ``summary.json`` used
``seed = train.seed + 2**30``.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl import env_backends
from orin_rl.env_factory import make_env
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
    """Episode i started from ``reset(seed=seed + i)``."""
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
    episodes: int = 10,
    seed: int = 0,
    deterministic: bool = True,
    render: bool = False,
    video_dir: str | Path | None = None,
    env_config: dict[str, Any] | None = None,
    env_kwargs: dict[str, Any] | None = None,
) -> EvalResult:
    """Run ``episodes`` episodes of ``policy`` (an ``orin_rl.Policy``) and return what they gave.

    Args:
        policy: from ``orin_rl.load_policy``.
        env: a gymnasium id, a ``gymnasium.Env`` (used as it is), or None for the policy's own
            environment (made as in training: time limit, kwargs, wrappers).
        episodes: how many.
        seed: episode ``i`` starts from ``reset(seed=seed + i)``.
        deterministic: the policy's mode; False samples (run folders only).
        render: show the episodes in a window (``render_mode="human"``).
        video_dir: write one MP4 per episode here (gymnasium's ``RecordVideo``; needs moviepy).
        env_config: how to make ``env`` when it is an id (default: the policy's, when ``env``
            is its own id or None): ``max_episode_steps``, ``kwargs``, ``wrappers``.
        env_kwargs: constructor keyword arguments that replace ``env_config``'s.
    """
    if episodes <= 0:
        raise EvalError(f"episodes must be positive, got {episodes}")
    gym_env, env_id = _environment(policy, env, env_config, env_kwargs, render, video_dir)
    try:
        returns, lengths, logs = _episodes(policy, gym_env, episodes, seed, deterministic)
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


def _environment(policy, env, env_config, env_kwargs, render: bool, video_dir) -> tuple[Any, str]:
    import gymnasium as gym

    if isinstance(env, gym.Env):
        if video_dir is not None or render:
            raise EvalError("render / video_dir need an env id (they choose its render_mode)")
        return env, env.spec.id if env.spec else type(env).__name__
    env_id = env or policy.env_id
    if env_id is None:
        raise EvalError(f"{policy.source}: the environment is unknown; pass --env ID")
    if env_config is None:
        env_config = policy.env_config if env_id == policy.env_id else {}
    if env_backends.for_id(env_id, "gym") == "mjlab":  # one world of its play configuration
        if render or video_dir is not None or env_kwargs:
            raise EvalError("an mjlab task takes no --render, --video or --env-kwargs here")
        from orin_rl.envs.mjlab import MjlabGymEnv

        return MjlabGymEnv(env_id, env_config), env_id
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


def _episodes(policy, env, episodes: int, seed: int, deterministic: bool):
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
    except gym.error.DependencyNotInstalled as exc:  # drawing frames (pygame, mujoco renderer)
        raise EvalError(
            f"rendering needs a package that is missing ({exc}): {VIDEO_HINT}"
        ) from None
    return returns, lengths, logs
