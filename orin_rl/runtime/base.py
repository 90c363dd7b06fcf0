"""The backend contract: ``activate`` / ``infer`` / ``deactivate``, a context manager, specs, and
input validation done once here for every backend (Polygraphy's runner pattern: public
methods wrap ``*_impl`` hooks). Nothing touches a device before ``activate``.
"""

from __future__ import annotations

import abc
import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from orin_rl.bundle import TensorSpec
from orin_rl.errors import OrinError

log = logging.getLogger(__name__)


_ZEROS: dict[int, np.ndarray] = {}


def _finite(x: np.ndarray) -> bool:
    """All elements finite: the dot product with zeros is 0 for finite values and NaN as soon
    as one element is NaN or ±Inf (0 · ±Inf = NaN), and it cannot overflow. One BLAS call on a
    cached zero vector: cheaper than ``np.isfinite(x).all()`` or a float64 sum."""
    zeros = _ZEROS.get(x.size)
    if zeros is None or zeros.dtype != x.dtype:
        if len(_ZEROS) > 64:
            _ZEROS.clear()
        zeros = _ZEROS[x.size] = np.zeros(x.size, x.dtype)
    return math.isfinite(x.reshape(-1).dot(zeros))


class RuntimeBackendError(OrinError, RuntimeError):
    """A backend cannot be created, activated or used."""


class Backend(abc.ABC):
    """Base of every runtime backend.

    Args:
        input_spec: the observation input (name, shape with "batch" or an int, dtype), or the
            inputs of a dict observation's model (one per key: ``infer`` then takes a dict).
        output_spec: the outputs, ``action`` first.
        safe_action: returned (and counted) when the input or the output is not finite; None
            raises instead.
    """

    name = "base"

    def __init__(
        self,
        input_spec: TensorSpec | list[TensorSpec],
        output_spec: list[TensorSpec],
        safe_action: np.ndarray | None = None,
    ):
        self.input_specs = list(input_spec) if isinstance(input_spec, list) else [input_spec]
        """Every input: one, or a dict observation's keys (``infer`` takes them by name)."""
        input_spec = self.input_specs[0]
        self.input_spec = input_spec
        self.output_spec = output_spec
        self.safe_action = None if safe_action is None else np.asarray(safe_action)
        self.non_finite_events = 0
        """Calls answered with the safe action because of NaN/Inf input or output."""
        self.active = False
        self._dtype = np.dtype(input_spec.dtype)
        self._fixed = tuple(d for d in input_spec.shape[1:])
        self._batch = input_spec.shape[0] if isinstance(input_spec.shape[0], int) else None

    # ---------------------------------------------------------------- contract
    def activate(self) -> Backend:
        """Load the model onto its device; idempotent."""
        if not self.active:
            self.activate_impl()
            self.active = True
        return self

    def deactivate(self) -> None:
        """Release device resources; idempotent."""
        if self.active:
            self.deactivate_impl()
            self.active = False

    def __enter__(self) -> Backend:
        return self.activate()

    def __exit__(self, *exc) -> None:
        self.deactivate()

    def infer(self, obs: np.ndarray | Mapping[str, np.ndarray]) -> np.ndarray:
        """One observation batch (batch, *obs_shape) → actions (batch, ...) on the host; a dict
        observation's model takes a dict of such batches, one per input name.

        Wrong shape or dtype raises ValueError. Non-finite input or output returns the safe
        action for the whole batch (counted in ``non_finite_events``) or raises when none is set.
        """
        if not self.active:
            raise RuntimeBackendError(f"{self.name} backend is not active: call activate() first")
        obs = self.validate(obs)
        arrays = list(obs.values()) if isinstance(obs, dict) else [obs]
        rows = len(arrays[0])
        if not all(_finite(a) for a in arrays):
            return self._unsafe("non-finite observation", rows)
        action = self.infer_impl(obs)
        if action.dtype.kind == "f" and not _finite(action):
            return self._unsafe("non-finite action from the model", rows)
        return action

    def validate(self, obs: Any) -> np.ndarray | dict[str, np.ndarray]:
        """Check shape and dtype against the input spec (float64 is not cast silently); a
        model of several inputs takes a dict of them by name, of one batch size."""
        if len(self.input_specs) > 1:
            return self._validate_inputs(obs)
        if not isinstance(obs, np.ndarray):
            raise ValueError(f"obs must be a numpy array, got {type(obs).__name__}")
        if obs.dtype != self._dtype:
            raise ValueError(f"obs dtype {obs.dtype} does not match the model's {self._dtype}")
        if obs.ndim != len(self.input_spec.shape) or obs.shape[1:] != self._fixed:
            raise ValueError(
                f"obs shape {obs.shape} does not match the model's "
                f"{tuple(self.input_spec.shape)} (batch first)"
            )
        if self._batch is not None and obs.shape[0] != self._batch:
            raise ValueError(
                f"this model takes a batch of exactly {self._batch}, got {obs.shape[0]}"
            )
        return obs if obs.flags.c_contiguous else np.ascontiguousarray(obs)

    def _validate_inputs(self, obs: Any) -> dict[str, np.ndarray]:
        names = [spec.name for spec in self.input_specs]
        if not isinstance(obs, Mapping) or set(obs) != set(names):
            got = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
            raise ValueError(f"this model takes {len(names)} inputs by name ({', '.join(names)}): "
                             f"pass a dict of numpy arrays, not {got}")  # fmt: skip
        feeds = {}
        for spec in self.input_specs:
            value = obs[spec.name]
            if not isinstance(value, np.ndarray) or value.dtype != np.dtype(spec.dtype):
                what = value.dtype if isinstance(value, np.ndarray) else type(value).__name__
                raise ValueError(f"input {spec.name}: {what} does not match the model's "
                                 f"{spec.dtype} (a numpy array)")  # fmt: skip
            batch = spec.shape[0] if isinstance(spec.shape[0], int) else None
            fits = value.ndim == len(spec.shape) and value.shape[1:] == tuple(spec.shape[1:])
            if not fits or (batch is not None and value.shape[0] != batch):
                raise ValueError(f"input {spec.name}: shape {value.shape} does not match the "
                                 f"model's {tuple(spec.shape)} (batch first)")  # fmt: skip
            feeds[spec.name] = value if value.flags.c_contiguous else np.ascontiguousarray(value)
        if len({len(v) for v in feeds.values()}) > 1:
            sizes = {k: len(v) for k, v in feeds.items()}
            raise ValueError(f"the inputs' batches differ ({sizes}): one row per observation")
        return feeds

    def _unsafe(self, why: str, batch: int) -> np.ndarray:
        self.non_finite_events += 1
        if self.safe_action is None:
            raise ValueError(f"{why}, and no safe action is configured")
        log.debug("%s: returning the safe action", why)
        return np.broadcast_to(self.safe_action, (batch, *self.safe_action.shape)).copy()

    # ------------------------------------------------------------------- hooks
    @abc.abstractmethod
    def activate_impl(self) -> None:
        """Create sessions, engines and buffers."""

    @abc.abstractmethod
    def infer_impl(self, obs: np.ndarray | dict[str, np.ndarray]) -> np.ndarray:
        """Run the model on a validated batch (a dict of them, by input name, for a model of
        several inputs); return the ``action`` output."""

    @abc.abstractmethod
    def deactivate_impl(self) -> None:
        """Free what activate_impl made."""

    def describe(self) -> dict[str, Any]:
        """Backend, device and mode, for reports."""
        return {"backend": self.name}
