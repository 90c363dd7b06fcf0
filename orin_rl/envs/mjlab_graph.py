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

where each ``[...]`` is one ``torch.cuda.CUDAGraph`` on CUDA (captured after a warm-up step)
and ``sim.step``/``sim.forward``/``sim.sense`` launch mjlab's own Warp graphs between them, on
the same stream. The eager parts are mjlab's code, called as ``env.step`` calls it. On the CPU
(Warp's CPU device) or with graphs off the segments run eagerly: that path is held against
``env.step`` bit for bit by the CPU tests, and the graphed one against it by the ``gpu`` tests.

What a graph cannot keep, it does not capture: a segment that reads a Python-side buffer
pointer (an actuator's command delay, an observation term's history or delay) stays eager, and
``describe()`` says which segments are graphs.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import time
from collections.abc import Callable
from typing import Any

import torch

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


def group_has_noise(env: Any, group: str) -> bool:
    """Observation noise draws from torch's generator (a graph would advance it)."""
    return any(cfg.noise is not None for cfg in env.observation_manager._group_obs_term_cfgs[group])


def _is_int_list(x: Any) -> bool:
    return (
        type(x) is list
        and len(x) > 0
        and all(type(v) is int for v in x)  # not bool: a list of bools is a mask
    )


@contextlib.contextmanager
def device_list_indices(cache: dict[tuple, torch.Tensor], device: torch.device):
    """Indexing a CUDA tensor with a Python list of ints (``x[:, asset_cfg.body_ids, :]``, as
    mjlab's reward terms do) copies the list to the device at every call, and a copy from
    pageable memory cannot be captured. Within this context such a list, indexing a tensor on
    ``device``, becomes a cached int64 tensor there: the same advanced indexing, made once
    (eagerly, in the warm-up step) and reused while capturing."""
    getitem, setitem = torch.Tensor.__getitem__, torch.Tensor.__setitem__

    def convert(tensor: torch.Tensor, idx: Any) -> Any:
        here = tensor.device
        if here.type != device.type or (device.index is not None and here.index != device.index):
            return idx

        def one(x: Any) -> Any:
            if not _is_int_list(x):
                return x
            key = (tensor.device, tuple(x))
            if key not in cache:
                cache[key] = torch.tensor(x, dtype=torch.int64, device=tensor.device)
            return cache[key]

        if isinstance(idx, tuple):
            return tuple(one(x) for x in idx)
        return one(idx)

    def patched_getitem(self, idx):
        return getitem(self, convert(self, idx))

    def patched_setitem(self, idx, value):
        return setitem(self, convert(self, idx), value)

    torch.Tensor.__getitem__ = patched_getitem
    torch.Tensor.__setitem__ = patched_setitem
    try:
        yield
    finally:
        torch.Tensor.__getitem__ = getitem
        torch.Tensor.__setitem__ = setitem


class TensorBindings:
    """The tensors a captured graph reads and writes, held where mjlab's eager code expects
    them. mjlab rebinds some attributes to fresh tensors between the graphed segments (the
    terrain-height sensor's hit positions at every ``sense()``); a graph keeps reading the
    tensor it captured. ``restore`` copies each rebound value into the captured tensor and
    binds it back, so graph and eager code see one tensor again."""

    def __init__(self, root: Any, device: torch.device, max_depth: int = 6):
        self.records: list[tuple[Any, Any, torch.Tensor]] = []
        self.mismatched: list[str] = []
        self._walk(root, device, max_depth, set())

    def _walk(self, obj: Any, device: torch.device, depth: int, seen: set[int]) -> None:
        if depth < 0 or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, dict):
            items: list[tuple[Any, Any]] = list(obj.items())
        elif isinstance(obj, list):
            items = list(enumerate(obj))
        elif _is_task_object(obj):
            items = list(vars(obj).items())
        else:
            return
        for key, value in items:
            if isinstance(value, torch.Tensor):
                if value.device.type == device.type:
                    self.records.append((obj, key, value))
            elif isinstance(value, dict | list) or _is_task_object(value):
                self._walk(value, device, depth - 1, seen)

    def restore(self) -> bool:
        """Bind every rebound attribute back to its captured tensor, with the new values;
        False (and ``mismatched`` names them) where a new value has another shape."""
        ok = True
        for obj, key, captured in self.records:
            current = obj[key] if isinstance(obj, dict | list) else getattr(obj, key, None)
            if current is captured or not isinstance(current, torch.Tensor):
                continue
            if current.shape != captured.shape or current.dtype != captured.dtype:
                self.mismatched.append(f"{type(obj).__name__}.{key}")
                ok = False
                continue
            captured.copy_(current)
            if isinstance(obj, dict | list):
                obj[key] = captured
            else:
                setattr(obj, key, captured)
        return ok


def _is_task_object(obj: Any) -> bool:
    """An object of mjlab (a manager, a term, an entity, a sensor, their data) whose tensor
    attributes a segment may read; mjlab's TorchArray views of Warp arrays never move."""
    module = type(obj).__module__ or ""
    return (
        module.startswith("mjlab")
        and hasattr(obj, "__dict__")
        and type(obj).__name__ != "TorchArray"
        and not isinstance(obj, type)
    )


class _Segment:
    """One piece of device work: run eagerly, or captured once and replayed."""

    def __init__(self, name: str, fn: Callable[[], None], graphable: bool):
        self.name = name
        self.fn = fn
        self.graphable = graphable
        self.graph: torch.cuda.CUDAGraph | None = None

    def __call__(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        else:
            self.fn()

    def capture(self, stream: torch.cuda.Stream) -> None:
        graph = torch.cuda.CUDAGraph()
        enabled = gc.isenabled()
        gc.disable()  # no finaliser (a Warp graph's, an array's free) recorded into the graph
        try:
            with torch.cuda.graph(graph, stream=stream):
                self.fn()
        finally:
            if enabled:
                gc.enable()
        self.graph = graph


_STEP_OUTPUTS = ("obs_buf", "reward_buf", "reset_buf", "reset_terminated", "reset_time_outs")
"""What ``env.step`` leaves on the env (the capture binds them to graph memory meanwhile)."""


class SegmentedStep:
    """``env.step`` of an mjlab ``ManagerBasedRlEnv`` as segments (module docstring).

    ``step(action)`` returns what ``env.step`` returns, plus the critic group's observation of
    the worlds that timed out, taken before their reset (None when none did).
    """

    def __init__(self, env: Any, terminal_group: str, use_graphs: bool = False):
        if not env.cfg.auto_reset:
            raise ValueError("SegmentedStep steps mjlab envs with auto_reset=True")
        self.env = env
        self.terminal_group = terminal_group
        self.decimation = int(env.cfg.decimation)
        self.device = torch.device(env.device)
        self._action = torch.zeros(
            (env.num_envs, env.action_manager.total_action_dim), device=self.device
        )
        delay = _actuators_have_delay(env)
        buffers = _observations_have_buffers(env)
        self.segments = [_Segment("action", self._first_substep, not delay)]
        for k in range(self.decimation):
            last = k == self.decimation - 1
            self.segments.append(
                _Segment(
                    "rewards" if last else f"substep{k + 1}",
                    self._end_of_step if last else self._between_substeps,
                    not delay,
                )
            )
        self.observe = _Segment("observations", self._observations, not buffers)
        self.terminal = _Segment(
            "terminal",
            self._terminal_obs,
            not buffers and not group_has_noise(env, terminal_group),
        )
        # What the segments leave for the step (set by their first run, eager or captured).
        self._terminal_out: Any = None
        self._outputs: Any = None
        self._obs: Any = None
        self.use_graphs = use_graphs and self.device.type == "cuda"
        self._bindings: TensorBindings | None = None
        self._index_cache: dict[tuple, torch.Tensor] = {}
        self.captured = False
        self.terminal_needed = True
        """Take the terminal observation of worlds that time out (the learner reads it)."""
        self.timings: dict[str, float] | None = None
        """Host seconds per phase of the step, summed, when set to a dict (the step benchmark's
        profile: the step is launch-bound, so its host time is its wall time)."""
        # mjlab writes sim data on Warp's stream and relies on its implicit ordering with
        # torch's legacy default stream; the segmented step runs everything on Warp's stream,
        # so graph capture and replay see one stream and one order.
        self._stream = None
        if self.device.type == "cuda":
            import warp as wp

            wp_stream = wp.get_stream(env.sim.wp_device)
            self._stream = torch.cuda.ExternalStream(wp_stream.cuda_stream, device=self.device)

    @property
    def _every(self) -> list[_Segment]:
        """The segments in the order a step runs them."""
        return [*self.segments, self.observe, self.terminal]

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

    def _end_of_step(self) -> None:
        env = self.env
        self._after_physics()
        env.episode_length_buf += 1
        env.reset_buf = env.termination_manager.compute()
        env.reset_terminated = env.termination_manager.terminated
        env.reset_time_outs = env.termination_manager.time_outs
        env.reward_buf = env.reward_manager.compute(dt=env.step_dt)
        env.metrics_manager.compute()
        self._outputs = (env.reset_buf, env.reset_terminated, env.reset_time_outs, env.reward_buf)

    def _observations(self) -> None:
        self._obs = self.env.observation_manager.compute(update_history=True)

    def _terminal_obs(self) -> None:
        manager = self.env.observation_manager
        self._terminal_out = manager.compute_group(self.terminal_group, update_history=False)

    # ------------------------------------------------------------------------ the step
    def step(self, action: torch.Tensor) -> tuple[Any, ...]:
        """One step. With graphs on, the first call is an eager step followed by the capture
        (which changes no world), and later calls replay."""
        if self._stream is None:
            return self._step(action)
        caller = torch.cuda.current_stream(self.device)
        self._stream.wait_stream(caller)  # the action was written on the caller's stream
        with torch.cuda.stream(self._stream):  # type: ignore[arg-type]
            if self.use_graphs and not self.captured:
                with device_list_indices(self._index_cache, self.device):  # warm-up, then capture
                    out = self._step(action)
                    self._capture()
            else:
                out = self._step(action)
        caller.wait_stream(self._stream)  # the caller reads what the step wrote
        return out

    def _step(self, action: torch.Tensor) -> tuple[Any, ...]:
        """mjlab 1.6's ``ManagerBasedRlEnv.step`` with ``auto_reset=True``, line for line."""
        env = self.env
        t = self._clock(0.0, "")
        env.extras["log"] = dict()
        self._action.copy_(action)
        self._rebind()
        segments = iter(self.segments)
        next(segments)()
        for k in range(self.decimation):
            env._sim_step_counter += 1
            env.sim.step()
            if k == self.decimation - 1:
                env.common_step_counter += 1  # before terminations and rewards, as mjlab
            next(segments)()
        env.reset_buf, env.reset_terminated, env.reset_time_outs, env.reward_buf = self._outputs
        t = self._clock(t, "physics and rewards")
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
        self._rebind()
        self.observe()
        env.obs_buf = self._obs
        env.observation_manager._obs_buffer = self._obs
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

    def _terminal_observation(self) -> torch.Tensor:
        """The terminal group's observation of the state the worlds reached (before reset):
        derived quantities refreshed first, as the step's docstring says they lag; torch's
        generator forked where the group draws noise (eagerly then)."""
        env = self.env
        env.sim.forward()
        env.sim.sense()
        self._rebind()
        if self.terminal.graph is not None:
            self.terminal()
        elif self.terminal.graphable:  # graphs on or off, the same numbers
            self._terminal_obs()
        else:
            devices = [self.device.index or 0] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=devices):
                self._terminal_obs()
        return self._terminal_out.clone()

    def _clock(self, since: float, phase: str) -> float:
        """With ``timings`` set: add the host time since ``since`` to ``phase``; returns now."""
        if self.timings is None:
            return 0.0
        now = time.perf_counter()
        if phase:
            self.timings[phase] = self.timings.get(phase, 0.0) + now - since
        return now

    # ------------------------------------------------------------------------ capture
    def _capture(self) -> None:
        """Capture every graphable segment in the order a step runs them, right after an
        eager step (lazy state made, kernels loaded). Capturing records the work, it does not
        run it: no world changes. What the eager step left in ``env`` is put back."""
        env = self.env
        kept = {name: getattr(env, name) for name in _STEP_OUTPUTS}
        kept_obs = env.observation_manager._obs_buffer
        if self.terminal.graphable:
            self._terminal_obs()  # its warm-up (an observation only, nothing advanced)
        torch.cuda.synchronize(self.device)
        for segment in self._every:
            if segment in (self.observe, self.terminal):
                # A step senses before these (eagerly, between the graphs): so does the
                # capture, or a sensor's Python-side cache would hold the rewards' reading.
                env.sim.sense()
            if segment.graphable:
                segment.capture(self._stream)
        torch.cuda.synchronize(self.device)
        self._bindings = TensorBindings(env, self.device)
        for name, value in kept.items():
            setattr(env, name, value)
        env.observation_manager._obs_buffer = kept_obs
        self.captured = True
        log.info("mjlab step: CUDA graphs %s; eager %s", *self.describe().values())

    def _rebind(self) -> None:
        """Before a graph replays: what eager code rebound goes back into the tensors the
        graphs hold; where that cannot be (another shape), every segment runs eagerly from
        here on (the eager step is mjlab's own, exactly)."""
        if self._bindings is None or self._bindings.restore():
            return
        for segment in self._every:
            segment.graph = None
        log.warning(
            "mjlab step: CUDA graphs off from here on, eager code rebinds %s with another "
            "shape than the graphs captured",
            ", ".join(sorted(set(self._bindings.mismatched))),
        )
        self._bindings = None

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
        every = self._every
        return {
            "graphs": [s.name for s in every if s.graph is not None],
            "eager": [s.name for s in every if s.graph is None],
        }
