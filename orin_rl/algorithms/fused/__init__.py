"""Fused PPO: a whole rollout in one Numba CUDA kernel and, for small minibatches, each
minibatch step of the update in three, instead of the thousands of small torch kernels of the
general path.

Measured on the H200 (docs/benchmarks/profile_h200.md), one 4-env iteration of the general path
is 12,672 GPU ops in the rollout (~99 per env step) and 2,703 in the update (~170 per minibatch
step), 1-2 µs of device time each; its CUDA graph replays them in 28.1 ms. The fused iteration
is 66 GPU ops and takes 2.19 ms (profile_fused_h200.md); docs/fused.md has the measurements.

- ``rollout`` kernel (rollout.py): grid = agents x env chunks, a block runs its envs for all
  ``num_steps``: the actor and critic forward passes, the categorical draw, the env step (the
  task's device functions behind task.py's interface: cartpole.py, mountain_car.py and
  acrobot.py, registered in tasks.py), the time limit,
  auto-reset, the episode statistics, every buffer field, the value of the true final
  observation where an episode was truncated, and GAE at the end.
- update: ``prepare`` (update.py) normalises the advantages; then per minibatch step either
  the gradient by batched GEMMs (``gemm_update``, ``ppo.fused_grads=gemm``; on ``auto``
  wherever the gradient kernel does not take the shape) and ``apply``, or ``grads``
  (grads.py: forward, the PPO loss's gradient by hand and backward over a slice of the
  minibatch into a partial gradient), ``reduce`` (the parts summed in a fixed order, and the
  squared norm) and ``apply`` (the global grad-norm clip and Adam with torch's formula;
  update.py). The learning rate and the Adam step count are device scalars, so the whole
  iteration can be captured in one CUDA graph. A block per 8 samples cannot beat cuBLAS on big
  minibatches, so the update kernels are used only up to ``MAX_FUSED_MINIBATCH`` samples per
  agent; above that the fused rollout feeds torch's update.

Scope (``blocker`` names what is missing, and the trainer logs it and runs the general path):
CartPole-v1, MountainCar-v0 and Acrobot-v1 on the GPU-native backend (float32; the tasks of
``tasks.TASKS``), a categorical policy with two hidden layers
(tanh or relu) whose weights fit in a block's 48 KiB of static shared memory, fp32, no
observation/reward normalisation, no ``target_kl``, one process, the rollout buffer on the
device (or managed).

Every agent's parameters live in one flat float32 buffer that the torch modules view
(shapes.py has the layout). The modules, their state dicts, export and the torch optimizer see
the same memory the kernels write.

The package: this module holds what the trainer calls (the checks ``blocker``,
``update_blocker``, ``grads_path`` and ``kernel_blocker``, the driver ``FusedPPO``) and the
settings tests and tools change at run time (``MAX_FUSED_MINIBATCH``, ``ROLLOUT_THREADS``,
``UPDATE_THREADS``, read here); ``kernels`` compiles and caches the kernels of a policy shape
(``build_kernels``); ``shapes`` has the sizes, ``device`` the shared device functions, ``task``
(the interface), ``cartpole``, ``mountain_car``, ``acrobot`` and ``tasks`` (the registry) the
env side of the rollout, and ``rollout``, ``grads`` and ``update`` the kernels.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import torch

from orin_rl.algorithms.fused.kernels import FusedKernels as FusedKernels
from orin_rl.algorithms.fused.kernels import build_kernels as build_kernels
from orin_rl.algorithms.fused.shapes import CHUNK, ENVS_PER_BLOCK, SHARED_FLOATS
from orin_rl.algorithms.fused.shapes import module_params as module_params
from orin_rl.algorithms.fused.shapes import param_layout as param_layout
from orin_rl.algorithms.fused.shapes import parts_per_agent as parts_per_agent
from orin_rl.algorithms.fused.shapes import reduce_blocks as reduce_blocks
from orin_rl.algorithms.fused.shapes import shared_floats as shared_floats
from orin_rl.algorithms.fused.tasks import TASKS as TASKS
from orin_rl.algorithms.fused.tasks import device_task
from orin_rl.algorithms.gemm_update import GemmGrads
from orin_rl.buffers import ops
from orin_rl.models import profile as profiles

log = logging.getLogger(__name__)

MAX_FUSED_MINIBATCH = 2048
"""Largest per-agent minibatch the update kernels take (above it, torch's GEMMs)."""
ROLLOUT_THREADS = 128
UPDATE_THREADS = 256  # a power of two (tree reductions), at least 2 x the widest hidden layer


def blocker(cfg: Any, env: Any, policy: torch.nn.Module, device: torch.device,
            distributed: bool) -> str | None:  # fmt: skip
    """Why the fused kernels cannot run this configuration (None: they can)."""
    from orin_rl.buffers import memory

    ppo = cfg.ppo
    spec = policy.spec
    checks = [
        (ppo.fused == "off", "ppo.fused is off"),
        (device.type != "cuda" and not (ppo.fused == "on" and memory.cuda_simulated()),
         "the learner is not on CUDA"),
        (spec.action_kind != "discrete", f"continuous actions ({cfg.env.env_id}): the fused "
                                         "kernels' policy head is categorical"),
        (env.fused_task not in TASKS, f"the fused kernels cover {', '.join(TASKS)} on the gpu "
                                      f"backend, not {cfg.env.env_id} ({cfg.env.backend})"),
        (env.dtype != torch.float32, "a float64 env"),
        (device.type == "cuda" and cfg.buffer.placement in ("host", "pinned"),
         f"buffer placement {cfg.buffer.placement} keeps the rollout in host memory"),
        (len(spec.hidden_sizes) != 2, "the fused kernels take two hidden layers"),
        (spec.obs_groups is not None or spec.critic_hidden_sizes is not None,
         "an asymmetric actor-critic"),
        (ppo.desired_kl is not None, "the adaptive learning rate (ppo.desired_kl)"),
        (spec.profile is not profiles.GENERIC, "ppo.rsl_rl (rsl_rl's init, std and clipping)"),
        (ppo.normalize_advantage and ppo.normalize_advantage_per_minibatch,
         "ppo.normalize_advantage_per_minibatch (the fused update normalises the rollout's)"),
        (ppo.timeout_bootstrap != "final_obs", "ppo.timeout_bootstrap=value"),
        (spec.activation not in ("tanh", "relu"), f"activation {spec.activation}"),
        (ppo.normalize_obs or ppo.normalize_reward, "observation/reward normalisation"),
        (cfg.train.precision != "fp32", f"precision {cfg.train.precision}"),
        (ppo.target_kl is not None, "target_kl needs a host read per epoch"),
        (distributed, "a distributed run"),
        (cfg.train.compile, "torch.compile was asked for"),
    ]  # fmt: skip
    for failed, reason in checks:
        if failed:
            return reason
    dims = _dims(spec)
    if shared_floats(*dims, 1, CHUNK, TASKS[env.fused_task].state_dim)[0] > SHARED_FLOATS:
        return f"a policy of {spec.hidden_sizes} does not fit in a block's shared memory"
    return None


def _dims(spec: Any) -> tuple[int, int, int, int]:
    h1, h2 = spec.hidden_sizes
    return int(np.prod(spec.obs_shape)), int(h1), int(h2), int(spec.action_dim)


def update_blocker(cfg: Any, spec: Any) -> str | None:
    """Why the update stays torch's even when the rollout is fused (None: fused too, its
    gradients by ``grads_path``)."""
    if cfg.ppo.compile_update:
        return "ppo.compile_update asks for torch's update, compiled"
    if cfg.ppo.fused_grads == "kernel":
        return kernel_blocker(cfg, spec)
    return None


def grads_path(cfg: Any, spec: Any) -> str:
    """Who computes the fused update's gradients (``ppo.fused_grads``): ``kernel`` where asked,
    or on ``auto`` where the gradient kernel takes the shape; else ``gemm`` (gemm_update)."""
    choice = cfg.ppo.fused_grads
    if choice == "auto":
        return "kernel" if kernel_blocker(cfg, spec) is None else "gemm"
    return choice


def kernel_blocker(cfg: Any, spec: Any) -> str | None:
    """Why the gradient kernel does not take this update (None: it does)."""
    minibatch = cfg.ppo.num_steps * cfg.env.num_envs // cfg.ppo.num_minibatches
    if minibatch > MAX_FUSED_MINIBATCH:
        return (
            f"a minibatch of {minibatch} samples per agent (> {MAX_FUSED_MINIBATCH}): torch's "
            "matmuls beat the update kernels there"
        )
    dims = _dims(spec)
    if 2 * max(dims[1], dims[2]) > UPDATE_THREADS:
        return f"hidden layers wider than {UPDATE_THREADS // 2} units"
    if shared_floats(*dims, 1, CHUNK)[1] > SHARED_FLOATS:
        return f"a policy of {spec.hidden_sizes} does not fit in the update's shared memory"
    return None


# ---------------------------------------------------------------------------- driver
class FusedPPO:
    """Runs PPO iterations of ``algo`` (a PPO or MultiAgentPPO) with the fused kernels.

    Owns the flat parameter buffer (the policy's parameters become views of it), the Adam
    moments of the fused update and the scratch memory; ``iteration`` is one PPO iteration.
    """

    def __init__(self, algo: Any, env: Any, cfg: Any, fused_update: bool,
                 threads: tuple[int, int] | None = None, parts: int | None = None,
                 grads: str = "kernel"):  # fmt: skip
        self.algo = algo
        self.env = env
        self.cfg = cfg.ppo
        self.fused_update = fused_update
        self.gemm: GemmGrads | None = None
        """The update's gradients by batched GEMMs (``grads="gemm"``), else by the ``grads``
        and ``reduce`` kernels; ``apply`` steps either."""
        policy = algo.policy
        spec = policy.spec
        self.num_agents = getattr(policy, "num_agents", 1)
        self.num_envs = env.num_envs // self.num_agents  # per agent
        self.device = algo.device
        self.dims = _dims(spec)
        self.task = device_task(env.fused_task)
        """The env's dynamics in the rollout kernel (tasks.py)."""
        self.params = module_params(policy)
        self.flat = self._bind_flat(self.params)
        # as many envs per block as fit in shared memory, at most ENVS_PER_BLOCK
        state_dim = self.task.state_dim
        self.envs_per_block = max(
            [e for e in range(1, min(ENVS_PER_BLOCK, self.num_envs) + 1)
             if shared_floats(*self.dims, e, CHUNK, state_dim)[0] <= SHARED_FLOATS] or [1]
        )  # fmt: skip
        self.chunks = math.ceil(self.num_envs / self.envs_per_block)
        rt, ut = threads or (ROLLOUT_THREADS, UPDATE_THREADS)
        self.threads = (rt, ut)
        shape = (*self.dims, spec.activation, self.num_agents > 1, self.num_agents,
                 self.envs_per_block, rt, ut, self.task)  # fmt: skip
        try:
            self.kernels = build_kernels(*shape)
        except RuntimeError as exc:  # Numba finds no writable cache folder (read-only install)
            if "cannot cache" not in str(exc):
                raise
            log.warning("the fused kernels cannot be cached here (%s): they compile in every "
                        "process; set NUMBA_CACHE_DIR to a writable folder to keep them",
                        exc)  # fmt: skip
            self.kernels = build_kernels(*shape, cache=False)
        buf = algo.buffer
        T, K, N = buf.num_steps, self.num_agents, self.num_envs
        # per step and env: one uniform for the action, the task's for a reset state
        self.rand = torch.zeros(T, K * N, 1 + self.task.reset_uniforms, device=self.device)
        view = ops.numba_view
        st = env.stats
        self._rollout_args = [
            view(self.flat), view(env.state), view(env.elapsed), view(st.episode_return),
            view(st.episode_length), view(st._last_return), view(st._last_length),
            view(st._finished), view(self.rand),
            *(view(getattr(buf, name)) for name in (
                "obs", "actions", "logprobs", "values", "rewards", "terminated", "episode_end",
                "bootstrap_values", "next_values", "advantages", "returns")),
        ]  # fmt: skip
        if fused_update:
            z = lambda *shape: torch.zeros(*shape, device=self.device)  # noqa: E731
            size = self.flat.numel()
            self.grad, self.m1, self.m2 = z(size), z(size), z(size)
            self.stats = z(K, 5)
            self.keys = z(self.cfg.num_epochs, K, T * N)
            self.sorted = z(self.cfg.num_epochs, K, T * N)
            self.perm = torch.zeros(self.cfg.num_epochs, K, T * N, dtype=torch.int64,
                                    device=self.device)  # fmt: skip
            self.minibatch = T * N // self.cfg.num_minibatches
            if grads == "gemm":
                self.gemm = GemmGrads(self, spec.activation == "tanh")
            self.parts = parts or parts_per_agent(self.minibatch, K, self.device)
            # each block's slice of a minibatch gradient (the gemm path writes ``grad`` whole)
            self.partial = z(self.parts if self.gemm is None else 1, size)
            self.pterms = z(self.parts, K, 5)
            # blocks per agent of the reduce and Adam kernels: about 4 elements per thread
            self.reduce_blocks = reduce_blocks(size // K, K, self.threads[1], self.device)
            self.norms = z(K, self.reduce_blocks)
            # (learning rate, Adam steps so far): device scalars, so a graph replays them
            self.hyper = torch.zeros(2, dtype=torch.float64, device=self.device)
            self.adam_steps = 0
            self._prepare_args = [view(buf.advantages), view(self.stats), N]
            self._grads_args = [
                view(self.flat), view(self.partial), view(self.pterms),
                *(view(getattr(buf, name)) for name in (
                    "obs", "actions", "logprobs", "values", "advantages", "returns")),
                view(self.perm),
            ]  # fmt: skip
            self._reduce_args = [view(self.partial), view(self.grad), view(self.norms)]
            self._apply_args = [
                view(self.flat), view(self.grad), view(self.m1), view(self.m2),
                view(self.norms), view(self.pterms), view(self.stats), view(self.hyper),
            ]  # fmt: skip
            if self.gemm is not None:
                self._gemm_apply_args = [
                    *self._apply_args[:4], view(self.gemm.norms), view(self.gemm.pterms),
                    *self._apply_args[6:],
                ]  # fmt: skip

    @property
    def grads_path(self) -> str:
        """Who computes the update's gradients: ``gemm`` or ``kernel``."""
        return "kernel" if self.gemm is None else "gemm"

    def _bind_flat(self, params: list[torch.nn.Parameter]) -> torch.Tensor:
        """One flat buffer holding every parameter (agent-major within each tensor); the
        parameters become views of it, so torch and the kernels share the memory."""
        total = sum(p.numel() for p in params)
        flat = torch.empty(total, dtype=torch.float32, device=params[0].device)
        start = 0
        for p in params:
            n = p.numel()
            view = flat[start : start + n].view(p.shape)
            view.copy_(p.detach())
            p.data = view
            start += n
        return flat

    def _launch(self, kernel: Any, grid: int, block: int, args: list) -> None:
        if self.device.type == "cuda":
            kernel[grid, block, ops.stream(self.device)](*args)
        else:  # the Numba CUDA simulator (tests)
            kernel[grid, block](*args)

    def rollout(self) -> None:
        """One rollout into the algorithm's buffer: env steps, returns and advantages."""
        cfg = self.cfg
        self.rand.uniform_()
        self._launch(
            self.kernels.rollout, self.num_agents * self.chunks, self.threads[0],
            [*self._rollout_args, np.float32(cfg.gamma), np.float32(cfg.gae_lambda),
             int(self.env.max_episode_steps), self.num_envs, self.chunks],
        )  # fmt: skip
        self.algo.buffer.step = self.algo.buffer.num_steps

    def begin(self, lr: float) -> None:
        """Hand this iteration's learning rate and Adam step count to the update kernels
        (device scalars: a captured ``launch`` replays with them)."""
        if self.fused_update:
            self.hyper[0].fill_(float(lr))
            self.hyper[1].fill_(float(self.adam_steps))

    def end(self, num_updates: int) -> None:
        """Count the Adam steps that ``launch`` ran (host-side: a graph replay cannot)."""
        if self.fused_update:
            self.adam_steps += num_updates

    def launch_update(self, perm: torch.Tensor | None = None) -> tuple[int, int]:
        """Every epoch and minibatch step of the update, on the stream; loss sums into the
        algorithm's. ``perm`` (epochs, agents, samples) overrides the random permutation
        (tests). Launches only: it can be captured in a CUDA graph."""
        cfg, K, ut = self.cfg, self.num_agents, self.threads[1]
        if perm is None:
            self.keys.uniform_()
            torch.sort(self.keys, dim=-1, out=(self.sorted, self.perm))
        else:
            self.perm.copy_(perm)
        self._launch(self.kernels.prepare, K, ut,
                     [*self._prepare_args, bool(cfg.normalize_advantage)])  # fmt: skip
        consts = [np.float32(cfg.clip_coef), np.float32(cfg.ent_coef), np.float32(cfg.vf_coef),
                  bool(cfg.clip_value_loss), self.num_envs, cfg.num_minibatches]  # fmt: skip
        steps = cfg.num_epochs * cfg.num_minibatches
        if self.gemm is not None:
            self.gemm.begin()
        for j in range(steps):
            if self.gemm is None:
                self._launch(self.kernels.grads, K * self.parts, ut,
                             [*self._grads_args, *consts, j])  # fmt: skip
                self._launch(self.kernels.reduce, K * self.reduce_blocks, ut, self._reduce_args)
                args, blocks = self._apply_args, self.reduce_blocks
            else:  # the gradient by cuBLAS, straight into ``grad``; norms a column a tensor
                self.gemm.step(j)
                args, blocks = self._gemm_apply_args, self.gemm.norms.shape[1]
            apply = [*args, float(cfg.max_grad_norm), self.minibatch, j]
            self._launch(self.kernels.apply, K * blocks, ut, apply)
        torch.mean(self.stats, 0, out=self.algo._loss_sums)
        return steps, cfg.num_epochs

    def update(self, lr: float, perm: torch.Tensor | None = None) -> tuple[int, int]:
        """The whole update of one iteration at learning rate ``lr``: (gradient steps, epochs)."""
        self.begin(lr)
        num_updates, epochs = self.launch_update(perm)
        self.end(num_updates)
        return num_updates, epochs

    def launch(self) -> tuple[int, int]:
        """Rollout, returns and update of one iteration, launches only (capturable); call
        ``begin`` before and ``end`` after. (gradient steps, epochs)."""
        self.rollout()
        if self.fused_update:
            return self.launch_update()
        if self.cfg.normalize_advantage:
            self.algo.normalize_advantages()
        return self.algo.update_steps()

    def iteration(self, lr: float) -> tuple[int, int]:
        """One whole iteration, eagerly; (gradient steps, epochs)."""
        self.begin(lr)
        num_updates, epochs = self.launch()
        self.end(num_updates)
        return num_updates, epochs

    # ----------------------------------------------------------------- checkpoints
    def to_optimizer(self) -> None:
        """Write the fused Adam state into the torch optimizer (the checkpoint's format), so a
        run resumes on either path."""
        if not self.fused_update or self.adam_steps == 0:
            return
        opt = self.algo.optimizer
        start = 0
        for p in self.params:
            n = p.numel()
            state = opt.state[p]
            state["exp_avg"] = self.m1[start : start + n].view(p.shape).clone()
            state["exp_avg_sq"] = self.m2[start : start + n].view(p.shape).clone()
            state["step"] = torch.tensor(float(self.adam_steps), device=p.device)
            start += n

    def from_optimizer(self) -> None:
        """Take the Adam state from the torch optimizer (after a resume)."""
        if not self.fused_update:
            return
        opt = self.algo.optimizer
        start = 0
        for p in self.params:
            n = p.numel()
            state = opt.state.get(p)
            if state and "exp_avg" in state:
                self.m1[start : start + n].copy_(state["exp_avg"].reshape(-1))
                self.m2[start : start + n].copy_(state["exp_avg_sq"].reshape(-1))
                self.adam_steps = int(float(state["step"]))
            start += n
