"""GraphCache: a graph is replayed only for the batch and buffers it was captured on."""

from __future__ import annotations

import pytest

from orin_rl.runtime.graph_cache import GraphCache


def capture_recorder(log):
    def capture(key):
        log.append(key)
        return {"key": key}

    return capture


class TestKeys:
    def test_same_key_replays_new_key_captures(self):
        log = []
        cache = GraphCache(capture_recorder(log), max_graphs=4)
        first = cache.get((1, 100))
        assert cache.get((1, 100)) is first and log == [(1, 100)]
        cache.get((7, 100))
        cache.get((1, 100))
        assert log == [(1, 100), (7, 100)] and cache.captures == 2

    def test_back_to_a_batch_after_reallocation_captures_again(self):
        """The TensorRT defect: batch 1 → 7 reallocated the buffers, and going back to 1
        replayed the batch-1 graph on freed addresses. The backend's own key (its
        ``_key``, on a stand-in runner: no TensorRT here) must tell those apart."""
        from orin_rl.runtime.tensorrt_backend import TensorRTBackend

        class Runner:  # what _key reads of the engine runner: batch and buffer addresses
            batch, addresses = 1, (1000, 2000)

        backend = object.__new__(TensorRTBackend)
        backend.runner = Runner()
        log = []
        cache = GraphCache(capture_recorder(log), max_graphs=4)
        captured_on = []
        for batch, addresses in ((1, (1000, 2000)), (7, (3000, 4000)), (1, (5000, 6000))):
            backend.runner.batch, backend.runner.addresses = batch, addresses
            graph = cache.get(backend._key())
            captured_on.append(graph["key"])
        assert captured_on[2] != captured_on[0], "replayed a graph over freed buffers"
        assert len(log) == 3
        backend.runner.batch, backend.runner.addresses = 1, (5000, 6000)  # same again: replay
        assert cache.get(backend._key()) is cache.get(backend._key()) and len(log) == 3

    def test_one_graph_at_a_time_releases_the_old_one(self):
        released, log = [], []
        cache = GraphCache(capture_recorder(log), max_graphs=1, release=released.append)
        cache.get(1)
        cache.get(7)
        assert cache.keys() == [7] and released == [{"key": 1}]
        cache.get(1)
        assert log == [1, 7, 1] and released[-1] == {"key": 7}

    def test_least_recently_used_goes_first(self):
        cache = GraphCache(capture_recorder([]), max_graphs=2)
        cache.get(1)
        cache.get(2)
        cache.get(1)  # 1 is now the newest
        cache.get(3)
        assert cache.keys() == [1, 3]

    def test_clear_releases_everything(self):
        released = []
        cache = GraphCache(capture_recorder([]), max_graphs=3, release=released.append)
        for key in (1, 2, 3):
            cache.get(key)
        cache.clear()
        assert len(cache) == 0 and len(released) == 3

    def test_needs_room_for_one(self):
        with pytest.raises(ValueError, match="max_graphs"):
            GraphCache(capture_recorder([]), max_graphs=0)
