"""Environment backends by name: the one list ``envs.make``, the config and the CLI read.

Torch-free (the CLI builds its parser from it without importing torch). A backend is a module
with ``make_vec_env(env_id, num_envs, device, options: envs.EnvOptions) -> envs.VecEnv``;
adding one is that module, a loader below that imports it, and one line in ``BACKENDS``. The
loaders import in their body (so nothing loads before the backend is asked for) with a plain
``from ... import`` statement, which the layout test (``tests/test_layout.py``) reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MakeVecEnv = Callable[..., Any]


def _gym() -> MakeVecEnv:
    from orin_rl.envs.gym_backend import make_vec_env

    return make_vec_env


def _gpu() -> MakeVecEnv:
    from orin_rl.envs.gpu import make_vec_env

    return make_vec_env


def _mjlab() -> MakeVecEnv:
    from orin_rl.envs.mjlab import make_vec_env

    return make_vec_env


def _envpool() -> MakeVecEnv:
    from orin_rl.envs.envpool_env import make_vec_env

    return make_vec_env


BACKENDS: dict[str, tuple[Callable[[], MakeVecEnv], str, tuple[str, ...] | None]] = {
    "gym": (_gym, "gymnasium.vector envs (any id, module:EnvId)", None),
    "gpu": (_gpu, "GPU-native envs stepping on the learner's device", None),
    "mjlab": (_mjlab, "mjlab's robot tasks (Isaac Lab's manager API on MuJoCo Warp)",
              ("Mjlab-", "Orin-Velocity-")),
    "envpool": (_envpool, "envpool's batched C++ envs (Atari, as CleanRL's "
                "ppo_atari_envpool)", None),
}  # fmt: skip
"""name -> (the loader importing the backend's module and returning its ``make_vec_env``, one
line of what it is, the id prefixes it claims: mjlab's own ``Mjlab-...`` and orin_rl's mjlab
tasks, ``Orin-Velocity-...``)."""


def names() -> list[str]:
    """Every registered backend name, in registration order."""
    return list(BACKENDS)


def for_id(env_id: str, asked: str) -> str:
    """The backend for ``env_id``: the one asked for, except that the default ``gym`` yields
    to a backend whose id prefix ``env_id`` has (``Mjlab-...`` and ``Orin-Velocity-...`` are
    mjlab's)."""
    if asked == "gym":
        for name, (_, _, prefix) in BACKENDS.items():
            if prefix is not None and env_id.startswith(prefix):
                return name
    return asked


def factory(name: str) -> Callable[..., Any]:
    """The backend's ``make_vec_env`` (its module is imported now, not before)."""
    from orin_rl.envs.factory import EnvMakeError

    if name not in BACKENDS:
        raise EnvMakeError(f"unknown env backend {name!r}; available: {', '.join(BACKENDS)}")
    return BACKENDS[name][0]()
