"""The whole mjlab step as one capture unit: one graph launch a step.

The segmented step (``mjlab.graph``) replays a torch graph per segment and launches mjlab's own
Warp graphs (``sim.step``, ``forward``, ``sense``, ``reset``) between them: with the masked
reset path that is ~12 launches a step for Go1, and the GPU waits on the host between them.
Here the masked step's device work, in mjlab's order,

    action, decimation x (sim.step, substep), rewards | interval events | terminal observation
    (forward, sense, critic group) | reset (mask, sim.reset, managers) | forward | commands |
    sense, sensors | observations

is one capture: Warp's kernels are captured inside torch's. On CUDA, ``torch.cuda.graph`` on
Warp's stream opens the capture (torch's generator registered: the resets' draws advance at
every replay) and ``wp.ScopedCapture(stream=..., external=True)`` tells Warp a capture is open
on its stream, so Warp captures ``mujoco_warp``'s kernels, copies and memsets into it (its
allocations from its memory pool, the solver's loop as a conditional node) while mjlab calls
``mujoco_warp`` directly (``sim.use_cuda_graph`` off for the capture: a Warp graph launched on
a capturing stream is refused by Warp). What is left on the host per step is Python: the
action's copy, the step counters, the curricula's settings and the log.

The reverse nesting (Warp's capture outside, torch's ops inside) is not built: torch cannot
join a capture it did not begin, so its generator would not be registered (every replay would
draw the same numbers) nor its allocator told (later work would reuse the graph's memory).

Off CUDA, the unit is recorded as an ``EmulatedGraph`` in which each of mjlab's Warp calls is
captured by Warp's own capture on its CPU device (``EmulatedGraph.warp_graph``) and replayed in
its place between the torch ops: the CPU tests hold that against mjlab's ``env.step`` bit for
bit. With mjlab's eager resets (it reads the reset worlds on the host, so no graph can hold
them) the unit holds what comes before that read, the action, the decimation loop and the
rewards, and the rest runs as before. Where a unit cannot be (an actuator's delay, an
observation's history, a noisy terminal group), or its capture fails (a term that reads the
host), the step runs as segments, as before, after one warning line.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator
from typing import Any

import torch

from orin_rl.envs.graph_emulation import EmulatedGraph
from orin_rl.envs.mjlab.graph import SegmentedStep, _Segment
from orin_rl.envs.mjlab.masked import masked_result

log = logging.getLogger(__name__)

STEP_ENV = "ORIN_RL_MJLAB_STEP"
"""``unit``: the graphed step as one capture (this module); ``segments`` (the default): the
segmented step (``mjlab.graph``)."""
MODES = ("segments", "unit")


def mode_from_env() -> str:
    """The step's capture mode ``ORIN_RL_MJLAB_STEP`` asks for; another value is one line."""
    mode = os.environ.get(STEP_ENV, "segments").strip() or "segments"
    if mode not in MODES:
        raise ValueError(f"{STEP_ENV}={mode!r}: use one of {', '.join(MODES)}")
    return mode


def why_not(step: SegmentedStep) -> str | None:
    """None where the step (with mjlab's eager resets: its decimation and rewards) can be one
    capture, else why not (one line)."""
    for name, why in step.describe_plan()["eager"].items():
        if step.masked is not None or name in ("action", "rewards") or name.startswith("substep"):
            return f"segment {name!r} cannot be a graph: {why}"
    if step.stream is not None and not step.env.sim.use_cuda_graph:
        return "mjlab's Warp graphs are off on this device (memory pool off or driver < 12.4)"
    return None


def turn_on(step: SegmentedStep) -> str | None:
    """Run ``step`` as one unit from its next call; None, or why it stays in segments (also
    logged, one line). With mjlab's eager resets (``step.masked`` None: it reads the reset
    worlds on the host) the unit holds the decimation loop and the rewards; the events, the
    resets, the commands and sense stay eager, the observations a segment, as before."""
    why = why_not(step)
    if why is not None:
        log.warning("mjlab step: one-unit step off, the step runs as segments: %s", why)
        return why
    from orin_rl.envs.mjlab.terms import use_graph_safe_sensors

    if step.masked is None:
        log.info("mjlab step: resets are mjlab's eager code; one capture holds the physics")
        step.unit = _Unit(step, "physics", functools.partial(_physics_work, step))
        return None
    use_graph_safe_sensors(step.env)  # sim.sense is inside the capture: no host branch in it
    step.unit = _Unit(step, "step", functools.partial(_device_work, step))
    return None


class _Unit(_Segment):
    """The step's device work (masked resets: all of it; mjlab's eager resets: the physics and
    the rewards) as one segment whose capture holds Warp's work too."""

    def __init__(self, step: SegmentedStep, name: str, fn: Any):
        super().__init__(name, fn, True, step)

    def key(self) -> tuple:
        """The step's cache key, and whether the terminal observation is taken (the whole
        step's unit takes it)."""
        return (*self.step.cache_key(), self.step.terminal_needed)

    def recording(self, graph: Any) -> contextlib.AbstractContextManager:
        if isinstance(graph, EmulatedGraph):
            return _warp_in_emulated(self.step, graph)
        return _warp_in_torch_capture(self.step, graph)

    def _refuse(self, why: list[str]) -> None:
        self.refused = why
        log.warning(
            "mjlab step: one-unit step off, the step runs as segments: %s", "; ".join(why[:5])
        )

    def run(self, action: torch.Tensor) -> tuple[Any, ...]:
        """``SegmentedStep._step`` (masked) with its device work one capture."""
        step, env, m = self.step, self.step.env, self.step.masked
        if m is None:
            raise RuntimeError("the one-unit masked step runs with masked resets only")
        t = step._clock(0.0, "")
        step._log.clear()
        env.extras["log"] = step._log
        step._action.copy_(action)
        m.before_step()  # Python curricula, and the reset events' step counter
        if step.use_graphs:
            step._check_settings()
        step._rebind()
        # mjlab's counters as its step leaves them (a term reading one in the capture keeps
        # what it read then, as in the segments' graphs)
        env._sim_step_counter += step.decimation
        env.common_step_counter += 1
        outputs, terminal, reset_log, obs = self()
        env.reset_buf, env.reset_terminated, env.reset_time_outs, env.reward_buf = outputs
        return masked_result(step, obs, reset_log, terminal, step._clock(t, "step (one unit)"))


def _physics_work(step: SegmentedStep) -> tuple[torch.Tensor, ...]:
    """The action, the decimation loop (mjlab's ``sim.step`` between the substeps) and the
    rewards; what the rewards segment returns."""
    env = step.env
    step._first_substep()
    for k in range(step.decimation):
        env.sim.step()
        if k == step.decimation - 1:
            return step._end_of_step()
        step._between_substeps()
    raise AssertionError("a step has at least one substep")


def _device_work(step: SegmentedStep) -> tuple[Any, ...]:
    """Every device op of the masked step, in ``SegmentedStep._step`` + ``masked_tail``'s order:
    (rewards' outputs, terminal observation or None, the reset's log, the observations)."""
    env, m = step.env, step.masked
    if m is None:
        raise RuntimeError("the one-unit masked step runs with masked resets only")
    outputs = _physics_work(step)
    env.reset_buf, env.reset_terminated, env.reset_time_outs, env.reward_buf = outputs
    m.interval_events()
    terminal = None
    if step.terminal_needed:  # the state the worlds reached, before their reset
        env.sim.forward()
        env.sim.sense()
        terminal = step._terminal_obs().clone()
    m.begin_reset()
    m.sim_reset()
    reset_log = m.finish_reset()
    env.sim.forward()
    m.commands()
    env.sim.sense()
    m.refresh_sensors()
    obs = step._observations()
    return outputs, terminal, reset_log, obs


def _warp_calls(step: SegmentedStep) -> list[tuple[Any, str]]:
    """(object, method) of every call in the step that runs Warp's work: mjlab's simulator's
    step, forward and sense kernels, and the masked reset's ``sim.reset``."""
    sim = step.env.sim
    calls = [(sim, "step"), (sim, "forward"), (sim, "_sense_kernel")]
    return calls + ([(step.masked, "sim_reset")] if step.masked is not None else [])


@contextlib.contextmanager
def _warp_in_emulated(step: SegmentedStep, graph: EmulatedGraph) -> Iterator[None]:
    """While ``graph`` records: each Warp call captured by Warp's CPU capture, in its place."""
    device = step.env.sim.wp_device
    patched = []
    for obj, name in _warp_calls(step):
        own = vars(obj).get(name, _MISSING)
        setattr(obj, name, functools.partial(graph.warp_graph, device, getattr(obj, name)))
        patched.append((obj, name, own))
    try:
        yield
    finally:
        for obj, name, own in reversed(patched):
            if own is _MISSING:
                delattr(obj, name)
            else:
                setattr(obj, name, own)


_MISSING = object()


@contextlib.contextmanager
def _warp_in_torch_capture(step: SegmentedStep, graph: Any) -> Iterator[None]:
    """Inside ``torch.cuda.graph`` on Warp's stream: Warp told that a capture is open there
    (``external=True``, the mode torch opened it in), and mjlab calling ``mujoco_warp``'s
    kernels instead of launching its own Warp graphs. Warp's graph object is kept with the
    torch graph (it holds what Warp allocated during the capture)."""
    import warp as wp

    sim = step.env.sim
    was = sim.use_cuda_graph
    sim.use_cuda_graph = False
    scope = wp.ScopedCapture(
        device=sim.wp_device,
        stream=wp.get_stream(sim.wp_device),
        force_module_load=False,  # the eager warm-up step loaded every kernel
        external=True,
        capture_mode=wp.CaptureMode.GLOBAL,  # torch.cuda.graph's default capture_error_mode
    )
    try:
        with scope:
            yield
    finally:
        sim.use_cuda_graph = was
        graph.warp_graph = scope.graph
