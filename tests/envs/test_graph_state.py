"""A captured graph's semantics (``graph_emulation``) and the Python a replay must redo
(``graph_state``), on small objects whose right answers are known."""

from __future__ import annotations

import pytest
import torch

from orin_rl.capture import recover
from orin_rl.envs.graph_emulation import CaptureError, EmulatedGraph
from orin_rl.envs.graph_state import Effects, bindings, sync_cache


class Term:
    """A task object (its module is not a library's): walked by ``bindings``."""

    def __init__(self):
        self.state = torch.zeros(3)
        self.flag = False
        self.count = 0
        self.log: dict[str, torch.Tensor] = {}
        self.items: list[int] = []

    def step(self, x: torch.Tensor) -> torch.Tensor:
        self.state = torch.where(x > 0, self.state + x, self.state)  # rebinds, as mjlab's terms
        self.flag = True
        self.log["mean"] = self.state.mean()
        return self.state * 2


def _captured(term: Term, x: torch.Tensor) -> tuple[EmulatedGraph, Effects, torch.Tensor]:
    graph = EmulatedGraph()
    before = bindings(term)
    with graph.recording():
        out = term.step(x)
        effects = Effects(before, bindings(term))
        effects.copy_back()
    return graph, effects, out


def test_a_recording_changes_nothing_and_a_replay_does_the_work_on_the_same_tensors():
    a, b = torch.zeros(3), torch.ones(3)
    out = {}
    graph = EmulatedGraph()
    with graph.recording():
        c = a + b
        a.add_(1)
        a[1:].mul_(3)  # a view's write reaches its base
        out["x"] = c * 2
    assert torch.equal(a, torch.zeros(3))  # undone, as a capture never runs
    graph.replay()
    assert torch.equal(a, torch.tensor([1.0, 3.0, 3.0])) and torch.equal(c, torch.ones(3))
    graph.replay()  # each replay reads what the last one left
    assert torch.equal(a, torch.tensor([2.0, 12.0, 12.0]))
    assert torch.equal(out["x"], torch.tensor([4.0, 8.0, 8.0]))


def test_an_op_that_may_alias_but_copied_is_replayed_into_its_copy():
    """In inference mode ``to``, ``reshape`` and ``contiguous`` reach the recording as ops
    whose schema says they may return an input; where they made a copy (a dtype change), a
    replay must write the new result into it, as a CUDA graph's kernel does."""
    x, out = torch.zeros(4), torch.zeros(4)
    graph = EmulatedGraph()
    with graph.recording(), torch.inference_mode():
        wide = x.to(torch.float64)  # a copy: its schema allows an alias
        out.copy_((wide * 2).to(torch.float32))
    for value in (1.0, 3.0):
        x.fill_(value)
        graph.replay()
        assert torch.equal(out, torch.full((4,), 2 * value))


def test_a_replay_redoes_recorded_launches_and_restores_the_generators_a_capture_holds():
    """``launchers`` (functions launching kernels torch does not see) are replayed in order;
    ``generators`` come back to their state before the recording, as registered ones do."""
    import types

    calls = []
    host = types.SimpleNamespace(launch=lambda t: calls.append(t.numpy().copy()))  # a host view
    gen = torch.Generator().manual_seed(3)
    state = gen.get_state()
    x = torch.zeros(2)
    graph = EmulatedGraph([gen], [(host, "launch")])
    with graph.recording():
        y = x + torch.rand(2, generator=gen)
        host.launch(y)
    assert torch.equal(gen.get_state(), state)
    expected = x + torch.rand(2, generator=torch.Generator().manual_seed(3))
    graph.replay()
    assert len(calls) == 2  # the recording's call and the replay's
    assert torch.equal(torch.from_numpy(calls[-1]), expected)  # the replay's y, the same draws


def test_a_host_read_cannot_be_recorded_and_the_generator_is_left_as_it_was():
    x = torch.ones(2)
    with pytest.raises(CaptureError, match="host"), EmulatedGraph().recording():
        bool(x.sum() > 0)
    with pytest.raises(CaptureError, match="host"), EmulatedGraph().recording():
        x.nonzero()
    recover()  # as every capture site does after a failure (``capture.capture``)
    state = torch.get_rng_state()
    graph = EmulatedGraph()
    with graph.recording():
        noise = torch.randn(4)
    assert torch.equal(torch.get_rng_state(), state)
    graph.replay()  # draws from the generator at the replay, as eager code would
    assert torch.equal(noise, torch.randn(4, generator=torch.Generator().set_state(state)))
    assert not torch.equal(torch.get_rng_state(), state)


def test_chained_state_is_copied_back_and_python_effects_are_made_again():
    """A term rebinding its state at every call: the capture copies the new value into the old
    tensor (bound again), so replays accumulate; the flag and the log entry come back after a
    replay. Without the copy-back the state would stay at the capture's input."""
    term = Term()
    x = torch.tensor([1.0, -1.0, 2.0])
    held = term.state
    graph, effects, out = _captured(term, x)
    assert term.state is held and [k for _, k, *_ in effects.chained] == ["state"]
    assert not effects.refused
    for n in (1, 2, 3):
        term.flag = False  # eager code between graphs
        term.log.clear()
        graph.replay()
        effects.apply()
        assert torch.equal(held, n * torch.tensor([1.0, 0.0, 2.0]))
        assert torch.equal(out, 2 * held) and term.flag and "mean" in term.log


@pytest.mark.parametrize("change", ["counter", "list", "shape", "delete"])
def test_python_a_replay_cannot_redo_refuses_the_capture_and_is_undone(change):
    term = Term()
    term.log["old"] = torch.ones(1)
    before = bindings(term)
    state, log = term.state, dict(term.log)
    if change == "counter":
        term.count += 1
    elif change == "list":
        term.items.append(1)
    elif change == "shape":
        term.state = torch.zeros(4)
    else:
        del term.log["old"]
    term.flag = True
    effects = Effects(before, bindings(term))
    assert effects.refused
    effects.undo()
    assert term.state is state and term.flag is False and term.log.keys() == log.keys()
    if change == "counter":
        assert term.count == 0


def test_a_cache_filled_eagerly_is_copied_into_the_one_a_graph_reads():
    class Data:
        def __init__(self, v):
            self.force = torch.full((2,), float(v))
            self.found = None

    class Sensor:
        _cached_data = Data(1)

    sensor = Sensor()
    captured = sensor._cached_data
    sensor._cached_data = Data(7)  # eager code recomputed the cache after a reset
    assert sync_cache(sensor, captured)
    assert sensor._cached_data is captured and torch.equal(captured.force, torch.full((2,), 7.0))
    sensor._cached_data = Data(3)
    sensor._cached_data.force = torch.zeros(5)  # another shape: cannot stand in
    assert not sync_cache(sensor, captured)


def test_a_shifted_state_is_copied_from_clones():
    """``prev = cur; cur = cur + 1``: each new value is copied into its old tensor as it was
    after the call, not after another copy-back overwrote it."""

    class Shift:
        def __init__(self):
            self.cur = torch.ones(2)
            self.prev = torch.zeros(2)

    obj = Shift()
    graph = EmulatedGraph()
    before = bindings(obj)
    with graph.recording():
        obj.prev = obj.cur
        obj.cur = obj.cur + 1
        Effects(before, bindings(obj)).copy_back()
    for _ in range(2):
        graph.replay()
    assert torch.equal(obj.prev, torch.full((2,), 2.0))  # eager: prev 2, cur 3
    assert torch.equal(obj.cur, torch.full((2,), 3.0))


def test_state_rebound_from_a_shared_or_viewed_tensor_is_refused():
    class Held:
        def __init__(self):
            buffer = torch.zeros(4)
            self.part = buffer[:2]  # a view: copying into it would write the buffer
            self.a = self.b = torch.zeros(2)  # held twice

    obj = Held()
    before = bindings(obj)
    obj.part = obj.part + 1
    obj.a = obj.a + 1
    effects = Effects(before, bindings(obj))
    assert len(effects.refused) == 2 and not effects.chained


def test_equal_scalars_are_no_change():
    """A NaN rebound to another NaN, 0 to False: the same value, nothing to refuse."""

    class Flags:
        def __init__(self):
            self.x = float("nan")
            self.n = 0

    obj = Flags()
    before = bindings(obj)
    obj.x, obj.n = float("nan"), False
    effects = Effects(before, bindings(obj))
    assert not effects.refused and not effects.rebind


def test_a_failed_recording_leaves_nothing_written_and_host_reads_raise():
    a = torch.zeros(2)
    state = torch.get_rng_state()
    with pytest.raises(CaptureError), EmulatedGraph().recording():
        a.add_(5)
        torch.rand(3)
        a.tolist()  # a host read, as a CUDA capture refuses
    assert torch.equal(a, torch.zeros(2)) and torch.equal(torch.get_rng_state(), state)
    for read in (lambda: torch.equal(a, a), lambda: a.numpy()):
        with pytest.raises(CaptureError), EmulatedGraph().recording():
            read()
    recover()
    assert a.tolist() == [0.0, 0.0]  # restored after the recording


def test_state_rebound_with_every_holder_of_its_memory_is_chained():
    """As mjlab's terrain-height sensor at every ``sense()``: a fresh stack bound to two
    attributes and its first row to a third, and a fresh view of the same buffer (a Warp
    array's ``wp.to_torch``). Every binding of the old stack's memory is rebound alike, so
    the three are chained (copied back into the old stack, which a replay then reads); the
    view of the same memory is no change. Three replays: what three eager calls leave
    (mutations: any shared rebinding refused; the same view counted as a rebinding: refused)."""

    class Sensor:
        def __init__(self):
            self.frames = torch.zeros(2, 3)
            self.cached = self.frames
            self.first = self.frames[:, 0]
            self.out = torch.zeros(4)
            self.view = self.out.view(2, 2)

        def sense(self, x: torch.Tensor) -> None:
            frames = self.frames + x
            self.frames = self.cached = frames
            self.first = frames[:, 0]
            self.view = self.out.view(2, 2)

    obj = Sensor()
    graph = EmulatedGraph()
    before = bindings(obj)
    with graph.recording():
        obj.sense(torch.ones(2, 3))
        effects = Effects(before, bindings(obj))
        assert not effects.refused, effects.refused
        effects.copy_back()
    assert len(effects.chained) == 3
    for _ in range(3):
        graph.replay()
    assert torch.equal(obj.frames, torch.full((2, 3), 3.0)) and obj.cached is obj.frames
    assert torch.equal(obj.first, torch.full((2,), 3.0))
    assert obj.first.data_ptr() == obj.frames.data_ptr()


def test_warp_work_in_a_recording_is_captured_by_warp_and_replayed_in_its_place():
    """A torch op, then Warp work (a kernel adding 10, then a ``capture_while`` loop halving
    the value while it is over 1, the loop's count read from the data at each replay), then a
    torch op, recorded with ``EmulatedGraph.warp_graph``: the recording changes nothing
    (Warp's capture runs nothing, the torch writes are undone), and each replay runs the three
    in order, the loop as many times as the data asks (mutations: the Warp work run eagerly
    inside the recording; its kernels also recorded launch by launch, so replayed twice:
    the values depart)."""
    wp = pytest.importorskip("warp")

    @wp.kernel
    def halve(
        a: wp.array(dtype=wp.float32), over: wp.array(dtype=wp.int32), n: wp.array(dtype=wp.int32)
    ):
        a[0] = a[0] * 0.5
        over[0] = wp.where(a[0] > 1.0, 1, 0)
        n[0] = n[0] + 1

    @wp.kernel
    def add_ten(a: wp.array(dtype=wp.float32)):
        a[0] = a[0] + wp.float32(10.0)  # wp named in the body: Warp resolves it there

    device = wp.get_device("cpu")
    buf = wp.array([8.0], dtype=wp.float32, device=device)
    over = wp.array([1], dtype=wp.int32, device=device)
    launches = wp.zeros(1, dtype=wp.int32, device=device)
    x = wp.to_torch(buf)

    def loop() -> None:
        wp.launch(add_ten, dim=1, inputs=[buf])
        over.fill_(1)
        wp.capture_while(over, lambda: wp.launch(halve, dim=1, inputs=[buf, over, launches]))

    def eager(v: float) -> tuple[float, int]:
        v, n = v + 11.0, 0
        while True:
            v, n = v * 0.5, n + 1
            if v <= 1.0:
                return v * 3.0, n

    graph = EmulatedGraph()
    with graph.recording():
        x.add_(1.0)
        graph.warp_graph(device, loop)
        x.mul_(3.0)
    assert x.tolist() == [8.0] and launches.numpy()[0] == 0
    want, counts = 8.0, []
    for _ in range(3):
        graph.replay()
        want, n = eager(want)
        counts.append(n)
        assert x.tolist() == [want]
        assert launches.numpy()[0] == sum(counts)
    assert counts == [5, 4, 4]
