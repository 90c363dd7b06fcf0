"""What every runner is: the run's device, ranks, seeds, environments, run folder, checkpoint
and summary, and the iteration loop the on- and off-policy runners share.

A runner subclass builds its algorithm (``_build``) and says what one iteration is
(``_iterate``); ``learn`` around it logs, evaluates, checkpoints and stops the same way for
all. The online runner keeps the set-up, checkpoint and summary and has a loop of its own.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import statistics
import time
from abc import ABC, abstractmethod
from collections import deque
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from orin_rl import config as config_mod
from orin_rl import distributed, envs, jetson
from orin_rl.checkpoint import save_checkpoint
from orin_rl.config import Config
from orin_rl.errors import OrinError
from orin_rl.runners import run_folder, summary
from orin_rl.runners.checkpointing import rng_state, seed_everything, set_rng_state
from orin_rl.runners.logger import MetricsLogger
from orin_rl.runners.progress import PROGRESS_LINE_S
from orin_rl.runners.signals import StopRequest
from orin_rl.runners.startup import Phases
from orin_rl.runners.verdict import Evaluation

log = logging.getLogger(__name__)


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


class Runner(Evaluation, ABC):
    """Owns the env, the algorithm, the run folder and the loop.

    Subclasses set ``rollout_steps`` (vector-env steps per iteration) and build ``algo``,
    ``policy``, ``policy_spec`` and ``buffer`` in ``_build``.
    """

    use_graphs = False
    """Whether iterations are captured in a CUDA graph (the on-policy runner decides)."""
    fused: Any = None
    """The fused PPO kernels, where the on-policy runner uses them."""
    obs_into_buffer = False
    """Whether the environments write observations into the rollout storage in place."""

    def __init__(
        self,
        cfg: Config,
        run_dir: str | Path,
        resume: bool = False,
        progress: bool | str = True,
        state: dict[str, Any] | None = None,
    ):
        # process start -> here (interpreter, imports, config), then each set-up phase up to
        # the end of the first iteration: summary.json's "startup"
        self.startup = Phases()
        self.run_dir = Path(run_dir)
        if resume and state is None:
            state = run_folder.resume_state(self.run_dir)
        if state is not None:
            cfg = config_mod.from_plain(state["config"])
        self.cfg = cfg
        self._config_changed = bool(state and state.get("config_changed"))
        if cfg.train.torch_threads:
            torch.set_num_threads(cfg.train.torch_threads)
        self.device = resolve_device(cfg.train.device)
        # process-wide in torch: set here, for this run's CUDA float32 matmuls
        torch.backends.cuda.matmul.allow_tf32 = cfg.train.matmul == "tf32"
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
            run_folder.check_empty(self.run_dir)
        if state is not None and state.get("world_size", 1) != self.dist.world_size:
            raise distributed.DistributedError(
                f"{self.run_dir} was trained with {state.get('world_size', 1)} processes, this "
                f"resume has {self.dist.world_size}; resume with --nproc "
                f"{state.get('world_size', 1)}"
            )
        self.rollout_steps = self._rollout_steps()
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
            wrappers=cfg.env.wrappers if cfg.env.train_wrappers is None else cfg.env.train_wrappers,
            random_episode_start=cfg.env.random_episode_start,
            num_workers=cfg.env.num_workers,
        )
        self.startup.mark("envs_s")
        workers = self.env.num_workers
        if cfg.env.vectorization == "workers" and isinstance(workers, int):
            cfg.env.num_workers = workers  # what ran (clamped to the envs), in config.yaml
        self._build()
        self.startup.mark("build_s")
        if state is None and self.is_main:
            run_folder.create(self.run_dir, cfg)
        self.sync_checks = 0  # bit-identity checks of the parameters across ranks passed
        self.monitor: Any = None
        if cfg.train.compile:
            self._compile()
        self._init_evaluation()
        self.global_step = 0
        self.time_offset = 0.0  # wall time spent by earlier processes of a resumed run
        self.episode_window: deque[float] = deque(maxlen=100)  # returns behind the mean
        self.length_window: deque[int] = deque(maxlen=100)  # their lengths (steps)
        self._obs: torch.Tensor | None = None  # the observation the next step acts on
        self._restored_obs: torch.Tensor | None = None
        if state is not None:
            self._restore(state)
        self.startup.mark("setup_s")
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

    # ------------------------------------------------------------- what a subclass says
    @abstractmethod
    def _rollout_steps(self) -> int:
        """Vector-env steps per iteration."""

    @abstractmethod
    def _build(self) -> None:
        """Make ``policy_spec``, ``policy``, ``algo`` and ``buffer``."""

    @abstractmethod
    def _iterate(self, obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """One iteration from ``obs``: (the observation the next one starts from, losses)."""

    def _compile(self) -> None:
        """torch.compile the networks (in place: state_dict keys unchanged) and, where the env
        has some, its step maths."""
        self.policy.actor.compile()
        self.policy.critic.compile()
        self.env.compile()
        log.info("torch.compile on: the first iterations include compile time")

    def graphed(self) -> bool:
        """Whether a CUDA graph replayed this run's iterations or updates."""
        return getattr(self.algo, "_graph", None) is not None

    def _fused_path(self) -> str | None:
        """Which fused kernels ran: "rollout+update", "rollout" or None (the general path)."""
        return None

    def _fused_grads(self) -> str | None:
        """Who computed the fused update's gradients: "kernel", "gemm" or None (no fused
        update)."""
        return None

    # ------------------------------------------------------------------ the loop
    def learn(self) -> dict[str, Any]:
        """Train to ``total_steps``, a solved evaluation (if asked) or a signal; summarise."""
        cfg = self.cfg
        logger = MetricsLogger(self.run_dir, cfg.train.tensorboard) if self.is_main else None
        self.monitor = jetson.start_monitor(cfg.train.power_monitor) if self.is_main else None
        start = time.perf_counter()
        start_step = self.global_step
        obs = self._restored_obs
        if obs is None:
            rank_offset = 100_000 * self.dist.rank  # each rank its own episodes
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
        first = "first_iteration_s" not in self.startup.phases
        if first:
            self.startup.mark("learn_setup_s")
        try:
            with StopRequest() as stop:
                stop_reason = self._train_iterations(
                    obs, stop, bar, logger, start, start_step, first
                )
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
        return self._finish(elapsed, start_step, time.perf_counter() - start, stop_reason)

    def _train_iterations(
        self,
        obs: torch.Tensor,
        stop: StopRequest,
        bar: tqdm,
        logger: MetricsLogger | None,
        start: float,
        start_step: int,
        first: bool,
    ) -> str:
        """Iterate until the last iteration, a signal, solving or the time limit; return which."""
        cfg = self.cfg
        check_sync = self.dist.enabled and os.environ.get("ORIN_RL_CHECK_SYNC") == "1"
        last_line = -math.inf  # when the last progress line was logged
        while self.algo.iteration < self.num_iterations:
            # One iteration. A signal lets it finish (well under a second), so the final
            # checkpoint sits on an iteration boundary and the resumed run continues exactly;
            # a second signal stops at once.
            obs, losses = self._iterate(obs)
            if first:  # kernels loaded or compiled, graphs captured
                self.startup.mark("first_iteration_s")
                first = False
            self._obs = obs
            self.global_step += self.iteration_steps
            bar.update(self.iteration_steps)
            if check_sync:
                distributed.check_identical(self.policy, self.dist.world_size)
                self.sync_checks += 1
            it = self.algo.iteration
            record, elapsed = self._iteration_record(losses, bar, start, start_step)
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
            signalled, solved, out_of_time = self._stop_votes(stop, start)
            if it % cfg.train.checkpoint_every == 0 or signalled:
                self._save(elapsed)
            if signalled:
                return signal.Signals(stop.signum or signal.SIGTERM).name
            if solved:
                return "solved"
            if out_of_time:
                return "max_wall_s"
        return "total_steps"

    def _iteration_record(
        self, losses: dict[str, float], bar: tqdm, start: float, start_step: int
    ) -> tuple[dict[str, Any], float]:
        """The metrics row of the iteration just run, and the run's wall time so far."""
        returns, lengths = self.env.pop_episode_stats()
        self.episode_window.extend(returns)
        self.length_window.extend(lengths)
        elapsed = self.time_offset + time.perf_counter() - start
        record = {
            "global_step": self.global_step,
            "iteration": self.algo.iteration,
            "time_s": round(elapsed, 3),
            "steps_per_s": (self.global_step - start_step) / max(time.perf_counter() - start, 1e-9),
            **losses,
        }
        if self.episode_window:
            record["charts/episode_return_mean"] = statistics.fmean(self.episode_window)
            bar.set_postfix(ret=f"{record['charts/episode_return_mean']:.1f}")
        if self.length_window:
            record["charts/episode_length_mean"] = statistics.fmean(self.length_window)
        record.update(self.env.pop_log())  # the task's own scalars (mjlab)
        record.update(self._memory_stats())
        return record, elapsed

    def _stop_votes(self, stop: StopRequest, start: float) -> tuple[bool, bool, bool]:
        """Whether to stop after this iteration: (signalled, solved, out of time), of all ranks."""
        cfg = self.cfg
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
        return signalled, solved, out_of_time

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

    def _memory_stats(self) -> dict[str, float]:
        if self.device.type != "cuda":
            return {}
        return {
            "gpu/allocated_mb": torch.cuda.memory_allocated(self.device) / 2**20,
            "gpu/reserved_mb": torch.cuda.memory_reserved(self.device) / 2**20,
        }

    # ------------------------------------------------------------- the end of a run
    def _finish(
        self, elapsed: float, start_step: int, session_time: float, stop_reason: str
    ) -> dict[str, Any]:
        """The verdict, summary.json and curve.png (rank 0); every rank closes its envs."""
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
        eval_returns, eval_extra = self._final_evaluation(stop_reason)
        elapsed += self.final_eval_time_s  # the run's wall time includes its final evaluation
        report = summary.build(
            self, elapsed, start_step, session_time, stop_reason, eval_returns, per_rank
        )
        report.update(eval_extra)
        report.update(self._summary_extra(session_time))
        summary.write(self.run_dir, report, self.cfg.env.env_id)
        self.env.close()
        return report

    def _summary_extra(self, session_time: float) -> dict[str, Any]:
        """What a runner adds to summary.json."""
        return {}

    # ------------------------------------------------------ checkpoint and resume
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
            "rng": rng_state(self.device),
            # Exact resume: the environments, the next observation and the stats window.
            "env_state": self.env.get_state(),
            "task_state": self.env.task_state(),  # curricula, where the episodes are not kept
            "obs": self._obs.cpu() if self._obs is not None else None,
            "episode_window": list(self.episode_window),
            "length_window": list(self.length_window),
            "solved_streak": self.solved_streak,
            "world_size": self.dist.world_size,
            "num_agents": self.num_agents,
            "best_agent": self._best_agent(),
            **self._extra_state(),
        }
        save_checkpoint(state, self.run_dir / "checkpoint.pt")
        if self._config_changed:  # an extended run: config.yaml follows its checkpoint
            config_mod.save(self.cfg, self.run_dir / "config.yaml")
            self._config_changed = False

    def _algo_state(self) -> dict[str, Any]:
        return self.algo.state_dict()

    def _extra_state(self) -> dict[str, Any]:
        """What a subclass adds to checkpoint.pt (plain values)."""
        return {}

    def _restore(self, state: dict[str, Any]) -> None:
        self.algo.load_state_dict(state["algo"])
        self._restore_algo_extras()
        self.global_step = int(state["global_step"])
        self.time_offset = float(state["time_s"])
        self.solved_at = state.get("solved_at")
        if self.is_main:
            run_folder.repair_metrics(self.run_dir, self.algo.iteration)
        self.solved_streak = int(state.get("solved_streak", 0))
        self.episode_window.extend(state.get("episode_window", []))
        self.length_window.extend(state.get("length_window", []))
        env_state = state.get("env_state")
        if (
            env_state is not None
            and state.get("obs") is not None
            and not self.dist.enabled  # rank 0's envs only: the other ranks start fresh
        ):
            self.env.set_state(env_state)
            self._restored_obs = state["obs"].to(self.device)
        else:
            log.info("environment state not in the checkpoint: resuming with fresh episodes")
            normalizer = getattr(self.algo, "reward_normalizer", None)
            if normalizer is not None:  # the saved returns belong to the old episodes
                normalizer.returns.zero_()
        if state.get("task_state") is not None:  # an older checkpoint has none
            self.env.load_task_state(state["task_state"])
        set_rng_state(state["rng"], self.device)
        log.info("resumed at step %d (iteration %d)", self.global_step, self.algo.iteration)

    def _restore_algo_extras(self) -> None:
        """After the algorithm's state is loaded: what a runner keeps beside it."""
