"""Placement policy and allocation."""

from __future__ import annotations

import pytest
import torch

from orin_rl.buffers import PlacementError, memory

CUDA, CPU = torch.device("cuda"), torch.device("cpu")


@pytest.fixture
def gpu(monkeypatch):
    """Pretend to be on a GPU machine of a given kind (the policy reads only these facts)."""

    def set_kind(integrated: bool, simulated: bool = False):
        monkeypatch.setattr(memory, "is_integrated", lambda device: integrated)
        monkeypatch.setattr(memory, "cuda_simulated", lambda: simulated)

    return set_kind


@pytest.mark.parametrize(
    ("integrated", "simulated", "expected"),
    [
        (True, False, "managed"),  # Orin: CPU and GPU share DRAM
        (True, True, "host"),  # the simulator has no managed memory
        (False, False, "device"),  # discrete GPU: where the learner reads it
    ],
)
def test_auto_policy(gpu, integrated, simulated, expected):
    gpu(integrated, simulated)
    placement, reason = memory.resolve_placement("auto", CUDA)
    assert placement == expected and reason


def test_auto_on_cpu_is_host():
    assert memory.resolve_placement("auto", CPU)[0] == "host"


@pytest.mark.parametrize("placement", ["device", "managed"])
def test_gpu_placements_need_a_cuda_learner(placement):
    with pytest.raises(PlacementError, match="needs a CUDA learner"):
        memory.resolve_placement(placement, CPU)


def test_unknown_placement():
    with pytest.raises(PlacementError, match="unknown buffer placement"):
        memory.resolve_placement("shared", CPU)


def test_managed_request_that_does_not_fit_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1 << 30, 80 << 30))
    with pytest.raises(PlacementError, match="does not fit"):
        memory.allocate((1 << 30,), torch.float32, "managed", CUDA)


def test_host_storage_is_zero_copy():
    s = memory.allocate((3, 4), torch.float32, "host", CPU)
    s.view[1, 2] = 7.0
    assert s.tensor[1, 2].item() == 7.0


@pytest.mark.gpu
@pytest.mark.parametrize("placement", ["device", "managed", "pinned"])
def test_gpu_storage_is_zero_copy(placement):
    s = memory.allocate((3, 4), torch.float32, placement, CUDA)
    s.tensor[1, 2] = 5.0
    if placement == "pinned":
        assert s.tensor.is_pinned() and s.view[1, 2] == 5.0
    else:  # the Numba view points at the very bytes torch wrote
        assert s.view.__cuda_array_interface__["data"][0] == s.tensor.data_ptr()
        assert s.view.shape == (3, 4)


def test_host_writes_land_in_the_tensor():
    """``Storage.host`` is the tensor's own memory: what the CPU writes there the learner reads."""
    s = memory.allocate((2, 3), torch.float32, "host", CPU)
    s.host[1] = [1.0, 2.0, 3.0]
    assert s.tensor[1].tolist() == [1.0, 2.0, 3.0]
    assert s.host is s.host  # made once


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("placement", "managed"), [("managed", True), ("device", False), ("pinned", False)]
)
def test_the_driver_says_which_storage_is_managed(placement, managed):
    """Pointer attributes from the CUDA driver, not pointer equality: managed storage really is
    unified memory, and the CPU's writes into ``host`` reach the GPU's tensor without a copy."""
    s = memory.allocate((64, 4), torch.float32, placement, CUDA)
    assert memory.query_managed(s.tensor.data_ptr()) is managed  # True/False: the query worked
    if placement == "device":
        assert s.host is None
        return
    memory.host_write_fence(CUDA)
    s.host[3] = [1.0, 2.0, 3.0, 4.0]
    assert (s.tensor[3] * 2).tolist() == [2.0, 4.0, 6.0, 8.0]  # pinned: s.tensor is on the host


def test_no_driver_is_named(monkeypatch):
    """Without libcuda the pointer query names what is missing instead of a ctypes traceback."""

    def no_lib(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(memory, "_libcuda", None)
    monkeypatch.setattr(memory.ctypes, "CDLL", no_lib)
    with pytest.raises(PlacementError, match=r"no CUDA driver \(libcuda.so.1\)"):
        memory.query_managed(0x1000)
