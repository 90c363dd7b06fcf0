"""mjlab's ``ManagerBasedRlEnv.step`` (mjlab 1.6) in segments, the segments as CUDA graphs.

An eager mjlab step launches 1.6-2.4k CUDA kernels from Python for ~10 ms of physics: it is
launch-bound. Its host branches sit in a few places (measured on the CPU by tracing every
``nonzero``/``item``/``bool`` of a step, Go1 and G1 velocity tasks): the interval events'
timers, the reset ids, command resampling, the velocity command's heading/standing split and
the raycast sensor's singularity check. Everything between them is device work with no
Python decision on device values, so this module runs the step as

    [process + apply action, write]  sim.step  [update, apply, write]  sim.step ... [update,
    counters, terminations, rewards, metrics]  | step/interval events, resets,
    sim.forward, commands, sim.sense (eager) |  [observations]

where each ``[...]`` is one ``torch.cuda.CUDAGraph`` on CUDA and ``sim.step``/``sim.forward``/
``sim.sense`` launch mjlab's own Warp graphs between them, on the same stream. The eager parts
are mjlab's code, called as ``env.step`` calls it. A segment runs eagerly the first time (its
warm-up), is captured the second time and replays from then on, one capture per state of the
sensors' Python-side caches (a reset step recomputes what other steps read from the cache).
The Python a replay skips is redone by ``graph_state`` (a term's state rebound at every call
is copied back into the tensor the graph reads; flags and log entries are set again).

On the CPU (Warp's CPU device) or with graphs off the segments run eagerly: that path is held
against ``env.step`` bit for bit by the CPU tests. ``emulate_graphs()`` runs the capture and
replay logic on the CPU with ``graph_emulation`` (the recorded ops replayed on the recorded
tensors): the CPU tests hold that against ``env.step`` bit for bit too, and the ``gpu`` test
holds the CUDA graphs against it.

What a graph cannot keep, it does not capture: a segment that reads a Python-side buffer
pointer (an actuator's command delay, an observation term's history or delay) stays eager, as
does one whose Python a replay cannot redo (a counter, a list that grows); ``describe()`` says
which segments are graphs. ``mjlab.unit`` captures the same work, mjlab's Warp kernels
included, as one graph a step (``ORIN_RL_MJLAB_STEP=unit``).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from orin_rl.capture import capture
from orin_rl.envs.capture_constants import device_list_indices
from orin_rl.envs.graph_emulation import EmulatedGraph, HostReadWatch
from orin_rl.envs.graph_state import Effects, TensorBindings, bindings, sync_cache
from orin_rl.envs.mjlab.masked import MaskedReset, masked_tail
from orin_rl.envs.mjlab.pin import check_env

log = logging.getLogger(__name__)


def _actuators_have_delay(env: Any) -> bool:
    """An actuator delays commands through a DelayBuffer whose pointer is a Python int."""
    for entity in getattr(env.scene, "entities", {}).values():
        for actuator in getattr(entity, "actuators", None) or []:
            cfg = getattr(actuator, "cfg", None)
            if getattr(cfg, "delay_max_lag", 0) > 0:
                return True
    return False


def _observations_have_buffers(env: Any) -> bool:
    """An observation term with history or delay advances a Python-int pointer per step."""
    manager = env.observation_manager
    return any(
        cfg.history_length > 0 or cfg.delay_max_lag > 0
        for cfgs in manager._group_obs_term_cfgs.values()
        for cfg in cfgs
    )


def _scalar_settings(env: Any) -> tuple:
    """Every reward's, termination's and observation term's weight and scalar parameters:
    constants to a captured graph, changed by curricula between steps."""
    out: list = []
    managers = [getattr(env, "reward_manager", None), getattr(env, "termination_manager", None)]
    cfgs = [c for m in managers if m is not None for c in getattr(m, "_term_cfgs", [])]
    obs = getattr(env, "observation_manager", None)
    for group in getattr(obs, "_group_obs_term_cfgs", {}).values():
        cfgs += group
    for cfg in cfgs:
        params = getattr(cfg, "params", None) or {}
        scalars = tuple((k, v) for k, v in params.items() if _is_scalar(v))
        out.append((id(cfg), getattr(cfg, "weight", None), scalars))
    return tuple(out)


def _is_scalar(v: Any) -> bool:
    if isinstance(v, tuple | list):
        return all(_is_scalar(x) for x in v)
    return isinstance(v, bool | int | float | str)


def group_has_noise(env: Any, group: str) -> bool:
    """Observation noise draws from torch's generator (a graph would advance it)."""
    return any(cfg.noise is not None for cfg in env.observation_manager._group_obs_term_cfgs[group])


_UNSEEN = object()
MAX_VARIANTS = 8
"""Captures a segment may keep (one per Python-side state); past them it runs eagerly."""


class _Variant:
    """One capture of a segment: its graph, the Python it redoes after a replay, what the
    function returned (tensors the graph rewrites), and the sensor caches it read."""

    def __init__(self, graph: Any, effects: Effects, result: Any, cached: list[tuple[Any, Any]]):
        self.graph = graph
        self.effects = effects
        self.result = result
        self.cached = cached

    def replay(self) -> tuple[bool, Any]:
        """(False, None) where a sensor's cache cannot be brought back (run it eagerly)."""
        for sensor, captured in self.cached:
            if not sync_cache(sensor, captured):
                return False, None
        self.graph.replay()
        self.effects.apply()
        return True, self.result


class _Segment:
    """One piece of device work: run eagerly, or captured and replayed.

    With graphs on, a segment keeps one capture per state of the sensors' Python-side caches
    (a reset invalidates them: mjlab's step then recomputes what it would otherwise read from
    the cache, and so does the capture made in that state). The first time a state is seen the
    segment runs eagerly (its warm-up: lazy tensors made, kernels loaded, list indices cached);
    the second time it is captured, then replayed from there on."""

    def __init__(self, name: str, fn: Callable[[], Any], graphable: bool, step: SegmentedStep):
        self.name = name
        self.fn = fn
        self.graphable = graphable
        self.step = step
        self.variants: dict[tuple, _Variant | None] = {}
        self.refused: list[str] = []
        self.replays = 0

    @property
    def captured(self) -> bool:
        return any(v is not None for v in self.variants.values())

    def __call__(self) -> Any:
        step = self.step
        if not (step.use_graphs and self.graphable) or self.refused:
            return self._eager()
        key = self.key()
        variant = self.variants.get(key, _UNSEEN)
        if variant is _UNSEEN:
            if len(self.variants) >= MAX_VARIANTS:
                self._refuse([f"more than {MAX_VARIANTS} Python-side states to capture"])
                return self._eager()
            self.variants[key] = None
            watch = HostReadWatch(cuda_syncs=step.stream is not None)
            with step.list_indices(), watch:
                result = self._eager()
            if watch.reads:  # its capture would fail: stay eager, no capture tried
                reads = ", ".join(watch.reads)
                self._refuse([f"its warm-up reads device values on the host ({reads})"])
            return result
        step.restore_if_dirty()  # an eager run may have rebound what this graph reads
        if variant is None:
            variant = self._capture()
            if variant is None:
                return self._eager()
            self.variants[key] = variant
        ok, result = variant.replay()
        if not ok:
            return self._eager()
        self.replays += 1
        return result

    def key(self) -> tuple:
        """What its captures are kept by: the step's ``cache_key``."""
        return self.step.cache_key()

    def recording(self, graph: Any) -> contextlib.AbstractContextManager:
        """Around the work while ``graph`` records it: nothing for a segment (no Warp work)."""
        return contextlib.nullcontext()

    def _eager(self) -> Any:
        """The segment's work as mjlab's code does it; graphs replayed later restore first."""
        self.step.dirty = True
        return self.fn()

    def _refuse(self, why: list[str]) -> None:
        self.refused = why
        log.warning(
            "mjlab step: segment %r stays eager, its Python cannot be replayed: %s",
            self.name,
            "; ".join(why[:5]),
        )

    def _capture(self) -> _Variant | None:
        """Record the work (a CUDA graph, or its emulation off CUDA) and what its Python
        changes; None where that Python cannot be redone (the capture's changes undone)."""
        step = self.step
        step.sync()
        before = bindings(step.env)
        cached = [(s, s._cached_data) for s in step.sensors if s._cache_valid]
        graph: Any = EmulatedGraph() if step.stream is None else torch.cuda.CUDAGraph()
        context = capture(graph, stream=step.stream)  # a failure leaves the generators as found
        enabled = gc.isenabled()
        gc.disable()  # no finaliser (a Warp graph's, an array's free) recorded into the graph
        effects: Effects | None = None
        try:
            with step.list_indices(), context:
                with self.recording(graph):
                    result = self.fn()
                effects = Effects(before, bindings(step.env))
                if not effects.refused:
                    effects.copy_back()
        except Exception as exc:  # work a capture cannot record (a host read, a host copy)
            if effects is None:
                effects = Effects(before, bindings(step.env))
            effects.undo()
            step.sync()
            self._refuse([f"the capture failed: {type(exc).__name__}: {str(exc)[:200]}"])
            return None
        finally:
            if enabled:
                gc.enable()
        if effects.refused:
            effects.undo()
            self._refuse(effects.refused)
            return None
        step.sync()
        step.bindings.add(before)
        step.bindings.add({(id(c), k): (c, k, v) for c, k, v in effects.rebind})
        return _Variant(graph, effects, result, cached)


class SegmentedStep:
    """``env.step`` of an mjlab ``ManagerBasedRlEnv`` as segments (module docstring).

    ``step(action)`` returns what ``env.step`` returns, plus the critic group's observation of
    the worlds that timed out, taken before their reset (None when none did).
    """

    def __init__(self, env: Any, terminal_group: str, use_graphs: bool = False):
        check_env(env)  # every attribute of mjlab 1.6.0's step this copy uses, or one line
        if not env.cfg.auto_reset:
            raise ValueError("SegmentedStep steps mjlab envs with auto_reset=True")
        self.env = env
        self.terminal_group = terminal_group
        self.decimation = int(env.cfg.decimation)
        self.device = torch.device(env.device)
        self._action = torch.zeros(
            (env.num_envs, env.action_manager.total_action_dim), device=self.device
        )
        self._log: dict[str, Any] = {}  # env.extras["log"], one dict (a replay writes into it)
        self.sensors = list(getattr(env.scene, "sensors", {}).values())
        delay = _actuators_have_delay(env)
        buffers = _observations_have_buffers(env)
        self.segments = [_Segment("action", self._first_substep, not delay, self)]
        for k in range(self.decimation):
            last = k == self.decimation - 1
            self.segments.append(
                _Segment(
                    "rewards" if last else f"substep{k + 1}",
                    self._end_of_step if last else self._between_substeps,
                    not delay,
                    self,
                )
            )
        self.observe = _Segment("observations", self._observations, not buffers, self)
        self.terminal = _Segment(
            "terminal",
            self._terminal_obs,
            not buffers and not group_has_noise(env, terminal_group),
            self,
        )
        self.use_graphs = use_graphs and self.device.type == "cuda"
        self.bindings = TensorBindings(device=self.device)
        self.dirty = False
        """An eager segment ran since the last restore (it may have rebound what graphs read)."""
        self.masked: MaskedReset | None = None
        """The reset path as masked device code (``mask_resets``), else mjlab's eager one."""
        self.masked_segments: list[_Segment] = []
        self.unit: _Segment | None = None
        """The whole step as one capture (``mjlab.unit.turn_on``), else None."""
        self.resets = "eager"
        """How resets run: "masked", "eager", or why the task's could not be masked."""
        self._terms = (_scalar_settings(env), ())
        self._settings_version = 0
        self._index_cache: dict[tuple, torch.Tensor] = {}
        self.terminal_needed = True
        """Take the terminal observation of worlds that time out (the learner reads it)."""
        self.timings: dict[str, float] | None = None
        """Host seconds per phase of the step, summed, when set to a dict (the step benchmark's
        profile: the step is launch-bound, so its host time is its wall time)."""
        # mjlab writes sim data on Warp's stream and relies on its implicit ordering with
        # torch's legacy default stream; the segmented step runs everything on Warp's stream,
        # so graph capture and replay see one stream and one order.
        self.stream = None
        if self.device.type == "cuda":
            import warp as wp

            wp_stream = wp.get_stream(env.sim.wp_device)
            self.stream = torch.cuda.ExternalStream(wp_stream.cuda_stream, device=self.device)

    @property
    def _every(self) -> list[_Segment]:
        """The segments in the order a step runs them (the one unit first, where it is on)."""
        unit = [self.unit] if self.unit is not None else []
        return [*unit, *self.segments, *self.masked_segments, self.observe, self.terminal]

    @property
    def _in_use(self) -> list[_Segment]:
        """What runs a step: the one unit, or the segments (also once the unit was refused)."""
        if self.unit is None or self.unit.refused:
            return self._every
        if self.masked is not None:
            return [self.unit]
        return [self.unit, self.observe, self.terminal]

    @property
    def captured(self) -> bool:
        return any(s.captured for s in self._every)

    def cache_key(self) -> tuple:
        """What a segment's Python branches on: the state of the sensors' Python-side caches,
        and the version of the terms' settings (a curriculum changing a reward's weight)."""
        return (self._settings_version, *(bool(s._cache_valid) for s in self.sensors))

    def restore_if_dirty(self) -> None:
        if self.dirty:
            self._rebind()

    def _check_settings(self) -> None:
        """A term's weight or scalar parameter that eager code (a curriculum at a reset)
        changed is a constant in the graphs captured before: capture again under it."""
        now = (_scalar_settings(self.env), self.masked.settings() if self.masked else ())
        if now != self._terms:
            self._terms = now
            self._settings_version += 1
            log.info("mjlab step: a term's settings changed; its segments are captured again")

    def list_indices(self) -> contextlib.AbstractContextManager:
        return device_list_indices(self._index_cache, self.device)

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def mask_resets(self) -> str | None:
        """Run the reset path (interval events, resets, command resampling) as masked device
        code over every world (``mjlab.masked``): segments a graph can hold, no host read.
        Returns None, or why the task keeps mjlab's eager resets (one line, also logged)."""
        why = self.resets = MaskedReset.check(self.env) or "masked"
        if why != "masked":
            log.warning("mjlab step: resets stay mjlab's eager code: %s", why)
            return why
        m = self.masked = MaskedReset(self.env)
        self.masked_segments = [
            _Segment(name, fn, True, self)
            for name, fn in (
                ("events", m.interval_events),
                ("reset", m.begin_reset),
                ("reset2", m.finish_reset),
                ("commands", m.commands),
                ("sensors", m.refresh_sensors),
            )
        ]
        self._terms = (_scalar_settings(self.env), self.masked.settings())
        return None

    def emulate_graphs(self) -> None:
        """Off CUDA: capture and replay the segments with ``graph_emulation`` (the graphs'
        semantics, for tests on Warp's CPU device)."""
        if self.device.type == "cuda":
            raise ValueError("emulated graphs are for devices without CUDA graphs")
        self.use_graphs = True

    # ------------------------------------------------------------ the segments' device work
    def _first_substep(self) -> None:
        self.env.action_manager.process_action(self._action)
        self._apply_action()

    def _between_substeps(self) -> None:
        self._after_physics()
        self._apply_action()

    def _apply_action(self) -> None:
        """The decimation loop's part before ``sim.step``."""
        self.env.action_manager.apply_action()
        self.env.scene.write_data_to_sim()

    def _after_physics(self) -> None:
        """The decimation loop's part after ``sim.step``."""
        self.env.scene.update(dt=self.env.physics_dt)
        self.env.metrics_manager.compute_substep()

    def _end_of_step(self) -> tuple[torch.Tensor, ...]:
        env = self.env
        self._after_physics()
        env.episode_length_buf += 1
        env.reset_buf = env.termination_manager.compute()
        env.reset_terminated = env.termination_manager.terminated
        env.reset_time_outs = env.termination_manager.time_outs
        env.reward_buf = env.reward_manager.compute(dt=env.step_dt)
        env.metrics_manager.compute()
        return env.reset_buf, env.reset_terminated, env.reset_time_outs, env.reward_buf

    def _observations(self) -> dict[str, torch.Tensor]:
        return self.env.observation_manager.compute(update_history=True)

    def _terminal_obs(self) -> torch.Tensor:
        manager = self.env.observation_manager
        return manager.compute_group(self.terminal_group, update_history=False)

    # ------------------------------------------------------------------------ the step
    def step(self, action: torch.Tensor) -> tuple[Any, ...]:
        """One step; with graphs on, each segment runs eagerly the first time, is captured
        the second (a capture changes no world, then the graph replays) and replays after."""
        if self.stream is None:
            return self._step(action)
        caller = torch.cuda.current_stream(self.device)
        self.stream.wait_stream(caller)  # the action was written on the caller's stream
        with torch.cuda.stream(self.stream):  # type: ignore[arg-type]
            out = self._step(action)
        caller.wait_stream(self.stream)  # the caller reads what the step wrote
        return out

    def _step(self, action: torch.Tensor) -> tuple[Any, ...]:
        """mjlab 1.6's ``ManagerBasedRlEnv.step`` with ``auto_reset=True``, line for line."""
        if self.unit is not None and not self.unit.refused and self.masked is not None:
            return self.unit.run(action)  # type: ignore[attr-defined]
        env = self.env
        t = self._clock(0.0, "")
        self._log.clear()
        env.extras["log"] = self._log
        self._action.copy_(action)
        if self.masked is not None:
            self.masked.before_step()
        if self.use_graphs:
            self._check_settings()
        self._rebind()
        outputs = self._physics()
        env.reset_buf, env.reset_terminated, env.reset_time_outs, env.reward_buf = outputs
        t = self._clock(t, "physics and rewards")
        if self.masked is not None:
            return masked_tail(self, t)
        if "step" in env.event_manager.available_modes:
            env.event_manager.apply(mode="step", dt=env.step_dt)
        if "interval" in env.event_manager.available_modes:
            env.event_manager.apply(mode="interval", dt=env.step_dt)
        t = self._clock(t, "events")
        terminal = None
        reset_env_ids = env.reset_buf.nonzero(as_tuple=False).squeeze(-1)
        resets = len(reset_env_ids) > 0
        if resets:
            # only time-outs bootstrap from it (a learner may not ask: rsl_rl's bootstrap)
            if self.terminal_needed and bool(env.reset_time_outs.any()):
                terminal = self._terminal_observation()
                t = self._clock(t, "terminal observation")
            env.recorder_manager.record_pre_reset(reset_env_ids)
            env._reset_idx(reset_env_ids)
            env.scene.write_data_to_sim()
        t = self._clock(t, "reset")
        env.sim.forward()
        t = self._clock(t, "forward")
        if resets:
            command_dt = env._command_dt
            command_dt.fill_(env.step_dt)
            command_dt[reset_env_ids] = 0.0
            env.command_manager.compute(dt=command_dt)
        else:
            env.command_manager.compute(dt=env.step_dt)
        t = self._clock(t, "commands")
        env.sim.sense()
        t = self._clock(t, "sense")
        if self.use_graphs and resets:
            self._check_settings()  # a curriculum runs at a reset
        self._rebind()
        obs = self.observe()
        env.obs_buf = obs
        env.observation_manager._obs_buffer = obs
        t = self._clock(t, "observations")
        if resets:
            env.recorder_manager.record_post_reset(reset_env_ids)
        env.recorder_manager.record_post_step()
        self._clock(t, "recorders")
        return (
            env.obs_buf,
            env.reward_buf,
            env.reset_terminated,
            env.reset_time_outs,
            env.extras,
            terminal,
        )

    def _physics(self) -> tuple[torch.Tensor, ...]:
        """The decimation loop and the rewards: one capture where the one unit holds them
        (with mjlab's eager resets), else the segments with mjlab's Warp graphs between."""
        env = self.env
        if self.unit is not None and not self.unit.refused:
            env._sim_step_counter += self.decimation  # mjlab's counters: no graph reads them
            env.common_step_counter += 1
            return self.unit()
        segments = iter(self.segments)
        next(segments)()
        for k in range(self.decimation):
            env._sim_step_counter += 1
            env.sim.step()
            if k == self.decimation - 1:
                env.common_step_counter += 1  # before terminations and rewards, as mjlab
                outputs = next(segments)()
            else:
                next(segments)()
        return outputs

    def _terminal_observation(self) -> torch.Tensor:
        """The terminal group's observation of the state the worlds reached (before reset):
        derived quantities refreshed first, as the step's docstring says they lag; torch's
        generator forked where the group draws noise (eagerly then)."""
        env = self.env
        env.sim.forward()
        env.sim.sense()
        self._rebind()
        if self.terminal.graphable:  # graphs on or off, the same numbers
            out = self.terminal()
        else:
            devices = [self.device.index or 0] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices):
                out = self._terminal_obs()
        return out.clone()

    def _clock(self, since: float, phase: str) -> float:
        """With ``timings`` set: add the host time since ``since`` to ``phase``; returns now."""
        if self.timings is None:
            return 0.0
        now = time.perf_counter()
        if phase:
            self.timings[phase] = self.timings.get(phase, 0.0) + now - since
        return now

    def _rebind(self) -> None:
        """Before a graph replays: what eager code rebound goes back into the tensors the
        graphs hold; where that cannot be (another shape), every segment runs eagerly from
        here on (the eager step is mjlab's own, exactly)."""
        self.dirty = False
        if not self.captured or self.bindings.restore():
            return
        self.use_graphs = False
        for segment in self._every:
            segment.variants.clear()
        log.warning(
            "mjlab step: CUDA graphs off from here on, eager code rebinds %s with another "
            "shape than the graphs captured",
            ", ".join(sorted(set(self.bindings.mismatched))),
        )

    def describe_plan(self) -> dict[str, Any]:
        """Which segments become graphs at the capture, and why the others stay eager."""
        every = self._every
        why = {
            "action": "an actuator delays commands (a Python-side buffer pointer)",
            "observations": "an observation term keeps history or delay (Python pointer)",
            "terminal": "the critic group draws observation noise, or keeps history",
        }
        return {
            "graphs": [s.name for s in every if s.graphable],
            "eager": {s.name: why.get(s.name, why["action"]) for s in every if not s.graphable},
        }

    def describe(self) -> dict[str, Any]:
        every, used = self._every, self._in_use
        return {
            "step": "unit" if self.unit is not None and not self.unit.refused else "segments",
            "graphs": [s.name for s in used if s.captured],
            "eager": [s.name for s in used if not s.captured],
            "captures": {s.name: sum(v is not None for v in s.variants.values()) for s in every},
            "replays": {s.name: s.replays for s in every},
            "refused": {s.name: s.refused for s in every if s.refused},
            "resets": self.resets,
        }
