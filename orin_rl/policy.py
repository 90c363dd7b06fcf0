"""``load_policy``: a trained policy to act with from Python, the way SB3's ``PPO.load`` is.

Torch-free for bundles and engines (numpy + a runtime backend); torch is imported only for the
torch backend, for sampled actions from a run folder, or when the caller hands in tensors.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl import runtime
from orin_rl.envs.factory import ENV_CONFIG_KEYS
from orin_rl.errors import OrinError

log = logging.getLogger(__name__)


class PolicyError(OrinError, ValueError):
    """The policy cannot do what was asked (bad observation, no distribution to sample)."""


def _torch_tensor(obs: Any):
    """``obs`` if it is a torch tensor (torch already imported by the caller), else None."""
    torch = sys.modules.get("torch")
    return obs if torch is not None and isinstance(obs, torch.Tensor) else None


def _run_folder(path: Path) -> Path | None:
    """The run folder ``path`` names itself (a folder with checkpoint.pt, or the file)."""
    if path.name == "checkpoint.pt" and path.is_file():
        return path.parent
    if path.is_dir() and (path / "checkpoint.pt").is_file():
        return path
    return None


class Policy:
    """A loaded, active policy: ``act(obs)`` for one observation or a batch (a dict
    observation's policy: a dict of them, one per key, as SB3's ``MultiInputPolicy`` takes).

    Made by ``load_policy``; close it (or use it as a context manager) to free the backend.
    """

    def __init__(self, backend: runtime.Backend, source: Path, run_dir: Path | None):
        self.backend = backend.activate()
        self.source = source
        self.run_dir = run_dir
        """The run folder whose checkpoint can be sampled from (None for bundles, engines)."""
        spec = backend.input_spec
        self.observation_shape: tuple[int, ...] = tuple(int(d) for d in spec.shape[1:])
        """Shape of one observation."""
        self.dtype = np.dtype(spec.dtype)
        """The model's observation dtype (inputs of any real dtype are cast to it)."""
        self.observation_shapes: dict[str, tuple[int, ...]] | None = None
        """A dict observation's policy: each key's shape (None: one observation array)."""
        self._dtypes: dict[str, np.dtype] = {}
        if len(backend.input_specs) > 1:
            self.observation_shapes = {
                s.name: tuple(int(d) for d in s.shape[1:]) for s in backend.input_specs
            }
            self._dtypes = {s.name: np.dtype(s.dtype) for s in backend.input_specs}
        self.env_id, self.env_config = _env_of(source, run_dir)
        self._sampler = None

    # --------------------------------------------------------------- public
    def act(self, obs: Any, deterministic: bool = True) -> Any:
        """Actions for ``obs``: one observation (``observation_shape``) or a batch (N, ...).

        Any real dtype is cast once to the model's dtype; numpy (or array-like) in gives numpy
        out, a torch tensor gives a tensor on its device. One observation in, one action out
        (a 0-d int64 array for discrete actions). ``deterministic=False`` samples from the
        policy's distribution (run folders only: needs the checkpoint and torch).
        """
        if self.observation_shapes is not None:
            return self._act_dict(obs, deterministic)
        tensor = _torch_tensor(obs)
        if tensor is not None:
            obs = tensor.detach().cpu().numpy()
        batch, single = self._prepare(obs)
        action = self._action(batch, deterministic)
        if single:
            action = action[0]
        if tensor is not None:
            import torch

            return torch.as_tensor(np.asarray(action)).to(tensor.device)
        return np.asarray(action)

    def _act_dict(self, obs: Any, deterministic: bool) -> Any:
        """``act`` of a dict observation: each key cast and checked as one observation is."""
        shapes = self.observation_shapes or {}
        if not isinstance(obs, Mapping) or set(obs) != set(shapes):
            got = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
            raise PolicyError(f"this policy takes a dict observation with keys {sorted(shapes)} "
                              f"(one array each, or a batch of them), not {got}")  # fmt: skip
        tensors = [t for t in map(_torch_tensor, obs.values()) if t is not None]
        batch, singles = {}, set()
        for key, shape in shapes.items():
            value = obs[key]
            if _torch_tensor(value) is not None:
                value = value.detach().cpu().numpy()
            batch[key], single = self._prepare(value, shape, self._dtypes[key], f"{key!r} ")
            singles.add(single)
        if len(singles) > 1 or len({len(v) for v in batch.values()}) > 1:
            raise PolicyError("the keys of a dict observation hold one observation each, or "
                              "batches of one size")  # fmt: skip
        action = self._action(batch, deterministic)
        if singles == {True}:
            action = action[0]
        if tensors:
            import torch

            return torch.as_tensor(np.asarray(action)).to(tensors[0].device)
        return np.asarray(action)

    def _action(self, batch: Any, deterministic: bool) -> np.ndarray:
        """The backend's action for a prepared batch, or a sample from the run's checkpoint."""
        if not deterministic:
            return self._sample(batch)
        try:
            return self.backend.infer(batch)
        except ValueError as exc:  # the backend's own checks (a fixed batch size)
            raise PolicyError(str(exc)) from None

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
    ) -> tuple[Any, None]:
        """Stable-Baselines3's ``predict``: ``(act(observation, deterministic), None)``.

        As in SB3 2.x, ``deterministic`` defaults to False: the actions are sampled, which needs
        a run folder's checkpoint (a bundle or an engine raises ``PolicyError``: pass
        ``deterministic=True``). ``state`` and ``episode_start`` are taken and ignored (no
        recurrent policies); the state returned is None.
        """
        return self.act(observation, deterministic), None

    def close(self) -> None:
        """Release the backend (sessions, engines, device memory)."""
        self.backend.deactivate()

    def __enter__(self) -> Policy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"Policy({self.source}, backend={self.backend.name}, env={self.env_id}, "
            f"obs {self.observation_shapes or self.observation_shape})"
        )

    # ------------------------------------------------------------- helpers
    def _prepare(
        self,
        obs: Any,
        shape: tuple[int, ...] | None = None,
        dtype: np.dtype | None = None,
        what: str = "",
    ) -> tuple[np.ndarray, bool]:
        """(batch cast to the model dtype, whether one observation came in); one-line errors.
        ``shape``, ``dtype``: a dict observation's key's (``what`` names it), else the model's."""
        shape = self.observation_shape if shape is None else shape
        dtype = self.dtype if dtype is None else dtype
        arr = np.asarray(obs)
        if arr.dtype.kind not in "biuf":
            raise PolicyError(
                f"observation {what}dtype {arr.dtype} is not a real number type; pass numbers "
                f"shaped {shape} or (N, *{shape})"
            )
        if arr.shape == shape:
            single = True
            arr = arr[None]
        elif arr.ndim == len(shape) + 1 and arr.shape[1:] == shape:
            single = False
        else:
            raise PolicyError(
                f"observation {what}shape {arr.shape} does not fit this policy: it takes "
                f"{shape} or a batch (N, {', '.join(map(str, shape))})"
            )
        with np.errstate(over="ignore", invalid="ignore"):  # reported just below
            batch = np.ascontiguousarray(arr, dtype=dtype)  # the one cast
        if not np.isfinite(batch).all():
            rows = np.flatnonzero(~np.isfinite(batch.reshape(len(batch), -1)).all(1))
            raise PolicyError(
                f"observation {what}{'' if single else f'row(s) {rows[:5].tolist()} '}holds NaN "
                f"or Inf (after the cast to {dtype}); check the sensor or the environment"
            )
        return batch, single

    def _sample(self, batch: np.ndarray) -> np.ndarray:
        if self.run_dir is None:
            raise PolicyError(
                f"{self.source} holds only the deterministic policy (argmax / mean), it cannot "
                "sample: call predict(obs, deterministic=True) or act(obs), or pass the run "
                "folder (with checkpoint.pt) to sample actions"
            )
        if self._sampler is None:
            self._sampler = _Sampler(self.run_dir)
        return self._sampler(batch)


class _Sampler:
    """Samples from the trained distribution of a run folder's checkpoint (torch)."""

    def __init__(self, run_dir: Path):
        try:
            import torch
        except ImportError:
            raise PolicyError(
                "sampled actions need PyTorch and the run's checkpoint.pt (pip install torch); "
                "predict(obs, deterministic=True) and act(obs) run without it"
            ) from None
        from orin_rl.checkpoint import load_policy as load_checkpoint_policy

        self.torch = torch
        # Building the network draws initial weights: leave the caller's RNG stream untouched,
        # so torch.manual_seed(s) before act(...) gives the same draws whenever this loads.
        with torch.random.fork_rng(devices=[]):
            self.policy, self.spec, cfg = load_checkpoint_policy(run_dir)
        self.algo = (cfg.get("train") or {}).get("algo", "ppo")
        if self.algo == "dqn":
            raise PolicyError(
                f"{run_dir} is a DQN policy: its actions are the argmax of Q, there is no "
                "distribution to sample; call predict(obs, deterministic=True) or act(obs)"
            )

    def __call__(self, batch: np.ndarray | dict[str, np.ndarray]) -> np.ndarray:
        torch, policy, spec = self.torch, self.policy, self.spec
        with torch.inference_mode():
            obs = policy.normalize(self._full(batch))
            if self.algo == "sac":
                from orin_rl.algorithms.sac import squashed_gaussian

                low = torch.tensor(spec.action_low, dtype=torch.float32)
                high = torch.tensor(spec.action_high, dtype=torch.float32)
                out = policy.actor(obs.flatten(1)).float()
                action, _ = squashed_gaussian(out, (high + low) / 2, (high - low) / 2)
            else:
                action = policy.distribution(obs).sample()
                if spec.action_kind == "continuous" and spec.action_low is not None:
                    # as the training env steps it: Gaussian samples clipped to the Box
                    low = torch.as_tensor(spec.action_low, dtype=action.dtype)
                    high = torch.as_tensor(spec.action_high, dtype=action.dtype)
                    action = torch.minimum(torch.maximum(action, low), high)
        return action.numpy()

    def _full(self, batch: np.ndarray | dict[str, np.ndarray]):
        """The policy's observation of the actor's: its group placed in a full vector, or a dict
        observation's actor keys in rows of bytes (``obs_layout``), the critic's zero."""
        spec, torch = self.spec, self.torch
        if spec.obs_layout is not None:
            from orin_rl.obs_layout import ObsLayout

            layout = ObsLayout.from_spec(spec.obs_layout)
            rows = len(next(iter(batch.values())))
            values = {
                key: batch[key] if key in batch else np.zeros((rows, *part.shape), part.dtype)
                for key, part in layout.parts.items()
            }
            return torch.from_numpy(layout.pack(values))
        obs = torch.from_numpy(batch)
        if spec.obs_groups is None:
            return obs
        full = torch.zeros(obs.shape[0], *spec.obs_shape, dtype=obs.dtype)
        full[:, slice(*spec.obs_groups["actor"])] = obs
        return full


def _env_of(source: Path, run_dir: Path | None) -> tuple[str | None, dict[str, Any]]:
    """The environment id and options (kwargs, wrappers, time limit) the policy was trained
    with: from policy.json, else the run's config.yaml (read without torch)."""
    from orin_rl import bundle

    found = runtime.locate(source)
    if "bundle" in found:
        info, _ = bundle.load_bundle(found["bundle"], verify_hash=False)
        return info.env_id, dict(info.env_config)
    run = run_dir or found.get("run")
    if run is not None and (run / "config.yaml").is_file():
        import yaml

        env = (yaml.safe_load((run / "config.yaml").read_text()) or {}).get("env") or {}
        return env.get("env_id"), {k: env[k] for k in ENV_CONFIG_KEYS if env.get(k)}
    return None, {}


def load_policy(
    path: str | Path, backend: str = "auto", device: str = "cpu", **options: Any
) -> Policy:
    """Load a trained policy to act with.

    Args:
        path: a run folder (its bundle and/or checkpoint.pt), a bundle folder (policy.json) or
            a TensorRT engine file.
        backend: ``auto`` (time every backend the artefacts and this machine allow, keep the
            lowest p99, as ``orin_rl.runtime.load``), ``onnxruntime``, ``tensorrt`` or ``torch``.
        device: ``cpu`` or ``cuda``.
        options: passed to the backend (``threads``, ``batch``, ``cuda_graph``).

    Returns:
        An active ``Policy``; ``policy.act(obs)`` gives actions.
    """
    source = Path(path)
    chosen = runtime.load(source, backend, device, **options)
    return Policy(chosen, source, _run_folder(source))
