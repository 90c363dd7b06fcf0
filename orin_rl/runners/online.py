"""Online learning: a real-time actor and a concurrent learner (``train --online``, SAC or
DQN).

Three threads share one process:

- the **actor** runs ``runtime.ControlLoop`` at ``online.control_rate_hz`` against a
  :class:`Plant` (a gymnasium env stepped in real time, a robot over UDP, your own adapter):
  each tick reads the plant's feedback, queues the finished transition, acts with its own CPU
  copy of the policy and sends the action. An episode is one ``ControlLoop.run``; the reset
  between episodes is outside the deadline accounting (a robot's reset takes its own time);
- the **learner** drains the queue into the replay buffer (one batched insert, on the
  learner's device: the actor never touches the GPU, so a tick never waits behind the
  learner's kernels), runs SAC (or DQN) gradient steps up to ``online.update_to_data`` per env
  step,
  evaluates, checkpoints, and every ``online.weight_sync_every`` env steps publishes a fresh
  copy of the actor network (``runners/online_learner.py``; the actor is in
  ``runners/online_actor.py``);
- the **supervisor** (the calling thread) handles signals and the stop file, and is the
  watchdog: an actor whose tick has not finished for ``online.watchdog_periods`` periods gets
  the safe action sent to the plant in its place.

Weight hand-over is a reference swap: the learner builds a whole new CPU network, then
replaces the mailbox's one reference (atomic in CPython); the actor picks the new reference
up at the start of a tick and uses it for the whole tick. The actor never sees a network that
is being written, and the swap costs the tick nothing but a pointer read.

Threads, not processes: a tick is a short stretch of Python holding the GIL, and the
learner's torch operators release it while they compute; the switch interval is lowered to
0.5 ms for the run so the actor waits about that long for it at most once a tick (its policy
is a numpy copy: no torch call, each of which would hand the GIL back). The deadline figures
this choice rests on, with and without the learner, are in ``docs/benchmarks/online_cpu.md``.
"""

from __future__ import annotations

import copy
import importlib
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tqdm.auto import tqdm

from orin_rl import jetson
from orin_rl.runners.logger import MetricsLogger
from orin_rl.runners.off_policy import OffPolicyRunner
from orin_rl.runners.online_actor import Actor, WeightMailbox
from orin_rl.runners.online_learner import OnlineLearner
from orin_rl.runners.plant import GymPlant, OnlineError, Plant
from orin_rl.runners.signals import StopRequest

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- trainer
def make_plant(spec: str, env_id: str, env_config: dict[str, Any] | None = None) -> Plant:
    """``gym`` (env_id in real time, made as training makes it: ``env_config`` holds the
    run's time limit, kwargs and wrappers), ``udp://HOST:PORT`` (orin_rl.runners.plant_udp's
    protocol) or ``module:factory`` (a callable returning a Plant; it gets env_id)."""
    if spec == "gym":
        return GymPlant(env_id, env_config=env_config)
    if spec.startswith("udp://"):
        from orin_rl.runners.plant_udp import UdpPlant

        host, _, port = spec.removeprefix("udp://").rpartition(":")
        if not host or not port.isdigit():
            raise OnlineError(f"online.plant {spec!r}: expected udp://HOST:PORT")
        return UdpPlant(host, int(port), env_id)
    module, _, name = spec.partition(":")
    if not name:
        raise OnlineError(f"online.plant {spec!r}: expected gym, udp://HOST:PORT or module:factory")
    try:
        factory = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise OnlineError(f"online.plant {spec!r}: cannot import it ({exc})") from None
    plant = factory(env_id)
    if not isinstance(plant, Plant):
        raise OnlineError(f"online.plant {spec!r}: returned {type(plant).__name__}, not a Plant")
    return plant


class OnlineRunner(OnlineLearner, OffPolicyRunner):
    """``train --online``: the runners' run folder, checkpoints, evaluation and summary around a
    real-time actor and a concurrent learner (SAC, or DQN for discrete actions)."""

    def __init__(self, cfg, run_dir, resume: bool = False, progress: bool = True, state=None):
        sub = getattr(cfg, cfg.train.algo)
        fresh = not resume and state is None
        if fresh and hasattr(sub, "save_buffer") and not sub.save_buffer:
            # "Nothing lost on a stop": the experience a robot gathered in real time is the
            # expensive part, so an online checkpoint carries it (up to save_buffer_max_mb).
            sub.save_buffer = True
            log.info(
                "online run: the replay buffer goes into checkpoints (%s.save_buffer)",
                cfg.train.algo,
            )
        super().__init__(cfg, run_dir, resume=resume, progress=progress, state=state)
        cfg = self.cfg
        self.algo_cfg = getattr(cfg, cfg.train.algo)
        """The algorithm's config section (learning_starts, batch_size, gamma)."""
        if cfg.env.num_envs != 1:
            raise OnlineError("online learning drives one plant; set env.num_envs=1")
        if self.dist.enabled:
            raise OnlineError("online learning runs in one process; drop --nproc")
        self.mailbox = WeightMailbox(self.algo.policy.actor)
        self.mailbox.publish(self.algo.policy.actor)  # the restored or initial weights
        self.stop = threading.Event()
        self.learner_error: BaseException | None = None
        self.learner_heartbeat = time.monotonic()
        self.learner_loop_s = 0.0
        """The learner loop's time (a run's last process), which its phases add up to."""
        self.weight_swaps_published = 0
        self.watchdog_trips = 0
        self._base_steps = self.algo.env_steps  # from an earlier process of this run
        # set by _restore (called inside Runner.__init__) on a resume
        self._base_episodes = getattr(self, "_base_episodes", 0)
        self._actor: Actor | None = None
        self._pending_due = False  # the learner has updates due (for the stall check)

    def _rollout_steps(self) -> int:
        if self.cfg.train.algo not in ("sac", "dqn"):  # before anything is built
            raise OnlineError(
                "online learning runs SAC (continuous actions) or DQN (discrete); "
                "pass --algo sac or --algo dqn"
            )
        return super()._rollout_steps()

    # the actor reads these ------------------------------------------------------------
    def env_steps_total(self) -> int:
        """Env steps of the run so far (earlier processes included)."""
        return self._base_steps + (self._actor.steps if self._actor is not None else 0)

    def episodes_done(self) -> int:
        return self._base_episodes + (
            len(self._actor.episode_returns) if self._actor is not None else 0
        )

    def learner_stalled(self) -> bool:
        """Updates are due and the learner has not made one for online.learner_stall_s."""
        limit = self.cfg.online.learner_stall_s
        return bool(
            limit and self._pending_due and time.monotonic() - self.learner_heartbeat > limit
        )

    # ------------------------------------------------------------------------ the run
    def learn(self) -> dict[str, Any]:
        """Run the actor and the learner beside the supervisor until a stop; save and summarise."""
        cfg = self.cfg
        ocfg = cfg.online
        plant, actor = self._open_plant()
        self._warm_up(actor)
        logger = MetricsLogger(self.run_dir, cfg.train.tensorboard)
        self.monitor = jetson.start_monitor(cfg.train.power_monitor)
        stop_file = self.run_dir / ocfg.stop_file
        if stop_file.exists():  # left from the stop of an earlier process
            stop_file.unlink()
        start = time.perf_counter()
        start_step = self.global_step
        switch = sys.getswitchinterval()
        sys.setswitchinterval(0.0005)
        learner = threading.Thread(
            target=self._learner, args=(logger, start), name="orin-rl-learner", daemon=True
        )
        actor_thread = threading.Thread(target=actor.run, name="orin-rl-actor", daemon=True)
        bar = tqdm(
            total=cfg.train.total_steps,
            initial=self.global_step,
            unit="step",
            dynamic_ncols=True,
            disable=self.progress != "bar",
            desc=f"{cfg.env.env_id} online {ocfg.control_rate_hz:g} Hz",
        )
        shown = self.global_step
        last_line = time.perf_counter()
        try:
            with StopRequest() as signals:
                learner.start()
                actor.heartbeat_ns = time.monotonic_ns()  # the warm-up is not a stall
                actor_thread.start()
                stop_reason = self._supervise(
                    plant, actor_thread, signals, stop_file, bar, shown, last_line
                )
        except BaseException:
            if self.monitor is not None:  # a second Ctrl-C: no tegrastats process left behind
                self.monitor.stop()
            raise
        finally:
            self.stop.set()
            actor.stop.set()
            actor_thread.join(timeout=10)
            learner.join(timeout=60)
            sys.setswitchinterval(switch)
            bar.close()
            logger.close()
            plant.close()
            stuck = [t.name for t in (actor_thread, learner) if t.is_alive()]
            failed = stuck or actor.error is not None or self.learner_error is not None
            if failed and self.monitor is not None:  # never leave a tegrastats process behind
                self.monitor.stop()
        if stuck:  # saving now would race a thread still using the policy and the buffer
            raise OnlineError(
                f"online run: {', '.join(stuck)} did not stop (a plant call or a gradient step "
                f"that never returns); the last periodic checkpoint in {self.run_dir} is kept"
            )
        return self._wrap_up(stop_reason, stop_file, start, start_step)

    def _open_plant(self) -> tuple[Plant, Actor]:
        """Make the plant (online.plant), check it against the policy and give it an actor."""
        cfg = self.cfg
        env_config = {
            "max_episode_steps": cfg.env.max_episode_steps,
            "kwargs": cfg.env.kwargs,
            "wrappers": (
                cfg.env.wrappers if cfg.env.train_wrappers is None else cfg.env.train_wrappers
            ),
        }
        plant = make_plant(cfg.online.plant, cfg.env.env_id, env_config)
        try:
            self._check_plant(plant)
            actor = self._actor = Actor(self, plant)
        except BaseException:
            plant.close()
            raise
        return plant, actor

    def _supervise(
        self,
        plant: Plant,
        actor_thread: threading.Thread,
        signals: StopRequest,
        stop_file: Path,
        bar: tqdm,
        shown: int,
        last_line: float,
    ) -> str:
        """The supervisor: watch the actor, show progress, and return why the run stops."""
        cfg, ocfg, actor = self.cfg, self.cfg.online, self._actor
        period_ns = 1e9 / ocfg.control_rate_hz
        while True:
            time.sleep(min(0.01, period_ns / 2e9))
            if (
                ocfg.watchdog_periods
                and not actor.resetting
                and time.monotonic_ns() - actor.heartbeat_ns > ocfg.watchdog_periods * period_ns
                and not self.stop.is_set()
                and self._watchdog(plant, actor)
            ):
                continue
            if self.global_step > shown:
                bar.update(self.global_step - shown)
                shown = self.global_step
            if self.progress == "lines" and time.perf_counter() - last_line >= 10:
                last_line = time.perf_counter()
                log.info(
                    "%s online: step %d / %d, %d ticks, %d deadline misses, %d updates",
                    cfg.env.env_id, self.global_step, cfg.train.total_steps,
                    actor.ticks, actor.deadline_misses, self.algo.grad_steps,
                )  # fmt: skip
            reason = self._stop_reason(signals, stop_file, actor_thread)
            if reason is not None:
                return reason

    def _stop_reason(
        self, signals: StopRequest, stop_file: Path, actor_thread: threading.Thread
    ) -> str | None:
        """Why the run stops now (a signal, the stop file, an error, the learner), else None."""
        actor = self._actor
        if signals.signum is not None:
            return signal.Signals(signals.signum).name
        if stop_file.exists():
            return "stop_file"
        if actor.error is not None or self.learner_error is not None:
            return "error"
        if self.stop.is_set():  # the learner's own reason
            return self._learner_reason
        if not actor_thread.is_alive():
            return "error"
        return None

    def _wrap_up(
        self, stop_reason: str, stop_file: Path, start: float, start_step: int
    ) -> dict[str, Any]:
        """The last transitions, the final checkpoint, then a thread's error or the summary."""
        actor = self._actor
        self._drain()  # what the actor queued after the learner's last drain
        self.global_step = self.algo.env_steps
        elapsed = self.time_offset + time.perf_counter() - start
        for error in (actor.error, self.learner_error):
            if error is not None:
                self._save(elapsed)
                raise OnlineError(
                    f"online run stopped: {type(error).__name__}: {error} (checkpoint saved; "
                    f"fix the cause and resume with orin-rl train --resume {self.run_dir})"
                ) from error
        self._save(elapsed)
        if stop_reason == "stop_file":
            stop_file.unlink(missing_ok=True)
        session = time.perf_counter() - start
        return self._finish(elapsed, start_step, session, stop_reason)

    def _warm_up(self, actor: Actor) -> None:
        """First calls load Numba's cached kernels and torch's operators (hundreds of ms with
        the GIL held): make them before the actor's first deadline, on throwaway data."""
        from orin_rl.buffers import ReplayBuffer

        algo = self.algo
        n = self.algo_cfg.batch_size
        scratch = ReplayBuffer(n, algo.replay.specs, algo.device, algo.replay.placement)
        scratch.add(
            {
                name: torch.zeros((n, *spec.shape), dtype=spec.dtype)
                for name, spec in algo.replay.specs.items()
            }
        )
        scratch.sample(n)
        actor._infer(np.zeros(self.policy_spec.obs_shape, dtype=np.float32))
        actor.weight_swaps = actor.safe_actions = 0

    def _check_plant(self, plant: Plant) -> None:
        if not isinstance(getattr(plant, "lock", None), type(threading.Lock())):
            # an adapter whose __init__ did not call Plant.__init__: give it its lock now,
            # before any thread could race to make one
            plant.lock = threading.Lock()
        spec = self.policy_spec
        obs_shape = tuple(plant.observation_space.shape or ())
        space = plant.action_space
        if spec.action_kind == "discrete":
            actions_match = isinstance(space, gym.spaces.Discrete) and space.n == spec.action_dim
            want = f"Discrete({spec.action_dim})"
        else:
            actions_match = space.shape == (spec.action_dim,)
            want = f"({spec.action_dim},)"
        if obs_shape != tuple(spec.obs_shape) or not actions_match:
            got = space if isinstance(space, gym.spaces.Discrete) else space.shape
            raise OnlineError(
                f"plant spaces (obs {obs_shape}, action {got}) do not match "
                f"{self.cfg.env.env_id}'s (obs {tuple(spec.obs_shape)}, action {want}); "
                "set env.env_id to the plant's task"
            )

    def _watchdog(self, plant: Plant, actor: Actor) -> bool:
        """The actor is stuck inside a tick: send the safe action in its place (once per
        stall). True when it tripped."""
        if getattr(actor, "_tripped_at", None) == actor.heartbeat_ns:
            return False
        actor._tripped_at = actor.heartbeat_ns
        self.watchdog_trips += 1
        log.warning(
            "watchdog: the actor has not finished a tick for %.0f ms; sending the safe action",
            (time.monotonic_ns() - actor.heartbeat_ns) / 1e6,
        )
        if plant.lock.acquire(timeout=0.05):
            try:
                actor.watchdog_sends += 1  # the transition this send falls into is dropped
                plant.send(actor.safe_action)
            except Exception as exc:  # the supervisor must go on (and stop the run cleanly)
                log.error("watchdog: sending the safe action failed: %s", exc)
            finally:
                plant.lock.release()
        else:  # the actor holds the plant inside send(): nothing more can be done from here
            log.error("watchdog: the plant's send() is blocked; the safe action was not sent")
        return True

    def _evaluate(self, seed_offset: int, policy=None, device=None, watch=None) -> list[float]:
        """With the learner on a GPU, the evaluation episodes run a host copy of its policy:
        one small forward per env step on the GPU would cost a launch and a synchronisation
        behind the queued updates, most of the learner's time at 1 kHz (measured on the H200,
        docs/benchmarks/online_h200_phases.md)."""
        if policy is None and self.device.type == "cuda" and not self.eval_on_training_physics:
            policy, device = copy.deepcopy(self.policy).cpu(), torch.device("cpu")
        return super()._evaluate(seed_offset, policy, device, watch)

    def _extra_state(self) -> dict[str, Any]:
        return {"online_episodes": self.episodes_done()}

    def _restore(self, state: dict[str, Any]) -> None:
        super()._restore(state)
        self._base_episodes = int(state.get("online_episodes", 0))

    def _summary_extra(self, session_time: float) -> dict[str, Any]:
        """summary.json's ``online`` section: the actor's ticks and deadlines, the learner's
        updates, weight hand-overs and phases."""
        actor = self._actor
        learning_steps = max(self.algo.env_steps - self.algo_cfg.learning_starts, 1)
        return {
            "online": {
                "control_rate_hz": self.cfg.online.control_rate_hz,
                "plant": self.cfg.online.plant,
                "ticks": actor.ticks,
                "deadline_misses": actor.deadline_misses,
                "deadline_miss_fraction": actor.deadline_misses / max(actor.ticks, 1),
                "overruns": actor.overruns,
                "latency_us": actor.latency_summary(),
                "weight_swaps": actor.weight_swaps,
                "weights_published": self.weight_swaps_published,
                "updates": self.algo.grad_steps,
                "updates_this_process": getattr(self, "updates_this_process", 0),
                "updates_per_s": getattr(self, "updates_this_process", 0) / max(session_time, 1e-9),
                "updates_per_env_step": self.algo.grad_steps / learning_steps,
                "update_to_data_target": self.cfg.online.update_to_data,
                "safe_action_ticks": actor.safe_actions,
                "watchdog_trips": self.watchdog_trips,
                "episodes": len(actor.episode_returns),
                "wall_to_threshold_s": self.solved_at["time_s"] if self.solved_at else None,
                "rt_settings": actor.rt_settings,
                "learner_phase_s": {
                    k: round(v, 3) for k, v in getattr(self, "learner_phase_s", {}).items()
                },
            }
        }


__all__ = ["OnlineRunner"]
