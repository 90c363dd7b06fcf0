"""The mjlab the segmented step was written against, checked where it is used.

``mjlab.graph.SegmentedStep`` is mjlab 1.6.0's ``ManagerBasedRlEnv.step`` cut into segments,
line for line, and reads and writes what that step does, private attributes included
(``_sim_step_counter``, ``_reset_idx``, ``_command_dt``, the observation manager's
``_obs_buffer``); the masked resets (``mjlab.masked``) read more of mjlab's managers. Another
mjlab release may rename or drop any of them, and the copied step would then run a step
that is not mjlab's without a word. So: another version ends in one line naming the version
tested, at import (``check_version``); and every attribute the step relies on is checked on the
environment before its first step (``check_env``), naming what is missing.
"""

from __future__ import annotations

from typing import Any

from orin_rl.envs.base import EnvError

MJLAB_TESTED = "1.6.0"
"""The mjlab release the segmented step copies (``pyproject.toml``'s ``mjlab==1.6.0``)."""

STEP_ATTRIBUTES = (
    # ManagerBasedRlEnv.step, as SegmentedStep._step runs it
    "_sim_step_counter",
    "_reset_idx",
    "_command_dt",
    "_manual_reset_pending",
    "common_step_counter",
    "obs_buf",
    "extras",
    "step_dt",
    "physics_dt",
    "num_envs",
    "device",
    "max_episode_length_s",
    "episode_length_buf",
    "max_episode_length",
    "cfg.decimation",
    "cfg.auto_reset",
    "sim.step",
    "sim.forward",
    "sim.sense",
    "scene.write_data_to_sim",
    "scene.update",
    "action_manager.total_action_dim",
    "event_manager.available_modes",
    "event_manager.apply",
    "recorder_manager.record_pre_reset",
    "recorder_manager.record_post_reset",
    "recorder_manager.record_post_step",
    "command_manager.compute",
    "command_manager._terms",
    "termination_manager.compute",
    "termination_manager._term_dones",
    "reward_manager.compute",
    "metrics_manager.compute",
    "metrics_manager.compute_substep",
    "curriculum_manager",
    "observation_manager.compute",
    "observation_manager._obs_buffer",
    "observation_manager._group_obs_term_cfgs",
)
"""Dotted attributes of an mjlab ``ManagerBasedRlEnv`` the segmented step reads, or writes
into (what it only assigns, ``reset_buf``, ``reward_buf``..., need not exist before)."""


def pin_line(version: str) -> str:
    """The one line for an mjlab other than the one tested."""
    return (
        f"mjlab {version} is installed; orin_rl's mjlab step follows mjlab {MJLAB_TESTED}'s "
        f"ManagerBasedRlEnv.step line for line: pip install mjlab=={MJLAB_TESTED}"
    )


def check_version(version: str | None = None) -> None:
    """Refuse an mjlab other than ``MJLAB_TESTED`` (the installed one unless ``version``)."""
    if version is None:
        from importlib.metadata import version as installed

        version = installed("mjlab")
    if version != MJLAB_TESTED:
        raise EnvError(pin_line(version))


def missing_attributes(env: Any) -> list[str]:
    """The ``STEP_ATTRIBUTES`` that ``env`` lacks."""
    missing = []
    for dotted in STEP_ATTRIBUTES:
        obj = env
        for name in dotted.split("."):
            if not hasattr(obj, name):
                missing.append(dotted)
                break
            obj = getattr(obj, name)
    return missing


def check_env(env: Any) -> None:
    """Refuse an mjlab environment without an attribute the segmented step relies on."""
    missing = missing_attributes(env)
    if missing:
        from importlib.metadata import version as installed

        raise EnvError(
            f"this mjlab environment has no {', '.join(missing)}: {pin_line(installed('mjlab'))}"
        )
