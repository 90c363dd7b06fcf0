"""The mjlab pin (``envs.mjlab.pin``): another mjlab release is refused in one line naming the
tested one, and an environment lacking an attribute the segmented step uses is refused,
naming it, before a step is taken.

Mutations, each failing a test here (2026-12-05): no ``check_version`` in ``import_mjlab``; no
``check_env`` in ``SegmentedStep``; ``_command_dt`` dropped from ``STEP_ATTRIBUTES``."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

if os.environ.get("ORIN_RL_REQUIRE_MJLAB") == "1":  # CI: the mjlab extra must be there
    import mjlab  # noqa: F401
else:
    pytest.importorskip("mjlab", reason="needs the mjlab extra: pip install -e '.[mjlab]'")

from orin_rl.envs import mjlab as mjlab_env
from orin_rl.envs.base import EnvError, EnvOptions
from orin_rl.envs.mjlab.pin import (
    MJLAB_TESTED,
    STEP_ATTRIBUTES,
    check_version,
    missing_attributes,
)

WRITTEN_ONLY = {"reset_buf", "reset_terminated", "reset_time_outs", "reward_buf"}
"""What the step assigns without reading: mjlab creates them in its first step."""


def test_another_release_is_refused_at_import_in_one_line(monkeypatch):
    """``import_mjlab`` (every mjlab task's way in) with mjlab reporting 1.7.0: one line with
    the command that installs the tested release (mutation: no ``check_version`` call)."""
    import importlib.metadata

    check_version()  # the installed one is the tested one
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "1.7.0" if name == "mjlab" else real(name))  # fmt: skip
    mjlab_env.import_mjlab.cache_clear()
    try:
        with pytest.raises(EnvError) as info:
            mjlab_env.import_mjlab()
    finally:
        mjlab_env.import_mjlab.cache_clear()
    message = str(info.value)
    assert "\n" not in message and "mjlab 1.7.0" in message
    assert f"pip install mjlab=={MJLAB_TESTED}" in message


def test_every_env_attribute_the_step_names_is_pinned():
    """Each ``env.<name>`` in the segmented step and the masked resets is in STEP_ATTRIBUTES
    (or only assigned there): a new use of mjlab's internals cannot skip the check."""
    root = Path(mjlab_env.__file__).parent
    used = set()
    for module in ("graph.py", "masked.py"):
        used |= set(re.findall(r"\benv\.([A-Za-z_]+)", (root / module).read_text()))
    pinned = {dotted.split(".")[0] for dotted in STEP_ATTRIBUTES}
    assert used - pinned - WRITTEN_ONLY - {"step"} == set()


@pytest.fixture(scope="module")
def go1():
    vec = mjlab_env.MjlabVecEnv("Mjlab-Velocity-Flat-Unitree-Go1", 1, "cpu", EnvOptions(seed=0))
    yield vec
    vec.close()


@pytest.mark.parametrize(
    "dotted", ["_reset_idx", "_command_dt", "_sim_step_counter", "observation_manager._obs_buffer"]
)
def test_a_missing_attribute_is_refused_before_the_first_step(go1, monkeypatch, dotted):
    """As an mjlab release without it would be: the segmented step refuses the environment,
    naming the attribute and the tested release (mutation: no ``check_env`` in
    ``SegmentedStep``: the step is built and would fail, or worse run, later)."""
    from orin_rl.envs.mjlab.graph import SegmentedStep

    env = go1.env
    assert missing_attributes(env) == []
    *path, name = dotted.split(".")
    owner = env
    for part in path:
        owner = getattr(owner, part)
    where = owner if name in vars(owner) else type(owner)
    monkeypatch.delattr(where, name)
    with pytest.raises(EnvError, match=re.escape(dotted)) as info:
        SegmentedStep(env, "critic")
    assert f"mjlab=={MJLAB_TESTED}" in str(info.value)
