"""The one patch of torch (``envs.capture_constants``): scoped to the thread that entered the
context, and torch's own three functions back on every way out.

Mutations, each failing a test here (2026-12-05): ``_uninstall`` restoring ``__getitem__``
only (the other two names stay patched); the context's ``finally`` replaced by a plain exit
(an exception leaves the patch on); the replacements ignoring the thread (another thread's
indexing fills the cache); the count of open contexts ignored (the first thread to leave
uninstalls the patch under the second).
"""

from __future__ import annotations

import threading

import pytest
import torch

from orin_rl.envs.capture_constants import device_list_indices

CPU = torch.device("cpu")
NAMES = ("__getitem__", "__setitem__")


def _torch_own() -> tuple:
    return torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.tensor


def test_all_three_names_are_torchs_own_after_the_context():
    before = _torch_own()
    with device_list_indices({}, CPU):
        assert all(a is not b for a, b in zip(_torch_own(), before, strict=True))
    assert all(a is b for a, b in zip(_torch_own(), before, strict=True))


def test_all_three_names_are_torchs_own_after_an_exception():
    before = _torch_own()
    with pytest.raises(ZeroDivisionError), device_list_indices({}, CPU):
        torch.arange(4.0)[[1, 2]]
        1 / 0  # noqa: B018
    assert all(a is b for a, b in zip(_torch_own(), before, strict=True))


def test_another_thread_gets_torchs_behaviour_inside_the_context():
    """While the capturing thread is inside, a second thread's list indexing, scalar
    assignment and ``torch.tensor`` of numbers are torch's: nothing reaches the cache, and a
    ``torch.tensor`` there is a fresh tensor, not a copy of a cached one."""
    cache: dict = {}
    x = torch.arange(12.0).reshape(3, 4)
    seen: dict = {}

    def other() -> None:
        y = x.clone()
        y[[0, 2]] = 5.0
        seen["get"] = x[[2, 0]]
        seen["set"] = y
        seen["tensor"] = torch.tensor([1.0, 2.0], device="cpu")

    with device_list_indices(cache, CPU):
        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
        assert cache == {}  # the other thread's calls left it alone
        mine = x[[2, 0]]  # this thread's: cached
    assert len(cache) == 1
    assert torch.equal(seen["get"], mine)
    assert torch.equal(seen["set"][[0, 2]], torch.full((2, 4), 5.0))
    assert torch.equal(seen["tensor"], torch.tensor([1.0, 2.0]))


def test_two_threads_inside_at_once_each_keep_their_own_cache_until_the_last_leaves():
    """Two threads inside their own contexts: each one's indexing fills its own cache; the
    first to leave does not take the patch from the second, the last one does."""
    before = _torch_own()
    x = torch.arange(10.0)
    caches: list[dict] = [{}, {}]
    entered, first_left = threading.Barrier(2), threading.Event()

    def inside(k: int) -> None:
        with device_list_indices(caches[k], CPU):
            entered.wait()
            if k == 1:
                first_left.wait()
            x[[k, k + 1]]
        if k == 0:
            first_left.set()

    threads = [threading.Thread(target=inside, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [set(k[1] for k in c) for c in caches] == [{(0, 1)}, {(1, 2)}]
    assert all(a is b for a, b in zip(_torch_own(), before, strict=True))
