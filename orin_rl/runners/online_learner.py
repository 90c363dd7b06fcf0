"""The learner thread of an online run (``runners/online.py``): drain the actor's transitions
into the replay buffer, take gradient steps up to ``online.update_to_data`` per env step,
publish the actor's weights, log, evaluate, checkpoint and decide when the run is over, timing
each phase into summary.json's ``online.learner_phase_s``.

``OnlineLearner`` is a mixin of ``OnlineRunner``: its methods run on the runner's state (the
algorithm, the actor's queue, the weight mailbox, the stop event).
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from typing import Any

import numpy as np
import torch

from orin_rl.runners.logger import MetricsLogger

DRAIN_BATCH = 16
"""The learner moves the actor's transitions into the buffer once this many are queued..."""
DRAIN_EVERY_S = 0.01
"""...or once this long has passed since the last move."""

LEARNER_PHASES = ("drain", "update", "wait_for_data", "publish", "evaluate", "other")
"""The learner loop's phases, timed into summary.json's ``online.learner_phase_s``: moving the
actor's transitions into the replay buffer, a gradient step (its sampling included), sleeping
until the data allow the next update, publishing weights to the actor, the periodic
evaluation, and the rest (logging, checkpoints, the stop checks)."""


class OnlineLearner:
    """The learner thread's side of ``OnlineRunner`` (mixed in before ``OffPolicyRunner``)."""

    _learner_reason = "total_steps"

    def _learner(self, logger: MetricsLogger, start: float) -> None:
        try:
            self._learner_loop(logger, start)
        except BaseException as exc:
            self.learner_error = exc
            self.stop.set()

    def _drain(self, force: bool = True) -> int:
        """Move the actor's finished transitions into the replay buffer (one insert).

        ``force=False`` (the learner loop) waits until ``DRAIN_BATCH`` transitions are queued
        or ``DRAIN_EVERY_S`` has passed: an insert costs the same for one transition as for
        sixteen. For storage on a GPU the batch is staged in page-locked memory, so its copy
        is asynchronous: from pageable memory it would first wait for every queued update."""
        actor, algo = self._actor, self.algo
        n = len(actor.queue)
        now = time.perf_counter()
        if not n or (not force and n < DRAIN_BATCH and now - self._last_drain < DRAIN_EVERY_S):
            return 0
        self._last_drain = now
        items = [actor.queue.popleft() for _ in range(n)]
        obs, actions, rewards, next_obs, terminated = zip(*items, strict=True)
        batch = {
            "obs": torch.from_numpy(np.stack(obs)),
            "actions": torch.from_numpy(np.stack(actions)),
            "rewards": torch.tensor(rewards),
            "next_obs": torch.from_numpy(np.stack(next_obs)),
            "terminated": torch.tensor(terminated),
            "discounts": torch.full((n,), self.algo_cfg.gamma),
        }
        # In the buffer's dtypes here, so a GPU buffer's copy from pinned memory stays async.
        pin = algo.replay.storage_device.type == "cuda"
        for key, value in batch.items():
            value = value.to(algo.replay.specs[key].dtype)
            batch[key] = value.pin_memory() if pin else value
        algo.replay.add(batch)
        algo.env_steps += n
        return n

    def _learner_loop(self, logger: MetricsLogger, start: float) -> None:
        """The learner thread's loop: drain, update, publish, log, evaluate, checkpoint; timed."""
        cfg, algo = self.cfg, self.algo
        ocfg, tcfg = cfg.online, cfg.train
        last_sync = last_eval = algo.env_steps
        # train.eval_every counts iterations, as offline: an iteration is the env steps between
        # two rounds of updates there (sac: train_freq 1, so one; the DQN presets: 256).
        eval_every = tcfg.eval_every * self.iteration_steps
        last_log = last_ckpt = time.perf_counter()
        losses_sum: torch.Tensor | None = None
        losses_n = 0
        self.updates_this_process = 0
        # Where the learner's wall time goes, by phase (host time: a phase that waits on the
        # GPU, such as the first copy after a graph replay, carries that wait).
        phase = self.learner_phase_s = dict.fromkeys(LEARNER_PHASES, 0.0)
        clock = time.perf_counter
        eval_before = self.eval_time_s  # periodic and verdict evaluations count it
        self._last_drain = 0.0
        # Updates in flight on a GPU: the loop waits for the one before last before it queues
        # another, so the actor's weights never lag far behind the updates counted.
        in_flight: deque[torch.cuda.Event] = deque()
        # The phases partition the loop's time: "other" runs from one iteration's last clock
        # reading to the next one's first (the stop check between them included).
        loop_start = last = clock()
        while not self.stop.is_set():
            t0 = clock()
            phase["other"] += t0 - last
            self._drain(force=False)
            t1 = clock()
            phase["drain"] += t1 - t0
            steps = algo.env_steps
            self.global_step = steps
            due = self._updates_due(steps)
            self._pending_due = due
            if due:
                losses_sum = self._gradient_step(in_flight, losses_sum)
                losses_n += 1
                t3 = clock()
                phase["update"] += t3 - t1
            else:
                time.sleep(0.0005)  # waiting for data: let the actor have the core
                t3 = clock()
                phase["wait_for_data"] += t3 - t1
            self.learner_heartbeat = time.monotonic()
            if steps - last_sync >= ocfg.weight_sync_every and algo.grad_steps:
                self.mailbox.publish(algo.policy.actor)
                self.weight_swaps_published += 1
                last_sync = steps
            t4 = clock()
            phase["publish"] += t4 - t3
            algo.iteration = steps
            now = time.perf_counter()
            elapsed = self.time_offset + now - start
            record: dict[str, Any] | None = None
            if now - last_log >= ocfg.log_every_s:
                last_log = now
                record = self._record(steps, elapsed, start, losses_sum, losses_n)
                losses_sum, losses_n = None, 0
            # Evaluation and checkpoints are the learner's own work, not a stall.
            self._pending_due = False
            if eval_every and steps - last_eval >= eval_every:
                last_eval = steps
                record = record or self._record(steps, elapsed, start, None, 0)
                # seeds by evaluation count: they never reach the verdict's
                self._periodic_eval(record, elapsed, index=steps // eval_every)
            if record is not None:
                logger.log(record)
            if now - last_ckpt >= ocfg.checkpoint_every_s:
                last_ckpt = now
                self._save(elapsed)
            self._learner_stop_check(steps, start)
            self.learner_heartbeat = time.monotonic()
            last = clock()
            phase["other"] += last - t4
        self.learner_loop_s = last - loop_start  # what the phases add up to
        phase["evaluate"] = self.eval_time_s - eval_before
        phase["other"] -= phase["evaluate"]
        # the supervisor stopped us, or we stopped: last transitions into the buffer
        self._drain()

    def _updates_due(self, steps: int) -> bool:
        """Whether the learner is behind online.update_to_data gradient steps per env step."""
        algo, scfg = self.algo, self.algo_cfg
        learning = steps >= scfg.learning_starts and len(algo.replay) >= scfg.batch_size
        return learning and algo.grad_steps < self.cfg.online.update_to_data * (
            steps - scfg.learning_starts + 1
        )

    def _gradient_step(
        self, in_flight: deque[torch.cuda.Event], losses_sum: torch.Tensor | None
    ) -> torch.Tensor:
        """One gradient step, after the one before last on a GPU; ``losses_sum`` plus its losses."""
        algo = self.algo
        # --cuda-graphs: the step replayed from a graph (SAC on CUDA; the batch is sampled
        # eagerly into its inputs); an eager SAC step on a GPU is hundreds of small launches
        # from this thread.
        if len(in_flight) >= 2:
            in_flight.popleft().synchronize()
        losses = algo.gradient_step()
        if self.device.type == "cuda":
            in_flight.append(torch.cuda.Event())
            in_flight[-1].record(torch.cuda.current_stream(self.device))
        losses_sum = losses if losses_sum is None else losses_sum + losses
        algo.grad_steps += 1
        self.updates_this_process += 1
        return losses_sum

    def _learner_stop_check(self, steps: int, start: float) -> None:
        """Stop the run at train.total_steps, a solved verdict or train.max_wall_s."""
        tcfg = self.cfg.train
        if steps >= tcfg.total_steps:
            self._learner_reason = "total_steps"
            self.stop.set()
        elif (
            tcfg.stop_at_threshold
            and self.solved_streak >= tcfg.solved_patience
            and self._verdict_passes()
        ):
            self._learner_reason = "solved"
            self.stop.set()
        elif tcfg.max_wall_s is not None and time.perf_counter() - start >= tcfg.max_wall_s:
            self._learner_reason = "max_wall_s"
            self.stop.set()

    def _record(self, steps, elapsed, start, losses_sum, losses_n) -> dict[str, Any]:
        actor = self._actor
        record: dict[str, Any] = {
            "global_step": steps,
            "iteration": steps,
            "time_s": round(elapsed, 3),
            "steps_per_s": (steps - self._base_steps) / max(time.perf_counter() - start, 1e-9),
            "online/gradient_steps": self.algo.grad_steps,
            "online/updates_per_env_step": self.algo.grad_steps
            / max(steps - self.algo_cfg.learning_starts, 1),
            "online/deadline_misses": actor.deadline_misses,
            "online/weight_swaps": actor.weight_swaps,
        }
        if losses_n:
            means = (losses_sum / losses_n).tolist()
            record.update({f"losses/{k}": v for k, v in zip(self.algo.loss_names, means,
                                                                strict=True)})  # fmt: skip
        returns = list(actor.episode_returns)[-100:]
        if returns:
            record["charts/episode_return_mean"] = statistics.fmean(returns)
        return record
