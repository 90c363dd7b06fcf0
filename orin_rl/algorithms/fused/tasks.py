"""The tasks the fused rollout kernel implements, by the ``fused_task`` an env class declares
(``VecEnv.fused_task``): the discrete-action classic-control tasks of the GPU-native backend
(``orin_rl.envs.gpu.classic``). Pendulum-v1 and MountainCarContinuous-v0 are not among them:
their actions are continuous, and the kernels' policy head is categorical."""

from __future__ import annotations

from orin_rl.algorithms.fused.acrobot import ACROBOT
from orin_rl.algorithms.fused.cartpole import CARTPOLE
from orin_rl.algorithms.fused.mountain_car import MOUNTAIN_CAR
from orin_rl.algorithms.fused.task import DeviceTask

TASKS: dict[str, DeviceTask] = {task.task_id: task for task in (CARTPOLE, MOUNTAIN_CAR, ACROBOT)}
"""Each registered task by its ``task_id``."""


def device_task(task_id: str | None) -> DeviceTask:
    """The registered task ``task_id`` (a ValueError names the ones there are)."""
    if task_id not in TASKS:
        raise ValueError(f"no fused kernels for {task_id!r}; they cover {', '.join(TASKS)}")
    return TASKS[task_id]
