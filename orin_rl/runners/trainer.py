"""The training loop: rollout → returns → update, with logs, checkpoints and evaluation.

``Trainer.learn`` reads top to bottom as the whole story; everything else is bookkeeping.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import random
import shutil
import signal
import statistics
import time
from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tqdm.auto import tqdm

from orin_rl import config as config_mod
from orin_rl import distributed, envs, jetson
from orin_rl.algorithms import PPO, fused
from orin_rl.algorithms.dqn import DQN
from orin_rl.algorithms.ppo_multi import MultiAgentPPO
from orin_rl.algorithms.sac import SAC
from orin_rl.buffers import RolloutBuffer
from orin_rl.checkpoint import (
    CheckpointError,
    load_checkpoint,
    remove_stale_temp_files,
    save_checkpoint,
)
from orin_rl.config import Config
from orin_rl.envs.gpu import MUJOCO_IDS, make_gpu
from orin_rl.errors import OrinError
from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models.batched import BatchedActorCritic
from orin_rl.runners.evaluate import evaluate, evaluate_agents, evaluate_batch
from orin_rl.runners.graphs import GraphedCall, GraphedIteration, graph_blocker, nvtx_range
from orin_rl.runners.logger import MetricsLogger, plot_curve, read_metrics

log = logging.getLogger(__name__)

PROGRESS_LINE_S = 10.0
"""With ``progress="lines"``: seconds between two progress log lines (plus the first and last
iteration)."""

VERDICT_SEED_OFFSET = 2**30
"""Episode seeds of the final verdict start at train.seed + this: no periodic evaluation
(10,000 + 1,000 * iteration) reaches them."""


class RunFolderError(OrinError, ValueError):
    """The run folder cannot be used as asked (exists, missing, or from another run)."""


def resolve_device(name: str) -> torch.device:
    """``auto`` → cuda when torch sees a GPU, else cpu; ``cuda`` without a GPU is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise OrinError(
            "--device cuda asked for, but torch sees no CUDA GPU (CPU-only torch build or no "
            "driver); use --device cpu, or install a CUDA build of torch"
        )
    return torch.device(name)


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch (CPU and CUDA)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class _StopRequest:
    """Turns SIGINT/SIGTERM into a flag the loop checks between steps."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopRequest:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, _frame) -> None:
        if self.signum is not None:  # second signal: give up immediately
            raise KeyboardInterrupt
        self.signum = signum
        log.warning("%s received: finishing with a checkpoint", signal.Signals(signum).name)

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class Trainer:
    """Owns the env, the algorithm, the run folder and the loop."""

    def __init__(
        self,
        cfg: Config,
        run_dir: str | Path,
        resume: bool = False,
        progress: bool | str = True,
    ):
        self.run_dir = Path(run_dir)
        state = self._load_resume_state() if resume else None
        if state is not None:
            cfg = config_mod.from_plain(state["config"])
        self.cfg = cfg
        if cfg.train.torch_threads:
            torch.set_num_threads(cfg.train.torch_threads)
        self.device = resolve_device(cfg.train.device)
        # torchrun's environment makes this one rank of several (nothing changes otherwise).
        self.dist = distributed.init_from_env(self.device.type)
        if self.dist.enabled and self.device.type == "cuda":
            self.device = torch.device("cuda", self.dist.local_rank)
        self.is_main = self.dist.is_main
        # True / "bar": a tqdm bar; "lines": plain log lines (logs and CI, no carriage
        # returns); False: neither.
        self.progress = ("bar" if progress is True else progress) if self.is_main else False
        if self.progress not in (False, "bar", "lines"):
            raise ValueError(f"progress must be True, False, 'bar' or 'lines', got {progress!r}")
        if state is None and self.is_main:
            self._check_run_dir()
        if state is not None and state.get("world_size", 1) != self.dist.world_size:
            raise distributed.DistributedError(
                f"{self.run_dir} was trained with {state.get('world_size', 1)} processes, this "
                f"resume has {self.dist.world_size}; resume with --nproc "
                f"{state.get('world_size', 1)}"
            )
        # Vector-env steps per iteration: PPO's rollout, or the env steps between two rounds
        # of off-policy gradient steps.
        if cfg.train.algo == "ppo":
            self.rollout_steps = cfg.ppo.num_steps
        else:
            self.rollout_steps = max(1, getattr(cfg, cfg.train.algo).train_freq // cfg.env.num_envs)
        self.iteration_steps = self.rollout_steps * cfg.env.num_envs * self.dist.world_size
        self.num_iterations = max(1, math.ceil(cfg.train.total_steps / self.iteration_steps))
        seed_everything(cfg.train.seed)

        self.num_agents = cfg.train.num_agents
        if self.num_agents > 1 and self.dist.enabled:
            raise distributed.DistributedError(
                "train.num_agents > 1 runs in one process; drop --nproc or --num-agents"
            )
        self.env = envs.make(
            cfg.env.env_id,
            cfg.env.num_envs * self.num_agents,  # agent k owns the k-th block of num_envs
            self.device,
            backend=cfg.env.backend,
            vectorization=cfg.env.vectorization,
            max_episode_steps=cfg.env.max_episode_steps,
            env_kwargs=cfg.env.kwargs,
            wrappers=cfg.env.wrappers,
        )
        if cfg.train.algo != "ppo":
            self._make_off_policy()
        else:
            self._make_ppo()
        if state is None and self.is_main:
            self._create_run_dir(cfg)
        self.agent_returns: list[float] | None = None  # final per-agent evaluation
        self.sync_checks = 0  # bit-identity checks of the parameters across ranks passed
        self._graph: GraphedIteration | None = None
        self._eval_envs: Any = None  # the GPU-physics evaluation batch, made on first use
        if cfg.train.compile:
            self._compile()
        self.threshold = (
            cfg.train.solved_threshold
            if cfg.train.solved_threshold is not None
            else envs.reward_threshold(cfg.env.env_id)
        )
        self.global_step = 0
        self.time_offset = 0.0  # wall time spent by earlier processes of a resumed run
        self.solved_at: dict[str, float] | None = None
        self.solved_streak = 0  # consecutive solved periodic evaluations
        self.eval_time_s = 0.0  # spent in periodic evaluations by this process
        self._verdict_returns: list[float] | None = None  # a passed verdict evaluation
        self.episode_window: deque[float] = deque(maxlen=100)  # returns behind the mean
        self._obs: torch.Tensor | None = None  # the observation the next step acts on
        self._restored_obs: torch.Tensor | None = None
        if state is not None:
            self._restore(state)
        log.info(
            "training %s (%s) on %s: %d envs x %d steps, %d iterations; buffer %s (%s)",
            cfg.env.env_id,
            cfg.train.algo,
            self.device,
            cfg.env.num_envs,
            self.rollout_steps,
            self.num_iterations,
            self.buffer.placement,
            self.buffer.placement_reason,
        )

    def _make_off_policy(self) -> None:
        """SAC or DQN with its replay buffer (the algorithm owns both networks and storage)."""
        cfg = self.cfg
        if self.dist.enabled:
            raise distributed.DistributedError(f"--nproc is PPO-only; {cfg.train.algo} runs in one")
        sub = getattr(cfg, cfg.train.algo)
        space = self.env.action_space
        if cfg.train.algo == "sac" and not isinstance(space, gym.spaces.Box):
            raise OrinError(f"SAC needs continuous actions; {cfg.env.env_id} has {space}: use dqn")
        if cfg.train.algo == "dqn" and not isinstance(space, gym.spaces.Discrete):
            raise OrinError(f"DQN needs discrete actions; {cfg.env.env_id} has {space}: use sac")
        self.policy_spec = PolicySpec.from_spaces(
            self.env.observation_space,
            space,
            hidden_sizes=list(sub.hidden_sizes),
            activation="relu",
            squash=cfg.train.algo == "sac",
        )
        common = (self.policy_spec, sub, cfg.env.num_envs, self.device, cfg.buffer.placement,
                  cfg.train.log_every)  # fmt: skip
        if cfg.train.algo == "sac":
            graphs = cfg.train.cuda_graphs
            if graphs and (self.device.type != "cuda" or cfg.sac.prioritized):
                log.warning(
                    "CUDA graphs off: %s; running eagerly",
                    "the learner is not on a CUDA device"
                    if self.device.type != "cuda"
                    else "prioritized replay updates the sum-tree outside the graph",
                )
                graphs = False
            self.algo = SAC(*common, graphs=graphs, precision=cfg.train.precision)
        else:
            self.algo = DQN(
                *common, total_steps=cfg.train.total_steps, precision=cfg.train.precision
            )
        self.policy = self.algo.policy
        self.buffer = self.algo.replay
        self.use_graphs = False
        self.fused = None
        self.obs_into_buffer = False

    def _make_ppo(self) -> None:
        cfg = self.cfg
        self.policy_spec = PolicySpec.from_spaces(
            self.env.observation_space,
            self.env.action_space,
            hidden_sizes=list(cfg.ppo.hidden_sizes),
            activation=cfg.ppo.activation,
            normalize_obs=cfg.ppo.normalize_obs,
            init_log_std=cfg.ppo.init_log_std,
            obs_clip=cfg.ppo.obs_clip,
        )
        self.policy = (
            BatchedActorCritic(self.policy_spec, self.num_agents)
            if self.num_agents > 1
            else ActorCritic(self.policy_spec)
        ).to(self.device)
        if self.dist.enabled:
            distributed.broadcast_module(self.policy)  # one set of weights to start from
            torch.manual_seed(cfg.train.seed + 7919 * self.dist.rank)  # own action samples
        discrete = self.policy_spec.action_kind == "discrete"
        self.buffer = RolloutBuffer(
            cfg.ppo.num_steps,
            cfg.env.num_envs * self.num_agents,
            tuple(self.policy_spec.obs_shape),
            () if discrete else (self.policy_spec.action_dim,),
            torch.int64 if discrete else torch.float32,
            self.device,
            cfg.buffer.placement,
            cfg.ppo.num_minibatches,
        )
        self.use_graphs = False
        if cfg.train.cuda_graphs:
            blocker = graph_blocker(self.env, self.device, cfg.ppo.target_kl)
            if blocker is None and self.dist.enabled and self.dist.backend != "nccl":
                blocker = f"{self.dist.backend} collectives cannot be captured"
            self.use_graphs = blocker is None
            if blocker:
                log.warning("CUDA graphs off: %s; running eagerly", blocker)
        args = (self.policy, self.buffer, cfg.ppo, self.num_iterations, self.device)
        options = {"precision": cfg.train.precision, "capturable": self.use_graphs}
        if self.num_agents > 1:
            self.algo: Any = MultiAgentPPO(*args, **options)
        else:
            self.algo = PPO(*args, **options, dist_ctx=self.dist)
        self._make_fused()
        self._make_obs_into_buffer()

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
            isinstance(self.env, envs.GymVecEnv)
            and self.num_agents == 1
            and self.fused is None
            and not self.use_graphs
            and self.buffer.host_writable
            and np.issubdtype(env_obs.dtype, np.floating)
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
            return
        reason = fused.blocker(cfg, self.env, self.policy, self.device, self.dist.enabled)
        if reason is not None:
            if cfg.ppo.fused == "on":
                raise OrinError(f"ppo.fused=on, but {reason}; set ppo.fused=auto or off")
            if self.device.type == "cuda":
                log.info("fused PPO kernels off (%s): general path", reason)
            return
        update_reason = fused.update_blocker(cfg, self.policy.spec)
        self.fused = fused.FusedPPO(self.algo, self.env, cfg, fused_update=update_reason is None)
        if update_reason is None:
            log.info("fused PPO kernels: the rollout in one kernel, the update in %d blocks "
                     "per agent and minibatch step", self.fused.parts)  # fmt: skip
        else:
            log.info("fused PPO kernels: rollout fused, update by torch (%s)", update_reason)

    # ------------------------------------------------------------------ the loop
    def learn(self) -> dict[str, Any]:
        """Train to ``total_steps``, a solved evaluation (if asked) or a signal; summarise."""
        cfg = self.cfg
        episode_returns = self.episode_window
        logger = MetricsLogger(self.run_dir, cfg.train.tensorboard) if self.is_main else None
        self.monitor = jetson.start_monitor(cfg.train.power_monitor) if self.is_main else None
        check_sync = self.dist.enabled and os.environ.get("ORIN_RL_CHECK_SYNC") == "1"
        rank_offset = 100_000 * self.dist.rank  # each rank its own episodes
        start = time.perf_counter()
        start_step = self.global_step
        obs = self._restored_obs
        if obs is None:
            obs = self.env.reset(seed=cfg.train.seed + 1000 * self.algo.iteration + rank_offset)
        self._obs = obs
        bar = tqdm(
            total=self.num_iterations * self.iteration_steps,
            initial=self.global_step,
            unit="step",
            unit_scale=True,
            dynamic_ncols=True,
            disable=self.progress != "bar",
            desc=cfg.env.env_id,
        )
        last_line = -math.inf  # when the last progress line was logged
        stop_reason = "total_steps"
        try:
            with _StopRequest() as stop:
                while self.algo.iteration < self.num_iterations:
                    # Rollout, returns and update. A signal lets the iteration finish (well
                    # under a second), so the final checkpoint sits on an iteration boundary and
                    # the resumed run continues exactly; a second signal stops at once.
                    obs, losses = self._iterate(obs)
                    self._obs = obs
                    self.global_step += self.iteration_steps
                    bar.update(self.iteration_steps)
                    if check_sync:
                        distributed.check_identical(self.policy, self.dist.world_size)
                        self.sync_checks += 1

                    returns, _ = self.env.pop_episode_stats()
                    episode_returns.extend(returns)
                    it = self.algo.iteration
                    elapsed = self.time_offset + time.perf_counter() - start
                    record = {
                        "global_step": self.global_step,
                        "iteration": it,
                        "time_s": round(elapsed, 3),
                        "steps_per_s": (self.global_step - start_step)
                        / max(time.perf_counter() - start, 1e-9),
                        **losses,
                    }
                    if episode_returns:
                        record["charts/episode_return_mean"] = statistics.fmean(episode_returns)
                        bar.set_postfix(ret=f"{record['charts/episode_return_mean']:.1f}")
                    record.update(self._memory_stats())
                    evaluated = cfg.train.eval_every and it % cfg.train.eval_every == 0
                    if evaluated and self.is_main:
                        self._periodic_eval(record, elapsed)
                    now = time.perf_counter()
                    last = it >= self.num_iterations
                    if self.progress == "lines" and (now - last_line >= PROGRESS_LINE_S or last):
                        last_line = now
                        self._progress_line(record)
                    if logger is not None and (it % cfg.train.log_every == 0 or evaluated):
                        logger.log(record)
                    signalled = stop.signum is not None
                    solved = (
                        cfg.train.stop_at_threshold
                        and self.solved_streak >= cfg.train.solved_patience
                        and self.is_main
                        and self._verdict_passes()
                    )
                    limit = cfg.train.max_wall_s
                    out_of_time = limit is not None and time.perf_counter() - start >= limit
                    if self.dist.enabled:  # every rank stops together (rank 0 evaluates)
                        signalled, solved, out_of_time = distributed.any_rank(
                            [signalled, solved, out_of_time], self.device
                        )
                    if it % cfg.train.checkpoint_every == 0 or signalled:
                        self._save(elapsed)
                    if signalled:
                        stop_reason = signal.Signals(stop.signum or signal.SIGTERM).name
                        break
                    if solved:
                        stop_reason = "solved"
                        break
                    if out_of_time:
                        stop_reason = "max_wall_s"
                        break
        except BaseException:
            if self.monitor is not None:  # never leave a tegrastats process behind
                self.monitor.stop()
            raise
        finally:
            bar.close()
            if logger is not None:
                logger.close()
        elapsed = self.time_offset + time.perf_counter() - start
        self._save(elapsed)
        summary = self._finish(elapsed, start_step, time.perf_counter() - start, stop_reason)
        return summary

    def _progress_line(self, record: dict[str, Any]) -> None:
        """One plain log line: steps done of the total, speed, returns (no carriage return)."""
        step, total = record["global_step"], self.num_iterations * self.iteration_steps
        parts = [
            f"step {step:,} / {total:,} ({100 * step / total:.0f}%)",
            f"{record['steps_per_s']:,.0f} steps/s",
        ]
        if "charts/episode_return_mean" in record:
            parts.append(f"return {record['charts/episode_return_mean']:.1f}")
        if "eval/return_mean" in record:
            parts.append(f"eval {record['eval/return_mean']:.1f}")
        log.info("%s: %s", self.cfg.env.env_id, ", ".join(parts))

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
            else:
                self._fused_checked = True
                return out
        if self._graph is not None:
            lr = algo.set_learning_rate()
            with nvtx_range("iteration (CUDA graph replay)", nvtx):
                obs, num_updates, epochs = self._graph.replay()
            return obs, algo.finish_update(num_updates, epochs, lr)
        # The first iteration of a graphed run is its warm-up, on a side stream (torch docs).
        side = torch.cuda.Stream(self.device) if self.use_graphs else None
        if side is not None:
            side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            with nvtx_range("rollout", nvtx):
                for _ in range(self.rollout_steps):  # batched env steps into the buffer
                    actions = algo.act(obs)
                    step = self._env_step(actions)
                    algo.process_env_step(step)
                    obs = step.obs
            with nvtx_range("gae", nvtx):
                algo.compute_returns(obs)
            with nvtx_range("update", nvtx):
                losses = algo.update()
        if side is not None:
            torch.cuda.current_stream(self.device).wait_stream(side)
            self._capture(obs)
        return obs, losses

    def _env_step(self, actions: torch.Tensor) -> Any:
        """``env.step``; with ``obs_into_buffer`` the observations land in the next buffer slot
        (the last step's in the env's own storage: it starts the next rollout)."""
        if self.obs_into_buffer:  # PPO's rollout buffer (off-policy algorithms have none)
            buffer = self.algo.buffer
            nxt = buffer.step + 1
            if nxt < buffer.num_steps:
                return self.env.step(actions, obs_out=buffer.obs_slot(nxt))
        return self.env.step(actions)

    def _fused_snapshot(self) -> dict[str, Any]:
        """What a fused iteration changes before its update ends: see ``_fused_restore``."""
        return {
            "env": self.env.get_state(),
            "rng": self._rng_state(),
            "flat": self.fused.flat.clone(),  # type: ignore[union-attr]  # fused is set
        }

    def _fused_restore(self, before: dict[str, Any]) -> None:
        self.env.set_state(before["env"])
        self._set_rng_state(before["rng"])
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
        return self.env._observe(self.env.state), algo.finish_update(num_updates, epochs, lr)

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

    def _compile(self) -> None:
        """torch.compile the networks (in place: state_dict keys unchanged) and the env step."""
        self.policy.actor.compile()
        self.policy.critic.compile()
        if hasattr(self.env, "_dynamics"):
            self.env._dynamics = torch.compile(self.env._dynamics)
        log.info("torch.compile on: the first iterations include compile time")

    # ------------------------------------------------------------- bookkeeping
    def _periodic_eval(
        self, record: dict[str, Any], elapsed: float, index: int | None = None
    ) -> None:
        # New episodes each time (seeds move with the iteration, or the caller's evaluation
        # index), so a streak of solved evaluations is not one lucky set of start states seen
        # again and again.
        started = time.perf_counter()
        index = self.algo.iteration if index is None else index
        returns = self._evaluate(seed_offset=10_000 + 1_000 * index)
        self.eval_time_s += time.perf_counter() - started
        record["eval/return_mean"] = statistics.fmean(returns)
        record["eval/return_std"] = statistics.pstdev(returns)
        solved = self.threshold is not None and record["eval/return_mean"] >= self.threshold
        self.solved_streak = self.solved_streak + 1 if solved else 0
        if solved and self.solved_at is None:
            self.solved_at = {"global_step": self.global_step, "time_s": round(elapsed, 3)}

    def _verdict_passes(self) -> bool:
        """Run the final verdict's evaluation (seeds no periodic evaluation uses) now: a run
        stops as solved only if the policy it ends with passes it, so "stopped by solved"
        and "solved" never disagree. A failure restarts the streak of solved evaluations."""
        started = time.perf_counter()
        returns = self._evaluate(seed_offset=VERDICT_SEED_OFFSET)
        self.eval_time_s += time.perf_counter() - started
        mean = statistics.fmean(returns)
        if self.threshold is not None and mean >= self.threshold:
            self._verdict_returns = returns
            return True
        log.info(
            "%d solved evaluations in a row, but the verdict evaluation gave %.1f < %s: "
            "training on",
            self.solved_streak,
            mean,
            self.threshold,
        )
        self.solved_streak = 0
        return False

    def _evaluate(self, seed_offset: int, policy=None, device=None) -> list[float]:
        """Deterministic-policy returns on episodes seeded from ``seed + seed_offset`` (every
        agent's, one after the other, when there are several); ``policy`` on ``device``
        instead of the learner's own."""
        cfg = self.cfg
        policy = self.policy if policy is None else policy
        policy.eval()
        try:
            args = (policy, cfg.env.env_id, cfg.train.eval_episodes)
            kwargs = {
                "seed": cfg.train.seed + seed_offset,
                "device": self.device if device is None else device,
                "max_episode_steps": cfg.env.max_episode_steps,
                "env_kwargs": cfg.env.kwargs,
                "wrappers": cfg.env.wrappers,
            }
            if self.num_agents > 1:
                per_agent = evaluate_agents(*args, **kwargs)
                self.agent_returns = [statistics.fmean(r) for r in per_agent]
                return [x for r in per_agent for x in r]
            if self.eval_on_training_physics:
                return evaluate_batch(policy, self._eval_env(), kwargs["seed"])
            return evaluate(*args, **kwargs)
        finally:
            policy.train()

    @property
    def eval_on_training_physics(self) -> bool:
        """MuJoCo tasks trained on GPU physics are evaluated on it (a batch of eval_episodes
        worlds on the learner's device); gymnasium's CPU MuJoCo is the final sim-to-sim check."""
        cfg = self.cfg
        return cfg.env.backend == "gpu" and cfg.env.env_id in MUJOCO_IDS and self.num_agents == 1

    def _eval_env(self) -> Any:
        if self._eval_envs is None:  # built once: its kernels and Warp graphs are reused
            cfg = self.cfg
            self._eval_envs = make_gpu(
                cfg.env.env_id, cfg.train.eval_episodes, self.device, cfg.env.max_episode_steps
            )
        return self._eval_envs

    def _gym_eval(self) -> dict[str, Any]:
        """The deployed-physics check of a GPU-physics run: the same deterministic policy on
        gymnasium's own (CPU MuJoCo) env."""
        if not self.eval_on_training_physics:
            return {}
        cfg = self.cfg
        self.policy.eval()
        try:
            returns = evaluate(
                self.policy,
                cfg.env.env_id,
                cfg.train.eval_episodes,
                seed=cfg.train.seed + VERDICT_SEED_OFFSET,
                device=self.device,
                max_episode_steps=cfg.env.max_episode_steps,
            )
        finally:
            self.policy.train()
        return {
            "eval_physics": "mujoco_warp",
            "gym_eval_return_mean": statistics.fmean(returns),
            "gym_eval_return_std": statistics.pstdev(returns),
        }

    def _memory_stats(self) -> dict[str, float]:
        if self.device.type != "cuda":
            return {}
        return {
            "gpu/allocated_mb": torch.cuda.memory_allocated(self.device) / 2**20,
            "gpu/reserved_mb": torch.cuda.memory_reserved(self.device) / 2**20,
        }

    def _finish(
        self, elapsed: float, start_step: int, session_time: float, stop_reason: str
    ) -> dict[str, Any]:
        cfg = self.cfg
        interrupted = stop_reason in ("SIGINT", "SIGTERM")
        rank_steps_per_s = (
            (self.global_step - start_step) / self.dist.world_size / max(session_time, 1e-9)
        )
        per_rank = (
            distributed.gather_floats(rank_steps_per_s, self.dist.world_size, self.device)
            if self.dist.enabled
            else [rank_steps_per_s]
        )
        if not self.is_main:
            self.env.close()
            return {}
        # Seeds no periodic evaluation uses: the verdict is on episodes the run never saw (and
        # was already run, on this same policy, when the run stopped as solved).
        if interrupted:
            eval_returns = []
        elif stop_reason == "solved" and self._verdict_returns is not None:
            eval_returns = self._verdict_returns
        else:
            eval_returns = self._evaluate(seed_offset=VERDICT_SEED_OFFSET)
        summary: dict[str, Any] = {
            "env_id": cfg.env.env_id,
            "algo": cfg.train.algo,
            "total_steps": self.global_step,
            "iterations": self.algo.iteration,
            "wall_time_s": round(elapsed, 3),
            "steps_per_s": (self.global_step - start_step) / max(session_time, 1e-9),
            "eval_time_s": round(self.eval_time_s, 3),
            "eval_return_mean": statistics.fmean(eval_returns) if eval_returns else None,
            "eval_return_std": statistics.pstdev(eval_returns) if eval_returns else None,
            "eval_episodes": len(eval_returns),
            "solved_threshold": self.threshold,
            "solved": bool(
                eval_returns
                and self.threshold is not None
                and statistics.fmean(eval_returns) >= self.threshold
            ),
            "solved_at": self.solved_at,
            "stop_reason": stop_reason,
            "interrupted": interrupted,
            "device": str(self.device),
            "buffer_placement": self.buffer.placement,
            "env_backend": cfg.env.backend,
            "precision": cfg.train.precision,
            "cuda_graphs": self._graph is not None
            or getattr(self.algo, "_graph", None) is not None,
            "compiled": cfg.train.compile,
            "fused": self._fused_path(),
            "obs_into_buffer": self.obs_into_buffer,
            "world_size": self.dist.world_size,
            "backend": self.dist.backend or None,
            "num_agents": self.num_agents,
            "agents": (
                [{"agent": k, "eval_return_mean": r} for k, r in enumerate(self.agent_returns)]
                if self.num_agents > 1 and self.agent_returns and eval_returns
                else None
            ),
            "best_agent": self._best_agent(),
            "all_agents_steps_per_s": self.num_agents
            * (self.global_step - start_step)
            / max(session_time, 1e-9),
            "per_rank_steps_per_s": per_rank,
            "param_sync_checks": self.sync_checks,
            "seed": cfg.train.seed,
            "torch_version": torch.__version__,
            "power": jetson.power_report(
                self.monitor,
                (self.global_step - start_step) / max(session_time, 1e-9),
                "steps_per_s",
            ),
            **({} if interrupted else self._gym_eval()),
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        try:
            plot_curve(self.run_dir / "metrics.jsonl", self.run_dir / "curve.png", cfg.env.env_id)
        except Exception as exc:  # a plot must never lose a finished run
            log.warning("curve.png not written: %s", exc)
        self.env.close()
        return summary

    def _fused_path(self) -> str | None:
        """Which fused kernels ran: "rollout+update", "rollout" or None (the general path)."""
        if getattr(self, "fused", None) is None:
            return None
        return "rollout+update" if self.fused.fused_update else "rollout"

    def _best_agent(self) -> int | None:
        if self.num_agents == 1:
            return None
        if not self.agent_returns:
            return 0
        return max(range(self.num_agents), key=self.agent_returns.__getitem__)

    def _save(self, elapsed: float) -> None:
        if not self.is_main:
            return
        state = {
            "config": config_mod.to_dict(self.cfg),
            "policy_spec": self.policy_spec.to_dict(),
            "algo": self._algo_state(),
            "global_step": self.global_step,
            "time_s": elapsed,
            "solved_at": self.solved_at,
            "rng": self._rng_state(),
            # Exact resume: the environments, the next observation and the stats window.
            "env_state": self.env.get_state() if hasattr(self.env, "get_state") else None,
            "obs": self._obs.cpu() if self._obs is not None else None,
            "episode_window": list(self.episode_window),
            "solved_streak": self.solved_streak,
            "world_size": self.dist.world_size,
            "num_agents": self.num_agents,
            "best_agent": self._best_agent(),
            **self._extra_state(),
        }
        save_checkpoint(state, self.run_dir / "checkpoint.pt")

    def _algo_state(self) -> dict[str, Any]:
        if getattr(self, "fused", None) is not None:
            self.fused.to_optimizer()  # the fused Adam state in the optimizer's format
        return self.algo.state_dict()

    def _extra_state(self) -> dict[str, Any]:
        """What a subclass adds to checkpoint.pt (plain values)."""
        return {}

    def _rng_state(self) -> dict[str, torch.Tensor]:
        """torch's CPU generator and, on a CUDA learner, the device's (checkpoints, retries)."""
        state = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def _set_rng_state(self, state: dict[str, torch.Tensor]) -> None:
        torch.set_rng_state(state["torch"])
        if "cuda" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda"], self.device)

    def _restore(self, state: dict[str, Any]) -> None:
        self.algo.load_state_dict(state["algo"])
        if getattr(self, "fused", None) is not None:
            self.fused.from_optimizer()
        self.global_step = int(state["global_step"])
        self.time_offset = float(state["time_s"])
        self.solved_at = state.get("solved_at")
        if self.is_main:
            self._trim_metrics(self.algo.iteration)
        self.solved_streak = int(state.get("solved_streak", 0))
        self.episode_window.extend(state.get("episode_window", []))
        env_state = state.get("env_state")
        if (
            env_state is not None
            and state.get("obs") is not None
            and hasattr(self.env, "set_state")
            and not self.dist.enabled  # rank 0's envs only: the other ranks start fresh
        ):
            self.env.set_state(env_state)
            self._restored_obs = state["obs"].to(self.device)
        else:
            log.info("environment state not in the checkpoint: resuming with fresh episodes")
            normalizer = getattr(self.algo, "reward_normalizer", None)
            if normalizer is not None:  # the saved returns belong to the old episodes
                normalizer.returns.zero_()
        self._set_rng_state(state["rng"])
        log.info("resumed at step %d (iteration %d)", self.global_step, self.algo.iteration)

    def _trim_metrics(self, iteration: int) -> None:
        """Drop records logged after the checkpoint (a crash between the two), then append."""
        path = self.run_dir / "metrics.jsonl"
        records = read_metrics(path)
        kept = [r for r in records if r.get("iteration", 0) <= iteration]
        if len(kept) != len(records):
            tmp = path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
            os.replace(tmp, path)

    def _load_resume_state(self) -> dict[str, Any]:
        ckpt = self.run_dir / "checkpoint.pt"
        if os.environ.get("RANK", "0") == "0":  # the one writer of this folder
            for tmp in remove_stale_temp_files(ckpt):
                log.info("removed %s, left by a process killed while it wrote a checkpoint", tmp)
        if not ckpt.exists():
            raise RunFolderError(f"{self.run_dir}: nothing to resume (no checkpoint.pt)")
        try:
            return load_checkpoint(ckpt)
        except CheckpointError as exc:
            raise RunFolderError(str(exc)) from None

    def _check_run_dir(self) -> None:
        """Refuse a non-empty folder before building anything (nothing is written yet)."""
        if self.run_dir.exists() and any(self.run_dir.iterdir()):
            raise RunFolderError(
                f"{self.run_dir}: run folder is not empty; pass --resume to continue it, "
                "--overwrite to replace it, or another --out"
            )

    def _create_run_dir(self, cfg: Config) -> None:
        """Create the folder and config.yaml once envs and algorithm exist, so a bad env id or
        an algorithm that does not fit the env leaves no half-made run folder behind."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        config_mod.save(cfg, self.run_dir / "config.yaml")


def train(
    cfg: Config,
    run_dir: str | Path,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool | str = True,
) -> dict[str, Any]:
    """Train a policy into ``run_dir`` (see DESIGN.md: run folder) and return the summary.

    ``progress``: True or ``"bar"`` a tqdm bar, ``"lines"`` a plain log line every 10 s (for
    logs and CI), False neither.
    """
    run_dir = Path(run_dir)
    main_rank = os.environ.get("RANK", "0") == "0"
    if overwrite and not resume and run_dir.exists() and main_rank:
        if not (run_dir / "config.yaml").exists() and any(run_dir.iterdir()):
            raise RunFolderError(f"{run_dir}: not a run folder (no config.yaml); not deleting it")
        shutil.rmtree(run_dir)
    online = uses_online(run_dir) if resume else cfg.online.enabled
    finished = False
    try:
        if online:
            from orin_rl.runners.online import OnlineTrainer

            summary = OnlineTrainer(cfg, run_dir, resume=resume, progress=progress).learn()
        else:
            summary = Trainer(cfg, run_dir, resume=resume, progress=progress).learn()
        finished = True
        return summary
    finally:
        distributed.shutdown(wait_for_peers=finished)


def uses_online(run_dir: str | Path) -> bool:
    """Whether the run folder holds an online run (its config.yaml says so)."""
    path = Path(run_dir) / "config.yaml"
    return path.exists() and config_mod.load(path).online.enabled
