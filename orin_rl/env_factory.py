"""One gymnasium environment, made the way training made it (torch-free).

Evaluation (``orin-rl eval``) and the control loop (``orin-rl run``) step a single gymnasium
env; a bundle's ``env_config`` (from the run's ``env`` config section) says how it was made.
"""

from __future__ import annotations

from typing import Any

from orin_rl.errors import OrinError


class EnvMakeError(OrinError, ValueError):
    """An environment cannot be made as asked (unknown id, missing module or dependency)."""


MUJOCO_HINT = "install the MuJoCo extra: pip install 'orin-rl[mujoco]'"
ENV_CONFIG_KEYS = ("max_episode_steps", "kwargs", "wrappers")
"""The run's ``env`` settings a bundle keeps (``env_config``), so evaluation and the control
loop make the environment as training did."""


def make_env(
    env_id: str,
    env_config: dict[str, Any] | None = None,
    render_mode: str | None = None,
):
    """``gymnasium.make(env_id)`` with the training run's options.

    Args:
        env_id: a gymnasium id, ``module:EnvId`` for one registered on import.
        env_config: ``max_episode_steps`` (a time limit other than the registered one).
        render_mode: ``human`` (a window), ``rgb_array`` (frames, for video) or None.
    """
    import gymnasium as gym

    options = dict(env_config or {})
    make_kwargs: dict[str, Any] = {}
    if options.get("max_episode_steps"):
        make_kwargs["max_episode_steps"] = options["max_episode_steps"]
    if render_mode is not None:
        make_kwargs["render_mode"] = render_mode
    try:
        return gym.make(env_id, **make_kwargs)
    except gym.error.DependencyNotInstalled as exc:
        hint = f"; {MUJOCO_HINT}" if "mujoco" in str(exc).lower() else ""
        raise EnvMakeError(f"{env_id}: {exc}{hint}") from None
    except gym.error.Error as exc:
        raise EnvMakeError(f"{env_id}: {exc}") from None
