"""Engine recipes (``engines/*.yaml``): one place for the build options of TensorRT and of
ONNX Runtime's TensorRT / CUDA execution providers, so both give the same precision choices."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orin_rl.config import read_yaml_mapping
from orin_rl.errors import OrinError
from orin_rl.runtime.onnxruntime_backend import (
    CPU_EP,
    CUDA_EP,
    TENSORRT_EP,
    EpSettings,
    provider_options,
)

PRECISIONS = ("fp32", "fp16", "int8")
CALIBRATORS = ("entropy", "minmax")


class RecipeError(OrinError, ValueError):
    """A recipe file or build option is invalid; the message names the key."""


@dataclass
class BuildRecipe:
    """How to build an engine from a bundle."""

    precision: str = "fp16"
    """fp32, fp16 or int8."""
    dla_core: int | None = None
    """DLA core to run on (AGX Orin / Orin NX: 0 or 1); None for the GPU."""
    gpu_fallback: bool = False
    """Let layers the DLA cannot run fall back to the GPU (each one is reported)."""
    batch: list[int] = field(default_factory=lambda: [1, 1, 1])
    """Optimisation profile (min, opt, max) batch; DLA needs min = opt = max."""
    workspace_mb: int = 256
    """Builder workspace limit in MiB."""
    timing_cache: str | None = "engines/timing.cache"
    """Timing cache file reused across builds (valid for one TensorRT version and device)."""
    version_compatible: bool = False
    """Build with BuilderFlag.VERSION_COMPATIBLE (TensorRT 8.6+; not for DLA)."""
    calib: str | None = None
    """Calibration data for int8 (a run folder, a bundle or an .npz with an ``obs`` array);
    defaults to the bundle's calibration.npz."""
    int8_calibrator: str = "entropy"
    """TensorRT <= 10 calibrator: entropy (IInt8EntropyCalibrator2) or minmax."""
    ort_engine_cache: str = "engines/ort-cache"
    """Root folder of ONNX Runtime's TensorRT EP engine and timing caches."""

    def validate(self) -> BuildRecipe:
        """Check values and their combinations; return self."""
        if self.precision not in PRECISIONS:
            raise RecipeError(
                f"precision: {self.precision!r} is not one of {', '.join(PRECISIONS)}"
            )
        if self.int8_calibrator not in CALIBRATORS:
            raise RecipeError(
                f"int8_calibrator: {self.int8_calibrator!r} is not one of entropy, minmax"
            )
        if len(self.batch) != 3 or not 0 < self.batch[0] <= self.batch[1] <= self.batch[2]:
            raise RecipeError(f"batch: need 0 < min <= opt <= max, got {self.batch}")
        if self.workspace_mb <= 0:
            raise RecipeError(f"workspace_mb: must be positive, got {self.workspace_mb}")
        if self.dla_core is not None:
            if self.dla_core < 0:
                raise RecipeError(f"dla_core: must be >= 0, got {self.dla_core}")
            if self.precision == "fp32":
                raise RecipeError("dla_core: the DLA runs fp16 or int8 only; set precision")
            if len(set(self.batch)) != 1:
                raise RecipeError(
                    f"batch: the DLA needs a static shape (min = opt = max), got {self.batch}"
                )
            if self.version_compatible:
                raise RecipeError("version_compatible: not supported for DLA engines")
        return self


def _check_types(data: dict[str, Any], source: str) -> None:
    hints = {f.name: f for f in dataclasses.fields(BuildRecipe)}
    for key, value in data.items():
        if key not in hints:
            raise RecipeError(f"{source}: {key}: unknown key (known: {', '.join(hints)})")
        default = hints[key].default
        if key == "batch":
            ok = isinstance(value, list) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in value
            )
        elif key in ("dla_core",):
            ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
        elif key in ("timing_cache", "calib"):
            ok = value is None or isinstance(value, str)
        elif isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, int):
            ok = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok = isinstance(value, str)
        if not ok:
            raise RecipeError(f"{source}: {key}: wrong type {type(value).__name__} ({value!r})")


def load_recipe(path: str | Path | None = None, **overrides: Any) -> BuildRecipe:
    """A recipe from a YAML file (or the defaults), with non-None ``overrides`` applied."""
    data: dict[str, Any] = {}
    source = "recipe"
    if path is not None:
        source = str(path)
        data = read_yaml_mapping(path, "recipe", RecipeError)
    data.update({k: v for k, v in overrides.items() if v is not None})
    _check_types(data, source)
    try:
        return BuildRecipe(**data).validate()
    except RecipeError as exc:
        raise RecipeError(f"{source}: {exc}") from None


def ort_providers(
    recipe: BuildRecipe,
    onnx_sha256: str,
    obs_shape: list[int],
    versions: dict[str, str],
    available: list[str],
) -> list[tuple[str, dict[str, Any]]]:
    """ONNX Runtime providers (best first) with options matching ``recipe``.

    Engine and timing caches go to a folder keyed by the model hash and the versions of ORT,
    TensorRT and the GPU, so a cache is never reused across a change of any of them.
    """
    names = [p for p in (TENSORRT_EP, CUDA_EP) if p in available] + [CPU_EP]
    return provider_options(names, onnx_sha256, obs_shape, versions, ep_settings(recipe))


def ep_settings(recipe: BuildRecipe) -> EpSettings:
    """The recipe's precision, DLA core, profile and workspace as ONNX Runtime EP settings."""
    return EpSettings(
        precision=recipe.precision,
        dla_core=recipe.dla_core,
        batch=tuple(recipe.batch),
        workspace_mb=recipe.workspace_mb,
        cache_root=recipe.ort_engine_cache,
    )
