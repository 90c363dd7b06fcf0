"""The on-policy runner: PPO's rollout → returns → update, in four forms.

- **general**: the loop below, eagerly, on any env backend;
- **graphs** (``train.cuda_graphs``): the first iteration runs eagerly on a side stream, then
  one whole iteration is captured in a CUDA graph and replayed (``runners.graphs``);
- **fused** (``ppo.fused``): the rollout (CartPole, MountainCar or Acrobot) and PPO's update
  in Numba kernels (``algorithms.fused``), also replayable as one graph;
- **many agents** (``train.num_agents``): N independent PPO agents as one batched program.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import numpy as np
import torch

from orin_rl import distributed
from orin_rl.algorithms import PPO, fused
from orin_rl.algorithms.ppo_multi import MultiAgentPPO
from orin_rl.buffers import RolloutBuffer, memory
from orin_rl.errors import OrinError
from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models import profile as profiles
from orin_rl.models.batched import BatchedActorCritic
from orin_rl.runners import paths
from orin_rl.runners.base import Runner
from orin_rl.runners.checkpointing import rng_state, set_rng_state
from orin_rl.runners.graphs import (
    GraphedAct,
    GraphedCall,
    GraphedIteration,
    GraphedUpdate,
    nvtx_range,
)
from orin_rl.runners.overlap import OverlappedRollouts, OverlappedWorkers
from orin_rl.runners.worker_rollouts import WorkerRollouts

log = logging.getLogger(__name__)


class OnPolicyRunner(Runner):
    """PPO (general, CUDA graphs, fused kernels, many agents)."""

    _graph: GraphedIteration | GraphedCall | None = None

    def _rollout_steps(self) -> int:
        return self.cfg.ppo.num_steps

    def _build(self) -> None:
        self.env.final_obs_needed = self.cfg.ppo.timeout_bootstrap == "final_obs"
        self._make_policy()
        self.buffer = self.make_rollout_buffer()
        choice = self.path_choice = paths.PathChoice()
        self._choose_graphs(choice)
        self._make_learner(choice)
        self._make_obs_into_buffer()
        self._choose_rollouts(choice)
        self._settle_path()

    def _make_policy(self) -> None:
        """The policy's spec (the env's spaces and groups, ``ppo`` and its profile), the policy
        on the learner's device, one set of weights on every rank."""
        cfg = self.cfg
        self.policy_spec = PolicySpec.from_spaces(
            self.env.observation_space,
            self.env.action_space,
            hidden_sizes=list(cfg.ppo.hidden_sizes),
            activation=cfg.ppo.activation,
            normalize_obs=cfg.ppo.normalize_obs,
            init_log_std=cfg.ppo.init_log_std,
            obs_clip=cfg.ppo.obs_clip,
            obs_groups=self.env.obs_groups,
            critic_hidden_sizes=cfg.ppo.critic_hidden_sizes,
            **profiles.spec_fields(profiles.of_config(cfg.ppo)),
            share_encoder=cfg.ppo.share_encoder,
        )
        if self.num_agents > 1 and self.policy_spec.obs_groups is not None:
            raise OrinError(
                f"{cfg.env.env_id} has actor and critic observation groups; train.num_agents > 1 "
                "takes one observation for both: train the agents one by one"
            )
        self.policy = (
            BatchedActorCritic(self.policy_spec, self.num_agents)
            if self.num_agents > 1
            else ActorCritic(self.policy_spec)
        ).to(self.device)
        if self.dist.enabled:
            distributed.broadcast_module(self.policy)  # one set of weights to start from
            torch.manual_seed(cfg.train.seed + 7919 * self.dist.rank)  # own action samples

    def _choose_graphs(self, choice: paths.PathChoice) -> None:
        """``train.cuda_graphs``: a whole iteration as one graph where ``graph_blocker`` finds
        nothing against it; else the env's own step graphs (mjlab's), else the act alone."""
        cfg = self.cfg
        self.use_graphs = False
        self.act_graph = False
        self.env_graphs: dict[str, Any] | None = None
        if cfg.train.cuda_graphs:
            blocker = paths.graph_blocker(self.env, self.device, cfg.ppo.target_kl)
            if blocker is None and self.dist.enabled and self.dist.backend != "nccl":
                blocker = f"{self.dist.backend} collectives cannot be captured"
            self.use_graphs = blocker is None
            if blocker is not None:
                choice.not_taken["graphs"] = blocker
            self.env_graphs = None if self.use_graphs else self.env.use_graphs()
            if self.env_graphs is not None:  # the env's own step in graphs (mjlab's)
                choice.inside["env step"] = True
                log.info("CUDA graphs in the env's step: %s", self.env_graphs)
            elif blocker and not self.env.has_own_graphs:
                act_blocker = paths.act_graph_blocker(cfg, self.policy, self.device,
                                                      self.dist.enabled)  # fmt: skip
                self.act_graph = act_blocker is None
                choice.inside["act"] = act_blocker or True
                if self.act_graph:  # the policy's act alone, one launch an env step
                    log.info("CUDA graphs: no graph of a whole iteration (%s); the policy's act "
                             "runs as one each env step", blocker)  # fmt: skip
                else:
                    log.warning("CUDA graphs off: %s; running eagerly", blocker)
            elif self.env.has_own_graphs:  # an mjlab world on Warp's CPU device, or graphs off
                where = "CPU" if self.env.device.type != "cuda" else "GPU, ORIN_RL_MJLAB_GRAPHS=0"
                choice.inside["env step"] = f"the mjlab world steps eagerly ({where})"
                log.warning("CUDA graphs off: the mjlab world steps eagerly (%s)", where)
        else:
            choice.not_taken["graphs"] = "train.cuda_graphs is off"

    def _make_learner(self, choice: paths.PathChoice) -> None:
        """PPO (or its many-agents form), the fused kernels where they run, and the update's and
        the act's graphs inside the eager path."""
        cfg = self.cfg
        update_blocker = paths.update_graph_blocker(cfg, self.env, self.device, self.dist.enabled)
        args = (self.policy, self.buffer, cfg.ppo, self.num_iterations, self.device)
        capturable = self.use_graphs or update_blocker is None
        options = {"precision": cfg.train.precision, "capturable": capturable}
        if self.num_agents > 1:
            self.algo: Any = MultiAgentPPO(*args, **options)
        else:
            self.algo = PPO(*args, **options, dist_ctx=self.dist)
        self._make_fused()
        if self.act_graph and self.fused is None:
            self.algo.graphed_act = GraphedAct(self.algo.policy.act)
        if update_blocker is None and self.fused is None:
            self.algo.graphed_update = GraphedUpdate(self.algo)
            choice.inside["update"] = True
            log.info("the update runs as a CUDA graph (ppo.graph_update=off launches it op by op)")
        elif self.device.type == "cuda" and not self.use_graphs and self.fused is None:
            choice.inside["update"] = update_blocker
            log.info("the update launches op by op: %s", update_blocker)

    def _choose_rollouts(self, choice: paths.PathChoice) -> None:
        """Rollout workers where the env runs programs and nothing is against them; the
        overlapped collector with ``train.overlap``."""
        cfg = self.cfg
        self.worker_rollouts: WorkerRollouts | None = None
        reason = paths.worker_rollouts_blocker(self)
        if reason is None:
            self.worker_rollouts = WorkerRollouts(self)
        else:
            choice.not_taken["worker rollouts"] = reason
            if self.env.runs_programs:
                log.warning("rollout workers step one batch at a time: %s", reason)
        self.overlap: OverlappedRollouts | OverlappedWorkers | None = None
        if not cfg.train.overlap:
            choice.not_taken["overlap"] = "train.overlap is off"
        else:
            reason = paths.overlap_blocker(cfg, self.env, self.device, self.dist.enabled)
            if reason is not None:
                raise OrinError(f"train.overlap: {reason}; drop --overlap")
            if self.worker_rollouts is not None:
                self.overlap = OverlappedWorkers(self)
            else:
                self.overlap = OverlappedRollouts(self)
            log.info("overlapped rollouts: the envs collect the next rollout during the update")

    def make_rollout_buffer(
        self, storage: dict[str, memory.Storage] | None = None
    ) -> RolloutBuffer:
        """A rollout buffer of this run's shape and placement (over ``storage`` where given:
        the rollout workers' shared memory)."""
        cfg, spec = self.cfg, self.policy_spec
        discrete = spec.action_kind == "discrete"
        return RolloutBuffer(
            cfg.ppo.num_steps,
            cfg.env.num_envs * self.num_agents,
            tuple(spec.obs_shape),
            () if discrete else (spec.action_dim,),
            torch.int64 if discrete else torch.float32,
            self.device,
            cfg.buffer.placement,
            cfg.ppo.num_minibatches,
            storage,
            keep_action_means=spec.profile.exact_kl and not discrete,  # the KL needs the means
            obs_dtype=getattr(torch, spec.obs_dtype),  # uint8 frames stay uint8
        )

    def _make_obs_into_buffer(self) -> None:
        """CPU envs write straight into storage the learner reads, where the buffer allows it.

        ``host`` storage on a CPU learner, ``managed`` on a CUDA one (auto on an integrated GPU
        such as Orin, where CPU and GPU share the DRAM): each step's observations go into the
        rollout buffer's next slot and the other outputs into env-owned storage of the same
        placement. The learner reads them where they are: no host-to-device copy, and no copy
        of the observation into the buffer. (The fused path and CUDA graphs have GPU envs.)
        """
        self.obs_into_buffer = False
        env_obs = self.env.observation_space
        if not (
            self.env.writes_into_storage
            and self.num_agents == 1
            and self.fused is None
            and not self.use_graphs
            and self.buffer.host_writable
            and (np.issubdtype(env_obs.dtype, np.floating) or env_obs.dtype == np.uint8)
            # overlapped on CUDA, the collector's host writes would meet the learner's kernels
            # in managed memory (Tegra: concurrentManagedAccess 0)
            and not (self.cfg.train.overlap and self.device.type == "cuda")
        ):
            return
        self.env.stage_outputs(self.buffer.placement)
        self.obs_into_buffer = True
        log.info("gym envs write into %s storage: no device copy", self.buffer.placement)

    def _make_fused(self) -> None:
        """The fused kernels where they apply (``ppo.fused``); the choice is logged."""
        cfg = self.cfg
        self.fused: fused.FusedPPO | None = None
        self._fused_checked = False
        if cfg.ppo.fused == "off":
            self.path_choice.not_taken["fused"] = "ppo.fused is off"
            return
        reason = fused.blocker(cfg, self.env, self.policy, self.device, self.dist.enabled)
        if reason is not None:
            self.path_choice.not_taken["fused"] = reason
            if cfg.ppo.fused == "on":
                raise OrinError(f"ppo.fused=on, but {reason}; set ppo.fused=auto or off")
            if self.device.type == "cuda":
                log.info("fused PPO kernels off (%s): general path", reason)
            return
        update_reason = fused.update_blocker(cfg, self.policy.spec)
        grads = fused.grads_path(cfg, self.policy.spec)
        self.fused = fused.FusedPPO(self.algo, self.env, cfg, fused_update=update_reason is None,
                                    grads=grads)  # fmt: skip
        if update_reason is None and self.fused.grads_path == "gemm":
            log.info("fused PPO kernels: the rollout in one kernel, the update's gradients by "
                     "batched GEMMs (ppo.fused_grads=%s)", cfg.ppo.fused_grads)  # fmt: skip
        elif update_reason is None:
            log.info("fused PPO kernels: the rollout in one kernel, the update in %d blocks "
                     "per agent and minibatch step", self.fused.parts)  # fmt: skip
        else:
            log.info("fused PPO kernels: rollout fused, update by torch (%s)", update_reason)

    # ------------------------------------------------------------------ one iteration
    def _iterate(self, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """One iteration from ``obs``: a graph replay once captured, else eager."""
        algo, nvtx = self.algo, self.cfg.train.nvtx
        if self.fused is not None:
            if self._fused_checked or self.cfg.ppo.fused == "on":
                return self._fused_iterate()
            # auto: the first iteration compiles the kernels, one by one as they first launch.
            # If one fails, undo what the kernels before it did (the env, the rollout buffer,
            # the draws, the weights) and go on as if the run had started on the general path.
            before = self._fused_snapshot()
            try:
                out = self._fused_iterate()
            except Exception as exc:  # Numba raises many kinds when a compile fails
                first = (str(exc).splitlines() or [""])[0][:200]
                log.warning("fused PPO kernels failed on their first iteration (%s: %s); the "
                            "general path takes over (ppo.fused=off skips the attempt)",
                            type(exc).__name__, first)  # fmt: skip
                self._fused_restore(before)
                self.fused = None
                self.path_choice.not_taken["fused"] = f"its kernels failed to compile ({first})"
                self._settle_path()
            else:
                self._fused_checked = True
                return out
        if self.overlap is not None:
            return self.overlap.iterate(obs)
        if self.worker_rollouts is not None:
            return self.worker_rollouts.iterate()
        if self.use_graphs and self._graph is None and not self._cold_capture_tried:
            self._cold_capture_tried = True
            self._capture_cold(obs)
        if self._graph is not None:
            lr = algo.set_learning_rate()
            with nvtx_range("iteration (CUDA graph replay)", nvtx):
                obs, num_updates, epochs = self._graph.replay()
            return obs, algo.finish_update(num_updates, epochs, lr)
        # The first iteration of a graphed run is its warm-up, on a side stream (torch docs).
        side = torch.cuda.Stream(self.device) if self.use_graphs else None
        if side is not None:
            side.wait_stream(torch.cuda.current_stream(self.device))
        began = time.perf_counter()
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            with nvtx_range("rollout", nvtx):
                for _ in range(self.rollout_steps):  # batched env steps into the buffer
                    actions = algo.act(obs)
                    step = self.env_step(actions, algo.buffer)
                    algo.process_env_step(step)
                    obs = step.obs
            if self.device.type == "cuda":  # the phases' wall times (one sync an iteration)
                torch.cuda.synchronize(self.device)
            rolled = time.perf_counter()
            with nvtx_range("gae", nvtx):
                algo.compute_returns(obs)
            with nvtx_range("update", nvtx):
                losses = algo.update()  # ends in a host read of the losses
        losses["perf/rollout_s"] = rolled - began
        losses["perf/update_s"] = time.perf_counter() - rolled
        if side is not None:
            torch.cuda.current_stream(self.device).wait_stream(side)
            self._capture(obs)
        return obs, losses

    def _settle_path(self) -> None:
        """The path the next iteration takes (``runners.paths``), logged once."""
        self.path_choice.settle({
            "fused": self.fused is not None, "overlap": self.overlap is not None,
            "worker rollouts": self.worker_rollouts is not None, "graphs": self.use_graphs,
        })  # fmt: skip

    def env_step(self, actions: torch.Tensor, buffer: RolloutBuffer) -> Any:
        """``env.step``; with ``obs_into_buffer`` the observations land in ``buffer``'s next
        slot (the last step's in the env's own storage: it starts the next rollout)."""
        if self.obs_into_buffer:
            nxt = buffer.step + 1
            if nxt < buffer.num_steps:
                return self.env.step(actions, obs_out=buffer.obs_slot(nxt))
        return self.env.step(actions)

    _cold_capture_tried = False

    def _capture_cold(self, obs: torch.Tensor) -> None:
        """Capture the first iteration from ``obs`` (the first reset's) with no eager iteration
        before it: a GPU-physics task's eager warm-up was most of its start-up (86,920 Warp
        launches from Python for Humanoid-v5, issue 54). Where it cannot, or the capture
        fails, the first iteration warms up eagerly and the second is captured, as before."""
        if self.cfg.train.graph_warm_up:
            return
        reason = self.algo.prepare_capture()
        if reason is not None:
            log.info("the first iteration warms up eagerly before the capture: %s", reason)
            return
        graph = GraphedIteration(self.algo, self.env, self.cfg.ppo.num_steps)
        try:
            graph.capture(obs)
        except Exception as exc:  # the eager warm-up and a second capture remain
            first = (str(exc).splitlines() or [""])[0][:200]
            log.warning("CUDA graph capture from the first reset failed (%s: %s); warming up "
                        "with one eager iteration", type(exc).__name__, first)  # fmt: skip
            self.algo.buffer.clear()
            return
        self._graph = graph
        log.info("captured one PPO iteration from the first reset in a CUDA graph")

    def _capture(self, obs: torch.Tensor) -> None:
        graph = GraphedIteration(self.algo, self.env, self.cfg.ppo.num_steps)
        try:
            graph.capture(obs)
        except Exception as exc:  # stay correct: an eager run is slower, not wrong
            log.warning("CUDA graph capture failed (%s); running eagerly", exc)
            self.algo.buffer.clear()
            self.use_graphs = False
            return
        self._graph = graph
        log.info("captured one PPO iteration in a CUDA graph; replaying it from now on")

    # -------------------------------------------------------------- the fused path
    def _fused_snapshot(self) -> dict[str, Any]:
        """What a fused iteration changes before its update ends: see ``_fused_restore``."""
        return {
            "env": self.env.get_state(),
            "rng": rng_state(self.device),
            "flat": self.fused.flat.clone(),  # type: ignore[union-attr]  # fused is set
        }

    def _fused_restore(self, before: dict[str, Any]) -> None:
        self.env.set_state(before["env"])
        set_rng_state(before["rng"], self.device)
        self.fused.flat.copy_(before["flat"])  # type: ignore[union-attr]  # fused is set
        self.algo.buffer.clear()

    def _fused_iterate(self) -> tuple[torch.Tensor, dict[str, float]]:
        """One iteration of the fused kernels (a graph replay with ``--cuda-graphs``)."""
        algo, nvtx = self.algo, self.cfg.train.nvtx
        fused_ppo: fused.FusedPPO = self.fused  # type: ignore[assignment]  # set by the caller
        lr = algo.set_learning_rate()
        with nvtx_range("fused iteration", nvtx):
            if self._graph is not None:
                fused_ppo.begin(lr)
                _, num_updates, epochs = self._graph.replay()
                fused_ppo.end(num_updates)
            elif self.use_graphs:  # warm up on a side stream, then capture (torch docs)
                side = torch.cuda.Stream(self.device)
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    num_updates, epochs = fused_ppo.iteration(lr)
                torch.cuda.current_stream(self.device).wait_stream(side)
                graph = GraphedCall(fused_ppo.launch)
                try:
                    graph.capture()
                except Exception as exc:  # stay correct: an eager run is slower, not wrong
                    log.warning("CUDA graph capture failed (%s); running eagerly", exc)
                    self.use_graphs = False
                else:
                    self._graph = graph
                    log.info("captured the fused iteration in a CUDA graph")
            else:
                num_updates, epochs = fused_ppo.iteration(lr)
        return self.env.observe(), algo.finish_update(num_updates, epochs, lr)

    # ------------------------------------------------------------- bookkeeping
    def graphed(self) -> bool:
        return self._graph is not None or super().graphed()

    def _fused_path(self) -> str | None:
        if self.fused is None:
            return None
        return "rollout+update" if self.fused.fused_update else "rollout"

    def _fused_grads(self) -> str | None:
        if self.fused is None or not self.fused.fused_update:
            return None
        return self.fused.grads_path

    def _algo_state(self) -> dict[str, Any]:
        if self.fused is not None:
            self.fused.to_optimizer()  # the fused Adam state in the optimizer's format
        return super()._algo_state()

    def _restore_algo_extras(self) -> None:
        if self.fused is not None:
            self.fused.from_optimizer()
        if self.overlap is not None:
            self.overlap.restore_from_learner()

    def _finish(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            return super()._finish(*args, **kwargs)
        finally:
            if self.overlap is not None:
                self.overlap.close()
            if self.worker_rollouts is not None:
                self.worker_rollouts.close()
