"""Why a step costs what it costs on the GPU: MuJoCo Warp's solver iterations per world.

MuJoCo Warp's constraint solver loops (a CUDA graph ``while``) until every world has
converged or hit ``opt.iterations``: one world that does not converge makes every world pay
the maximum. The step benchmark's profile (2026-12-02, H200, Go1, 4096 worlds) showed orin_rl's
segmented step running 55 solver iterations per env step where mjlab's ``env.step`` ran 10.
This tool steps the same task from the same seed and actions four ways and prints, every few
steps, the solver iterations of the worlds (mean, max, how many at the cap), the worlds with
a non-finite state, and the wall time per step:

- ``mjlab``: mjlab's ``env.step`` (torch's default stream, Warp's stream for physics);
- ``ours``: orin_rl's segmented step, eager (everything on Warp's stream);
- ``ours-default-stream``: the same on torch's default stream;
- ``mjlab-warp-stream``: mjlab's ``env.step`` inside Warp's stream.

    python tools/diagnose_mjlab_solver.py --task Mjlab-Velocity-Flat-Unitree-Go1 --out DIR/solver.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ("mjlab", "ours", "ours-default-stream", "mjlab-warp-stream")


def _tensor(x):
    import torch

    return torch.as_tensor(getattr(x, "_tensor", x))


def _solver_stats(env) -> dict:
    import torch

    data = env.env.sim.data
    niter = _tensor(data.solver_niter).float()
    cap = int(env.env.sim.mj_model.opt.iterations)
    qpos, qvel = _tensor(data.qpos), _tensor(data.qvel)
    bad = ~(torch.isfinite(qpos).all(-1) & torch.isfinite(qvel).all(-1))
    return {
        "niter_mean": round(float(niter.mean()), 3),
        "niter_max": int(niter.max()),
        "worlds_at_cap": int((niter >= cap).sum()),
        "nonfinite_worlds": int(bad.sum()),
        "max_abs_qvel": float(qvel.abs().nan_to_num(0).max()),
    }


def run_mode(mode: str, args) -> dict:
    import torch
    import warp as wp

    from orin_rl.envs.base import EnvOptions
    from orin_rl.envs.mjlab import MjlabVecEnv

    cuda = args.device == "cuda"
    env = MjlabVecEnv(
        args.task, args.num_envs, args.device, EnvOptions(seed=args.seed, random_episode_start=True)
    )
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    env.reset()
    env.final_obs_needed = False
    if mode == "ours-default-stream":
        env._stepper.stream = None
    if cuda:
        warp_stream = torch.cuda.ExternalStream(wp.get_stream(env.env.sim.wp_device).cuda_stream)
    g = torch.Generator(device=args.device).manual_seed(args.seed)
    dim = env.action_space.shape[0]
    rows = []
    start = time.perf_counter()
    for i in range(args.steps):
        a = args.action_scale * torch.randn(args.num_envs, dim, device=args.device, generator=g)
        if mode == "mjlab":
            env.env.step(a)
        elif mode == "mjlab-warp-stream":
            warp_stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(warp_stream):
                env.env.step(a)
            torch.cuda.current_stream().wait_stream(warp_stream)
        else:
            env.step(a)
        if (i + 1) % args.every == 0:
            sync()
            rows.append({"step": i + 1, **_solver_stats(env)})
    sync()
    out = {
        "mode": mode,
        "ms_per_step": 1000 * (time.perf_counter() - start) / args.steps,
        "cap": int(env.env.sim.mj_model.opt.iterations),
        "rows": rows,
    }
    env.close()
    if cuda:
        torch.cuda.empty_cache()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="Mjlab-Velocity-Flat-Unitree-Go1")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--device", default="cuda", help="cuda; cpu checks the tool (two modes)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--action-scale", type=float, default=1.0)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    results = []
    for mode in args.modes.split(","):
        r = run_mode(mode, args)
        results.append(r)
        print(f"{mode}: {r['ms_per_step']:.1f} ms/step (incl. checks), cap {r['cap']}", flush=True)
        for row in r["rows"]:
            print("  ", json.dumps(row), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"task": args.task, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
