"""Graph-safe twins of mjlab task terms whose device work reads values on the host.

mjlab's rough-terrain ``upright`` reward fits the terrain's plane under the robot with
``torch.linalg.eigh`` of a 3x3 covariance per world. On CUDA ``eigh`` checks its solver's
status on the host (a sync), so the rewards segment that holds it cannot be a CUDA graph and
stays eager (``mjlab.graph``: the warm-up sees the host read). ``fit_plane_normal`` computes the
same normal in closed form (the symmetric 3x3 eigenvalues by the trigonometric formula, the
smallest one's eigenvector as the largest cross product of two rows of ``A - l I``), in float64,
with elementwise ops only; ``use_graph_safe_terms`` swaps it in for mjlab's fit inside the
reward term's call (and only there).

mjlab's raycast sensor (the terrain height scan, and the flat tasks' foot-height rays) aligns
its rays with the robot's yaw and checks on the host whether any world is pitched past the
yaw's singularity (``if singular.any()``) before it takes those worlds' yaw from the Y axis.
``extract_yaw_rotation`` computes both and keeps the Y axis's where a world is singular: the
same numbers, no host read (``use_graph_safe_sensors``; the one-unit step needs it, since
``sim.sense`` is inside its capture).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch


def sym3_eigenvalues(a: torch.Tensor) -> torch.Tensor:
    """Eigenvalues of symmetric 3x3 matrices ``[B, 3, 3]``, ascending ``[B, 3]``."""
    a00, a11, a22 = a[:, 0, 0], a[:, 1, 1], a[:, 2, 2]
    a01, a02, a12 = a[:, 0, 1], a[:, 0, 2], a[:, 1, 2]
    q = (a00 + a11 + a22) / 3.0
    p1 = a01 * a01 + a02 * a02 + a12 * a12
    p2 = (a00 - q) ** 2 + (a11 - q) ** 2 + (a22 - q) ** 2 + 2.0 * p1
    p = torch.sqrt(p2 / 6.0)
    safe = torch.where(p > 0, p, torch.ones_like(p))
    b00, b11, b22 = (a00 - q) / safe, (a11 - q) / safe, (a22 - q) / safe
    b01, b02, b12 = a01 / safe, a02 / safe, a12 / safe
    det = (
        b00 * (b11 * b22 - b12 * b12)
        - b01 * (b01 * b22 - b12 * b02)
        + b02 * (b01 * b12 - b11 * b02)
    )
    phi = torch.acos((det / 2.0).clamp(-1.0, 1.0)) / 3.0
    largest = q + 2.0 * p * torch.cos(phi)
    smallest = q + 2.0 * p * torch.cos(phi + 2.0 * math.pi / 3.0)
    middle = 3.0 * q - largest - smallest
    return torch.stack([smallest, middle, largest], dim=1)


def smallest_eigenvector(a: torch.Tensor, smallest: torch.Tensor) -> torch.Tensor:
    """A unit eigenvector of ``a`` for its eigenvalue ``smallest`` (``[B, 3]``)."""
    m = a - smallest.view(-1, 1, 1) * torch.eye(3, dtype=a.dtype, device=a.device)
    r0, r1, r2 = m[:, 0], m[:, 1], m[:, 2]
    crosses = torch.stack(
        [torch.cross(r0, r1, dim=1), torch.cross(r0, r2, dim=1), torch.cross(r1, r2, dim=1)],
        dim=1,
    )
    norms = crosses.norm(dim=2)
    best = norms.argmax(dim=1)
    v = crosses.gather(1, best.view(-1, 1, 1).expand(-1, 1, 3)).squeeze(1)
    return v / norms.gather(1, best.view(-1, 1)).clamp(min=1e-30)


def fit_plane_normal(points: torch.Tensor, valid_mask: torch.Tensor) -> torch.Tensor:
    """mjlab's ``fit_terrain_normal`` (mjlab 1.6, ``tasks/velocity/mdp/terrain_utils.py``)
    without ``eigh``: the plane normal of the valid points, oriented upward, [0, 0, 1] where
    the fit is degenerate (fewer than 3 points, line- or point-like, non-finite)."""
    device, dtype = points.device, points.dtype
    count = valid_mask.sum(dim=1)
    enough = count >= 3
    mask_f = valid_mask.to(torch.float64).unsqueeze(-1)
    pts = points.to(torch.float64)
    centroid = (pts * mask_f).sum(dim=1) / count.clamp(min=1).to(torch.float64).unsqueeze(-1)
    centered = (pts - centroid.unsqueeze(1)) * mask_f
    cov = torch.einsum("bni,bnj->bij", centered, centered)
    finite = torch.isfinite(cov).all(dim=(-2, -1))
    eye = torch.eye(3, device=device, dtype=cov.dtype)
    cov = torch.where(finite.view(-1, 1, 1), cov, eye)
    values = sym3_eigenvalues(cov)
    normal = smallest_eigenvector(cov, values[:, 0])
    normal = torch.where((normal[:, 2] < 0).unsqueeze(-1), -normal, normal)
    eps = torch.finfo(dtype).eps  # mjlab's thresholds, in the points' precision
    plane_like = (values[:, 0] / values[:, 1].clamp(min=eps)) < 0.1
    has_spread = values[:, 1] > values[:, 2].clamp(min=eps) * 1e-6
    reliable = enough & plane_like & has_spread & finite
    up = torch.zeros_like(normal)
    up[:, 2] = 1.0
    return torch.where(reliable.unsqueeze(-1), normal, up).to(dtype)


class GraphSafeUpright:
    """mjlab's ``upright`` reward term (a class term) with ``fit_plane_normal`` for its
    terrain normal; everything else (reset, debug drawing) is the wrapped term's."""

    def __init__(self, inner: Any):
        self.inner = inner

    def __call__(self, env: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        with _plane_fit(fit_plane_normal):
            return self.inner(env, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@contextlib.contextmanager
def _plane_fit(fit: Any):
    from mjlab.tasks.velocity.mdp import terrain_utils

    original = terrain_utils.fit_terrain_normal
    terrain_utils.fit_terrain_normal = fit
    try:
        yield
    finally:
        terrain_utils.fit_terrain_normal = original


def extract_yaw_rotation(rot_mat: torch.Tensor) -> torch.Tensor:
    """mjlab's ``RayCastSensor._extract_yaw_rotation`` (mjlab 1.6) without its host branch:
    the yaw-only rotation ``[B, 3, 3]`` of ``rot_mat``, from the Y axis where the X axis is
    within 0.1 of vertical, every value as mjlab's."""
    x_proj = rot_mat[:, :, 0].clone()
    x_proj[:, 2] = 0
    x_norm = x_proj.norm(dim=1)
    singular = x_norm < 0.1
    y_proj = rot_mat[:, :, 1].clone()
    y_proj[:, 2] = 0
    y_proj = y_proj / y_proj.norm(dim=1).clamp(min=1e-6).unsqueeze(-1)
    x_from_y = torch.zeros_like(y_proj)  # the Y axis turned -90 degrees about Z: [y_y, -y_x]
    x_from_y[:, 0] = y_proj[:, 1]
    x_from_y[:, 1] = -y_proj[:, 0]
    x_proj = torch.where(singular.unsqueeze(-1), x_from_y, x_proj)
    x_norm = torch.where(singular, torch.ones_like(x_norm), x_norm).clamp(min=1e-6)
    x_proj = x_proj / x_norm.unsqueeze(-1)
    yaw_mat = torch.zeros((rot_mat.shape[0], 3, 3), device=rot_mat.device, dtype=rot_mat.dtype)
    yaw_mat[:, 0, 0] = x_proj[:, 0]
    yaw_mat[:, 1, 0] = x_proj[:, 1]
    yaw_mat[:, 0, 1] = -x_proj[:, 1]
    yaw_mat[:, 1, 1] = x_proj[:, 0]
    yaw_mat[:, 2, 2] = 1
    return yaw_mat


def use_graph_safe_sensors(env: Any) -> list[str]:
    """Swap ``extract_yaw_rotation`` in for the yaw-aligned raycast sensors' own (on each
    sensor object); the names of those swapped."""
    swapped = []
    for name, sensor in getattr(env.scene, "sensors", {}).items():
        if getattr(getattr(sensor, "cfg", None), "ray_alignment", None) == "yaw":
            sensor._extract_yaw_rotation = extract_yaw_rotation
            swapped.append(name)
    return swapped


def use_graph_safe_terms(env: Any) -> list[str]:
    """Swap the twins in for the env's terms that have one; the names of those swapped."""
    swapped = []
    rm = env.reward_manager
    for name, cfg in zip(rm._term_names, rm._term_cfgs, strict=True):
        if type(cfg.func).__name__ == "upright" and cfg.params.get("terrain_sensor_names"):
            cfg.func = GraphSafeUpright(cfg.func)
            swapped.append(name)
    return swapped
