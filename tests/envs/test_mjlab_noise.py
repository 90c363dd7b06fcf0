"""Known third-party noise of an mjlab run kept off the terminal unless ``orin-rl -v``
(``orin_rl.envs.mjlab.noise``, issue 41 item 14): the real warnings, raised by torch, MuJoCo
Warp and Warp themselves, not copies of their text."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings

import pytest
import torch

if os.environ.get("ORIN_RL_REQUIRE_MJLAB") == "1":  # CI: the mjlab extra must be there
    import mjlab  # noqa: F401
else:
    pytest.importorskip("mjlab", reason="needs the mjlab extra: pip install -e '.[mjlab]'")

from orin_rl.envs.mjlab.noise import WARP_NO_DRIVER, known_warnings_filtered
from tests.conftest import HAS_CUDA

ROUGH_PAIRS = """<mujoco><option><flag multiccd="enable"/></option>
<asset><hfield name="h" nrow="3" ncol="3" size="1 1 0.1 0.1"/></asset>
<worldbody><geom type="hfield" hfield="h"/>
<body pos="0 0 0.5"><freejoint/><geom type="capsule" size="0.05 0.1"/></body></worldbody>
</mujoco>"""
"""A height field and a capsule with MULTICCD on: MuJoCo Warp's warning of a rough terrain."""


def _third_party_warnings() -> list[str]:
    """Raise the real known warnings and one other; the messages that got through."""
    import mujoco
    import mujoco_warp

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with known_warnings_filtered():

            def plus_one(x: torch.Tensor) -> torch.Tensor:
                return x + 1

            torch.jit.script(plus_one)  # as mjlab's lab_api.math does at its import
            mujoco_warp.put_model(mujoco.MjModel.from_xml_string(ROUGH_PAIRS))
            warnings.warn("a warning of the user's own", UserWarning, stacklevel=1)
    return [str(w.message) for w in caught]


@pytest.fixture
def verbose():
    """``orin-rl -v``: orin_rl's loggers at DEBUG."""
    logger = logging.getLogger("orin_rl")
    level = logger.level
    logger.setLevel(logging.DEBUG)
    yield
    logger.setLevel(level)


def test_the_known_warnings_are_not_shown_and_others_are():
    assert _third_party_warnings() == ["a warning of the user's own"]


def test_verbose_shows_the_known_warnings(verbose):
    shown = _third_party_warnings()
    assert any("torch.jit.script" in m for m in shown), shown
    assert any(m.startswith("MULTICCD is enabled") for m in shown), shown
    assert "a warning of the user's own" in shown


@pytest.mark.skipif(HAS_CUDA, reason="Warp prints its no-driver line only without a driver")
def test_the_cli_drops_warps_no_driver_line_unless_verbose():
    """``orin-rl envs --backend mjlab`` starts Warp (on a CPU box: its native no-driver line
    on file descriptor 2); ``-v`` shows the line, the default does not."""
    cmd = [sys.executable, "-m", "orin_rl.cli"]
    quiet = subprocess.run([*cmd, "envs", "--backend", "mjlab"], capture_output=True, text=True)
    loud = subprocess.run(
        [*cmd, "-v", "envs", "--backend", "mjlab"], capture_output=True, text=True
    )
    assert quiet.returncode == 0 and loud.returncode == 0, quiet.stderr + loud.stderr
    assert "Mjlab-Velocity-Flat-Unitree-Go1" in quiet.stdout
    assert WARP_NO_DRIVER not in quiet.stderr, quiet.stderr
    assert WARP_NO_DRIVER in loud.stderr, loud.stderr
