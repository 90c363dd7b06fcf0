"""CUDA graphs keyed on what they bake in.

A captured graph replays the kernels, shapes and buffer addresses of its capture: replaying it
after the batch changed, or after the buffers it read were freed and reallocated, computes on
the wrong shape or on freed memory. ``GraphCache`` keys each graph on exactly those facts
(batch, shapes, addresses) and captures anew on a key it has not seen, so a caller cannot
replay a stale graph. Pure Python: the TensorRT and torch backends pass their own capture.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

G = TypeVar("G")


class GraphCache(Generic[G]):
    """Up to ``max_graphs`` graphs by key, least recently used dropped first.

    Args:
        capture: makes the graph for a key (called on a miss only).
        max_graphs: graphs kept; 1 keeps only the graph of the last key.
        release: called on each graph that is dropped (None: let it be collected).
    """

    def __init__(
        self,
        capture: Callable[[Hashable], G],
        max_graphs: int = 4,
        release: Callable[[G], None] | None = None,
    ):
        if max_graphs < 1:
            raise ValueError(f"max_graphs must be >= 1, got {max_graphs}")
        self._capture = capture
        self._release = release
        self.max_graphs = max_graphs
        self._graphs: OrderedDict[Hashable, G] = OrderedDict()
        self.captures = 0
        """Graphs captured so far (a re-capture counts again)."""

    def get(self, key: Hashable) -> G:
        """The graph for ``key``, captured now if no valid one is cached."""
        graph = self._graphs.get(key)
        if graph is not None:
            self._graphs.move_to_end(key)
            return graph
        while len(self._graphs) >= self.max_graphs:
            self._drop(next(iter(self._graphs)))
        graph = self._capture(key)
        self.captures += 1
        self._graphs[key] = graph
        return graph

    def keys(self) -> list[Hashable]:
        """Keys of the cached graphs, oldest first."""
        return list(self._graphs)

    def clear(self) -> None:
        """Drop every graph (buffers were reallocated, or the backend deactivates)."""
        for key in list(self._graphs):
            self._drop(key)

    def _drop(self, key: Hashable) -> None:
        graph = self._graphs.pop(key)
        if self._release is not None:
            self._release(graph)

    def __len__(self) -> int:
        return len(self._graphs)
