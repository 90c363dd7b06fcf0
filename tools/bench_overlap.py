"""PPO on CPU physics, synchronous against overlapped rollouts (``--overlap``), same envs and
seeds, one process each, beside the envs' own speed with random actions.

Per task: ``env_only_steps_per_s`` (the same gymnasium vector env, random actions),
``sync_steps_per_s`` and ``overlap_steps_per_s`` (the trainer's, periodic evaluation
excluded), the wall time to ``--threshold`` (the first periodic evaluation at or above it)
and the final evaluation of both. Writes JSON + Markdown.

    python tools/bench_overlap.py --tasks Hopper-v5,Humanoid-v5 --total-steps 1000000 \\
        --device cuda --out docs/benchmarks/overlap_h200
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

from bench_common import task_seed_parser  # noqa: E402

THRESHOLDS = {"Hopper-v5": 1500.0, "Humanoid-v5": 5000.0, "CartPole-v1": 475.0}


def env_only(task: str, num_envs: int, vectorization: str, steps: int, seed: int) -> float:
    """Steps/s of the gymnasium vector env alone, random actions (after a warm-up)."""
    import numpy as np

    from orin_rl import envs

    env = envs.make(task, num_envs, "cpu", seed=seed, vectorization=vectorization)
    env.reset()
    space = env.action_space
    rng = np.random.default_rng(seed)
    import torch

    def act():
        if hasattr(space, "n"):
            return torch.as_tensor(rng.integers(0, space.n, num_envs))
        low, high = space.low, space.high
        return torch.as_tensor(
            rng.uniform(low, high, (num_envs, *space.shape)), dtype=torch.float32
        )

    for _ in range(20):
        env.step(act())
    start = time.perf_counter()
    for _ in range(steps):
        env.step(act())
    wall = time.perf_counter() - start
    env.close()
    return num_envs * steps / wall


def train(task: str, args, overlap: bool, work: Path, seed: int, eager_update: bool = False
          ) -> dict:  # fmt: skip
    """One ``orin-rl train`` run; its speed, wall (and steps) to the threshold and final
    evaluation (``eager_update``: with ``ppo.graph_update=off``, the update op by op)."""
    name = f"{'overlap' if overlap else 'sync'}{'-eager' if eager_update else ''}-{task}-{seed}"
    out = work / name
    vectorization = args.overlap_vectorization if overlap else args.vectorization
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress", "--env", task,
           "--device", args.device, "--num-envs", str(args.num_envs), "--vectorization",
           vectorization, "--total-steps", str(args.total_steps), "--seed", str(seed),
           "--out", str(out), "--overwrite", "--set", "train.stop_at_threshold=false",
           "--set", f"train.eval_every={args.eval_every}",
           *(["--overlap"] if overlap else []),
           *(x for kv in (args.overlap_set if overlap else []) for x in ("--set", kv)),
           *(["--set", "ppo.graph_update=off"] if eager_update else [])]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(
            f"{task} ({'overlap' if overlap else 'sync'}) failed:\n{proc.stderr[-3000:]}"
        )
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x]
    threshold = args.threshold or THRESHOLDS.get(task)
    reached = next(
        (r for r in records
         if threshold is not None and r.get("eval/return_mean", -1e30) >= threshold),
        {},
    )  # fmt: skip
    train_s = summary["wall_time_s"] - summary["eval_time_s"]
    # The profile of an iteration after the first (which warms up and captures): mean seconds
    # of the update, of the learner's wait for the workers, of the synchronous rollout.
    profile = {}
    for key in ("perf/update_s", "perf/rollout_wait_s", "perf/rollout_s"):
        values = [r[key] for r in records[1:] if key in r]
        if values:
            profile[key.split("/")[1].removesuffix("_s") + "_s_mean"] = round(
                sum(values) / len(values), 5
            )
    return {
        **profile,
        "steps_per_s": summary["total_steps"] / train_s if train_s > 0 else None,
        "wall_to_threshold_s": reached.get("time_s"),
        "steps_to_threshold": reached.get("global_step"),
        "final_eval": summary["eval_return_mean"],
        "process_wall_s": round(wall, 2),
    }


def main() -> None:
    p = task_seed_parser(
        __doc__, "Hopper-v5,Humanoid-v5", 64, "1", ROOT / "docs/benchmarks/overlap_h200"
    )
    p.add_argument("--vectorization", default="async", help="the synchronous run's")
    p.add_argument(
        "--overlap-vectorization",
        default="workers",
        help="the --overlap run's (workers: rollout workers that act themselves)",
    )
    p.add_argument(
        "--overlap-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a --set for the overlapped runs only (repeatable)",
    )
    p.add_argument("--total-steps", type=int, default=1_000_000)
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--env-only-steps", type=int, default=300)
    p.add_argument("--threshold", type=float, help="evaluation return counted as reached")
    p.add_argument("--device", default="cuda")
    p.add_argument(
        "--compare-eager-update",
        action="store_true",
        help="also the overlapped run with ppo.graph_update=off (the baseline)",
    )
    p.add_argument(
        "--append", action="store_true", help="keep the rows of other tasks already in --out's JSON"
    )
    p.add_argument("--work", type=Path, default=Path("/tmp/bench_overlap"))
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    seeds = [int(s) for s in args.seeds.split(",")]
    for task, seed in ((t, s) for t in args.tasks.split(",") for s in seeds):
        if seed == seeds[0]:  # the envs alone: once a task
            alone = env_only(task, args.num_envs, args.vectorization, args.env_only_steps, seed)
        row = {"task": task, "seed": seed, "num_envs": args.num_envs,
               "env_only_steps_per_s": alone}  # fmt: skip
        runs = [("sync", False, False), ("overlap", True, False)]
        if args.compare_eager_update:
            runs.append(("overlap_eager_update", True, True))
        for name, overlap, eager_update in runs:
            result = train(task, args, overlap, args.work, seed, eager_update)
            print(json.dumps({"task": task, "seed": seed, "run": name, **result}), flush=True)
            row.update({f"{name}_{k}": v for k, v in result.items()})
        row["overlap_vs_env_only"] = row["overlap_steps_per_s"] / row["env_only_steps_per_s"]
        row["overlap_vs_sync"] = row["overlap_steps_per_s"] / row["sync_steps_per_s"]
        if row["sync_wall_to_threshold_s"] and row["overlap_wall_to_threshold_s"]:
            row["overlap_vs_sync_wall_to_threshold"] = (
                row["overlap_wall_to_threshold_s"] / row["sync_wall_to_threshold_s"]
            )
        if args.compare_eager_update:
            row["graph_vs_eager_update"] = (
                row["overlap_steps_per_s"] / row["overlap_eager_update_steps_per_s"]
            )
        print(json.dumps(row), flush=True)
        rows.append(row)
    write(rows, args)


def write(rows: list[dict], args) -> None:
    from train_bench_common import machine_line

    meta = {
        "machine": machine_line(),
        "command": "python tools/bench_overlap.py " + " ".join(sys.argv[1:]),
        "sync_vectorization": args.vectorization,
        "overlap_vectorization": args.overlap_vectorization,
        "date": time.strftime("%Y-%m-%d"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    previous = args.out.with_suffix(".json")
    if args.append and previous.exists():  # keep the other tasks' rows (one call per task)
        done = {(r["task"], r.get("seed", 1)) for r in rows}
        old = json.loads(previous.read_text())
        rows[:0] = [r for r in old["rows"] if (r["task"], r.get("seed", 1)) not in done]
        meta["earlier_rows"] = [*old["meta"].get("earlier_rows", []), old["meta"]["command"]]
    args.out.with_suffix(".json").write_text(
        json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n"
    )
    cols = ["task", "seed", "num_envs", "env_only_steps_per_s", "sync_steps_per_s", "overlap_steps_per_s",
            "overlap_vs_env_only", "overlap_vs_sync", "sync_wall_to_threshold_s",
            "overlap_wall_to_threshold_s", "overlap_vs_sync_wall_to_threshold",
            "sync_steps_to_threshold", "overlap_steps_to_threshold",
            "sync_final_eval", "overlap_final_eval", "sync_update_s_mean", "sync_rollout_s_mean",
            "overlap_update_s_mean", "overlap_rollout_wait_s_mean",
            "overlap_eager_update_steps_per_s", "overlap_eager_update_update_s_mean",
            "graph_vs_eager_update"]  # fmt: skip

    def fmt(v):
        if isinstance(v, float):
            return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
        return "—" if v is None else str(v)

    lines = [f"# PPO on CPU physics: synchronous vs overlapped rollouts ({meta['date']})", "",
             f"{meta['machine']}. `{meta['command']}`", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]  # fmt: skip
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    lines += [f"\nEarlier rows: `{c}`" for c in meta.get("earlier_rows", [])]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
