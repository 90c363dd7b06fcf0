"""The online run's real-time side: the actor's control loop and the weights it acts with.

The learner hands weights over through a :class:`WeightMailbox` (a reference swap: the actor
never sees a network being written); the actor evaluates its copy with numpy
(:class:`NumpyMLP`), so a tick makes no torch call that would hand the GIL to the learner.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
from collections import deque
from typing import Any, ClassVar, Protocol

import numpy as np
import torch

from orin_rl.algorithms.sac import squashed_gaussian
from orin_rl.config import Config, DQNConfig, SACConfig
from orin_rl.models import PolicySpec
from orin_rl.runners.plant import OnlineError, Plant
from orin_rl.runtime.loop import ControlLoop, LoopConfig
from orin_rl.runtime.stats import summarize_us

log = logging.getLogger(__name__)


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


class Trainer(Protocol):
    """What the actor reads of the run that drives it (``runners.online.OnlineRunner``): named
    here so that this module does not import the runner, which imports it."""

    cfg: Config
    policy_spec: PolicySpec
    algo_cfg: SACConfig | DQNConfig
    """``learning_starts``: actions are random before it."""
    algo: Any
    """The algorithm; DQN's ``epsilon()`` for discrete actions."""
    mailbox: WeightMailbox

    def env_steps_total(self) -> int: ...

    def episodes_done(self) -> int: ...

    def learner_stalled(self) -> bool: ...


class Actor:
    """The real-time side: a ControlLoop per episode, transitions into ``queue``."""

    def __init__(self, trainer: Trainer, plant: Plant):
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
