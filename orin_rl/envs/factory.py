"""Environments made the way the config says: ``env.kwargs``, ``env.wrappers``, custom ids.

Torch-free. Training uses ``resolve_wrappers`` / ``import_env_module`` for each sub-env of its
vector env; evaluation (``orin-rl eval``) and the control loop (``orin-rl run``) call
``make_env`` for one env, with a bundle's ``env_config`` (the run's ``env`` settings).

A custom environment is an id ``module:EnvId``: ``module`` is imported first (it calls
``gymnasium.register(id="EnvId", ...)``), from the Python path or, failing that, the current
folder. A config wrapper is ``module:function``. orin_rl's own modules named that way
(``orin_rl.envs.images:atari``) are imported through ``PROJECT_MODULES``, with plain
``from ... import`` statements the layout test reads; only the user's modules are imported by
name.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

from orin_rl.errors import OrinError


class EnvMakeError(OrinError, ValueError):
    """An environment cannot be made as asked (unknown id, missing module or dependency)."""


INSTALL_HINTS = {
    "gymnasium.envs.box2d": 'install Box2D: pip install "gymnasium[box2d]" (where Box2D '
    "builds from source: pip install swig first)",
    "gymnasium.envs.mujoco": "install the MuJoCo extra: pip install 'orin-rl[mujoco]'",
    "gymnasium.envs.classic_control": 'install pygame: pip install "gymnasium[classic-control]"',
    "gymnasium.envs.toy_text": 'install pygame: pip install "gymnasium[toy-text]"',
    "ale_py": "install the Atari envs: pip install 'orin-rl[pixels]' (ale-py, its ROMs bundled)",
    "minatar": "install MinAtar: pip install 'orin-rl[pixels]'",
}
"""What installs the dependencies of each family of gymnasium envs, by the module of its
entry point (Atari's ``ALE/`` ids exist only once ``ale_py`` is installed)."""
NAMESPACES = {"ALE/": "ale_py", "MinAtar/": "minatar"}
"""Env id prefixes registered by a package's import (``register_namespace``), not by gymnasium."""
ENV_CONFIG_KEYS = ("max_episode_steps", "kwargs", "wrappers")
"""The run's ``env`` settings a bundle keeps (``env_config``), so evaluation and the control
loop make the environment as training did."""


def install_hint(env_id: str) -> str | None:
    """What to install for ``env_id``'s family of gymnasium envs; None for an id of no known
    family (its own error then says what is missing)."""
    import gymnasium as gym

    for prefix, package in NAMESPACES.items():
        if env_id.startswith(prefix):
            return INSTALL_HINTS[package]
    try:
        entry_point = gym.spec(env_id).entry_point
    except gym.error.Error:
        return None
    if not isinstance(entry_point, str):
        return None
    family = entry_point.partition(":")[0]
    return next((h for m, h in INSTALL_HINTS.items() if family.startswith(f"{m}.")), None)


def make_error_message(env_id: str, exc: Exception) -> str:
    """One line for an env gymnasium cannot make: its error, then what to install, if known."""
    hint = install_hint(env_id)
    return f"{env_id}: {exc}; {hint}" if hint else f"{env_id}: {exc}"


def _images() -> ModuleType:
    from orin_rl.envs import images

    return images


PROJECT_MODULES: dict[str, Callable[[], ModuleType]] = {
    "orin_rl.envs.images": _images,  # the pixel wrappers: atari, minatar, rendered
    "orin_rl.image_envs": _images,  # its former name, kept for configs written before
}
"""orin_rl's modules that a config string may name (``module:function`` wrappers, ``module:EnvId``
ids) -> the loader importing it; a module that moved keeps its former name here too, so a
config naming it still works. A project string names one of these (the layout test checks the
strings in orin_rl); ``import_module`` imports any other name as the user's."""


def import_module(name: str, what: str) -> ModuleType:
    """Import ``name``: orin_rl's own through ``PROJECT_MODULES``, the user's by name; where
    that is not on the Python path, try the current folder too (as ``python -m`` would: the
    ``orin-rl`` script does not put it on the path)."""
    if name in PROJECT_MODULES:
        return PROJECT_MODULES[name]()
    top = name.split(".")[0]
    cwd = os.getcwd()
    for attempt in ("path", "cwd"):
        if attempt == "cwd":
            if cwd in sys.path:
                break
            sys.path.append(cwd)  # after everything else: nothing installed is shadowed
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != top:  # the module is there; something it imports is not
                raise EnvMakeError(f"{what}: importing {name!r} failed ({exc})") from None
            if attempt == "cwd":
                sys.path.remove(cwd)
    raise EnvMakeError(
        f"{what}: no module {name!r} on the Python path or in {cwd}; run from its folder or "
        "add that folder to PYTHONPATH"
    )


def import_env_module(env_id: str) -> None:
    """For a ``module:EnvId`` id, import ``module`` (which registers ``EnvId``); for an ``ALE/``
    or ``MinAtar/`` id, register that package's envs (``register_namespace``)."""
    module, sep, _ = env_id.partition(":")
    if sep:
        import_module(module, env_id)
        return
    prefix = next((p for p in NAMESPACES if env_id.startswith(p)), None)
    if prefix is not None:
        register_namespace(prefix)


def register_namespace(prefix: str) -> None:
    """Register the envs of ``ALE/`` (ale_py registers them on import) or ``MinAtar/`` (its
    ``register_envs``, once); a missing package is an EnvMakeError saying what to install."""
    import gymnasium as gym

    package = NAMESPACES[prefix]
    try:
        if package == "ale_py":
            import ale_py

            gym.register_envs(ale_py)
        elif not any(name.startswith(prefix) for name in gym.registry):
            from minatar.gym import register_envs

            register_envs()
    except ModuleNotFoundError:
        raise EnvMakeError(f"{prefix} envs need {package}; {INSTALL_HINTS[package]}") from None


def import_object(spec: str, what: str) -> Any:
    """The object a ``module:Name`` string names (``Name`` may be dotted: ``Class.method``)."""
    module_name, _, attr = spec.partition(":")
    obj = import_module(module_name, what)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise EnvMakeError(f"{what}: {module_name!r} has no {attr!r}") from None
    if not callable(obj):
        raise EnvMakeError(f"{what}: {spec} is not callable")
    return obj


def resolve_wrappers(entries: list[str | dict[str, Any]] | None) -> list[Any]:
    """Callables ``env -> wrapped env`` for config ``env.wrappers`` entries, in order."""
    wrappers = []
    for i, entry in enumerate(entries or []):
        name, kwargs = (entry, {}) if isinstance(entry, str) else (entry["wrapper"], {})
        if isinstance(entry, dict):
            kwargs = dict(entry.get("kwargs") or {})
        wrapper = import_object(name, f"env.wrappers[{i}]")
        wrappers.append(functools.partial(_wrap, name, wrapper, kwargs))
    return wrappers


def _wrap(name: str, wrapper: Any, kwargs: dict[str, Any], env: Any) -> Any:
    """``wrapper(env, **kwargs)``; a wrapper refusing its env or its arguments (a ValueError,
    TypeError or assertion from its constructor) becomes one line naming it."""
    try:
        return wrapper(env, **kwargs)
    except EnvMakeError:
        raise
    except (ValueError, TypeError, AssertionError) as exc:
        raise EnvMakeError(f"wrapper {name}: {exc}") from None


def make_env(
    env_id: str,
    env_config: dict[str, Any] | None = None,
    render_mode: str | None = None,
    kwargs: dict[str, Any] | None = None,
):
    """``gymnasium.make(env_id)`` with the training run's options, then its wrappers.

    Args:
        env_id: a gymnasium id, ``module:EnvId`` for one registered on import.
        env_config: ``max_episode_steps`` (a time limit other than the registered one),
            ``kwargs`` (for the constructor), ``wrappers`` (config ``env.wrappers`` entries).
        render_mode: ``human`` (a window), ``rgb_array`` (frames, for video) or None.
        kwargs: constructor keyword arguments that replace ``env_config``'s.
    """
    import gymnasium as gym

    options = dict(env_config or {})
    make_kwargs: dict[str, Any] = dict((options.get("kwargs") or {}) if kwargs is None else kwargs)
    if options.get("max_episode_steps"):
        make_kwargs["max_episode_steps"] = options["max_episode_steps"]
    if render_mode is not None:
        make_kwargs["render_mode"] = render_mode
    import_env_module(env_id)
    wrappers = resolve_wrappers(options.get("wrappers"))
    try:
        env = gym.make(env_id, **make_kwargs)
    except (gym.error.DependencyNotInstalled, gym.error.NamespaceNotFound) as exc:
        raise EnvMakeError(make_error_message(env_id, exc)) from None
    except gym.error.Error as exc:
        raise EnvMakeError(f"{env_id}: {exc}") from None
    except TypeError as exc:  # a keyword the constructor does not take
        if not make_kwargs.get("kwargs") and not (options.get("kwargs") or kwargs):
            raise
        raise EnvMakeError(f"{env_id}: {exc}; check env.kwargs / --env-kwargs") from None
    for wrap in wrappers:
        env = wrap(env)
    return env
