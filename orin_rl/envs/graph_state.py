"""The Python around a captured graph: what a replay does not redo, and how it is redone.

A CUDA graph replays device work on the tensors its capture saw. The Python that ran during
the capture ran once: a task term that binds a new tensor to its state at every call
(``self.peak_heights = torch.where(...)``, as mjlab's foot-swing reward does) leaves the graph
reading, at every replay, the tensor it read at the capture, never the one it wrote; a sensor's
``_cache_valid`` flag or a metric put into ``extras["log"]`` is set once and never again. This
module finds such changes by walking the task's objects before and after a capture
(``bindings``) and turns them into ``Effects``:

- a tensor attribute rebound to a new tensor of the same shape ("chained" state): the capture
  copies the new value back into the old tensor and binds the old one again, so every replay
  reads what the previous one wrote;
- any other new binding (a flag, a new object, a dict entry): made again after every replay;
- a Python number that changed (a counter a replay cannot advance), a list that grew, a
  deletion, or a tensor rebound to another shape: the capture is refused (the work stays
  eager), its Python changes undone.

``TensorBindings`` covers the other direction: eager code between graphs rebinding an attribute
a graph reads (mjlab's terrain-height sensor binds new hit positions at every ``sense()``).
"""

from __future__ import annotations

from typing import Any

import torch

_LIBRARIES = frozenset(
    {
        "torch", "warp", "numpy", "mujoco", "mujoco_warp", "builtins", "gymnasium", "logging",
        "threading", "collections", "functools", "typing", "enum", "pathlib", "abc", "re",
        "orin_rl", "trimesh", "rich", "prettytable",
    }
)  # fmt: skip
"""Modules whose objects are not the task's state (mjlab's own objects and a user's task
package's are)."""

_SCALARS = (bool, int, float, str, type(None))

Binding = tuple[Any, Any, Any]
"""(container, key, value): ``container[key]`` or ``getattr(container, key)``."""
Snapshot = dict[tuple[int, Any], Binding]
"""Bindings keyed by (id of the container, key); every container walked, even an empty one,
also as (id, WALKED): (container, WALKED, container)."""


class _Walked:
    def __repr__(self) -> str:
        return "WALKED"


WALKED = _Walked()


def is_task_object(obj: Any) -> bool:
    """An object of the task (a manager, a term, an entity, a sensor, their data); mjlab's
    TorchArray views of Warp arrays never move and are not walked."""
    if isinstance(obj, type) or not hasattr(obj, "__dict__"):
        return False
    kind = type(obj)
    root = (kind.__module__ or "").split(".")[0]
    return root not in _LIBRARIES and kind.__name__ != "TorchArray"


def bindings(root: Any, max_depth: int = 7) -> Snapshot:
    """Every attribute, dict entry and list item reachable from ``root`` through the task's
    objects, dicts and lists, keyed by (id of its container, key)."""
    out: Snapshot = {}
    seen: set[int] = set()

    def walk(obj: Any, depth: int) -> None:
        if depth < 0 or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, dict):
            items: list[tuple[Any, Any]] = list(obj.items())
        elif isinstance(obj, list):
            items = list(enumerate(obj))
        elif is_task_object(obj):
            items = list(vars(obj).items())
        else:
            return
        out[(id(obj), WALKED)] = (obj, WALKED, obj)
        for key, value in items:
            out[(id(obj), key)] = (obj, key, value)
            if isinstance(value, dict | list) or is_task_object(value):
                walk(value, depth - 1)

    walk(root, max_depth)
    return out


def _set(container: Any, key: Any, value: Any) -> None:
    if isinstance(container, dict | list):
        container[key] = value
    else:
        setattr(container, key, value)


def _get(container: Any, key: Any) -> Any:
    if isinstance(container, dict):
        return container.get(key)
    if isinstance(container, list):
        return container[key] if key < len(container) else None
    return getattr(container, key, None)


def _name(container: Any, key: Any) -> str:
    return f"{type(container).__name__}.{key}"


def _same_scalar(a: Any, b: Any) -> bool:
    """Python scalars with the same value (0 and False alike, NaN equal to NaN)."""
    if not (isinstance(a, _SCALARS) and isinstance(b, _SCALARS)):
        return False
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return (type(a) is type(b) and a == b) or (
        isinstance(a, int | float) and isinstance(b, int | float) and a == b
    )


def _under_caches(snapshot: Snapshot) -> set[int]:
    """Ids of the objects inside a sensor's ``_cached_data`` (what a sensor computed from
    its state; a rebinding of that state, ``roll`` of a contact history, leaves the cache
    holding the old tensor until the cache is computed again)."""
    children: dict[int, list[Any]] = {}
    roots = []
    for container, key, value in snapshot.values():
        if key is WALKED:
            continue
        children.setdefault(id(container), []).append(value)
        if key == "_cached_data" and value is not None:
            roots.append(value)
    out: set[int] = set()
    while roots:
        obj = roots.pop()
        if id(obj) in out:
            continue
        out.add(id(obj))
        roots.extend(children.get(id(obj), []))
    return out


def _memory(t: torch.Tensor) -> int:
    """The storage ``t`` views (one key for a tensor, its views and their aliases)."""
    return t.untyped_storage().data_ptr()


def _same_view(a: Any, b: Any) -> bool:
    """Two tensors that view the same memory the same way (a fresh ``wp.to_torch`` of one
    Warp array): one state, nothing to copy back."""
    return (
        isinstance(a, torch.Tensor)
        and isinstance(b, torch.Tensor)
        and a.data_ptr() == b.data_ptr()
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.dtype == b.dtype
        and a.device == b.device
    )


def _same_layout(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device


class Effects:
    """What the Python of a captured function changed (module docstring)."""

    def __init__(self, before: Snapshot, after: Snapshot):
        self.chained: list[tuple[Any, Any, torch.Tensor, torch.Tensor]] = []
        self.rebind: list[Binding] = []
        self.refused: list[str] = []
        self._undo: list[tuple[Any, Any, Any, bool]] = []  # container, key, old value, existed
        containers_before = {id(c) for c, _, _ in before.values()}
        holders: dict[int, int] = {}
        by_memory: dict[int, list[tuple[int, Any]]] = {}  # a storage: the bindings viewing it
        whole: set[int] = set()  # storages some binding views whole
        caches = _under_caches(before)
        for index, (container, key, value) in before.items():
            if isinstance(value, torch.Tensor) and key is not WALKED:
                if id(container) in caches:
                    continue  # a sensor's cached copy: the cache key and sync_cache keep it
                holders[id(value)] = holders.get(id(value), 0) + 1
                by_memory.setdefault(_memory(value), []).append(index)
                if value.numel() * value.element_size() == value.untyped_storage().nbytes():
                    whole.add(_memory(value))
        self._old_tensors = set(holders)
        shared: list[tuple[Any, Any, torch.Tensor, torch.Tensor]] = []
        containers_after = {id(c) for c, _, _ in after.values()}
        for index, (container, key, value) in after.items():
            if key is WALKED:
                continue
            old = before.get(index)
            if old is None:
                if id(container) not in containers_before:
                    continue  # inside a new object: reached through its parent's rebinding
                if isinstance(container, list):
                    self.refused.append(f"{_name(container, key)} appended")
                else:
                    self.rebind.append((container, key, value))
                    self._undo.append((container, key, None, False))
                continue
            was = old[2]
            if was is value or _same_scalar(was, value) or _same_view(was, value):
                continue
            self._undo.append((container, key, was, True))
            if isinstance(was, torch.Tensor) and isinstance(value, torch.Tensor):
                if not _same_layout(was, value):
                    self.refused.append(f"{_name(container, key)} rebound to another shape")
                elif was._base is not None or holders.get(id(was), 0) > 1:
                    shared.append((container, key, was, value))  # chained if all its holders are
                else:
                    self.chained.append((container, key, was, value))
            elif isinstance(was, int | float) and not isinstance(was, bool):
                self.refused.append(f"{_name(container, key)} counts in Python ({was} -> {value})")
            else:
                self.rebind.append((container, key, value))
        for container, key, was, value in shared:
            memory = _memory(was)
            moved = [
                index in after
                and isinstance(after[index][2], torch.Tensor)
                and after[index][2] is not before[index][2]
                for index in by_memory[memory]
            ]
            # chained where the task holds all of that memory (one binding views it whole) and
            # rebinds every binding on it in this capture (a stack, its first row, an alias)
            if memory in whole and all(moved):
                self.chained.append((container, key, was, value))
            else:  # copying into it would change what else holds it, which eager code leaves
                self.refused.append(f"{_name(container, key)} rebound from a shared tensor")
        for index, (container, key, was) in before.items():
            if index not in after and id(container) in containers_after:
                self.refused.append(f"{_name(container, key)} deleted")
                self._undo.append((container, key, was, True))

    def copy_back(self) -> None:
        """Inside the capture: each chained state's new value into its old tensor, which is
        bound again (every replay then reads what the previous one wrote)."""
        # A new value may itself be an old tensor another chained state is about to receive
        # (a shift: prev = cur; cur = cur + 1): copy from clones then.
        clone = any(id(new) in self._old_tensors for *_, new in self.chained)
        sources = [new.clone() if clone else new for *_, new in self.chained]
        for (container, key, old, _), new in zip(self.chained, sources, strict=True):
            old.copy_(new)
            _set(container, key, old)

    def apply(self) -> None:
        """After a replay: the bindings the capture's Python made, made again."""
        for container, key, value in self.rebind:
            _set(container, key, value)

    def undo(self) -> None:
        """The capture's Python changes taken back (a refused capture: the work runs eagerly)."""
        for container, key, old, existed in reversed(self._undo):
            if existed:
                _set(container, key, old)
            elif isinstance(container, dict):
                container.pop(key, None)
            elif key in vars(container):
                delattr(container, key)


class TensorBindings:
    """The tensors captured graphs read, held where the task's eager code expects them. Eager
    code may rebind such an attribute to a fresh tensor between graphs; a graph keeps reading
    the tensor it captured. ``restore`` copies each rebound value into the captured tensor and
    binds it back, so graph and eager code see one tensor again."""

    def __init__(self, root: Any = None, device: torch.device | None = None):
        self.records: list[Binding] = []
        self.mismatched: list[str] = []
        self._known: set[tuple[int, Any]] = set()
        self.device = device
        if root is not None:
            self.add(bindings(root))

    def add(self, snapshot: Snapshot) -> None:
        """Hold every tensor binding of ``snapshot`` on the device not held yet."""
        for index, (container, key, value) in snapshot.items():
            if index in self._known or not isinstance(value, torch.Tensor):
                continue
            if self.device is not None and value.device.type != self.device.type:
                continue
            self._known.add(index)
            self.records.append((container, key, value))

    def restore(self) -> bool:
        """Bind every rebound attribute back to its captured tensor, with the new values;
        False (and ``mismatched`` names them) where a new value has another shape."""
        ok = True
        for container, key, captured in self.records:
            current = _get(container, key)
            if current is captured or not isinstance(current, torch.Tensor):
                continue
            if not _same_layout(current, captured):
                self.mismatched.append(_name(container, key))
                ok = False
                continue
            captured.copy_(current)
            _set(container, key, captured)
        return ok


def sync_cache(sensor: Any, captured: Any) -> bool:
    """A graph captured while ``sensor``'s cache was valid reads the tensors of the cached
    object it found (``captured``); eager code may since have cached a new object. Copy its
    tensors into the captured one and cache that again; False where they do not fit."""
    current = sensor._cached_data
    if current is captured:
        return True
    if isinstance(captured, torch.Tensor):
        pairs = [(captured, current)]
    else:
        pairs = [(getattr(captured, k, None), v) for k, v in vars(current).items()]
    for dst, src in pairs:
        if isinstance(src, torch.Tensor) or isinstance(dst, torch.Tensor):
            if not (isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor)):
                return False
            if not _same_layout(dst, src):
                return False
    for dst, src in pairs:
        if isinstance(src, torch.Tensor):
            dst.copy_(src)
    sensor._cached_data = captured
    return True
