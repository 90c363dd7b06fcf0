"""``orin_rl.capture``: a failed capture leaves the process as it found it (torch's random
generators included), on CUDA and in the CPU emulation of its fault."""

from __future__ import annotations

import pytest
import torch

from orin_rl import capture
from orin_rl.envs.graph_emulation import CaptureError, EmulatedGraph


@pytest.fixture(autouse=True)
def _clean():
    yield
    capture.recover()  # a failing test leaves no fault behind for the next


def test_a_failed_recording_leaves_random_draws_raising_until_recovered():
    """The emulation models torch 2.11's fault: after a failed capture, a seeded random op
    raises the offset error (mutation: no ``emulate_failed_capture`` in ``recording``)."""
    x = torch.ones(2)
    with pytest.raises(CaptureError), EmulatedGraph().recording():
        x.tolist()
    assert capture.generators_left_capturing()
    with pytest.raises(RuntimeError, match="Offset increment outside graph capture"):
        torch.randint_like(x, 3)
    x + 1  # only random draws are broken
    capture.recover()
    torch.randint_like(x, 3)


def test_the_capture_context_recovers_and_keeps_the_random_stream():
    """``capture(...)`` recovers before the error propagates, and the draws after it are
    those of a process that never tried (mutation: no ``recover`` in ``capture``)."""
    state = torch.get_rng_state()
    with pytest.raises(CaptureError, match="host"), capture.capture(EmulatedGraph()):
        torch.randn(3)
        torch.ones(3).nonzero()  # a host read: the recording fails
    assert not capture.generators_left_capturing()
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(torch.randn(3), torch.randn(3, generator=torch.Generator().set_state(state)))


@pytest.mark.gpu
def test_after_a_failed_cuda_capture_draws_and_replays_go_on():
    """On CUDA: a capture that fails on a host read (``torch.linalg.eigh``, which syncs), then
    random draws outside a capture and the replay of a graph that draws, as if never tried;
    the random stream is where it was (mutation: no ``recover``: torch raises the offset
    error at the first draw)."""
    torch.cuda.manual_seed(0)
    want = torch.rand(4, device="cuda")
    torch.cuda.manual_seed(0)
    a = torch.eye(3, device="cuda")
    stream = torch.cuda.Stream()
    with pytest.raises(RuntimeError), capture.capture(torch.cuda.CUDAGraph(), stream=stream):
        torch.linalg.eigh(a)
        a.nonzero()
    torch.cuda.synchronize()
    assert torch.equal(torch.rand(4, device="cuda"), want)
    out = torch.zeros(4, device="cuda")
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out.copy_(torch.rand(4, device="cuda"))  # warm-up
    torch.cuda.current_stream().wait_stream(side)
    with capture.capture(graph):
        out.copy_(torch.rand(4, device="cuda"))
    graph.replay()
    first = out.clone()
    graph.replay()
    torch.cuda.synchronize()
    assert not torch.equal(first, out)  # each replay draws new numbers
    torch.randint(0, 5, (8,), device="cuda")
