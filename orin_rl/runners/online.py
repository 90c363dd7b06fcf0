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
  copy of the actor network;
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

import abc
import contextlib
import copy
import importlib
import logging
import signal
import statistics
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from tqdm.auto import tqdm

from orin_rl import jetson
from orin_rl.algorithms.dqn import DQN
from orin_rl.algorithms.sac import SAC, squashed_gaussian
from orin_rl.errors import OrinError
from orin_rl.runners.logger import MetricsLogger
from orin_rl.runners.trainer import VERDICT_SEED_OFFSET, Trainer, _StopRequest
from orin_rl.runtime.loop import ControlLoop, LoopConfig
from orin_rl.runtime.stats import summarize_us

log = logging.getLogger(__name__)


class OnlineError(OrinError, RuntimeError):
    """An online run cannot start or continue (plant, config, a thread that died)."""


# ---------------------------------------------------------------------------------- plants
@dataclass
class Feedback:
    """What the plant reports after an action has acted for one period."""

    obs: np.ndarray
    """The observation now."""
    reward: float
    """Reward of the last action."""
    terminated: bool
    """The episode ended in a terminal state (no bootstrapping past it)."""
    truncated: bool
    """The episode was cut (time limit, operator): bootstrapping continues past it."""


class Plant(abc.ABC):
    """What the actor drives: a robot, or a simulator standing in for one.

    An adapter for a real robot implements ``reset``, ``send`` and ``receive`` (an adapter
    missing one cannot be made: Python names the method), and ``close`` where it holds
    something; the actor calls them from
    its real-time thread, the watchdog calls ``send`` (with the safe action) from another, so
    ``send`` must be safe to call from two threads (the actor holds ``lock`` around its own
    ``send`` calls, the watchdog takes it with a timeout).

    Attributes:
        observation_space: gymnasium Box of one observation.
        action_space: gymnasium Box of one action.
    """

    observation_space: gym.spaces.Box
    action_space: gym.spaces.Box

    def __init__(self) -> None:
        self.lock = threading.Lock()

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start an episode (move to the start pose, wait for the operator, ...) and return
        the first observation. Runs outside the deadline accounting."""

    @abc.abstractmethod
    def send(self, action: np.ndarray) -> None:
        """Apply ``action`` now (non-blocking: a robot's motors take it from here)."""

    @abc.abstractmethod
    def receive(self) -> Feedback:
        """The feedback one period after the last ``send``: observation, reward, episode end."""

    def close(self) -> None:  # noqa: B027 - optional: a plant holding nothing closes nothing
        """Release the plant (sockets, motors off)."""


class GymPlant(Plant):
    """A gymnasium env stepped in real time: ``send`` steps it at once, ``receive`` returns
    that step's outcome when the next tick reads it (the control loop sleeps to the rate in
    between, as a robot's period would pass)."""

    def __init__(
        self,
        env_id: str,
        max_episode_steps: int | None = None,
        env_config: dict[str, Any] | None = None,
    ):
        super().__init__()
        from orin_rl.env_factory import make_env

        config = dict(env_config or {})
        if max_episode_steps is not None:
            config["max_episode_steps"] = max_episode_steps
        self.env = make_env(env_id, config)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        self._feedback: Feedback | None = None

    def reset(self, seed: int | None = None) -> np.ndarray:
        obs, _ = self.env.reset(seed=seed)
        self._feedback = None
        return np.asarray(obs, dtype=np.float32)

    def send(self, action: np.ndarray) -> None:
        obs, reward, terminated, truncated, _ = self.env.step(action)
        self._feedback = Feedback(
            np.asarray(obs, dtype=np.float32), float(reward), bool(terminated), bool(truncated)
        )

    def receive(self) -> Feedback:
        if self._feedback is None:
            raise OnlineError("receive() before any send() in this episode")
        return self._feedback

    def close(self) -> None:
        self.env.close()


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


# ---------------------------------------------------------------------------- hand-over
class NumpyMLP:
    """A copy of an ``nn.Sequential`` MLP (Linear layers and ReLU/Tanh/ELU) evaluated with
    numpy: the actor's tick then makes no torch call, each of which would release the GIL to
    the learner and wait up to a switch interval to get it back."""

    ACTS: ClassVar[dict[str, Any]] = {
        "ReLU": lambda x: np.maximum(x, 0.0),
        "Tanh": np.tanh,
        "ELU": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    }

    def __init__(self, module: torch.nn.Module):
        self.layers: list[tuple[str, Any, Any]] = []
        for m in module:
            name = type(m).__name__
            if name == "Linear":
                w = m.weight.detach().cpu().numpy().astype(np.float32).T.copy()
                b = m.bias.detach().cpu().numpy().astype(np.float32).copy()
                self.layers.append(("Linear", w, b))
            elif name in self.ACTS:
                self.layers.append((name, None, None))
            else:
                raise TypeError(f"NumpyMLP: no numpy twin for {name}")

    @classmethod
    def supports(cls, module: torch.nn.Module) -> bool:
        return isinstance(module, torch.nn.Sequential) and all(
            type(m).__name__ in ("Linear", *cls.ACTS) for m in module
        )

    def __call__(self, x: np.ndarray) -> np.ndarray:
        for name, w, b in self.layers:
            x = x @ w + b if name == "Linear" else self.ACTS[name](x)
        return x


class WeightMailbox:
    """One slot holding the newest published actor network: (version, network).

    ``publish`` builds the whole copy before the slot's one reference changes, so a reader
    sees either the old network or the new one, never one being written. The copy is a
    :class:`NumpyMLP` where the network is a plain MLP (``numpy=True``), else a torch module.
    """

    def __init__(self, template: torch.nn.Module, numpy: bool = True):
        self._template = copy.deepcopy(template).cpu().eval().requires_grad_(False)
        self.numpy = numpy and NumpyMLP.supports(self._template)
        self._slot: tuple[int, Any] = (0, self._copy(self._template))

    def _copy(self, source: torch.nn.Module) -> Any:
        fresh = copy.deepcopy(self._template)
        with torch.no_grad():
            for dst, src in zip(fresh.state_dict().values(), source.state_dict().values(),
                                strict=True):  # fmt: skip
                dst.copy_(src)
        return NumpyMLP(fresh) if self.numpy else fresh

    def publish(self, source: torch.nn.Module) -> int:
        """Copy ``source``'s weights into a new network and make it the newest; returns its
        version."""
        fresh = self._copy(source)
        version = self._slot[0] + 1
        self._slot = (version, fresh)  # the hand-over: one reference assignment
        return version

    def latest(self) -> tuple[int, Any]:
        """(version, network) of the newest publication."""
        return self._slot


def squashed_gaussian_np(
    out: np.ndarray, mid: np.ndarray, half: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """``algorithms.sac.squashed_gaussian``'s sample in numpy (the actor's tick): the same
    soft clamp of log std, the same tanh squash into the bounds."""
    from orin_rl.algorithms.sac import LOG_STD_MAX, LOG_STD_MIN

    mean, log_std = np.split(out.astype(np.float32), 2, axis=-1)
    log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (np.tanh(log_std) + 1)
    u = mean + np.exp(log_std) * rng.standard_normal(mean.shape, dtype=np.float32)
    return (mid + half * np.tanh(u)).astype(np.float32)


# ------------------------------------------------------------------------------- actor
TICKS_PER_LOOP = 10_000
"""Ticks of one ControlLoop run (its latency recorder is preallocated to this many)."""


class Actor:
    """The real-time side: a ControlLoop per episode, transitions into ``queue``."""

    def __init__(self, trainer: OnlineTrainer, plant: Plant):
        t = trainer
        self.t, self.plant = t, plant
        self.cfg = t.cfg.online
        spec = t.policy_spec
        self.discrete = spec.action_kind == "discrete"
        self.num_actions = spec.action_dim
        if self.discrete:
            self._discrete_limits(t.cfg.env.env_id)
        else:
            self._continuous_limits(t.cfg.env.env_id)
        self.generator = torch.Generator().manual_seed(t.cfg.train.seed + 77)
        self.rng = np.random.default_rng(t.cfg.train.seed + 78)
        self.version, self.net = t.mailbox.latest()
        self.queue: deque[tuple] = deque()
        """Finished transitions (obs, action, reward, next_obs, terminated), oldest first."""
        self.steps = 0
        """Transitions produced by this process."""
        self.ticks = self.deadline_misses = self.overruns = self.safe_actions = 0
        self.weight_swaps = 0
        self.latency_ns: list[np.ndarray] = []
        self.episode_returns: deque[float] = deque()
        self.episode_lengths: deque[int] = deque()
        self.heartbeat_ns = time.monotonic_ns()
        self.resetting = False
        """Inside ``plant.reset``: the watchdog leaves a reset alone (it takes its own time)."""
        self.watchdog_sends = 0
        """Safe actions the watchdog sent; a transition spanning one is dropped (two plant steps,
        not one)."""
        self._sent_gen = 0
        self._obs_gen = 0
        """watchdog_sends when the observation the next action is chosen for was read."""
        self.dropped = 0
        """Transitions dropped because a watchdog send fell inside them."""
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.rt_settings: dict[str, str] = {}
        self._obs: np.ndarray | None = None
        self._action: np.ndarray | None = None
        self._episode_over = False
        self._ret = 0.0
        self._len = 0

    def _continuous_limits(self, env_id: str) -> None:
        """Box actions: the env's bounds, tightened by online.action_low/high; the safe action
        (the middle of the bounds unless given) clipped into them."""
        spec = self.t.policy_spec
        for key in ("safe_action", "action_low", "action_high"):
            value = getattr(self.cfg, key)
            if value is not None and len(value) != spec.action_dim:
                raise OnlineError(
                    f"online.{key}: {len(value)} values for {spec.action_dim} action "
                    f"dimension(s) of {env_id}; give one per dimension"
                )
        low = np.asarray(spec.action_low, dtype=np.float32)
        high = np.asarray(spec.action_high, dtype=np.float32)
        if self.cfg.action_low is not None:
            low = np.maximum(low, np.asarray(self.cfg.action_low, dtype=np.float32))
        if self.cfg.action_high is not None:
            high = np.minimum(high, np.asarray(self.cfg.action_high, dtype=np.float32))
        self.low, self.high = low, high
        self.mid = torch.tensor((np.asarray(spec.action_low) + spec.action_high) / 2).float()
        self.half = torch.tensor((np.asarray(spec.action_high) - spec.action_low) / 2).float()
        self.mid_np, self.half_np = self.mid.numpy(), self.half.numpy()
        safe = self.cfg.safe_action
        self.safe_action = np.clip(
            np.asarray(safe if safe is not None else self.mid.numpy(), dtype=np.float32),
            low,
            high,
        )

    def _discrete_limits(self, env_id: str) -> None:
        """Discrete actions: no bounds to tighten; the safe action is one action index."""
        n = self.num_actions
        if self.cfg.action_low is not None or self.cfg.action_high is not None:
            raise OnlineError(
                f"online.action_low/action_high bound continuous actions; {env_id} has {n} "
                "discrete ones: drop them"
            )
        safe = self.cfg.safe_action if self.cfg.safe_action is not None else [0]
        if len(safe) != 1 or float(safe[0]) != int(safe[0]) or not 0 <= int(safe[0]) < n:
            raise OnlineError(
                f"online.safe_action: one action index of {env_id} (0 to {n - 1}), got {safe}"
            )
        self.safe_action = np.int64(int(safe[0]))

    def _choose(self, obs: np.ndarray, net: Any) -> np.ndarray:
        """A discrete action: uniform before learning starts, then DQN's epsilon-greedy."""
        t = self.t
        if t.env_steps_total() < t.algo_cfg.learning_starts or self.rng.random() < t.algo.epsilon():
            return np.int64(self.rng.integers(self.num_actions))
        if isinstance(net, NumpyMLP):
            q = net(obs[None])[0]
        else:
            with torch.no_grad():
                q = net(torch.from_numpy(obs).unsqueeze(0))[0].numpy()
        return np.int64(np.argmax(q))

    # one tick: sensor -> infer -> actuate
    def _sensor(self) -> np.ndarray | None:
        if self._action is not None:  # the outcome of the last tick's action
            # A watchdog send from here on steps the plant away from the observation read now
            # before this tick's action reaches it: _actuate then marks the transition stale.
            self._obs_gen = self.watchdog_sends
            fb = self.plant.receive()
            if self.watchdog_sends == self._sent_gen:
                self.queue.append(
                    (self._obs, self._action, fb.reward, fb.obs, float(fb.terminated))
                )
                self.steps += 1
            else:  # the watchdog stepped the plant in between: not one (s, a, r, s')
                self._sent_gen = self.watchdog_sends
                self.dropped += 1
            self._ret += fb.reward
            self._len += 1
            if fb.terminated or fb.truncated:
                self._episode_over = True
                return None
            self._obs = fb.obs
        return self._obs

    def _infer(self, obs: np.ndarray | None) -> np.ndarray | None:
        if obs is None:
            return None
        version, net = self.t.mailbox.latest()
        if version != self.version:  # between ticks' uses: this tick acts with the new one
            self.version, self.net = version, net
            self.weight_swaps += 1
        if self.t.learner_stalled():
            self.safe_actions += 1
            return self.safe_action
        if self.discrete:
            return self._choose(obs, net)
        if self.t.env_steps_total() < self.t.algo_cfg.learning_starts:
            action = self.rng.uniform(self.low, self.high).astype(np.float32)
        elif isinstance(net, NumpyMLP):
            action = squashed_gaussian_np(net(obs[None]), self.mid_np, self.half_np, self.rng)[0]
        else:
            with torch.no_grad():
                out = net(torch.from_numpy(obs).unsqueeze(0))
                action = squashed_gaussian(out, self.mid, self.half, generator=self.generator)
                action = action[0][0].numpy()
        return np.clip(action, self.low, self.high)

    def _actuate(self, action: np.ndarray | None) -> None:
        self.heartbeat_ns = time.monotonic_ns()
        if action is None:
            return
        with self.plant.lock:
            # -1 (never equal): the watchdog sent since the sensor read, so this action meets
            # another state than the one it was chosen for; its transition is dropped.
            fresh = self.watchdog_sends == self._obs_gen
            self._sent_gen = self.watchdog_sends if fresh else -1
            self.plant.send(action)
        self._action = action

    def run(self) -> None:
        """Episodes until ``stop`` (the thread's target); errors are kept for the supervisor."""
        cfg, tcfg = self.cfg, self.t.cfg.train
        try:
            episode = 0
            self._episode_over = True
            next_start: int | None = None
            while not self.stop.is_set():
                if self._episode_over:  # a new episode: reset outside the deadline accounting
                    self.resetting = True
                    try:
                        with self.plant.lock:
                            self._obs = self.plant.reset(
                                seed=tcfg.seed + 100_000 + self.t.episodes_done()
                            )
                            self._obs_gen = self.watchdog_sends
                    finally:
                        self.heartbeat_ns = time.monotonic_ns()
                        self.resetting = False
                    self._action, self._episode_over = None, False
                    self._ret, self._len = 0.0, 0
                    next_start = None  # a new episode starts its schedule now
                self.heartbeat_ns = time.monotonic_ns()
                # An episode runs as loops of TICKS_PER_LOOP ticks (the recorder preallocates
                # and writes its samples up front); a loop ends early when the episode does.
                loop = ControlLoop(
                    self._sensor,
                    self._infer,
                    self._actuate,
                    LoopConfig(
                        rate_hz=cfg.control_rate_hz,
                        iterations=TICKS_PER_LOOP,
                        cpu=cfg.actor_cpu,
                        disable_gc=False,  # the learner thread allocates all the time
                    ),
                    should_stop=lambda: self._episode_over or self.stop.is_set(),
                )
                # An episode longer than one loop keeps its schedule across the split.
                result = loop.run(first_start_ns=next_start)
                next_start = None if self._episode_over else loop.next_start_ns
                if episode == 0:
                    self.rt_settings = result.rt_settings
                self.ticks += result.iterations
                self.deadline_misses += result.deadline_misses
                self.overruns += result.overruns
                if result.latency_ns is not None:
                    self.latency_ns.append(result.latency_ns[: result.iterations].copy())
                if self._episode_over:
                    self.episode_returns.append(self._ret)
                    self.episode_lengths.append(self._len)
                episode += 1
        except BaseException as exc:  # the supervisor stops the run and re-raises it
            self.error = exc
        finally:
            with contextlib.suppress(Exception), self.plant.lock:
                self.plant.send(self.safe_action)  # the robot holds still when acting ends

    def latency_summary(self) -> dict[str, float]:
        if not self.latency_ns:
            return {}
        lat = np.concatenate(self.latency_ns)
        stats = summarize_us(lat)
        return {k: stats[k] for k in ("p50", "p99", "max") if k in stats}


# ----------------------------------------------------------------------------- trainer
class OnlineTrainer(Trainer):
    """``train --online``: Trainer's run folder, checkpoints, evaluation and summary around a
    real-time actor and a concurrent learner (SAC, or DQN for discrete actions)."""

    def __init__(self, cfg, run_dir, resume: bool = False, progress: bool = True):
        sub = getattr(cfg, cfg.train.algo)
        if not resume and hasattr(sub, "save_buffer") and not sub.save_buffer:
            # "Nothing lost on a stop": the experience a robot gathered in real time is the
            # expensive part, so an online checkpoint carries it (up to save_buffer_max_mb).
            sub.save_buffer = True
            log.info(
                "online run: the replay buffer goes into checkpoints (%s.save_buffer)",
                cfg.train.algo,
            )
        super().__init__(cfg, run_dir, resume=resume, progress=progress)
        cfg = self.cfg
        if not isinstance(self.algo, SAC | DQN):
            raise OnlineError(
                "online learning runs SAC (continuous actions) or DQN (discrete); "
                "pass --algo sac or --algo dqn"
            )
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
        self.weight_swaps_published = 0
        self.watchdog_trips = 0
        self._base_steps = self.algo.env_steps  # from an earlier process of this run
        # set by _restore (called inside Trainer.__init__) on a resume
        self._base_episodes = getattr(self, "_base_episodes", 0)
        self._actor: Actor | None = None
        self._pending_due = False  # the learner has updates due (for the stall check)

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
        cfg = self.cfg
        ocfg = cfg.online
        env_config = {
            "max_episode_steps": cfg.env.max_episode_steps,
            "kwargs": cfg.env.kwargs,
            "wrappers": cfg.env.wrappers,
        }
        plant = make_plant(ocfg.plant, cfg.env.env_id, env_config)
        try:
            self._check_plant(plant)
            actor = self._actor = Actor(self, plant)
        except BaseException:
            plant.close()
            raise
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
        period_ns = 1e9 / ocfg.control_rate_hz
        stop_reason = "total_steps"
        shown = self.global_step
        last_line = time.perf_counter()
        try:
            with _StopRequest() as signals:
                learner.start()
                actor.heartbeat_ns = time.monotonic_ns()  # the warm-up is not a stall
                actor_thread.start()
                while True:  # the supervisor
                    time.sleep(min(0.01, period_ns / 2e9))
                    if (
                        ocfg.watchdog_periods
                        and not actor.resetting
                        and time.monotonic_ns() - actor.heartbeat_ns
                        > ocfg.watchdog_periods * period_ns
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
                    if signals.signum is not None:
                        stop_reason = signal.Signals(signals.signum).name
                        break
                    if stop_file.exists():
                        stop_reason = "stop_file"
                        break
                    if actor.error is not None or self.learner_error is not None:
                        stop_reason = "error"
                        break
                    if self.stop.is_set():  # the learner's own reason
                        stop_reason = self._learner_reason
                        break
                    if not actor_thread.is_alive():
                        stop_reason = "error"
                        break
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

    # ---------------------------------------------------------------------- the learner
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
        cfg, algo = self.cfg, self.algo
        ocfg, scfg, tcfg = cfg.online, self.algo_cfg, cfg.train
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
        cuda = self.device.type == "cuda"
        while not self.stop.is_set():
            t0 = clock()
            self._drain(force=False)
            t1 = clock()
            phase["drain"] += t1 - t0
            steps = algo.env_steps
            self.global_step = steps
            learning = steps >= scfg.learning_starts and len(algo.replay) >= scfg.batch_size
            due = learning and algo.grad_steps < ocfg.update_to_data * (
                steps - scfg.learning_starts + 1
            )
            self._pending_due = due
            if due:
                # --cuda-graphs: the step replayed from a graph (SAC on CUDA; the batch is
                # sampled eagerly into its inputs); an eager SAC step on a GPU is hundreds of
                # small launches from this thread.
                if len(in_flight) >= 2:
                    in_flight.popleft().synchronize()
                losses = algo.gradient_step()
                if cuda:
                    in_flight.append(torch.cuda.Event())
                    in_flight[-1].record(torch.cuda.current_stream(self.device))
                losses_sum = losses if losses_sum is None else losses_sum + losses
                losses_n += 1
                algo.grad_steps += 1
                self.updates_this_process += 1
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
            self.learner_heartbeat = time.monotonic()
            phase["other"] += clock() - t4
        phase["evaluate"] = self.eval_time_s - eval_before
        phase["other"] -= phase["evaluate"]
        # the supervisor stopped us, or we stopped: last transitions into the buffer
        self._drain()

    def _evaluate(self, seed_offset: int, policy=None, device=None) -> list[float]:
        """With the learner on a GPU, the evaluation episodes run a host copy of its policy:
        one small forward per env step on the GPU would cost a launch and a synchronisation
        behind the queued updates, most of the learner's time at 1 kHz (measured on the H200,
        docs/benchmarks/online_h200_phases.md)."""
        if policy is None and self.device.type == "cuda" and not self.eval_on_training_physics:
            policy, device = copy.deepcopy(self.policy).cpu(), torch.device("cpu")
        return super()._evaluate(seed_offset, policy, device)

    def _extra_state(self) -> dict[str, Any]:
        return {"online_episodes": self.episodes_done()}

    def _restore(self, state: dict[str, Any]) -> None:
        super()._restore(state)
        self._base_episodes = int(state.get("online_episodes", 0))

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

    def _finish(self, elapsed, start_step, session_time, stop_reason) -> dict[str, Any]:
        summary = super()._finish(elapsed, start_step, session_time, stop_reason)
        actor = self._actor
        learning_steps = max(self.algo.env_steps - self.algo_cfg.learning_starts, 1)
        summary["online"] = {
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
        import json

        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        return summary


DRAIN_BATCH = 16
"""The learner moves the actor's transitions into the buffer once this many are queued..."""
DRAIN_EVERY_S = 0.01
"""...or once this long has passed since the last move."""

LEARNER_PHASES = ("drain", "update", "wait_for_data", "publish", "evaluate", "other")
"""The learner loop's phases, timed into summary.json's ``online.learner_phase_s``: moving the
actor's transitions into the replay buffer, a gradient step (its sampling included), sleeping
until the data allow the next update, publishing weights to the actor, the periodic
evaluation, and the rest (logging, checkpoints, the stop checks)."""

__all__ = [
    "VERDICT_SEED_OFFSET",
    "Feedback",
    "GymPlant",
    "OnlineError",
    "OnlineTrainer",
    "Plant",
    "WeightMailbox",
    "make_plant",
]
