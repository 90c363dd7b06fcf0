"""``orin-rl doctor``: what this machine offers, with a next step for each missing piece, and
``--selftest``: the first-run proof that the TensorRT paths work on a board."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Check:
    """One row of the doctor's table."""

    item: str
    status: str
    """``ok``, ``missing``, ``warn``, ``info`` or ``skipped`` (not applicable here)."""
    detail: str
    next_step: str = ""


IMAGE_MARKER = "orin-rl-image.json"
"""The file in an environment's prefix (``sys.prefix``: the venv) that says which image it is:
``jetson/deploy.sh`` writes ``{"image": "deploy", "left_out": [...]}`` there."""
IMAGE_ENV = "ORIN_RL_IMAGE"
"""``deploy`` or ``training``: the image named outright (jetson/Dockerfile's runtime stage sets
``deploy``); it wins over the marker."""
DEPLOY_LEAVES_OUT = ("torch", "numba", "gpu physics")
"""The doctor's rows the deploy image leaves out on purpose (training's parts: it runs a policy,
it does not train one)."""
WHY_LEFT_OUT = {
    "torch": "the runtime runs without it",
    "numba": "training's buffer kernels",
    "gpu physics": "training's MuJoCo Warp",
    "robot wire": "installed without it (SKIP_ROBOT)",
}
"""What a left-out row says instead of advice to install it."""


@dataclass
class Image:
    """What this environment was installed as: the doctor judges a missing piece against it."""

    name: str
    """``training`` (the full install: ``pip install orin-rl``, jetson/setup.sh) or ``deploy``
    (the robot's torch-free runtime: jetson/deploy.sh, the Dockerfile's runtime stage)."""
    left_out: tuple[str, ...] = ()
    """Rows whose missing piece is the image's design, not a fault."""
    source: str = ""
    """Where ``name`` was read (the marker file, the environment variable); empty: the default."""


def detect_image(prefix: str | Path | None = None, environ: dict | None = None) -> Image:
    """This environment's image: ``$ORIN_RL_IMAGE``, else the marker ``jetson/deploy.sh`` wrote
    into the venv (``<sys.prefix>/orin-rl-image.json``), else ``training``. An installer says
    it outright, so a training venv that merely lacks torch still shows torch as missing."""
    environ = os.environ if environ is None else environ
    named = environ.get(IMAGE_ENV, "").strip().lower()
    if named == "deploy":
        return Image("deploy", DEPLOY_LEAVES_OUT, f"${IMAGE_ENV}")
    if named:  # "training" (anything else is not an image we know: judged as training)
        return Image("training", (), f"${IMAGE_ENV}")
    marker = Path(sys.prefix if prefix is None else prefix) / IMAGE_MARKER
    try:
        data = json.loads(marker.read_text())
    except FileNotFoundError:
        return Image("training")
    except (OSError, ValueError) as exc:  # unreadable: say so, judge as the full install
        return Image("training", (), f"{marker} unreadable ({exc.__class__.__name__})")
    if not isinstance(data, dict) or data.get("image") != "deploy":
        return Image("training", (), str(marker))
    left_out = data.get("left_out", DEPLOY_LEAVES_OUT)
    return Image("deploy", tuple(str(item) for item in left_out), str(marker))


def by_design(row: Check, image: Image) -> Check:
    """``row`` judged against the image: a piece the image leaves out on purpose is no fault
    and gets no advice to install it (``skipped``); anything else is returned as it is."""
    if row.status != "missing" or row.item not in image.left_out:
        return row
    why = WHY_LEFT_OUT.get(row.item, "left out on purpose")
    return Check(row.item, "skipped", f"not in this image ({image.name}: {why})")


def _version(module: str) -> str | None:
    if importlib.util.find_spec(module) is None:
        return None
    try:
        found = getattr(__import__(module), "__version__", None)
        if found is None:  # cyclonedds has no __version__: its distribution's
            from importlib import metadata

            found = metadata.version(module)
        return found
    except Exception as exc:  # installed but broken
        return f"broken ({exc.__class__.__name__})"


# The provider probe's model, y = Relu(x) on a [1, 4] float tensor (opset 17, IR version 8),
# serialised: written out so that the doctor needs onnxruntime only, not the onnx package (the
# robot's deploy image has no onnx). tests/test_jetson.py rebuilds it with onnx's helper and
# checks these bytes against it.
PROBE_ONNX = (
    b'\x08\x08:;\n\x0c\n\x01x\x12\x01y"\x04Relu\x12\x01tZ\x13\n\x01x\x12\x0e\n\x0c\x08\x01'
    b"\x12\x08\n\x02\x08\x01\n\x02\x08\x04b\x13\n\x01y\x12\x0e\n\x0c\x08\x01\x12\x08\n\x02"
    b"\x08\x01\n\x02\x08\x04B\x04\n\x00\x10\x11"
)


def working_ort_providers() -> tuple[list[str], list[str]]:
    """(providers that start a session, providers that are compiled in but fail)."""
    import onnxruntime as ort

    model = PROBE_ONNX
    works, fails = [], []
    for provider in ort.get_available_providers():
        try:
            session = ort.InferenceSession(model, providers=[provider])
            session.run(None, {"x": np.ones((1, 4), np.float32)})
            (works if session.get_providers()[0] == provider else fails).append(provider)
        except Exception:  # listed is not working: that is what we report
            fails.append(provider)
    return works, fails


def torch_check(torch_version: str, is_jetson: bool) -> Check:
    """torch's row: its GPU, or why it has none (a CPU build, or a CUDA build with no GPU)."""
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return Check("torch", "ok", f"{torch_version}, CUDA {torch.version.cuda}, {name}")
    if torch.version.cuda:  # a CUDA build on a machine without a GPU it can use
        detail = f"{torch_version} (a CUDA {torch.version.cuda} build), no GPU: runs on the CPU"
        step = "no GPU seen: check the driver (tegrastats, nvidia-smi)" if is_jetson else ""
        return Check("torch", "warn" if is_jetson else "info", detail, step)
    step = (
        "install NVIDIA's JetPack torch (jetson/setup.sh)"
        if is_jetson
        else "a CUDA build of torch for GPU training"
    )
    return Check("torch", "warn" if is_jetson else "info", f"{torch_version}, no CUDA", step)


def checks(image: Image | None = None) -> list[Check]:
    """Every row of the table, judged against ``image`` (default: ``detect_image()``)."""
    image = detect_image() if image is None else image
    rows = [Check("python", "ok", f"{platform.python_version()} ({sys.executable})")]
    if image.name != "training":
        left_out = ", ".join(image.left_out) or "nothing"
        rows.append(Check("image", "info", f"{image.name} ({image.source}): {left_out} left "
                          "out on purpose"))  # fmt: skip
    return [by_design(row, image) for row in rows + _machine_checks()]


def _machine_checks() -> list[Check]:
    """The rows of what this machine and environment offer, judged as a full install."""
    from orin_rl import jetson

    rows = []
    info = jetson.detect()
    torch_version = _version("torch")
    if torch_version is None:
        rows.append(
            Check(
                "torch",
                "missing",
                "not installed (the runtime works without it)",
                "pip install torch (on a Jetson: NVIDIA's JetPack build)",
            )
        )
    else:
        rows.append(torch_check(torch_version, info.is_jetson))
    numba_version = _version("numba")
    if numba_version is None:
        rows.append(Check("numba", "missing", "not installed", "pip install numba"))
    else:
        from numba import config as numba_config
        from numba import cuda

        if numba_config.ENABLE_CUDASIM:
            detail, status, step = "CUDA simulator (NUMBA_ENABLE_CUDASIM=1)", "info", ""
        elif cuda.is_available():
            detail, status, step = "CUDA kernels available", "ok", ""
        else:
            detail, status, step = (
                "no CUDA: kernels run as @njit CPU twins",
                "info",
                "pip install 'orin-rl[cuda]' on a GPU machine",
            )
        rows.append(Check("numba", status, f"{numba_version}; {detail}", step))
    if _version("onnxruntime") is None:
        rows.append(
            Check("onnxruntime", "missing", "not installed", "pip install 'orin-rl[export]'")
        )
    else:
        works, fails = working_ort_providers()
        detail = f"{_version('onnxruntime')}; providers that start: {', '.join(works)}"
        if fails:
            detail += f"; listed but failing: {', '.join(fails)}"
        step = (
            ""
            if any(p != "CPUExecutionProvider" for p in works)
            else "GPU providers: onnxruntime-gpu (NVIDIA's Jetson wheels on a Jetson)"
        )
        rows.append(Check("onnxruntime", "ok", detail, step))
    if info.tensorrt:
        rows.append(Check("tensorrt", "ok", f"{info.tensorrt}; DLA cores: {info.dla_cores}"))
    else:
        rows.append(
            Check(
                "tensorrt",
                "missing",
                "not importable",
                "on a Jetson: JetPack's TensorRT in a --system-site-packages venv (jetson/)",
            )
        )
    rows.append(gpu_physics_check(info.is_jetson))
    rows.append(robot_wire_check())
    if info.is_jetson:
        rows.append(Check("jetson", "ok", f"{info.model}; L4T {info.l4t}; JetPack {info.jetpack}"))
        try:
            name, mode_id = jetson.power_mode()
            rows.append(Check("power mode", "info", f"{name} (id {mode_id})"))
        except jetson.JetsonError as exc:
            rows.append(Check("power mode", "warn", str(exc)))
    else:
        rows.append(Check("jetson", "info", "not a Jetson (no /etc/nv_tegra_release)"))
    for warning in info.warnings:
        rows.append(Check("warning", "warn", warning))
    if torch_version is not None:
        import torch

        from orin_rl.buffers.memory import resolve_placement

        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        placement, reason = resolve_placement("auto", device)
        rows.append(Check("buffer placement", "info", f"auto → {placement} ({reason})"))
    return rows


def gpu_physics_check(is_jetson: bool = False) -> Check:
    """MuJoCo Warp (``--env-backend gpu`` for the MuJoCo tasks): versions, and whether Warp
    sees a CUDA device (without one it runs on Warp's CPU device: correct, but slow)."""
    missing = [m for m in ("warp", "mujoco", "mujoco_warp") if importlib.util.find_spec(m) is None]
    if missing:
        step = (
            "bash jetson/setup.sh installs warp-lang for JetPack's CUDA and the extra"
            if is_jetson
            else "pip install 'orin-rl[sim]'"
        )
        return Check("gpu physics", "missing", f"{', '.join(missing)} not installed", step)
    try:
        import warp as wp

        wp.config.log_level = wp.LOG_WARNING  # no banner in the table
        import mujoco
        import mujoco_warp

        cuda = wp.get_cuda_device_count()
    except Exception as exc:  # installed but broken: say how
        return Check("gpu physics", "warn", f"MuJoCo Warp does not import: {exc}", "")
    where = f"{cuda} CUDA device(s)" if cuda else "no CUDA device: Warp's CPU device (slow)"
    detail = (
        f"warp {wp.config.version}, mujoco {mujoco.__version__}, mujoco_warp "
        f"{mujoco_warp.__version__}; {where}"
    )
    return Check("gpu physics", "ok" if cuda else "info", detail)


def robot_wire_check() -> Check:
    """The robot's wire (``run --plant unitree-g1``, ``sim-robot``): the CycloneDDS binding,
    its version and architecture (aarch64 has no wheel: it is built against the C library)."""
    version = _version("cyclonedds")
    if version is None:
        return Check(
            "robot wire",
            "missing",
            "cyclonedds not installed (the G1 plant and the twin need it)",
            "pip install 'orin-rl[robot]' (aarch64: bash jetson/deploy.sh builds it)",
        )
    if version.startswith("broken"):
        step = (
            "unset CYCLONEDDS_HOME: the binding loads $CYCLONEDDS_HOME/lib/libddsc.so when it is "
            "set (set it only to build the binding)"
            if os.environ.get("CYCLONEDDS_HOME")
            else "reinstall the robot extra (aarch64: bash jetson/deploy.sh)"
        )
        return Check("robot wire", "warn", f"cyclonedds {version}", step)
    return Check("robot wire", "ok", f"cyclonedds {version} ({platform.machine()})")


def table(rows: list[Check]) -> str:
    """Fixed-width text table."""
    width = max(len(r.item) for r in rows)
    marks = {"ok": "✓", "missing": "✗", "warn": "!", "info": "·", "skipped": "-"}
    lines = []
    for r in rows:
        lines.append(f"{marks.get(r.status, '?')} {r.item:<{width}}  {r.detail}")
        if r.next_step:
            lines.append(f"  {'':<{width}}  → {r.next_step}")
    return "\n".join(lines)


def as_json(rows: list[Check]) -> list[dict[str, Any]]:
    """JSON-ready rows."""
    return [asdict(r) for r in rows]


@dataclass
class SelftestTarget:
    """One engine the selftest builds (or skips, with the reason)."""

    precision: str
    """fp32, fp16 or int8."""
    dla_core: int | None
    """DLA core, or None for the GPU."""
    model: Path | None
    """The ONNX to build from; None when skipped."""
    skip: str = ""
    """Why this row is not applicable here (empty: it is built)."""

    @property
    def label(self) -> str:
        """``fp16 on DLA 0``, ``int8 on GPU``."""
        where = f"DLA {self.dla_core}" if self.dla_core is not None else "GPU"
        return f"{self.precision} on {where}"


def selftest_targets(
    trt_major: int, dla_cores: int, models: dict[str, Path | None]
) -> list[SelftestTarget]:
    """What the selftest builds: fp32, fp16, int8 on the GPU and fp16 on each DLA core.

    TensorRT <= 10 sets the precision with builder flags, so every row builds from the fp32
    ONNX. TensorRT 11 is strongly typed: a row builds only from an ONNX that carries its
    precision (``models["fp16"]``, the Q/DQ ``models["int8"]``); without one the row is skipped
    as not applicable, since an fp32 ONNX there would build an fp32 engine under its name.
    """
    rows = [("fp32", None), ("fp16", None), ("int8", None)]
    rows += [("fp16", core) for core in range(dla_cores)]
    targets = []
    for precision, core in rows:
        model = models.get("fp32") if trt_major < 11 else models.get(precision)
        skip = ""
        if model is None:
            skip = (
                f"not applicable: TensorRT {trt_major} is strongly typed and no {precision} "
                "ONNX could be made for it"
                if trt_major >= 11
                else "no fp32 ONNX to build from"
            )
        targets.append(SelftestTarget(precision, core, model, skip))
    return targets


SELFTEST_BOUNDS = {"fp32": 1e-3, "fp16": 2e-2, "int8": 0.2}


def selftest_row(target: SelftestTarget, built_precision: str, error: float) -> Check:
    """The row of one built engine: ok only when it is the precision asked for and close to
    ONNX Runtime's fp32 answer."""
    item = f"selftest {target.label}"
    if built_precision.split("-")[0] != target.precision:
        return Check(
            item, "warn", f"built a {built_precision} engine, not {target.precision}: not tested"
        )
    bound = SELFTEST_BOUNDS[target.precision]
    status = "ok" if error <= bound else "warn"
    return Check(item, status, f"max error vs ONNX Runtime {error:.2g} (bound {bound})")


def _selftest_models(tmp: Path, obs: np.ndarray, trt_major: int) -> dict[str, Path | None]:
    """The tiny policy as fp32 ONNX and, for TensorRT 11, as fp16 and Q/DQ ONNX too."""
    import torch

    from orin_rl.export.onnx import _to_onnx, quantize_int8
    from orin_rl.models import ActorCritic, PolicySpec
    from orin_rl.models.deploy import DeterministicPolicy

    torch.manual_seed(0)
    policy = ActorCritic(PolicySpec([8], "continuous", 2, action_low=[-1, -1], action_high=[1, 1]))
    fp32 = _to_onnx(DeterministicPolicy(policy), [8], "dynamic", 17, discrete=False)
    models: dict[str, Path | None] = {"fp32": tmp / "tiny.onnx", "fp16": None, "int8": None}
    models["fp32"].write_bytes(fp32.SerializeToString())
    if trt_major >= 11:
        fp16 = _to_onnx(DeterministicPolicy(policy, fp16=True), [8], "dynamic", 17, False)
        models["fp16"] = tmp / "tiny.fp16.onnx"
        models["fp16"].write_bytes(fp16.SerializeToString())
        models["int8"] = tmp / "tiny.int8.onnx"
        models["int8"].write_bytes(quantize_int8(fp32.SerializeToString(), obs))
    return models


def selftest() -> list[Check]:
    """Build a tiny engine per precision (and on each DLA core), run it, compare with ONNX
    Runtime on the CPU. Needs TensorRT: elsewhere one row says what to install."""
    if importlib.util.find_spec("tensorrt") is None:
        return [
            Check(
                "selftest",
                "missing",
                "TensorRT is not installed: nothing to test",
                "run on a Jetson with JetPack's TensorRT",
            )
        ]
    import onnxruntime as ort

    from orin_rl.export.recipes import load_recipe
    from orin_rl.export.tensorrt import build_engine
    from orin_rl.runtime.tensorrt_engine import TensorRTEngine, import_tensorrt, trt_major

    rows = []
    obs = np.random.default_rng(0).standard_normal((64, 8)).astype(np.float32)
    trt = import_tensorrt()
    major = trt_major(trt)
    dla = int(trt.Builder(trt.Logger(trt.Logger.ERROR)).num_DLA_cores)
    with tempfile.TemporaryDirectory() as tmp:
        models = _selftest_models(Path(tmp), obs, major)
        np.savez(Path(tmp) / "calib.npz", obs=obs)
        expected = ort.InferenceSession(
            str(models["fp32"]), providers=["CPUExecutionProvider"]
        ).run(None, {"obs": obs})[0]
        for target in selftest_targets(major, dla, models):
            if target.skip:
                rows.append(Check(f"selftest {target.label}", "skipped", target.skip))
                continue
            try:
                recipe = load_recipe(
                    None,
                    precision=target.precision,
                    dla_core=target.dla_core,
                    gpu_fallback=target.dla_core is not None,
                    calib=str(Path(tmp) / "calib.npz"),
                    timing_cache=str(Path(tmp) / "t.cache"),
                )
                engine = Path(tmp) / f"{target.precision}-{target.dla_core}.engine"
                sidecar = build_engine(target.model, engine, recipe)
                with TensorRTEngine.from_file(engine, batch=1, dla_core=target.dla_core) as run:
                    got = np.concatenate(
                        [run.run({"obs": obs[i : i + 1]})["action"] for i in range(len(obs))]
                    )
                error = float(np.abs(got - expected).max())
                rows.append(selftest_row(target, sidecar.precision, error))
            except Exception as exc:  # report each path's failure and go on
                rows.append(
                    Check(
                        f"selftest {target.label}",
                        "missing",
                        f"{exc.__class__.__name__}: {exc}"[:200],
                    )
                )
    return rows
