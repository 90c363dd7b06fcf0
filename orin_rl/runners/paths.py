"""The one place that decides how PPO trains (docs/design.md: the training paths).

An iteration runs on one of five paths, tried in this order: ``fused`` (CartPole's rollout and
update as Numba kernels), ``overlap`` (the next rollout collected during the update),
``worker rollouts`` (the rollout workers run whole rollouts), ``graphs`` (one CUDA graph a whole
iteration) and ``eager`` (the loop in ``OnPolicyRunner._iterate``). Inside the eager path a CUDA
learner may still replay the update as a graph, the policy's act as one an env step, or an
mjlab env's own step. Each rule below reads what the configuration asks and what the env and
the policy declare (``VecEnv``'s capabilities), and says why a path cannot run (None: it can).
``PathChoice`` is what was chosen and why the others were not: logged once, and written to
``summary.json`` (``training_path``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch

from orin_rl.models import numpy_policy

log = logging.getLogger(__name__)

PATHS = ("fused", "overlap", "worker rollouts", "graphs", "eager")
"""The training paths, in the order an iteration tries them."""


@dataclass
class PathChoice:
    """The path an iteration takes, why each path before it in ``PATHS`` was not taken, and
    what runs as a CUDA graph inside it (True, or why not)."""

    path: str = "eager"
    not_taken: dict[str, str] = field(default_factory=dict)
    inside: dict[str, bool | str] = field(default_factory=dict)

    def settle(self, taken: dict[str, bool]) -> PathChoice:
        """Set ``path`` to the first of ``PATHS`` that ``taken`` marks; log the choice."""
        self.path = next((p for p in PATHS if taken.get(p)), "eager")
        why = "; ".join(f"{p}: {self.not_taken[p]}" for p in PATHS if p in self.not_taken)
        log.info("training path: %s%s", self.path, f" (not taken: {why})" if why else "")
        return self

    def to_dict(self) -> dict[str, Any]:
        """For summary.json."""
        return {"path": self.path, "not_taken": dict(self.not_taken), "inside": dict(self.inside)}


def graph_blocker(env: Any, device: torch.device, target_kl: float | None) -> str | None:
    """Why an iteration cannot be captured here (None when it can)."""
    if device.type != "cuda":
        return "the learner is not on a CUDA device"
    if not env.graph_safe:
        return "the environments step on the host (use --env-backend gpu)"
    if env.device != device:
        return f"the environments are on {env.device}, the learner on {device}"
    if target_kl is not None:
        return "ppo.target_kl needs a host read after every epoch"
    return None


def update_graph_blocker(cfg: Any, env: Any, device: torch.device, distributed: bool
                         ) -> str | None:  # fmt: skip
    """Why the update cannot be one CUDA graph (None: it can; ``ppo.graph_update``). Envs on
    the GPU are left out: ``train.cuda_graphs`` graphs their whole iteration (it needs them on
    the GPU, so it never meets this graph), an mjlab step has its own graphs, and the mjlab and
    MuJoCo Warp runs have not been checked with the update graphed on its own."""
    on_gpu = env.graph_safe or env.has_own_graphs
    checks = [
        (cfg.ppo.graph_update == "off", "ppo.graph_update=off"),
        (device.type != "cuda", "the learner is not on a CUDA device"),
        (on_gpu, "the envs step on the GPU (train.cuda_graphs graphs their whole iteration)"),
        (cfg.ppo.target_kl is not None, "ppo.target_kl reads the device after every epoch"),
        (cfg.train.precision == "fp16", "fp16's gradient scaler"),
        (distributed, "a distributed run (its collectives)"),
    ]  # fmt: skip
    return next((reason for failed, reason in checks if failed), None)


def act_graph_blocker(cfg: Any, policy: Any, device: torch.device, distributed: bool
                      ) -> str | None:  # fmt: skip
    """Why the policy's ``act`` cannot run as a CUDA graph on its own (None: it can)."""
    checks = [
        (device.type != "cuda", "the learner is not on a CUDA device"),
        (policy.normalization.where != "none",
         "an observation normaliser updates its statistics from the host's count"),
        (cfg.train.precision != "fp32", f"train.precision={cfg.train.precision}"),
        (cfg.train.num_agents > 1, "train.num_agents > 1"),
        (distributed, "a distributed run (its normaliser's collectives)"),
        (cfg.train.overlap, "--overlap acts in its collector thread"),
    ]  # fmt: skip
    return next((reason for failed, reason in checks if failed), None)


def overlap_blocker(cfg: Any, env: Any, device: torch.device, distributed: bool) -> str | None:
    """Why ``train.overlap`` cannot run this configuration (None: it can)."""
    checks = [
        (cfg.train.algo != "ppo", f"PPO only (train.algo is {cfg.train.algo})"),
        (env.has_own_graphs,
         "an mjlab task steps in MuJoCo Warp (on the GPU or Warp's CPU device alike), not in "
         "CPU workers: --overlap overlaps gymnasium's CPU physics (env.backend gym)"),
        (env.graph_safe,
         "the envs step on the GPU: there is no CPU physics to overlap (env.backend gym)"),
        (cfg.train.cuda_graphs, "--cuda-graphs captures a whole synchronous iteration"),
        (cfg.train.num_agents > 1, "train.num_agents > 1"),
        (distributed, "a distributed run"),
        (cfg.ppo.target_kl is not None, "ppo.target_kl (an early stop reads the device)"),
    ]  # fmt: skip
    return next((reason for failed, reason in checks if failed), None)


def worker_rollouts_blocker(runner: Any) -> str | None:
    """Why the rollout workers cannot collect this run's rollouts (None: they can); they then
    step one batch at a time like any VecEnv."""
    cfg = runner.cfg
    checks = [
        (not runner.env.runs_programs, "the envs are not rollout workers"),
        (runner.num_agents > 1, "train.num_agents > 1"),
        (runner.dist.enabled, "a distributed run"),
        (runner.fused is not None, "the fused kernels"),
    ]  # fmt: skip
    reason = next((why for failed, why in checks if failed), None)
    if reason is None:
        reason = numpy_policy.blocker(runner.policy)
    if reason is None and cfg.train.compile:
        reason = "train.compile (a compiled policy's weights are published as they are)"
    return reason
