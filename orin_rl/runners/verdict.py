"""Evaluation during and after training: periodic evaluations, the solved streak, the final
verdict, and the deployed-physics check of a run trained on other physics.

One mixin that every runner has, so "solved" means the same thing in all of them: a run stops
as solved only if the policy it ends with passes the verdict evaluation, on seeds that no
periodic evaluation uses.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import statistics
import time
from collections.abc import Iterator
from typing import Any

import torch
from tqdm.auto import tqdm

from orin_rl import envs
from orin_rl.runners.evaluate import evaluate, evaluate_agents, evaluate_batch
from orin_rl.runners.progress import EvalWatch
from orin_rl.runners.signals import StopRequest

log = logging.getLogger(__name__)

VERDICT_SEED_OFFSET = 2**30
"""Episode seeds of the final verdict start at train.seed + this: no periodic evaluation
(10,000 + 1,000 * iteration) reaches them."""


class Evaluation:
    """Evaluation state and verbs of a runner (mixed into ``runners.base.Runner``).

    Reads the runner's ``cfg``, ``policy``, ``device``, ``env``, ``num_agents``, ``algo``,
    ``global_step`` and ``progress``; owns ``threshold``, ``solved_at``, ``solved_streak``,
    ``eval_time_s``, the final evaluation's time and stop, and the per-agent returns.
    """

    cfg: Any
    progress: bool | str
    policy: torch.nn.Module
    device: torch.device
    env: Any
    num_agents: int
    algo: Any
    global_step: int

    def _init_evaluation(self) -> None:
        cfg = self.cfg
        self.agent_returns: list[float | None] | None = None  # final per-agent means
        self._eval_envs: Any = None  # the training-physics evaluation batch, made on first use
        self.threshold = (
            cfg.train.solved_threshold
            if cfg.train.solved_threshold is not None
            else envs.reward_threshold(cfg.env.env_id)
        )
        self.solved_at: dict[str, float] | None = None
        self.solved_streak = 0  # consecutive solved periodic evaluations
        self.eval_time_s = 0.0  # spent in evaluations by this process (the final one too)
        self.final_eval_time_s = 0.0
        self.eval_stopped_by: str | None = None  # the signal that stopped the final evaluation
        self._verdict_returns: list[float] | None = None  # a passed verdict evaluation

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
        record.update(self._eval_log())
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

    def _final_evaluation(self, stop_reason: str) -> tuple[list[float], dict[str, Any]]:
        """The verdict's returns and what summary.json adds about them (the task's log, the
        gymnasium check): none after a signal; the passed verdict's when the run stopped as
        solved (same policy); else a fresh verdict evaluation, on episodes the run never saw.

        The fresh one shows a progress bar and is timed into ``eval_time_s``; SIGINT or SIGTERM
        stops it between steps, keeping the episodes that had finished (``eval_stopped_by``).
        """
        if stop_reason in ("SIGINT", "SIGTERM"):
            return [], {}
        started = time.perf_counter()
        then = "stopping the final evaluation (the episodes finished so far are kept)"
        with StopRequest(then) as stop:
            if stop_reason == "solved" and self._verdict_returns is not None:
                returns = self._verdict_returns
            else:
                with self._eval_watch("final evaluation", stop) as watch:
                    returns = self._evaluate(VERDICT_SEED_OFFSET, watch=watch)
            eval_log = self._eval_log()  # what the task logged (mjlab: the tracking error)
            extra: dict[str, Any] = {"eval_log": eval_log} if eval_log else {}
            if stop.signum is None:
                extra.update(self._gym_eval(stop))
        if stop.signum is not None:
            self.eval_stopped_by = signal.Signals(stop.signum).name
        self.final_eval_time_s = time.perf_counter() - started
        self.eval_time_s += self.final_eval_time_s
        return returns, extra

    @contextlib.contextmanager
    def _eval_watch(self, what: str, stop: StopRequest) -> Iterator[EvalWatch]:
        """A watch for one evaluation: ``stop``, and the run's kind of progress (a tqdm bar,
        log lines or nothing)."""
        bar = tqdm(
            desc=f"{self.cfg.env.env_id} {what}",
            dynamic_ncols=True,
            disable=self.progress != "bar",
            leave=False,
        )
        lines = f"{self.cfg.env.env_id} {what}" if self.progress == "lines" else None
        try:
            yield EvalWatch(bar, stop, lines)
        finally:
            bar.close()

    def _evaluate(
        self, seed_offset: int, policy=None, device=None, watch: EvalWatch | None = None
    ) -> list[float]:
        """Deterministic-policy returns on episodes seeded from ``seed + seed_offset`` (every
        agent's, one after the other, when there are several); ``policy`` on ``device``
        instead of the learner's own; ``watch``: its progress, and a stop."""
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
                "watch": watch,
            }
            if self.num_agents > 1:
                per_agent = evaluate_agents(*args, **kwargs)
                # an agent a stopped evaluation did not reach has no mean
                self.agent_returns = [statistics.fmean(r) if r else None for r in per_agent]
                return [x for r in per_agent for x in r]
            if self.eval_on_training_physics:
                return evaluate_batch(policy, self._eval_env(), kwargs["seed"], watch)
            return evaluate(*args, **kwargs)
        finally:
            policy.train()

    @property
    def eval_on_training_physics(self) -> bool:
        """Envs whose physics is not gymnasium's own (``VecEnv.eval_physics``, e.g. MuJoCo
        Warp) are evaluated on it (a batch of eval_episodes worlds on the learner's device);
        gymnasium's own env is the final sim-to-sim check."""
        return self.env.eval_physics is not None and self.num_agents == 1

    def _eval_env(self) -> Any:
        if self._eval_envs is None:  # built once: its kernels and Warp graphs are reused
            cfg = self.cfg
            self._eval_envs = envs.make(
                cfg.env.env_id,
                cfg.train.eval_episodes,
                self.device,
                backend=cfg.env.backend,
                max_episode_steps=cfg.env.max_episode_steps,
                evaluation=True,
            )
        return self._eval_envs

    def _gym_eval(self, stop: StopRequest) -> dict[str, Any]:
        """The deployed-physics check of a run on other physics: the same deterministic policy
        on gymnasium's own (CPU) env (``stop``: as the final evaluation's)."""
        if not (self.eval_on_training_physics and self.env.gymnasium_twin):
            return {}
        cfg = self.cfg
        self.policy.eval()
        try:
            with self._eval_watch("gymnasium check", stop) as watch:
                returns = evaluate(
                    self.policy,
                    cfg.env.env_id,
                    cfg.train.eval_episodes,
                    seed=cfg.train.seed + VERDICT_SEED_OFFSET,
                    device=self.device,
                    max_episode_steps=cfg.env.max_episode_steps,
                    watch=watch,
                )
        finally:
            self.policy.train()
        return {
            "eval_physics": self.env.eval_physics,
            "gym_eval_return_mean": statistics.fmean(returns) if returns else None,
            "gym_eval_return_std": statistics.pstdev(returns) if returns else None,
        }

    def _eval_log(self) -> dict[str, float]:
        """What the evaluation batch's task logged (mjlab: the velocity-tracking error), as
        ``eval/<name>``."""
        if self._eval_envs is None:
            return {}
        return {f"eval/{k}": v for k, v in self._eval_envs.pop_log().items()}

    def _best_agent(self) -> int | None:
        """The agent with the best final evaluation (None for a single agent)."""
        if self.num_agents == 1:
            return None
        scored = [k for k, r in enumerate(self.agent_returns or []) if r is not None]
        return max(scored, key=self.agent_returns.__getitem__) if scored else 0
