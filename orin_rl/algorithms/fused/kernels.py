"""The fused kernels of one policy shape and task, compiled once per process and kept on disk.

Numba's disk cache keeps a kernel beside the module that defines it (``__pycache__`` of
rollout.py, grads.py and update.py, or ``NUMBA_CACHE_DIR``). An entry is dropped when that
module changes, and keyed by the code and constants of the device functions the kernel captures
(each builder binds them to local names), so a change to device.py or to a task's module
(cartpole.py, mountain_car.py, acrobot.py) compiles the kernels that call them afresh, and
each task's rollout kernel is an entry of its own.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

from orin_rl.algorithms.fused import grads
from orin_rl.algorithms.fused.cartpole import CARTPOLE
from orin_rl.algorithms.fused.device import device_functions
from orin_rl.algorithms.fused.rollout import rollout_kernel
from orin_rl.algorithms.fused.shapes import kernel_shape
from orin_rl.algorithms.fused.task import DeviceTask
from orin_rl.algorithms.fused.update import prepare_kernel, reduce_and_apply

KERNEL_CACHE = os.environ.get("ORIN_RL_KERNEL_CACHE", "1") != "0"
"""Keep the compiled kernels on disk (Numba's cache, module docstring), so only a machine's
first run of a policy shape pays the compile. ``ORIN_RL_KERNEL_CACHE=0`` compiles in every
process."""


class FusedKernels(NamedTuple):
    """The compiled kernels of one policy shape and task (see the package docstring)."""

    rollout: Any
    prepare: Any
    grads: Any
    reduce: Any
    apply: Any


_KERNELS: dict[tuple, FusedKernels] = {}


def build_kernels(obs_dim: int, h1: int, h2: int, num_actions: int, activation: str,
                  in_major: bool, num_agents: int, envs_per_block: int, rollout_threads: int,
                  update_threads: int, task: DeviceTask = CARTPOLE,
                  cache: bool | None = None) -> FusedKernels:  # fmt: skip
    """Compile (once per shape and task) the rollout and update kernels; sizes are
    compile-time, ``task`` the env's dynamics in the rollout (tasks.py). ``cache``: keep them
    in Numba's disk cache (default ``KERNEL_CACHE``)."""
    use_cache = KERNEL_CACHE if cache is None else cache
    key = (obs_dim, h1, h2, num_actions, activation, in_major, num_agents, envs_per_block,
           rollout_threads, update_threads, task.task_id, grads.GRADS_MAX_REGISTERS,
           use_cache)  # fmt: skip
    if key in _KERNELS:
        return _KERNELS[key]
    s = kernel_shape(obs_dim, h1, h2, num_actions, activation, in_major, num_agents,
                     envs_per_block, rollout_threads, update_threads)  # fmt: skip
    dev = device_functions(s)
    reduce, apply = reduce_and_apply(s, dev, use_cache)
    kernels = FusedKernels(rollout_kernel(s, dev, task, use_cache),
                           prepare_kernel(s, dev, use_cache), grads.grads_kernel(s, dev, use_cache),
                           reduce, apply)  # fmt: skip
    _KERNELS[key] = kernels
    return kernels
