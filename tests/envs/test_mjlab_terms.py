"""Graph-safe twins of mjlab task terms (``mjlab_terms``) against mjlab's own."""

from __future__ import annotations

import os

import pytest
import torch

if os.environ.get("ORIN_RL_REQUIRE_MJLAB") == "1":
    import mjlab  # noqa: F401
else:
    pytest.importorskip("mjlab", reason="needs the mjlab extra: pip install -e '.[mjlab]'")

from orin_rl.envs.base import EnvOptions
from orin_rl.envs.mjlab import MjlabVecEnv
from orin_rl.envs.mjlab.terms import fit_plane_normal, use_graph_safe_terms

UP = torch.tensor([0.0, 0.0, 1.0])


def _clouds(seed: int, batch: int = 3000, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy tilted planes far from the origin, with rows of fewer than 3 valid points,
    exactly 3, and collinear points (the degenerate fits)."""
    g = torch.Generator().manual_seed(seed)
    normal = torch.randn(batch, 3, generator=g)
    normal[:, 2] = normal[:, 2].abs() + 1.0
    normal = normal / normal.norm(dim=1, keepdim=True)
    a = torch.linalg.cross(normal, torch.tensor([1.0, 0.0, 0.0]).expand(batch, 3))
    a = a / a.norm(dim=1, keepdim=True)
    b = torch.linalg.cross(normal, a)
    uv = torch.rand(batch, n, 2, generator=g) * 2 - 1
    noise = 0.01 * torch.randn(batch, n, 1, generator=g) * normal[:, None]
    points = uv[..., :1] * a[:, None] + uv[..., 1:] * b[:, None] + noise
    points = points + 5 * torch.randn(batch, 1, 3, generator=g)
    valid = torch.rand(batch, n, generator=g) > 0.2
    valid[:50] = False
    valid[50:100, 3:] = False
    line = torch.randn(50, 1, 3, generator=g)
    points[100:150] = points[100:150, :1] + torch.linspace(0, 1, n)[None, :, None] * line
    return points, valid


@pytest.mark.parametrize("seed", [0, 1])
def test_the_closed_form_plane_normal_is_eighs(seed):
    """Against mjlab's ``fit_terrain_normal`` in float64: the same normal (sine of the angle
    below 1e-5) and the same fallback rows (mutation: the middle eigenvalue taken for the
    smallest tilts every normal; the upward orientation dropped flips half)."""
    from mjlab.tasks.velocity.mdp.terrain_utils import fit_terrain_normal

    points, valid = _clouds(seed)
    ref = fit_terrain_normal(points.double(), valid)
    ours = fit_plane_normal(points, valid)
    assert ours.dtype == points.dtype
    sine = torch.linalg.cross(ours.double(), ref, dim=1).norm(dim=1)
    assert sine.max() < 1e-5 and (ours[:, 2] > 0).all()
    assert torch.equal((ours == UP).all(1), (fit_terrain_normal(points, valid) == UP).all(1))
    fallback = (ours == UP).all(1)
    assert fallback[:50].all() and fallback[100:150].all()  # too few points; collinear ones


def test_rough_go1s_rewards_become_a_graph_with_mjlabs_rewards():
    """Rough Go1 with the twin swapped in: the rewards segment no longer reads the host (it
    is captured and replayed, emulated graphs), and the rewards are mjlab's eager ones to
    float32 rounding through a round of resets (mutation: without the swap the segment stays
    eager on ``eigh``)."""
    task = "Mjlab-Velocity-Rough-Unitree-Go1"
    runs = []
    for twin in (False, True):
        env = MjlabVecEnv(task, 2, "cpu", EnvOptions(seed=2, max_episode_steps=3))
        if twin:
            assert use_graph_safe_terms(env.env) == ["upright"]
            env._stepper.emulate_graphs()
        env.reset()
        g = torch.Generator().manual_seed(0)
        rewards = []
        for _ in range(5):
            s = env.step(0.3 * torch.randn(2, env.action_space.shape[0], generator=g))
            rewards.append(s.reward)
        runs.append((torch.stack(rewards), env.graph_report()))
        env.close()
    (eager, _), (graphed, report) = runs
    assert "rewards" in report["graphs"] and report["refused"] == {}, report
    torch.testing.assert_close(graphed, eager, rtol=1e-5, atol=1e-6)


def test_the_yaw_twin_is_mjlabs_yaw_bit_for_bit_without_a_host_read():
    """Rotations of every yaw, pitch and roll, a quarter of them pitched to +-90 degrees (the
    X axis vertical: mjlab takes those worlds' yaw from the Y axis): the twin's yaw-only
    matrices are ``RayCastSensor._extract_yaw_rotation``'s exactly, and it reads nothing on
    the host (mutations: the Y axis not taken where singular, or no singular world in the
    batch so that mjlab's branch is skipped and the comparison is vacuous: fail)."""
    from mjlab.sensor.raycast_sensor import RayCastSensor
    from mjlab.utils.lab_api.math import matrix_from_quat, quat_from_euler_xyz

    from orin_rl.envs.graph_emulation import HostReadWatch
    from orin_rl.envs.mjlab.terms import extract_yaw_rotation

    g = torch.Generator().manual_seed(7)
    n = 4000
    roll, yaw = ((torch.rand(n, generator=g) * 2 - 1) * torch.pi for _ in range(2))
    pitch = (torch.rand(n, generator=g) * 2 - 1) * torch.pi / 2
    pitch[: n // 4] = torch.where(torch.rand(n // 4, generator=g) < 0.5, 1.0, -1.0) * torch.pi / 2
    mats = matrix_from_quat(quat_from_euler_xyz(roll, pitch, yaw))
    singular = mats[:, :2, 0].norm(dim=1) < 0.1
    assert n // 5 < int(singular.sum()) < n // 2  # both of mjlab's branches compared
    want = RayCastSensor._extract_yaw_rotation(None, mats)  # type: ignore[arg-type]
    with HostReadWatch() as watch:
        got = extract_yaw_rotation(mats)
    assert watch.reads == []
    assert torch.equal(got, want)


def test_the_yaw_twin_goes_on_every_yaw_aligned_raycast_sensor():
    """Flat Go1's terrain-height rays (its feet's) are yaw-aligned: the twin is on them."""
    from orin_rl.envs.mjlab.terms import extract_yaw_rotation, use_graph_safe_sensors

    env = MjlabVecEnv("Mjlab-Velocity-Flat-Unitree-Go1", 2, "cpu", EnvOptions(seed=1))
    sensors = env.env.scene.sensors
    yaw = [n for n, s in sensors.items() if getattr(s.cfg, "ray_alignment", None) == "yaw"]
    assert yaw and use_graph_safe_sensors(env.env) == yaw
    for name in yaw:
        assert sensors[name]._extract_yaw_rotation is extract_yaw_rotation
    env.close()
