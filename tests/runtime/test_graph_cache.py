"""GraphCache: a graph is replayed only for the batch and buffers it was captured on."""

from __future__ import annotations

import numpy as np
import pytest

from orin_rl.runtime.graph_cache import GraphCache


class Buffers:
    """Stands in for a backend's I/O: reallocated (new address) whenever asked."""

    def __init__(self):
        self.generation = 0
        self.data: dict[int, np.ndarray] = {}

    def allocate(self, batch: int) -> int:
        self.generation += 1
        self.data = {self.generation: np.zeros(batch)}
        return self.generation


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
        replayed the batch-1 graph on freed addresses. Keyed on (batch, address), the way
        back is a new key."""
        buffers, log = Buffers(), []
        cache = GraphCache(capture_recorder(log), max_graphs=4)
        for batch in (1, 7, 1):
            address = buffers.allocate(batch)
            graph = cache.get((batch, address))
            assert graph["key"][1] in buffers.data, "replayed a graph over freed buffers"
        assert [k[0] for k in log] == [1, 7, 1]

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
