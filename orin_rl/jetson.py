"""Jetson platform: board / L4T / JetPack detection, power mode and clocks, tegrastats parsing,
and a background power / thermal monitor (jtop when installed, else tegrastats).

Every file is read relative to ``root`` so tests can build a fake root folder. External tools
run with argument lists, never through a shell. Torch-free.
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import os
import re
import shutil

# subprocess runs fixed argument lists of JetPack tools, never through a shell.
import subprocess  # nosec B404
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from orin_rl.errors import OrinError

log = logging.getLogger(__name__)

# L4T release → JetPack (JETSON.md).
JETPACK = {
    "35.2.1": "5.1",
    "35.3.1": "5.1.1",
    "35.4.1": "5.1.2",
    "35.5.0": "5.1.3",
    "35.6.0": "5.1.4",
    "36.3.0": "6.0",
    "36.4.0": "6.1",
    "36.4.3": "6.2",
    "36.4.4": "6.2.1",
}


class JetsonError(OrinError, RuntimeError):
    """A Jetson tool is missing, failed, or needs privileges."""


@dataclass
class PlatformInfo:
    """What this machine is, as far as orin_rl cares."""

    is_jetson: bool
    """An NVIDIA Jetson (an L4T release file is present)."""
    model: str | None = None
    """Board model from the device tree, e.g. ``NVIDIA Jetson AGX Orin Developer Kit``."""
    l4t: str | None = None
    """L4T version, e.g. ``36.4.3``."""
    jetpack: str | None = None
    """JetPack version from the L4T mapping (``7.x`` for L4T 38/39)."""
    cuda: str | None = None
    """CUDA toolkit version (from the toolkit's version file, or torch)."""
    tensorrt: str | None = None
    """TensorRT version, when importable."""
    cudnn: str | None = None
    """cuDNN version, when torch reports it."""
    integrated_gpu: bool | None = None
    """The GPU shares DRAM with the CPU."""
    dla_cores: int | None = None
    """DLA cores TensorRT reports (None without TensorRT)."""
    torch_cuda: bool | None = None
    """torch sees a CUDA GPU (None when torch is not installed or not inspected)."""
    warnings: list[str] = field(default_factory=list)
    """Problems worth telling the user (e.g. a CPU-only torch on a Jetson)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def _read(root: Path, rel: str) -> str | None:
    try:
        return (root / rel).read_bytes().decode(errors="replace")
    except OSError:
        return None


def parse_l4t(text: str) -> str | None:
    """``# R36 (release), REVISION: 4.3, …`` → ``36.4.3``."""
    m = re.search(r"#\s*R(\d+)\s*\(release\),\s*REVISION:\s*([\d.]+)", text)
    if not m:
        return None
    revision = m.group(2)
    if revision.count(".") == 0:
        revision += ".0"
    return f"{m.group(1)}.{revision}"


def jetpack_for(l4t: str | None) -> str | None:
    """JetPack version of an L4T release (``7.x`` for L4T 38/39)."""
    if l4t is None:
        return None
    if l4t in JETPACK:
        return JETPACK[l4t]
    major = int(l4t.split(".")[0])
    if major in (38, 39):
        return "7.x"
    return None


def detect(root: str | Path = "/", inspect_torch: bool = True) -> PlatformInfo:
    """Detect the board, L4T/JetPack, CUDA/TensorRT/cuDNN, integrated GPU, DLA and torch CUDA."""
    root = Path(root)
    release = _read(root, "etc/nv_tegra_release")
    model = _read(root, "proc/device-tree/model")
    l4t = parse_l4t(release.splitlines()[0]) if release else None
    info = PlatformInfo(
        is_jetson=release is not None,
        model=model.strip("\x00\n ") if model else None,
        l4t=l4t,
        jetpack=jetpack_for(l4t),
    )
    version_json = _read(root, "usr/local/cuda/version.json")
    if version_json:
        m = re.search(r'"cuda"\s*:\s*\{[^}]*"version"\s*:\s*"([\d.]+)"', version_json)
        info.cuda = m.group(1) if m else None
    if info.is_jetson:
        info.integrated_gpu = True
    if importlib.util.find_spec("tensorrt") is not None:
        info.tensorrt, info.dla_cores = _tensorrt_facts()
    if inspect_torch and importlib.util.find_spec("torch") is not None:
        import torch

        info.torch_cuda = bool(torch.cuda.is_available())
        info.cuda = info.cuda or torch.version.cuda
        if info.torch_cuda:
            cudnn = torch.backends.cudnn.version()
            info.cudnn = str(cudnn) if cudnn else None
            if info.integrated_gpu is None:
                info.integrated_gpu = bool(torch.cuda.get_device_properties(0).is_integrated)
        if info.is_jetson and not info.torch_cuda:
            info.warnings.append(
                "torch has no CUDA on this Jetson (PyPI's aarch64 wheel is CPU-only): install "
                "NVIDIA's JetPack build of torch (jetson/setup.sh does)"
            )
    return info


def _tensorrt_facts() -> tuple[str | None, int | None]:
    try:
        import tensorrt as trt

        builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
        return trt.__version__, int(builder.num_DLA_cores)
    except Exception as exc:  # an installed but broken TensorRT: report the version we can
        log.warning("TensorRT present but not usable: %s", exc)
        return None, None


# ------------------------------------------------------------------ power and clocks


def nvpmodel_query_command() -> list[str]:
    """``nvpmodel -q``."""
    return ["nvpmodel", "-q"]


def nvpmodel_set_command(mode_id: int) -> list[str]:
    """``nvpmodel -m ID``."""
    if not isinstance(mode_id, int) or isinstance(mode_id, bool) or mode_id < 0:
        raise JetsonError(f"power mode id must be a non-negative integer, got {mode_id!r}")
    return ["nvpmodel", "-m", str(mode_id)]


def jetson_clocks_command(action: str, state_file: str | Path | None = None) -> list[str]:
    """``jetson_clocks`` (enable), ``--store FILE`` or ``--restore FILE``."""
    if action == "enable":
        return ["jetson_clocks"]
    if action in ("store", "restore"):
        if state_file is None:
            raise JetsonError(f"jetson_clocks {action} needs a state file")
        return ["jetson_clocks", f"--{action}", str(state_file)]
    raise JetsonError(f"jetson_clocks action must be enable, store or restore, not {action!r}")


def _run_tool(cmd: list[str]) -> str:
    if shutil.which(cmd[0]) is None:
        raise JetsonError(
            f"{cmd[0]} not found: this is not a Jetson, or JetPack's tools are not on PATH"
        )
    # cmd is one of the fixed argument lists built above, run without a shell.
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)  # nosec B603
    if proc.returncode != 0:
        msg = (proc.stderr or proc.stdout).strip().splitlines()
        detail = msg[-1] if msg else f"exit code {proc.returncode}"
        if "permission" in detail.lower() or "root" in detail.lower() or proc.returncode == 126:
            raise JetsonError(f"{' '.join(cmd)} needs root: run it with sudo ({detail})")
        raise JetsonError(f"{' '.join(cmd)} failed: {detail}")
    return proc.stdout


def parse_nvpmodel(text: str) -> tuple[str, int | None]:
    """``NV Power Mode: MAXN`` then the id on the next line → (name, id)."""
    m = re.search(r"NV Power Mode:\s*(\S+)", text)
    if not m:
        raise JetsonError(f"unexpected nvpmodel output: {text.strip()[:100]!r}")
    rest = text[m.end() :].split()
    mode_id = int(rest[0]) if rest and rest[0].isdigit() else None
    return m.group(1), mode_id


def power_mode() -> tuple[str, int | None]:
    """The current nvpmodel power mode (name, id)."""
    return parse_nvpmodel(_run_tool(nvpmodel_query_command()))


def set_power_mode(mode_id: int) -> None:
    """Switch the power mode (root)."""
    _run_tool(nvpmodel_set_command(mode_id))


def jetson_clocks(action: str = "enable", state_file: str | Path | None = None) -> None:
    """Pin clocks at the mode's maximum, or store / restore the clock state (root)."""
    _run_tool(jetson_clocks_command(action, state_file))


# ------------------------------------------------------------------------ tegrastats

_RAM = re.compile(r"\bRAM (\d+)/(\d+)MB")
_SWAP = re.compile(r"\bSWAP (\d+)/(\d+)MB")
_CPU = re.compile(r"\bCPU \[([^\]]*)\]")
_EMC = re.compile(r"\bEMC_FREQ (\d+)%(?:@(\d+))?")
_GR3D = re.compile(r"\bGR3D_FREQ (?:(\d+)%)?@?(\[[^\]]*\]|\d+)?")
_TEMP = re.compile(r"\b([A-Za-z][\w-]*)@(-?[\d.]+)C(?:/(-?[\d.]+)C)?")
_POWER = re.compile(r"\b([A-Z][A-Z0-9_]+) (\d+)mW/(\d+)mW(?:/(\d+)mW)?")
_STAMP = re.compile(r"^(\d\d-\d\d-\d{4} \d\d:\d\d:\d\d)")


def _freq(text: str | None) -> list[int] | int | None:
    if not text:
        return None
    if text.startswith("["):
        return [int(v) for v in re.findall(r"\d+", text)]
    return int(text)


def parse_tegrastats(line: str) -> dict[str, Any]:
    """One tegrastats line → fields (JetPack 5, 6, 7 and Thor formats).

    Returns keys present in the line: ``timestamp``, ``ram_used_mb``, ``ram_total_mb``,
    ``swap_used_mb``, ``swap_total_mb``, ``cpu`` (list of {load_pct, freq_mhz} or None for an
    offline core), ``emc_load_pct``, ``emc_freq_mhz``, ``gpu_load_pct`` (None on Thor),
    ``gpu_freq_mhz`` (int or per-GPC list), ``temperatures_c`` (lower-case names), ``power_mw``
    (rail → {current, average[, max]}).
    """
    out: dict[str, Any] = {}
    if m := _STAMP.search(line):
        out["timestamp"] = m.group(1)
    if m := _RAM.search(line):
        out["ram_used_mb"], out["ram_total_mb"] = int(m.group(1)), int(m.group(2))
    if m := _SWAP.search(line):
        out["swap_used_mb"], out["swap_total_mb"] = int(m.group(1)), int(m.group(2))
    if m := _CPU.search(line):
        cores = []
        for core in m.group(1).split(","):
            cm = re.match(r"\s*(\d+)%@(\d+)", core)
            cores.append(
                {"load_pct": int(cm.group(1)), "freq_mhz": int(cm.group(2))} if cm else None
            )
        out["cpu"] = cores
    if m := _EMC.search(line):
        out["emc_load_pct"] = int(m.group(1))
        out["emc_freq_mhz"] = int(m.group(2)) if m.group(2) else None
    if m := _GR3D.search(line):
        out["gpu_load_pct"] = int(m.group(1)) if m.group(1) else None
        out["gpu_freq_mhz"] = _freq(m.group(2))
    temps = {m.group(1).lower(): float(m.group(2)) for m in _TEMP.finditer(line)}
    if temps:
        out["temperatures_c"] = temps
    power = {}
    for m in _POWER.finditer(line):
        rail = {"current": int(m.group(2)), "average": int(m.group(3))}
        if m.group(4):
            rail["max"] = int(m.group(4))
        power[m.group(1)] = rail
    if power:
        out["power_mw"] = power
    return out


def total_power_mw(sample: dict[str, Any]) -> float | None:
    """Board power of a parsed sample: the input rail when reported, else the sum of rails."""
    rails = sample.get("power_mw")
    if not rails:
        return None
    for total in ("VIN_SYS_5V0", "POM_5V_IN", "VDD_IN"):
        if total in rails:
            return float(rails[total]["current"])
    return float(sum(r["current"] for r in rails.values()))


# --------------------------------------------------------------------------- monitor


class Monitor:
    """Samples power, load, clocks and temperatures in the background.

    Uses jetson-stats (``jtop``) when installed, else a ``tegrastats --interval MS``
    subprocess. If the source dies the monitor stops sampling, keeps what it has and records
    the reason in ``error``; it never stops the work it watches.
    """

    def __init__(
        self, interval_ms: int = 500, source: str = "auto", command: list[str] | None = None
    ):
        self.interval_ms = interval_ms
        self.source = source
        # ORIN_RL_TEGRASTATS replaces the tegrastats executable (tests, recorded replays).
        exe = os.environ.get("ORIN_RL_TEGRASTATS", "tegrastats")
        self.command = command or [exe, "--interval", str(interval_ms)]
        self.samples: list[tuple[float, dict[str, Any]]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen | None = None

    @staticmethod
    def available() -> bool:
        """True where jtop or tegrastats can be used."""
        exe = os.environ.get("ORIN_RL_TEGRASTATS", "tegrastats")
        return importlib.util.find_spec("jtop") is not None or shutil.which(exe) is not None

    def start(self) -> Monitor:
        """Start sampling in a daemon thread."""
        use_jtop = self.source == "jtop" or (
            self.source == "auto" and importlib.util.find_spec("jtop")
        )
        target = self._jtop_loop if use_jtop else self._tegrastats_loop
        self._thread = threading.Thread(target=target, name="orin-rl-monitor", daemon=True)
        self._t0 = time.monotonic()
        self._thread.start()
        return self

    def _tegrastats_loop(self) -> None:
        try:
            # The tegrastats argument list, no shell.
            self._proc = subprocess.Popen(  # nosec B603
                self.command,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                bufsize=1,
            )
        except OSError as exc:
            self.error = f"cannot start {self.command[0]}: {exc}"
            return
        if (
            self._proc.stdout is None
        ):  # cannot happen with stdout=PIPE; keep the type checker honest
            return
        for line in self._proc.stdout:
            if self._stop.is_set():
                break
            sample = parse_tegrastats(line)
            if sample:
                self.samples.append((time.monotonic() - self._t0, sample))
        if not self._stop.is_set():
            # EOF on stdout comes before the process is reaped: wait for its exit code
            # instead of polling (a poll here raced and reported "code None").
            try:
                code = self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                code = None
            self.error = f"{self.command[0]} exited (code {code}) while monitoring"

    def _jtop_loop(self) -> None:
        try:
            from jtop import jtop

            with jtop(interval=self.interval_ms / 1000) as j:
                while j.ok() and not self._stop.is_set():
                    power = {
                        k: {"current": v.get("power", 0), "average": v.get("avgPower", 0)}
                        for k, v in (j.power.get("rail") or {}).items()
                    }
                    tot = j.power.get("tot") or {}
                    if tot:
                        power["VIN_SYS_5V0"] = {
                            "current": tot.get("power", 0),
                            "average": tot.get("avgPower", 0),
                        }
                    sample = {
                        "power_mw": power,
                        "temperatures_c": {
                            k.lower(): v.get("temp") for k, v in j.temperature.items()
                        },
                        "gpu_load_pct": j.stats.get("GPU"),
                        "ram_used_mb": None,
                    }
                    self.samples.append((time.monotonic() - self._t0, sample))
        except Exception as exc:  # jtop's service missing or stopping: keep what we have
            self.error = f"jtop stopped: {exc}"

    def stop(self) -> dict[str, Any]:
        """Stop sampling; return the summary (see ``summary``)."""
        self._stop.set()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
        if self._thread is not None:
            self._thread.join(timeout=5)
        return self.summary()

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def summary(self) -> dict[str, Any]:
        """Samples, duration, mean / peak board power, energy (J, trapezoid over samples),
        peak temperatures, and the error if the source died."""
        powers = [(t, total_power_mw(s)) for t, s in self.samples]
        powers = [(t, p) for t, p in powers if p is not None]
        energy = 0.0
        for (t0, p0), (t1, p1) in itertools.pairwise(powers):
            energy += (p0 + p1) / 2 / 1000 * (t1 - t0)
        duration = powers[-1][0] - powers[0][0] if len(powers) > 1 else 0.0
        temps: dict[str, float] = {}
        for _, s in self.samples:
            for k, v in (s.get("temperatures_c") or {}).items():
                if v is not None:
                    temps[k] = max(temps.get(k, v), v)
        return {
            "samples": len(self.samples),
            "duration_s": duration,
            "mean_power_w": (sum(p for _, p in powers) / len(powers) / 1000) if powers else None,
            "peak_power_w": max((p for _, p in powers), default=0) / 1000 if powers else None,
            "energy_j": energy if len(powers) > 1 else None,
            "peak_temperatures_c": temps,
            "error": self.error,
        }


def start_monitor(mode: str = "auto") -> Monitor | None:
    """A started Monitor when ``mode`` is auto and a source exists here, else None."""
    if mode == "off" or not Monitor.available():
        return None
    return Monitor().start()


def platform_state() -> dict[str, Any]:
    """Power mode and board, for reports (empty off a Jetson)."""
    state: dict[str, Any] = {}
    if shutil.which("nvpmodel"):
        try:
            state["power_mode"] = power_mode()[0]
        except JetsonError as exc:
            state["power_mode"] = f"unknown ({exc})"
    info = detect(inspect_torch=False)
    if info.is_jetson:
        state.update(board=info.model, l4t=info.l4t, jetpack=info.jetpack)
    return state


def power_report(monitor: Monitor | None, work_per_s: float, unit: str) -> dict[str, Any] | None:
    """Stop ``monitor`` and describe energy and ``unit`` per watt; None without a monitor."""
    if monitor is None:
        return None
    summary = monitor.stop()
    summary[f"{unit}_per_watt"] = per_watt(work_per_s, summary)
    summary.update(platform_state())
    return summary


def per_watt(work_per_s: float, summary: dict[str, Any]) -> float | None:
    """Work per second per watt (e.g. training steps/s/W; inferences/s/W = inferences per J)."""
    watts = summary.get("mean_power_w")
    return work_per_s / watts if watts else None
