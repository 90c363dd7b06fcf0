"""The robot's torch-free ``orin-rl run``: peak resident memory, and where it goes (issue 67).

The deploy image (``jetson/deploy.sh`` into a fresh venv on this machine: no torch, numba or
training stack) runs a CartPole bundle on ONNX Runtime for 2,000 ticks at full speed, its plant
gymnasium's CartPole. Measured the way tools/aarch64_check.py measures it (the process's own
peak, ``VmHWM``, of a ``python -c`` that runs ``orin_rl.cli.main`` with torch and numba
blocked), also through the ``orin-rl`` script itself (its ``ru_maxrss``, what ``/usr/bin/time
-v`` prints), with ``--backend onnxruntime`` (aarch64_check's) and the default ``auto``.

Beside it, the floor: the same work with no orin_rl at all (numpy, an ONNX Runtime session with
the backend's options, ``gymnasium.make``, 2,000 steps), built up one import at a time so each
part's share shows, and the shared libraries' resident pages at the end of the run. With
``--baseline-ref REF`` the run is measured again with orin_rl's code at that commit on the same
venv (the before figure). Writes docs/benchmarks/deploy_rss_cpu.{json,md}.

    .venv/bin/python tools/bench_deploy_rss.py --baseline-ref HEAD
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from bench_common import write_report

ROOT = Path(__file__).resolve().parents[1]
TARGET_MIB = 62.0
"""Issue 67's bound on the torch-free run's peak RSS (x86-64)."""
STEPS = 2000
WATCHED = ("gymnasium", "numpy.random", "numpy.ma", "yaml", "orin_rl.config", "torch", "numba")
"""Modules whose presence after a run the record notes."""

_STATUS = """
def _status(*fields):
    out = {}
    for line in open("/proc/self/status"):
        key = line.split(":")[0]
        if key in fields:
            out[key] = int(line.split()[1]) / 1024
    return out
"""

RUN_CODE = _STATUS + textwrap.dedent("""
    import json, sys
    sys.modules["torch"] = None  # as on the deploy image: importing them fails
    sys.modules["numba"] = None
    after = {"python": _status("VmRSS")["VmRSS"]}
    from orin_rl.cli import main
    after["+ orin_rl.cli"] = _status("VmRSS")["VmRSS"]
    rc = main(sys.argv[1:])
    after["after the run"] = _status("VmRSS")["VmRSS"]
    watched = {m: sys.modules.get(m) is not None for m in WATCHED}
    import orin_rl
    print(json.dumps({"peak_mib": _status("VmHWM")["VmHWM"], "rss_mib_after": after,
                      "imported": watched, "modules": len(sys.modules),
                      "orin_rl": orin_rl.__file__, "maps": _maps()}))
    sys.exit(rc)
""")

MAPS_CODE = """
def _maps():
    rss, name = {}, "[anon]"
    for line in open("/proc/self/smaps"):
        parts = line.split()
        if "-" in parts[0] and ":" not in parts[0]:
            name = parts[5] if len(parts) > 5 else "[anon]"
        elif parts[0] == "Rss:":
            rss[name] = rss.get(name, 0) + int(parts[1]) / 1024
    return rss
"""

FLOOR_CODE = _STATUS + textwrap.dedent("""
    import json, sys
    steps = [("python (and json, the measurement's)", _status("VmRSS")["VmRSS"])]
    for extra in sys.argv[3:]:  # the CLI's standard-library modules, for the second floor
        __import__(extra)
    import numpy as np
    steps.append(("numpy", _status("VmRSS")["VmRSS"]))
    import onnxruntime as ort
    steps.append(("onnxruntime (import)", _status("VmRSS")["VmRSS"]))
    options = ort.SessionOptions()  # the backend's (runtime/onnxruntime_backend.py)
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    session.run(None, {name: np.zeros((1, 4), np.float32)})
    steps.append(("an inference session", _status("VmRSS")["VmRSS"]))
    import numpy.random
    steps.append(("numpy.random (gymnasium's seeding)", _status("VmRSS")["VmRSS"]))
    import gymnasium as gym
    steps.append(("gymnasium (import)", _status("VmRSS")["VmRSS"]))
    env = gym.make(sys.argv[2])
    obs, _ = env.reset(seed=0)
    for _ in range(STEPS):
        action = session.run(None, {name: np.asarray(obs, np.float32)[None]})[0]
        obs, _, terminated, truncated, _ = env.step(int(action.reshape(-1)[0]))
        if terminated or truncated:
            obs, _ = env.reset()
    steps.append(("CartPole made, 2,000 steps", _status("VmRSS")["VmRSS"]))
    print(json.dumps({"peak_mib": _status("VmHWM")["VmHWM"], "steps": steps}))
""")

CLI_STDLIB = ("argparse", "logging", "pathlib", "importlib.util")
"""What any command line of ``orin-rl`` imports from the standard library (argparse's gettext
comes with it), for the floor with a command line."""


def _python(python: str, code: str, argv: list[str], cwd: Path, timeout: float = 300) -> dict:
    """``python -c CODE ARGV`` in ``cwd`` without this process's PYTHONPATH; its last line as
    JSON (an ``error`` key where it failed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    header = f"WATCHED = {WATCHED!r}\nSTEPS = {STEPS}\n" + MAPS_CODE
    proc = subprocess.run([python, "-c", header + code, *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)  # fmt: skip
    if proc.returncode != 0:
        return {"error": (proc.stdout + proc.stderr)[-600:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_argv(bundle: Path, backend: str) -> list[str]:
    return ["-q", "run", "--model", str(bundle), "--backend", backend, "--rate", "0",
            "--steps", str(STEPS)]  # fmt: skip


def run_rss(bundle: Path, python: str = sys.executable, backend: str = "onnxruntime",
            code_dir: Path | None = None) -> dict:  # fmt: skip
    """Peak RSS (MiB) of a torch-free ``orin-rl run`` on ``bundle``, in-process (VmHWM), with
    the resident memory after the interpreter's start and ``orin_rl.cli``'s import, and which
    of ``WATCHED`` it imported. ``code_dir``: a folder whose ``orin_rl`` shadows the installed
    one (another commit's code on the same venv); default: the installed one."""
    with tempfile.TemporaryDirectory() as empty:
        cwd = code_dir or Path(empty)  # ``-c`` puts the working folder first on sys.path
        return _python(python, RUN_CODE, run_argv(bundle, backend), cwd)


def script_rss(venv: Path, bundle: Path, backend: str) -> float:
    """ru_maxrss (MiB) of the venv's ``orin-rl`` script itself (``/usr/bin/time -v``'s
    "Maximum resident set size")."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    with tempfile.TemporaryDirectory() as cwd:
        proc = subprocess.Popen([str(venv / "bin" / "orin-rl"), *run_argv(bundle, backend)],
                                cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        sys.exit(f"bench_deploy_rss: orin-rl run failed (exit {proc.returncode}): {err[-600:]}")
    return usage.ru_maxrss / 1024  # kB on Linux


def floor_rss(python: str, bundle: Path, env_id: str, extra: tuple[str, ...] = ()) -> dict:
    """The run's work without orin_rl: peak RSS (MiB) and the resident memory after each part."""
    with tempfile.TemporaryDirectory() as cwd:
        return _python(python, FLOOR_CODE, [str(bundle / "policy.onnx"), env_id, *extra],
                       Path(cwd))  # fmt: skip


def median_of(results: list[dict]) -> dict:
    """The result of median peak among ``results`` (each repeat is one whole process)."""
    good = [r for r in results if "error" not in r]
    if not good:
        return results[0]
    ordered = sorted(good, key=lambda r: r["peak_mib"])
    return {**ordered[len(ordered) // 2], "peaks_mib": [round(r["peak_mib"], 2) for r in good]}


def library_share(maps: dict[str, float]) -> list[tuple[str, float]]:
    """Resident MiB by what holds it: each shared library's file pages, and the anonymous
    memory (heap, Python's arenas, the session's buffers, thread stacks)."""
    groups = {"onnxruntime": "onnxruntime", "libpython": "libpython", "numpy.libs": "OpenBLAS "
              "and gfortran (numpy.libs)", "numpy/": "numpy's extension modules",
              "libcrypto": "libcrypto (hashlib, numpy.random's secrets)", "libstdc++": "libstdc++",
              "gymnasium": "gymnasium", "yaml": "pyyaml"}  # fmt: skip
    share: dict[str, float] = {}
    for path, mib in maps.items():
        if not path.startswith("/"):
            key = "anonymous (heap, Python objects, buffers, stacks)"
        else:
            key = next((v for k, v in groups.items() if k in path), "other libraries and files")
        share[key] = share.get(key, 0.0) + mib
    return sorted(share.items(), key=lambda kv: -kv[1])


def deploy(venv: Path) -> float:
    """jetson/deploy.sh into a fresh ``venv`` (as aarch64_check does for x86-64): seconds."""
    shutil.rmtree(venv, ignore_errors=True)
    venv.parent.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHON"] = sys.executable.replace(sys.prefix, sys.base_prefix)
    start = time.monotonic()
    proc = subprocess.run(["bash", str(ROOT / "jetson" / "deploy.sh"), str(venv)],
                          capture_output=True, text=True, timeout=1200, env=env)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"bench_deploy_rss: deploy.sh failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    return time.monotonic() - start


def cartpole_bundle(work: Path) -> Path:
    """A CartPole bundle made with this (training) interpreter, as aarch64_check makes its own."""
    out = work / "cartpole-run"
    shutil.rmtree(out, ignore_errors=True)
    for argv in (["train", "--env", "CartPole-v1", "--num-envs", "8", "--total-steps", "2048",
                  "--device", "cpu", "--out", str(out)], ["export", str(out)]):  # fmt: skip
        proc = subprocess.run([sys.executable, "-m", "orin_rl.cli", "-q", *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        if proc.returncode != 0:
            sys.exit(f"bench_deploy_rss: {argv[0]} failed:\n{proc.stderr[-2000:]}")
    return out / "bundle"


def export_with(code_dir: Path, run: Path, out: Path) -> Path:
    """``run`` exported again by the orin_rl in ``code_dir`` (a bundle that code reads: a newer
    bundle's fields are unknown to older code)."""
    shutil.rmtree(out, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-m", "orin_rl.cli", "-q", "export", str(run), "--out",
                           str(out)], cwd=code_dir, env=env, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    if proc.returncode != 0:
        sys.exit(f"bench_deploy_rss: the baseline's export failed:\n{proc.stderr[-2000:]}")
    return out


def checkout(ref: str, dest: Path) -> str:
    """orin_rl's code at ``ref`` into ``dest`` (``git archive``); the commit's short hash."""
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True,
                            text=True, check=True).stdout.strip()  # fmt: skip
    archive = subprocess.run(["git", "archive", commit, "orin_rl"], cwd=ROOT, capture_output=True,
                             check=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return commit


def measure(venv: Path, bundle: Path, repeats: int, baseline: str | None,
            trained: Path | None = None) -> dict:  # fmt: skip
    """Every figure of the record. ``trained``: the run folder ``bundle`` was exported from
    (the baseline's code exports it again), or None (the baseline runs ``bundle`` itself)."""
    python = str(venv / "bin" / "python")
    result: dict = {"runs": {}, "script_mib": {}}
    for backend in ("onnxruntime", "auto"):
        result["runs"][backend] = median_of(
            [run_rss(bundle, python, backend) for _ in range(repeats)]
        )
        result["script_mib"][backend] = statistics.median(
            script_rss(venv, bundle, backend) for _ in range(repeats)
        )
    result["floor"] = median_of([floor_rss(python, bundle, "CartPole-v1") for _ in range(repeats)])
    result["floor_with_cli_stdlib"] = median_of(
        [floor_rss(python, bundle, "CartPole-v1", CLI_STDLIB) for _ in range(repeats)]
    )
    if baseline:
        with tempfile.TemporaryDirectory() as tmp:
            code = Path(tmp) / "code"
            code.mkdir()
            commit = checkout(baseline, code)
            if trained is not None:
                bundle = export_with(code, trained, Path(tmp) / "bundle")
            before = {b: median_of([run_rss(bundle, python, b, code) for _ in range(repeats)])
                      for b in ("onnxruntime", "auto")}  # fmt: skip
        result["baseline"] = {"ref": baseline, "commit": commit, "runs": before}
    return result


def _packages(python: str) -> dict[str, str]:
    out = subprocess.run([python, "-m", "pip", "list", "--format", "json"], capture_output=True,
                         text=True, timeout=120).stdout  # fmt: skip
    wanted = ("numpy", "onnxruntime", "gymnasium", "PyYAML", "cyclonedds", "orin-rl")
    return {p["name"]: p["version"] for p in json.loads(out) if p["name"] in wanted}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "orin-rl" / "deploy-rss" / "venv",
                    help="the deploy venv (made afresh by jetson/deploy.sh unless --no-install)")  # fmt: skip
    ap.add_argument("--no-install", action="store_true", help="measure --venv as it is")
    ap.add_argument("--bundle", type=Path, help="a CartPole bundle (default: one is trained)")
    ap.add_argument("--repeats", type=int, default=3, help="processes per figure (median)")
    ap.add_argument("--baseline-ref", help="also measure orin_rl's code at this commit")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    ap.add_argument("--name", default="deploy_rss_cpu")
    args = ap.parse_args()
    deploy_s = None if args.no_install else deploy(args.venv)
    with tempfile.TemporaryDirectory() as work:
        bundle = args.bundle or cartpole_bundle(Path(work))
        trained = None if args.bundle else bundle.parent
        result = measure(args.venv, bundle.resolve(), args.repeats, args.baseline_ref, trained)
    python = str(args.venv / "bin" / "python")
    run = result["runs"]["onnxruntime"]
    record = {
        "what": "torch-free `orin-rl run` of a CartPole bundle on ONNX Runtime in the deploy "
        "image (jetson/deploy.sh): peak resident memory and where it goes",
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "date": time.strftime("%Y-%m-%d"),
        "command": "python tools/bench_deploy_rss.py"
        + (f" --baseline-ref {result['baseline']['commit']}" if args.baseline_ref else ""),
        "target_mib": TARGET_MIB,
        "peak_mib": run.get("peak_mib"),
        "meets_target": run.get("peak_mib", 1e9) <= TARGET_MIB,
        "packages": _packages(python),
        "deploy_s": deploy_s and round(deploy_s),
        "steps": STEPS,
        **result,
        "by_holder_mib": library_share(run.get("maps", {})),
    }
    for r in (*record["runs"].values(), *record.get("baseline", {}).get("runs", {}).values()):
        r.pop("maps", None)
    text = markdown(record)
    write_report(args.out, args.name, record, text)
    print(text)
    return 0


def _before_imports(base: dict | None) -> str:
    """What the baseline's run imported, as a sentence (empty without a baseline)."""
    before = (base or {}).get("runs", {}).get("onnxruntime", {})
    if "imported" not in before:
        return ""
    said = ", ".join(f"{m} {'yes' if v else 'no'}" for m, v in before["imported"].items())
    return f" Before ({base['commit']}): {said} ({before['modules']} modules)."


def markdown(r: dict) -> str:
    run, floor, cli = r["runs"]["onnxruntime"], r["floor"], r["floor_with_cli_stdlib"]
    auto = r["runs"]["auto"]
    base = r.get("baseline")
    lines = [
        "# The deploy image's torch-free `orin-rl run`: peak resident memory",
        "",
        f"{r['machine']}; the deploy image made by `jetson/deploy.sh` ("
        + ", ".join(f"{k} {v}" for k, v in sorted(r["packages"].items()))
        + f"); {r['date']}. `orin-rl run` of a CartPole bundle on ONNX Runtime, {r['steps']:,} "
        "ticks at full speed, its plant gymnasium's CartPole. Peak = the process's `VmHWM`, "
        "median of "
        f"{len(run.get('peaks_mib', [0]))} processes, as tools/aarch64_check.py measures it.",
        "",
        "| | peak RSS (MiB) |",
        "|---|---|",
    ]
    if base:
        for backend, b in base["runs"].items():
            lines.append(f"| before: orin_rl at {base['commit']}, `--backend {backend}` | "
                         f"{b.get('peak_mib', float('nan')):.1f} |")  # fmt: skip
    lines += [
        f"| `--backend onnxruntime` (aarch64_check's) | **{run['peak_mib']:.1f}** |",
        f"| `--backend auto` (the default) | {auto['peak_mib']:.1f} |",
        f"| the `orin-rl` script itself (`/usr/bin/time -v`'s figure), onnxruntime / auto | "
        f"{r['script_mib']['onnxruntime']:.1f} / {r['script_mib']['auto']:.1f} |",
        f"| the floor: the same work without orin_rl | {floor['peak_mib']:.1f} |",
        f"| the floor with a command line's standard library ({', '.join(CLI_STDLIB)}) | "
        f"{cli['peak_mib']:.1f} |",
        f"| target | {r['target_mib']:.0f} |",
        "",
        f"**Target {'met' if r['meets_target'] else 'not met'}**: "
        + (
            "the run fits."
            if r["meets_target"]
            else f"the floor alone is {floor['peak_mib']:.1f} MiB, above the target before "
            "orin_rl adds a module. Stepping CartPole needs gymnasium, and gymnasium's seeding "
            "needs numpy.random (its `secrets` loads libcrypto); what is left to orin_rl is "
            f"{run['peak_mib'] - floor['peak_mib']:.1f} MiB over the floor, "
            f"{run['peak_mib'] - cli['peak_mib']:.1f} over the floor with a command line."
        ),
        "",
        "Imported by the run: "
        + ", ".join(f"{m} {'yes' if v else 'no'}" for m, v in run["imported"].items())
        + f" ({run['modules']} modules)."
        + _before_imports(base),
        "",
        "## Where the floor goes (resident MiB after each part, one process)",
        "",
        "| part | resident after | its share |",
        "|---|---|---|",
    ]
    previous = 0.0
    for name, mib in floor["steps"]:
        lines.append(f"| {name} | {mib:.1f} | {mib - previous:+.1f} |")
        previous = mib
    lines += [
        "",
        "## What holds the run's peak (resident MiB at its end, by mapping)",
        "",
        "| holder | MiB |",
        "|---|---|",
        *(f"| {k} | {v:.1f} |" for k, v in r["by_holder_mib"]),
        "",
        "Shared libraries count with their pages that the process touched (file-backed, shared "
        "with other processes and reclaimable); the anonymous memory is the process's own.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
