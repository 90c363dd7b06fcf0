"""mjlab's camera tasks: one line before anything is built (the adapter feeds the policy vector
groups only, so the rendered frames would never reach it)."""

from __future__ import annotations

import os

import pytest

if os.environ.get("ORIN_RL_REQUIRE_MJLAB") == "1":  # CI: the mjlab extra must be there
    import mjlab  # noqa: F401
else:
    pytest.importorskip("mjlab", reason="needs the mjlab extra: pip install -e '.[mjlab]'")

from orin_rl.envs.base import EnvError
from orin_rl.envs.mjlab import MjlabVecEnv, import_mjlab
from orin_rl.envs.mjlab_tasks import refuse_camera_tasks


@pytest.mark.parametrize(("task", "kind"), [("Mjlab-Lift-Cube-Yam-Depth", "depth"),
                                            ("Mjlab-Lift-Cube-Yam-Rgb", "rgb")])  # fmt: skip
def test_camera_task_is_one_line_before_the_build(task, kind):
    with pytest.raises(EnvError) as exc:
        MjlabVecEnv(task, 1, "cpu")
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith(f"{task}: its camera (camera_d405 {kind} 32x32)")
    assert "vector groups only" in message and "mjlab's own runner" in message


def test_task_without_a_camera_is_not_refused():
    cfg = import_mjlab().load_env_cfg("Mjlab-Lift-Cube-Yam")
    refuse_camera_tasks("Mjlab-Lift-Cube-Yam", cfg)
