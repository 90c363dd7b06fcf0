"""The robot's deploy image on arm64, under emulation (issue 55): an arm64 Debian root built
with Debian's packages (debootstrap, then its second stage under ``proot -q
qemu-aarch64-static``: no privileges, no binfmt), the deploy side installed into it from this
checkout by ``jetson/deploy.sh`` (wheels for aarch64 from the package registry; the CycloneDDS
binding built against Debian's C library by ``jetson/common.sh``, the code ``setup.sh`` runs
on a board), then, inside the root: ``orin-rl doctor``; ``orin-rl run`` on a CartPole bundle;
``orin-rl run --plant unitree-g1`` against the G1 twin running on the host, over loopback DDS,
through the remote's stand-up into the policy and a stop. Writes
docs/benchmarks/aarch64_deploy.{json,md}.

Run by ``bash tools/aarch64_check.sh`` (which installs the host's tools first). It proves
installation and function, not timing: QEMU runs arm64 code several times slower than a board.

Emulation's own limits, worked around here (not the project's findings): QEMU 7.2's user mode
shows the host's x86 /proc/cpuinfo (ONNX Runtime's cpuinfo segfaults on it: an Orin-like one is
bound in its place), lacks IP_MULTICAST_IF (both DDS ends discover by unicast, ``--dds-peers``),
and proot 5.1 does not translate faccessat2 (tools/qemu_no_faccessat2.c).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from bench_common import write_report  # noqa: E402

SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
PACKAGES = "python3,python3-venv,python3-dev,gcc,libc6-dev,cyclonedds-dev,ca-certificates"
CYCLONEDDS = "0.10.2"  # Debian bookworm's cyclonedds-dev; Unitree's SDK2 pins the same release
DOMAIN = 97
VENV = "/opt/orin_rl/.venv"  # deploy.sh's default, where orin-rl-policy.service looks
ORIN_CPUINFO = "".join(
    f"processor\t: {i}\nBogoMIPS\t: 62.50\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 "
    "crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp uscat ilrcpc flagm paca pacg\n"
    "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd42\n"
    "CPU revision\t: 1\n\n"
    for i in range(2)
)
"""An Orin's cores as /proc/cpuinfo shows them (Cortex-A78AE: implementer 0x41, part 0xd42)."""


NICE = ["nice", "-n", "-10"] if os.geteuid() == 0 else []
"""The twin and the plant at the robot tests' raised priority (tests/robot/conftest.py) where
this process may raise it: the emulated plant is slow enough without the box's other work."""


FINDINGS = [
    "orin-rl doctor needed the onnx package for its provider probe (the model's bytes are now "
    "written out; tests/test_jetson.py rebuilds them with onnx)",
    "the CycloneDDS binding's build looks for $CYCLONEDDS_HOME/lib/libddsc.so: Debian's is in "
    "lib/aarch64-linux-gnu (common.sh builds against a prefix of links)",
    "the wire called 11.x's ddspy_take(reader, mask, n) and get_matched_publications: 0.10.x "
    "has ddspy_take(reader, n) and no get_matched_publications (both handled in robot/wire.py)",
    "a 0.10.2 process segfaults on discovering an 11.0.1 participant's G1 endpoints "
    "('ddsi_xt_type_init_impl with invalid type object'), natively on x86-64 too: the twin "
    "here speaks 0.10.2 (docs/jetson.md)",
    "deploy.sh's closing doctor ran with CYCLONEDDS_HOME still set, which makes the binding "
    "look for the library there (now unset for it; the doctor names the cause)",
]
"""What this check found broken on the way (fixed in the project), for the record."""


def log(message: str) -> None:
    print(f"[aarch64_check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def run(argv: list[str], timeout: float, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def checked(proc: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    if proc.returncode != 0:
        sys.exit(f"aarch64_check: {what} failed (exit {proc.returncode}):\n"
                 f"{(proc.stdout + proc.stderr)[-3000:]}")  # fmt: skip
    return proc


class Guest:
    """The arm64 root and the way into it."""

    def __init__(self, cache: Path):
        self.cache, self.root = cache, cache / "rootfs"
        self.work = cache / "work"
        self.shim = cache / "bin" / "qemu_no_faccessat2"
        self.cpuinfo = cache / "cpuinfo"
        self.ca = next((Path(p) for p in (os.environ.get("PIP_CERT"),
                        os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt")
                        if p and Path(p).is_file()), None)  # fmt: skip

    def prepare(self) -> float:
        """Build what is missing (the root is cached); seconds spent building the root."""
        self.shim.parent.mkdir(parents=True, exist_ok=True)
        if not self.shim.exists():
            src = ROOT / "tools" / "qemu_no_faccessat2.c"
            checked(run(["gcc", "-O2", "-static", "-o", str(self.shim), str(src)], 120), "gcc")
        self.cpuinfo.write_text(ORIN_CPUINFO)
        (self.cache / "pip").mkdir(exist_ok=True)
        if (self.root / ".orin-rl-root").exists():
            log(f"arm64 root cached at {self.root}")
            return 0.0
        start = time.monotonic()
        shutil.rmtree(self.root, ignore_errors=True)
        log(f"debootstrap --foreign --arch=arm64 {SUITE} (Debian's packages) ...")
        checked(run(["debootstrap", "--foreign", "--arch=arm64", "--variant=minbase",
                     f"--include={PACKAGES}", SUITE, str(self.root), MIRROR], 1200),
                "debootstrap (first stage)")  # fmt: skip
        shutil.copy("/usr/bin/qemu-aarch64-static", self.root / "usr" / "bin")
        log("second stage under proot + qemu-aarch64-static (~5-9 min) ...")
        second = self.call(["/debootstrap/debootstrap", "--second-stage"], 1800,
                           env={"DEBOOTSTRAP_DIR": "/debootstrap"})  # fmt: skip
        checked(second, "debootstrap (second stage)")
        (self.root / ".orin-rl-root").write_text(f"{SUITE} arm64 {time.ctime()}\n")
        return time.monotonic() - start

    def call(self, argv: list[str], timeout: float, env: dict | None = None, nice: bool = False):
        """``argv`` inside the root (PATH starts with the deploy venv's bin); ``nice``: at the
        robot tests' raised priority, where allowed."""
        binds = ["-b", "/dev", "-b", "/proc", "-b", "/sys", "-b", f"{self.cpuinfo}:/proc/cpuinfo",
                 "-b", f"{self.work}:/work", "-b", f"{self.cache / 'pip'}:/root/.cache/pip"]  # fmt: skip
        guest_env = {"HOME": "/root", "PATH": f"{VENV}/bin:/usr/local/bin:/usr/bin:/bin",
                     "PIP_DISABLE_PIP_VERSION_CHECK": "1", "LANG": "C.UTF-8", **(env or {})}  # fmt: skip
        if self.ca is not None:  # the host's trust store (a proxy's CA) for pip inside
            binds += ["-b", f"{self.ca}:/etc/host-ca.crt"]
            guest_env["PIP_CERT"] = "/etc/host-ca.crt"
        argv = [*(NICE if nice else []), "proot", "-q", f"{self.shim} /usr/bin/qemu-aarch64-static", "-0", "-r",
                str(self.root), *binds, "-w", "/work", "/usr/bin/env", "-i",
                *(f"{k}={v}" for k, v in guest_env.items()), *argv]  # fmt: skip
        proc = run(argv, timeout)
        proc.stderr = "\n".join(
            line for line in proc.stderr.splitlines() if not line.startswith("proot warning")
        )
        return proc


def copy_checkout(dest: Path) -> None:
    """The working tree (tracked and untracked, not ignored files) into ``dest``."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    files = checked(run(["git", "ls-files", "-co", "--exclude-standard", "-z"], 60, cwd=ROOT),
                    "git ls-files").stdout.split("\0")  # fmt: skip
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)


def host_bundles(work: Path, python: str) -> None:
    """A CartPole bundle and a G1 bundle (Orin-Velocity-Flat-Unitree-G1-Real, one iteration
    on 4 envs: an untrained MLP of the deployed shape, its contract and normaliser), made on the
    host where torch and mjlab are."""
    for name, argv in (
        ("cartpole", ["--env", "CartPole-v1", "--num-envs", "8", "--total-steps", "2048"]),
        ("g1", ["--env", "Orin-Velocity-Flat-Unitree-G1-Real", "--num-envs", "4",
                "--total-steps", "96"]),
    ):  # fmt: skip
        out = work / f"{name}-run"
        shutil.rmtree(out, ignore_errors=True)
        log(f"host: train + export the {name} bundle ...")
        checked(run([python, "-m", "orin_rl.cli", "-q", "train", *argv, "--device", "cpu",
                     "--out", str(out)], 900, cwd=ROOT), f"train {name}")  # fmt: skip
        checked(run([python, "-m", "orin_rl.cli", "-q", "export", str(out)], 900, cwd=ROOT),
                f"export {name}")  # fmt: skip


def host_twin_binding(cache: Path, python: str) -> Path:
    """CycloneDDS's Python binding 0.10.2 for the host's twin, built against Debian's C library
    (amd64) into a folder put first on the twin's PYTHONPATH: both ends then speak the release
    an aarch64 Debian/Ubuntu has (and a G1's SDK2 pins); a 0.10.2 process segfaults on
    discovering an 11.0.1 participant (the finding recorded in the JSON)."""
    target = cache / f"host-cyclonedds-{CYCLONEDDS}"
    if (target / "cyclonedds").is_dir():
        return target
    prefix = cache / "host-cyclonedds-prefix"
    shutil.rmtree(prefix, ignore_errors=True)
    prefix.mkdir(parents=True)
    lib = next(Path("/usr/lib").glob("*/libddsc.so"), None)
    if lib is None:
        sys.exit("aarch64_check: the host has no libddsc.so: apt-get install cyclonedds-dev")
    for name, where in (("include", "/usr/include"), ("bin", "/usr/bin"), ("lib", lib.parent)):
        (prefix / name).symlink_to(where)
    log(f"host: cyclonedds {CYCLONEDDS} binding for the twin (against Debian's C library) ...")
    checked(run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-binary",
                 "cyclonedds", "--target", str(target), f"cyclonedds=={CYCLONEDDS}"], 600,
                env={**os.environ, "CYCLONEDDS_HOME": str(prefix)}),
            "building the host's cyclonedds 0.10.2")  # fmt: skip
    return target


def g1_sim_to_sim(guest: Guest, python: str, binding: Path) -> dict:
    """The twin on the host (x86-64, CycloneDDS 0.10.2), the plant in the root (arm64), both
    on lo; the twin's scripted remote stands the robot up and starts the policy."""
    for stale in ("g1.json", "g1.exit", "twin.json"):
        (guest.work / stale).unlink(missing_ok=True)
    peers = ["--dds-domain", str(DOMAIN), "--dds-interface", "lo", "--dds-peers", "127.0.0.1"]
    twin_env = {**os.environ, "PYTHONPATH": f"{binding}{os.pathsep}{ROOT}"}
    twin = subprocess.Popen(
        [*NICE, python, "-m", "orin_rl.cli", "-q", "sim-robot", "--robot", "g1", *peers,
         "--remote-script", "docs/examples/g1_remote.json", "--hold-s", "60",
         "--report", str(guest.work / "twin.json")],
        cwd=ROOT, env=twin_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        log("arm64 plant against the host's twin (stand-up, policy, stop) ...")
        # The exit code from a shell inside the root: the emulator can crash after the process
        # has chosen it (seen: QEMU's SIGSEGV after the report was written) and proot then
        # returns 0.
        plant = guest.call(["sh", "-c", 'orin-rl run "$@"; echo "exit $?" > /work/g1.exit', "run",
                            "--model", "/work/g1-run/bundle", "--plant", "unitree-g1", *peers,
                            "--command", "remote", "--steps", "3000", "--wait-s", "120",
                            "--report", "/work/g1.json"], 400, nice=True)  # fmt: skip
    finally:
        twin.terminate()
        twin_out = twin.communicate(timeout=30)[0]
    report = json.loads((guest.work / "g1.json").read_text())
    exit_line = (guest.work / "g1.exit").read_text().split()
    return {
        "exit_code": int(exit_line[1]),
        "emulator_crashed_after": "qemu: uncaught target signal" in plant.stderr + plant.stdout,
        "end": report["end"],
        "ticks": report["ticks"],
        "transitions": [f"{t['from']} -> {t['to']} ({t['cause']})" for t in report["transitions"]],
        "latency_us_p50": report["latency_us"]["p50"],
        "state_messages": report["state_messages"],
        "command_messages": report["command_messages"],
        "twin_cyclonedds": CYCLONEDDS,
        "twin_says": twin_out.strip().splitlines()[-1:],
        "plant_tail": plant.stdout.strip().splitlines()[-6:]
        + plant.stderr.strip().splitlines()[-3:],
    }


def guest_facts(guest: Guest) -> dict:
    code = (
        "import importlib.util as u, json, platform, subprocess, sys;"
        "pk = json.loads(subprocess.run([sys.executable, '-m', 'pip', 'list', '--format', "
        "'json'], capture_output=True, text=True).stdout);"
        "print(json.dumps({'arch': platform.machine(), 'python': platform.python_version(),"
        "'packages': {p['name']: p['version'] for p in pk},"
        "'torch_installed': u.find_spec('torch') is not None,"
        "'numba_installed': u.find_spec('numba') is not None}))"
    )
    facts = json.loads(checked(guest.call(["python", "-c", code], 300), "facts").stdout)
    size = checked(guest.call(["du", "-sm", VENV], 120), "du").stdout.split()[0]
    facts["install_mb"] = int(size)
    return facts


def x86_deploy_rss(cache: Path, bundle: Path) -> dict:
    """The same deploy side on this x86-64 host (jetson/deploy.sh), and its torch-free
    ``orin-rl run`` peak RSS (issue 67's 62 MiB target is an x86-64 one: under QEMU the
    process's memory is the emulator's; tools/bench_deploy_rss.py measures where it goes)."""
    from bench_infer import torch_free_rss

    venv = cache / "x86-deploy"
    shutil.rmtree(venv, ignore_errors=True)
    log("host: jetson/deploy.sh into an x86-64 venv (for the RSS) ...")
    checked(run(["bash", str(ROOT / "jetson" / "deploy.sh"), str(venv)], 900), "x86 deploy.sh")
    rss = torch_free_rss(bundle, str(venv / "bin" / "python"))
    size = run(["du", "-sm", str(venv)], 60).stdout.split()[0]
    return {"install_mb": int(size), **rss}


def _deb_version(package: str) -> str:
    return run(["dpkg-query", "-W", "-f", "${Version}", package], 30).stdout.strip() or "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "orin-rl" / "aarch64", help="the arm64 root and pip's cache (kept)")  # fmt: skip
    ap.add_argument("--fresh", action="store_true", help="delete the cache first")
    ap.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"),
                    help="the host's training venv (make install): bundles and the twin")  # fmt: skip
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    args = ap.parse_args()
    if platform.machine() != "x86_64":
        sys.exit(
            "aarch64_check: written for an x86-64 host (an arm64 one runs jetson/deploy.sh itself)"
        )
    if args.fresh:
        shutil.rmtree(args.cache, ignore_errors=True)
    args.cache.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    guest = Guest(args.cache)
    root_s = guest.prepare()
    copy_checkout(guest.work / "src")
    host_bundles(guest.work, args.python)
    binding = host_twin_binding(args.cache, args.python)
    log(f"arm64: jetson/deploy.sh {VENV} (CycloneDDS binding against Debian's {CYCLONEDDS}) ...")
    guest.call(["rm", "-rf", VENV], 300)
    deploy_start = time.monotonic()
    deploy = checked(guest.call(["bash", "/work/src/jetson/deploy.sh", VENV], 1800,
                                env={"CYCLONEDDS_HOME": "/usr",
                                     "CYCLONEDDS_VERSION": CYCLONEDDS}), "deploy.sh")  # fmt: skip
    deploy_s = time.monotonic() - deploy_start
    facts = guest_facts(guest)
    log("arm64: orin-rl doctor; orin-rl run on the CartPole bundle ...")
    doctor = guest.call(["orin-rl", "doctor"], 300)
    cartpole = guest.call(["orin-rl", "run", "--model", "/work/cartpole-run/bundle", "--rate",
                           "0", "--steps", "1000"], 300)  # fmt: skip
    g1 = g1_sim_to_sim(guest, args.python, binding)
    x86 = x86_deploy_rss(args.cache, guest.work / "cartpole-run" / "bundle")
    result = {
        **facts,
        "emulated": True,
        "emulator": checked(
            run(["qemu-aarch64-static", "--version"], 30), "qemu"
        ).stdout.splitlines()[0],
        "root": f"Debian {SUITE} arm64 (debootstrap; proot {_deb_version('proot')})",
        "run_rss_mib": x86.get("peak_rss_mb"),
        "run_rss_arch": "x86_64 (the same deploy install, jetson/deploy.sh)",
        "run_rss_mib_after": x86.get("rss_mb_after"),
        "x86_64_install_mb": x86["install_mb"],
        "doctor": {"exit_code": doctor.returncode, "lines": doctor.stdout.strip().splitlines()},
        "cartpole_run": {
            "exit_code": cartpole.returncode,
            "lines": cartpole.stdout.strip().splitlines()[-5:],
        },
        "g1_plant": g1,
        "seconds": {
            "root_build": round(root_s),
            "deploy": round(deploy_s),
            "total": round(time.monotonic() - started),
        },
        "deploy_tail": deploy.stdout.strip().splitlines()[-3:],
        "findings_fixed": FINDINGS,
        "not_run": [
            "TensorRT and pycuda (JetPack's, no board)",
            "the GPU (CUDA/TensorRT execution providers)",
            "real-time timing (QEMU runs arm64 code several times slower than an Orin)",
            "JetPack 6's Python 3.10 / Ubuntu 22.04 (this root is Debian 12, Python 3.11)",
            "setup.sh's JetPack lines: the Jetson check, TensorRT, NVIDIA's torch and onnxruntime-gpu wheels, Warp cu12, the video group",
        ],
        "date": time.strftime("%Y-%m-%d"),
    }
    write_report(args.out, "aarch64_deploy", result, markdown(result))
    log(f"wrote {args.out / 'aarch64_deploy.json'} in {result['seconds']['total']} s")
    ok = (not result["torch_installed"] and doctor.returncode == 0 and cartpole.returncode == 0
          and any("-> policy" in t for t in g1["transitions"]) and g1["exit_code"] in (0, 3))  # fmt: skip
    return 0 if ok else 1


def markdown(r: dict) -> str:
    g1 = r["g1_plant"]
    lines = [
        "# The deploy image on arm64 (emulated)",
        "",
        f"Written by `bash tools/aarch64_check.sh` on {r['date']}: {r['root']}, "
        f"{r['emulator']}; the deploy side installed by `jetson/deploy.sh` (no torch). It proves "
        "installation and function, **not timing** (emulated).",
        "",
        "| | |",
        "|---|---|",
        f"| arch, python | {r['arch']}, {r['python']} |",
        f"| torch / numba installed | {r['torch_installed']} / {r['numba_installed']} |",
        f"| installed size (venv) | {r['install_mb']} MB arm64, {r['x86_64_install_mb']} MB x86-64 |",
        f"| torch-free `orin-rl run` peak RSS (x86-64) | {r['run_rss_mib']:.1f} MiB |",
        f"| `orin-rl doctor` | exit {r['doctor']['exit_code']} |",
        f"| `orin-rl run` CartPole bundle | exit {r['cartpole_run']['exit_code']} |",
        f"| G1 plant (arm64) ↔ twin (x86-64), DDS on lo | exit {g1['exit_code']}, {g1['ticks']} "
        f"policy ticks, end: {g1['end']}"
        + ("; then QEMU crashed at the process's exit" if g1["emulator_crashed_after"] else "")
        + " |",
        f"| time | root {r['seconds']['root_build']} s (0: cached), deploy "
        f"{r['seconds']['deploy']} s, total {r['seconds']['total']} s |",
        "",
        "G1 transitions: " + "; ".join(g1["transitions"]),
        "",
        "Packages: " + ", ".join(f"{k} {v}" for k, v in sorted(r["packages"].items())),
        "",
        "RSS after each import (x86-64, MiB): "
        + ", ".join(f"{k} {v:.0f}" for k, v in (r.get("run_rss_mib_after") or {}).items()),
        "",
        "Found and fixed on the way: " + "; ".join(r["findings_fixed"]) + ".",
        "",
        "Not run here: " + "; ".join(r["not_run"]) + ".",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
