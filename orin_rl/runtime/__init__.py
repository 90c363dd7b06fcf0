"""Runtime: run a deploy bundle, an engine or a run folder on the robot.

Imports neither torch nor numba: ``load`` with the ONNX Runtime backend needs numpy and
onnxruntime only; the torch backend imports torch when it is chosen.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
from pathlib import Path

import numpy as np

from orin_rl import bundle
from orin_rl.runtime.base import Backend, RuntimeBackendError

log = logging.getLogger(__name__)

BACKENDS = ("auto", "onnxruntime", "tensorrt", "torch")
ENGINE_SUFFIXES = (".engine", ".plan", ".trt")

__all__ = ["BACKENDS", "Backend", "RuntimeBackendError", "load", "locate"]


def _locate(model: str | Path) -> dict[str, Path]:
    """Which artefacts a path offers: engine, bundle folder, run folder."""
    path = Path(model)
    found: dict[str, Path] = {}
    if path.suffix in ENGINE_SUFFIXES:
        found["engine"] = path
        return found
    if path.suffix == ".onnx":  # one model of a bundle, e.g. its policy.int8.onnx
        if not (path.parent / "policy.json").is_file():
            return {"bundle": _foreign_onnx(path)}
        found["onnx"] = path
    folder = path.parent if path.name == "policy.json" or path.suffix == ".onnx" else path
    if (folder / "policy.json").is_file():
        found["bundle"] = folder
    elif (folder / "bundle" / "policy.json").is_file():
        found["bundle"] = folder / "bundle"
    for run in (folder, folder.parent):
        if (run / "checkpoint.pt").is_file():
            found["run"] = run
            break
    if not found:
        raise bundle.BundleError(
            f"{model}: not an engine, a bundle (policy.json) or a run folder (checkpoint.pt)"
        )
    return found


def _foreign_onnx(path: Path) -> Path:
    """An ONNX file outside a bundle: mjlab's policy export becomes a bundle (cached); any
    other is refused in one line."""
    from orin_rl.runtime import mjlab_onnx

    if not path.is_file():
        raise bundle.BundleError(f"{path}: no such file")
    try:
        if mjlab_onnx.is_mjlab_export(path):
            return mjlab_onnx.cached_bundle(path)
    except ImportError as exc:
        raise bundle.BundleError(
            f"{path}: a bare ONNX file is imported with onnx and onnxruntime ({exc.name} is "
            "missing): pip install 'orin-rl[export]'"
        ) from None
    raise bundle.BundleError(
        f"{path}: an ONNX file runs from its bundle folder (policy.json beside it), or is "
        "mjlab's policy export (`orin-rl export FILE.onnx --env TASK` checks it against the task)"
    )


def locate(model: str | Path) -> dict[str, Path]:
    """The artefacts ``model`` offers: ``engine``, ``bundle`` (folder) and ``run`` (folder)."""
    return _locate(model)


def _make(kind: str, found: dict[str, Path], device: str, safe_action, **options) -> Backend:
    if kind == "onnxruntime":
        if "bundle" not in found:
            raise RuntimeBackendError("onnxruntime needs a bundle: orin-rl export RUN_DIR first")
        from orin_rl.runtime.onnxruntime_backend import EpSettings, OnnxRuntimeBackend

        onnx = found.get("onnx")
        info, onnx_path = bundle.load_bundle(
            found["bundle"], precision=options.get("precision"), onnx_file=onnx and onnx.name
        )
        ep = options.get("ort_settings") or EpSettings()
        if options.get("cuda_graph"):  # the CUDA EP's graphs, as torch's and TensorRT's
            ep = dataclasses.replace(ep, cuda_graph=True)
        return OnnxRuntimeBackend(
            onnx_path,
            info,
            device,
            options.get("threads", 1),
            providers=options.get("providers"),
            safe_action=safe_action,
            ep=ep,
        )
    if kind == "tensorrt":
        if "engine" not in found:
            raise RuntimeBackendError(
                "tensorrt needs an engine: orin-rl build BUNDLE --out FILE.engine"
            )
        from orin_rl.runtime.tensorrt_backend import TensorRTBackend

        return TensorRTBackend(
            found["engine"],
            options.get("batch", 1),
            options.get("cuda_graph", False),
            safe_action,
            zero_copy=options.get("zero_copy"),
        )
    if kind == "torch":
        if "run" not in found:
            raise RuntimeBackendError("the torch backend needs the run folder (checkpoint.pt)")
        from orin_rl.runtime.torch_backend import TorchBackend

        return TorchBackend.from_run(
            found["run"],
            device,
            cuda_graph=options.get("cuda_graph", False),
            batch=options.get("batch", 1),
            safe_action=safe_action,
            threads=options.get("threads", 1),
            zero_copy=options.get("zero_copy"),
        )
    raise RuntimeBackendError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")


def measure(backend: Backend, calls: int = 300, batch: int = 1, seed: int = 0) -> dict[str, float]:
    """Median and p99 latency (µs) of ``infer`` on random observations (backend active)."""
    from orin_rl.runtime.bench import time_backend

    timing = time_backend(backend, batch, calls, seed)
    return {"p50_us": timing["p50_us"], "p99_us": timing["p99_us"]}


def load(
    model: str | Path,
    backend: str = "auto",
    device: str = "cpu",
    safe_action: np.ndarray | None = None,
    **options,
) -> Backend:
    """A backend for ``model`` (engine file, bundle folder or run folder), not yet active.

    ``options``: ``threads``; ``providers`` and ``ort_settings`` (ONNX Runtime); ``cuda_graph``,
    ``batch`` and ``zero_copy`` (torch and TensorRT). ``precision="int8"`` (or ``fp16``/
    ``fp32``), or ``model`` naming one ``.onnx`` file of a bundle, runs that model of the
    bundle on ONNX Runtime.

    ``backend="auto"`` activates every backend the artefacts and this machine allow, times a
    few hundred calls of each and keeps the one with the lowest p99 (logged): for a small MLP a
    CPU path often beats a GPU round trip. Where only one is allowed it is returned untimed.
    """
    found = _locate(model)
    path = Path(model)
    if "onnx" in found or options.get("precision"):  # one ONNX model of a bundle
        if backend not in ("auto", "onnxruntime"):
            raise RuntimeBackendError(
                f"an ONNX file or a precision picks a bundle model for onnxruntime, not {backend}"
            )
        backend = "onnxruntime"
    if backend != "auto":
        return _make(backend, found, device, safe_action, **options)
    # A bundle named by its own path runs as that bundle or not at all: "auto" must not swap
    # in the run's checkpoint around it (a tampered policy.onnx would then run the torch model).
    named_bundle = "bundle" in found and found["bundle"] in (path, path.parent)
    # (name in the timings, backend kind, its options)
    candidates: list[tuple[str, str, dict]] = []
    if "engine" in found:
        candidates.append(("tensorrt", "tensorrt", options))
    if "bundle" in found and importlib.util.find_spec("onnxruntime"):
        if device.startswith("cuda") and not options.get("providers"):
            # the CUDA EP's round trip against the CPU EP's: for a small MLP the CPU often wins
            for provider in ("cuda", "cpu"):
                candidates.append((f"onnxruntime-{provider}", "onnxruntime",
                                   {**options, "providers": [provider]}))  # fmt: skip
        else:
            candidates.append(("onnxruntime", "onnxruntime", options))
    if "run" in found and not named_bundle and importlib.util.find_spec("torch"):
        candidates.append(("torch", "torch", options))
    if named_bundle:  # its integrity first: a changed file is a refusal, not "unavailable"
        bundle.load_bundle(found["bundle"], precision=options.get("precision"))
    if not candidates:
        raise RuntimeBackendError(f"{model}: no backend can run it here (install onnxruntime)")
    if len(candidates) == 1:  # nothing to choose from: no timing round (a second start, and
        # random observations: numpy.random, 3 MiB more of a torch-free run without gymnasium)
        name, kind, opts = candidates[0]
        log.info("auto backend: %s (the only one this model and machine allow)", name)
        return _make(kind, found, device, safe_action, **opts)
    timings: dict[str, dict[str, float]] = {}
    reasons: dict[str, str] = {}
    for name, kind, opts in candidates:
        try:
            with _make(kind, found, device, safe_action, **opts) as b:
                timings[name] = measure(b)
        except Exception as exc:  # a backend that cannot start is skipped, with the reason
            reasons[name] = str(exc)
            log.warning("auto: %s unavailable: %s", name, exc)
    if not timings:  # the error itself says why each one failed
        why = "; ".join(f"{kind}: {reason}" for kind, reason in reasons.items())
        raise RuntimeBackendError(f"{model}: no backend could start ({why})")
    best = min(timings, key=lambda k: timings[k]["p99_us"])
    log.info(
        "auto backend: %s (%s)",
        best,
        ", ".join(
            f"{k} p50 {v['p50_us']:.1f} / p99 {v['p99_us']:.1f} µs" for k, v in timings.items()
        ),
    )
    _, kind, opts = next(c for c in candidates if c[0] == best)
    chosen = _make(kind, found, device, safe_action, **opts)
    chosen.auto_timings = timings
    return chosen
