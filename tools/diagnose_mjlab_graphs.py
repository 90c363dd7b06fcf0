"""Where the graphed mjlab step departs from the eager one: one call's worth of evidence.

Two ``MjlabVecEnv`` of the same task, seed and actions: one steps its segments eagerly, the
other replays them as CUDA graphs (emulated on the CPU: ``graph_emulation``). After every step it prints the
largest difference of the physics state (qpos, qvel), of each reward term
(``reward_manager._step_reward``), of each observation term of both groups, and of the
termination flags, and names the first step and quantity past ``--tol``. Physics that agrees
while a reward or observation term does not points at that term's inputs (a tensor or a
Python-side cache the graph does not follow); physics that departs first points at the
action or decimation segments.

    python tools/diagnose_mjlab_graphs.py --task Mjlab-Velocity-Flat-Unitree-Go1
    python tools/diagnose_mjlab_graphs.py --device cpu    # emulated graphs on a CPU
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _terms(env) -> dict[str, tuple[str, slice]]:
    """Observation term name -> (group, columns of that group's vector)."""
    manager = env.observation_manager
    out = {}
    for group, names in manager.active_terms.items():
        start = 0
        for name, dim in zip(names, manager.group_obs_term_dim[group], strict=True):
            width = 1
            for d in dim:
                width *= d
            out[f"{group}/{name}"] = (group, slice(start, start + width))
            start += width
    return out


def _snapshot(vec, obs) -> dict:
    """What to compare after a step, copied to the host."""
    env = vec.env
    data = env.sim.data
    snap = {
        "qpos": data.qpos.detach().cpu().clone() if hasattr(data.qpos, "detach") else None,
        "qvel": data.qvel.detach().cpu().clone() if hasattr(data.qvel, "detach") else None,
        "terminated": env.reset_terminated.detach().cpu().clone(),
        "time_outs": env.reset_time_outs.detach().cpu().clone(),
    }
    rewards = env.reward_manager._step_reward.detach().cpu().clone()
    for i, name in enumerate(env.reward_manager.active_terms):
        snap[f"reward/{name}"] = rewards[:, i]
    groups = {g: obs[g].detach().cpu().clone() for _, g in vec._groups}
    for name, (group, cols) in _terms(env).items():
        if group in groups:
            snap[f"obs/{name}"] = groups[group][:, cols]
    return snap


def _diff(a, b) -> float:
    if a is None or b is None:
        return float("nan")
    return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="Mjlab-Velocity-Flat-Unitree-Go1")
    p.add_argument("--num-envs", type=int, default=64)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--episode-steps", type=int, default=5, help="time limit: resets early")
    p.add_argument("--seed", type=int, default=3)
    p.add_argument("--tol", type=float, default=2e-3)
    p.add_argument("--device", default="cuda")
    p.add_argument("--eager-both", action="store_true", help="no graphs (checks the harness)")
    p.add_argument("--out", type=Path, help="also write the per-step differences as JSON")
    args = p.parse_args()

    import torch
    from mjlab.utils.random import seed_rng

    from orin_rl.envs.base import EnvOptions
    from orin_rl.envs.mjlab import MjlabVecEnv

    options = EnvOptions(seed=args.seed, max_episode_steps=args.episode_steps)
    # Both worlds draw from torch's global generators: each is built, and each step runs,
    # from the same generator state (the start-up randomisation, noise and resets agree).
    seed_rng(args.seed)
    eager = MjlabVecEnv(args.task, args.num_envs, args.device, options)
    seed_rng(args.seed)
    graphed = MjlabVecEnv(args.task, args.num_envs, args.device, options)
    cuda = torch.device(args.device).type == "cuda"

    def rng_state():
        return torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None

    def set_rng_state(state):
        torch.set_rng_state(state[0])
        if cuda:
            torch.cuda.set_rng_state_all(state[1])

    if not args.eager_both:
        if args.device == "cpu":  # the graphs' semantics emulated (graph_emulation)
            graphed._stepper.emulate_graphs()
        print("graphs:", graphed.use_graphs() or graphed._stepper.describe_plan())
    g = torch.Generator().manual_seed(0)
    dim = eager.action_space.shape[0]
    actions = [0.5 * torch.randn(args.num_envs, dim, generator=g) for _ in range(args.steps)]
    rows, first = [], None
    for t, a in enumerate(actions):
        if t == 0:
            eager.reset()
            graphed.reset()
        before = rng_state()
        eager._stepper.step(a.to(args.device))
        want = _snapshot(eager, eager.env.obs_buf)
        after = rng_state()
        set_rng_state(before)
        graphed._stepper.step(a.to(args.device))
        got = _snapshot(graphed, graphed.env.obs_buf)
        set_rng_state(after)
        diffs = {k: _diff(got[k], want[k]) for k in want}
        rows.append({"step": t, **diffs})
        worst = sorted(((v, k) for k, v in diffs.items() if v == v), reverse=True)[:6]
        print(f"step {t:2d}: " + ", ".join(f"{k} {v:.3g}" for v, k in worst), flush=True)
        if first is None:
            over = [k for k, v in diffs.items() if v > args.tol]
            if over:
                first = (t, over)
    if not args.eager_both:
        print("graph report:", graphed.graph_report())
    print("first step past tol:", first if first else "none")
    if args.out:
        args.out.write_text(json.dumps({"first": first, "rows": rows}, indent=1) + "\n")
    eager.close()
    graphed.close()


if __name__ == "__main__":
    main()
