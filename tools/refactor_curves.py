"""Same curves before and after a refactor: short trainings on fixed seeds, every per-iteration
figure that does not read a clock kept, then two such records compared number by number.

    python tools/refactor_curves.py run --out runs/curves-before.json [--source DIR]
    python tools/refactor_curves.py compare BEFORE.json AFTER.json \\
        --write docs/benchmarks/refactor_curves_cpu

``--source DIR`` runs the package of another checkout (a ``git worktree`` of the commit before
the refactor) with this interpreter: ``PYTHONPATH=DIR`` puts its ``orin_rl`` first. Each run is
one ``orin-rl train`` process on the CPU with the env's preset and a fixed seed, cut to a few
iterations. ``compare`` writes JSON + Markdown: for each run, the iterations compared, the
figures compared, and the first that differs (none: the curves are identical to the bit).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (name, orin-rl train arguments): the presets issue 70 names (CartPole, Pendulum, the mjlab
# CPU presets) and the other learners the refactor touches (SAC, DQN, the GPU-native twins on
# the CPU, the numba rollout buffer).
RUNS = {
    "ppo-cartpole": ["--env", "CartPole-v1", "--total-steps", "40960", "--seed", "3"],
    "ppo-pendulum": ["--env", "Pendulum-v1", "--total-steps", "40960", "--seed", "3"],
    "ppo-cartpole-gpu-backend": ["--env", "CartPole-v1", "--env-backend", "gpu",
                                 "--total-steps", "32768", "--seed", "5"],
    "sac-pendulum": ["--env", "Pendulum-v1", "--algo", "sac", "--total-steps", "3000",
                     "--seed", "3"],
    "dqn-cartpole": ["--env", "CartPole-v1", "--algo", "dqn", "--total-steps", "6000",
                     "--seed", "3"],
    "mjlab-cartpole-balance": ["--env", "Mjlab-Cartpole-Balance", "--total-steps", "2400",
                               "--seed", "2"],
    "mjlab-go1-flat": ["--env", "Mjlab-Velocity-Flat-Unitree-Go1", "--total-steps", "960",
                       "--seed", "2"],
}  # fmt: skip
GPU_RUNS = {  # --device cuda: the fused CartPole kernels (ppo.fused=auto), PureJaxRL's settings
    "ppo-cartpole-fused": ["--env", "CartPole-v1", "--env-backend", "gpu", "--num-envs", "4",
                           "--total-steps", "500000", "--seed", "1"],
}  # fmt: skip

CLOCK_KEYS = {"time_s", "steps_per_s", "wall_time_s"}
CLOCK_PREFIXES = ("perf/", "gpu/")  # the loop's phase timings; the allocator's memory figures


def is_clock(key: str) -> bool:
    """A figure that reads a clock (or the allocator): it differs run to run by nature. Named
    exactly: a curve such as mjlab's ``Episode_Termination/time_out`` is compared."""
    return key in CLOCK_KEYS or key.startswith(CLOCK_PREFIXES)


def run_one(name: str, args: list[str], workdir: Path, source: Path | None, device: str) -> dict:
    run = workdir / name
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress", "--overwrite",
           "--device", device, "--out", str(run), *args]  # fmt: skip
    env = dict(os.environ)
    if source is not None:  # its orin_rl first, what else PYTHONPATH holds after it
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(source), env.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=source or ROOT)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"name": name, "args": args, "error": proc.stderr[-3000:], "wall_s": wall}
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x]
    series = [{k: v for k, v in r.items() if not is_clock(k)} for r in records]
    summary = json.loads((run / "summary.json").read_text())
    return {
        "name": name,
        "args": args,
        "wall_s": wall,
        "records": series,
        "eval_return_mean": summary.get("eval_return_mean"),
        "steps_per_s": summary.get("steps_per_s"),  # not compared: a clock's
        "training_path": summary.get("training_path"),
        "checkpoint_sha256": checkpoint_digest(run / "checkpoint.pt"),
    }


def checkpoint_digest(path: Path) -> dict[str, str]:
    """sha256 of each tensor the learner saved (policy, critics, optimiser moments), by path."""
    import torch

    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    out: dict[str, str] = {}

    def walk(prefix: str, obj) -> None:
        if isinstance(obj, torch.Tensor):
            data = obj.detach().contiguous().cpu().numpy().tobytes()
            out[prefix] = hashlib.sha256(data).hexdigest()[:16]
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(f"{prefix}/{k}", v)
        elif isinstance(obj, (list, tuple)):
            for i, v in enumerate(obj):
                walk(f"{prefix}/{i}", v)

    walk("algo", ckpt.get("algo"))
    return out


def cmd_run(ns: argparse.Namespace) -> int:
    table = RUNS if ns.device == "cpu" else GPU_RUNS
    names = ns.only.split(",") if ns.only else list(table)
    source = ns.source.resolve() if ns.source else None
    commit = ns.commit or subprocess.run(["git", "rev-parse", "HEAD"], cwd=source or ROOT,
                                         capture_output=True, text=True).stdout.strip()  # fmt: skip
    out = {"commit": commit, "runs": {}}
    for name in names:
        print(f"{name} ...", flush=True)
        out["runs"][name] = r = run_one(name, table[name], ns.workdir, source, ns.device)
        print(f"  {r.get('error', 'ok')[:400]} ({r['wall_s']:.0f} s)", flush=True)
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(json.dumps(out, indent=1))
    return 0


def diff_run(a: dict, b: dict) -> dict:
    """Where two records of one run part: the first (iteration, key, before, after), if any."""
    if "error" in a or "error" in b:
        return {"error": a.get("error") or b.get("error")}
    first = None
    compared = 0
    if len(a["records"]) != len(b["records"]):
        first = {"what": "iterations", "before": len(a["records"]), "after": len(b["records"])}
    for i, (ra, rb) in enumerate(zip(a["records"], b["records"], strict=False)):
        for key in sorted(set(ra) | set(rb)):
            compared += 1
            if first is None and ra.get(key) != rb.get(key):
                first = {"iteration": i, "key": key, "before": ra.get(key), "after": rb.get(key)}
    if first is None and a["eval_return_mean"] != b["eval_return_mean"]:
        first = {"what": "eval_return_mean", "before": a["eval_return_mean"],
                 "after": b["eval_return_mean"]}  # fmt: skip
    weights = sorted(a["checkpoint_sha256"].values()) == sorted(b["checkpoint_sha256"].values())
    return {
        "iterations": len(a["records"]),
        "figures_compared": compared,
        "identical": first is None,
        "weights_identical": weights,
        "first_difference": first,
        "final_eval_before": a["eval_return_mean"],
        "final_eval_after": b["eval_return_mean"],
        "steps_per_s_before": a.get("steps_per_s"),
        "steps_per_s_after": b.get("steps_per_s"),
        "path_before": (a.get("training_path") or {}).get("path"),
        "path_after": (b.get("training_path") or {}).get("path"),
    }


def _rate(value: float | None, shown: bool) -> str:
    """Steps/s as a table cell: from the GPU only (a CPU box's clock is not a benchmark)."""
    return "not compared" if not shown or value is None else f"{value:,.0f}"


def cmd_compare(ns: argparse.Namespace) -> int:
    before = json.loads(ns.before.read_text())
    after = json.loads(ns.after.read_text())
    rows = {n: diff_run(before["runs"][n], after["runs"][n])
            for n in before["runs"] if n in after["runs"]}  # fmt: skip
    result = {"before_commit": before["commit"], "after_commit": after["commit"],
              "command": "python tools/refactor_curves.py run / compare", "runs": rows,
              "args": {n: before["runs"][n]["args"] for n in rows}}  # fmt: skip
    lines = [
        f"# Training curves before and after the issue-70 refactor ({ns.machine})",
        "",
        f"Before: `{before['commit'][:10]}`; after: `{after['commit'][:10]}`. Each run is one "
        f"`orin-rl train --device {ns.device}` process with the env's preset on a fixed seed "
        "(`tools/refactor_curves.py`); every per-iteration figure that does not read a clock is "
        "compared exactly, and the sha256 of each tensor of the final checkpoint.",
        "",
        "| run | arguments | iterations | figures compared | curves identical | weights identical "
        "| final eval before | after | steps/s before | after | path | first difference |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    gpu = ns.device != "cpu"
    for n, r in rows.items():
        if "error" in r:
            lines.append(f"| {n} | | | | error | | | | | | | {r['error'][-200:]!r} |")
            continue
        lines.append(
            f"| {n} | `{' '.join(result['args'][n])}` | {r['iterations']} | "
            f"{r['figures_compared']} | {'yes' if r['identical'] else 'no'} | "
            f"{'yes' if r['weights_identical'] else 'no'} | {r['final_eval_before']} | "
            f"{r['final_eval_after']} | {_rate(r['steps_per_s_before'], gpu)} | "
            f"{_rate(r['steps_per_s_after'], gpu)} | {r['path_before'] or 'not recorded'} → {r['path_after'] or 'not recorded'} | "
            f"{r['first_difference'] or '—'} |"
        )
    ns.write.parent.mkdir(parents=True, exist_ok=True)
    ns.write.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    ns.write.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r.get("identical") for r in rows.values()) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--source", type=Path, help="another checkout's root (its orin_rl runs)")
    r.add_argument("--workdir", type=Path, default=ROOT / "runs" / "refactor-curves")
    r.add_argument("--only", default="", help="comma-separated run names")
    r.add_argument("--commit", default="", help="the commit the runs are of (default: git's)")
    r.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cuda: the GPU runs (GPU_RUNS) instead of the CPU ones")  # fmt: skip
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    c.add_argument("--write", type=Path, default=ROOT / "docs/benchmarks/refactor_curves_cpu")
    c.add_argument("--machine", default="CPU box", help="where the runs ran, for the title")
    c.add_argument("--device", default="cpu", help="the runs' --device, for the text")
    ns = parser.parse_args()
    return cmd_run(ns) if ns.cmd == "run" else cmd_compare(ns)


if __name__ == "__main__":
    raise SystemExit(main())
