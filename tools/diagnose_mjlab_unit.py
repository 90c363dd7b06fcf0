"""Why the one-unit step (``ORIN_RL_MJLAB_STEP=unit``) departs from mjlab's step on CUDA:
is it the unit, or MuJoCo Warp's run-to-run spread on CUDA?

The gpu tests compare the unit against mjlab's ``env.step`` (``test_mjlab.py``) and against the
same masked step run eagerly (``test_mjlab_masked.py``) within rtol = atol = 2e-3 over the first
episode. This tool runs each of those rollouts, with the tests' own seeds, worlds and actions,
**twice**, and reports per step the largest absolute difference of observations and rewards and
how many elements break the tests' tolerance, for:

- ``mjlab~mjlab``: mjlab's own ``env.step``, two runs from one seed (its run-to-run spread);
- ``eager~eager``: orin_rl's step without graphs, two runs (the same for our eager path);
- ``segments~mjlab`` / ``unit~mjlab``: the graphed step as segments / as one unit against
  mjlab's first run (eager resets: ``test_the_graphed_step_is_mjlabs_step``);
- ``unit~unit``: the unit against itself;
- ``masked-unit~masked-eager`` (and ``masked-eager~masked-eager``): the masked step as one unit
  against the same masked step eager (``test_the_masked_step_is_the_same_eager_or_as_graphs``).

If the unit departs no more than a step departs from itself, the spread is the solver's; if it
departs more, the unit computes something else.

    python tools/diagnose_mjlab_unit.py --tasks Mjlab-Velocity-Flat-Unitree-Go1 --out OUT.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOL = 2e-3
"""The gpu tests' rtol and atol."""


def _ours(task: str, n: int, episode: int, actions, graphs: str | None, masked: bool,
          device: str = "cuda"):  # fmt: skip
    """orin_rl's step: eager (``graphs`` None), ``segments`` or ``unit``; (obs, reward) a step."""
    from orin_rl.envs.base import EnvOptions
    from orin_rl.envs.mjlab import MjlabVecEnv

    env = MjlabVecEnv(task, n, device, EnvOptions(seed=3, max_episode_steps=episode))
    if graphs is not None:
        plan = env.use_graphs(masked=masked, unit=graphs == "unit")
        assert plan is not None and plan["step"] == graphs, plan
    elif masked:
        assert env._stepper.mask_resets() is None
    env.reset()
    rewards = env.env.reward_manager  # per-term rewards of the step: (worlds, terms)
    out = []
    for a in actions:
        s = env.step(a.to(device))
        terms = rewards._step_reward.cpu().clone()
        out.append((s.obs.cpu().clone(), s.reward.cpu().clone(), terms, rewards.active_terms))
    report = env.graph_report()
    env.close()
    return out, report


def _compare(a: list, b: list, steps: int) -> dict:
    """Per step of the first ``steps``: max |a - b| of obs and reward, and the elements outside
    the tests' tolerance (|a - b| > atol + rtol |b|)."""
    rows = []
    for t in range(steps):
        row = {"t": t}
        for k, name in ((0, "obs"), (1, "reward")):
            x, y = a[t][k].double(), b[t][k].double()
            d = (x - y).abs()
            row[f"{name}_max_abs"] = float(d.max())
            row[f"{name}_outside_tol"] = int((d > TOL + TOL * y.abs()).sum())
            if name == "obs" and row["obs_outside_tol"]:
                cols = (d > TOL + TOL * y.abs()).any(0).nonzero().flatten().tolist()
                row["obs_columns_outside_tol"] = cols[:32]
        if len(a[t]) > 2 and len(b[t]) > 2:  # orin_rl's steps: which reward term departs
            d = (a[t][2].double() - b[t][2].double()).abs().amax(0)
            row["reward_terms_max_abs"] = {
                n: float(v) for n, v in zip(a[t][3], d.tolist(), strict=True) if v > 1e-6
            }
        rows.append(row)
    worst = {k: max(r[k] for r in rows) for k in rows[0]
             if k.endswith(("_max_abs", "_tol")) and k != "reward_terms_max_abs"}  # fmt: skip
    return {"worst": worst, "steps": rows}


def diagnose(task: str, repeats: int) -> dict:
    import torch

    from tests.envs.test_mjlab import EPISODE, _actions, _mjlab_rollout

    n = 64  # test_the_graphed_step_is_mjlabs_step's worlds, actions and seeds
    result: dict = {"task": task, "worlds": n, "episode": EPISODE, "tolerance": TOL}
    t0 = time.perf_counter()
    from orin_rl.envs.base import EnvOptions
    from orin_rl.envs.mjlab import MjlabVecEnv

    env = MjlabVecEnv(task, 1, "cuda", EnvOptions(seed=3, max_episode_steps=EPISODE))
    dim = env.action_space.shape[0]
    env.close()
    actions = _actions(3 * EPISODE + 2, dim, n=n)
    mj = [[(o.float(), r.float()) for o, r, *_ in _mjlab_rollout("cuda", actions, task)]
          for _ in range(repeats)]  # fmt: skip
    runs = {}
    for name, graphs, masked in (("eager", None, False), ("segments", "segments", False),
                                 ("unit", "unit", False)):  # fmt: skip
        runs[name] = [_ours(task, n, EPISODE, actions, graphs, masked) for _ in range(repeats)]
    pairs = {"mjlab~mjlab": (mj[0], mj[1]) if repeats > 1 else None,
             "eager~eager": (runs["eager"][0][0], runs["eager"][1][0]) if repeats > 1 else None,
             "eager~mjlab": (runs["eager"][0][0], mj[0]),
             "segments~mjlab": (runs["segments"][0][0], mj[0]),
             "unit~mjlab": (runs["unit"][0][0], mj[0]),
             "unit~unit": (runs["unit"][0][0], runs["unit"][1][0]) if repeats > 1 else None}  # fmt: skip
    result["eager_resets"] = {k: _compare(*v, EPISODE) for k, v in pairs.items() if v}
    result["unit_report"] = runs["unit"][0][1]
    # the masked test: 4 worlds, its own episode length and actions
    episode = 5 if "Go1" in task else 2
    g = torch.Generator().manual_seed(0)
    actions = [0.5 * torch.randn(4, dim, generator=g) for _ in range(16)]
    masked = {name: [_ours(task, 4, episode, actions, graphs, True)[0] for _ in range(repeats)]
              for name, graphs in (("eager", None), ("unit", "unit"), ("segments", "segments"))}  # fmt: skip
    result["masked"] = {
        "unit~eager": _compare(masked["unit"][0], masked["eager"][0], episode),
        "segments~eager": _compare(masked["segments"][0], masked["eager"][0], episode),
    }
    if repeats > 1:
        result["masked"]["eager~eager"] = _compare(masked["eager"][0], masked["eager"][1], episode)
        result["masked"]["unit~unit"] = _compare(masked["unit"][0], masked["unit"][1], episode)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--tasks", default="Mjlab-Velocity-Flat-Unitree-Go1,Mjlab-Velocity-Flat-Unitree-G1"
    )
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    import datetime

    import torch

    results = []
    record = {
        "what": "The one-unit mjlab step against mjlab's step and against itself on CUDA: "
        "run-to-run spread or a different computation? (tools/diagnose_mjlab_unit.py)",
        "machine": torch.cuda.get_device_name(),
        "date": datetime.date.today().isoformat(),
        "command": "python tools/diagnose_mjlab_unit.py " + " ".join(sys.argv[1:]),
        "tasks": results,
    }
    for task in args.tasks.split(","):
        r = diagnose(task, args.repeats)
        results.append(r)
        print(task)
        for group in ("eager_resets", "masked"):
            for pair, c in r[group].items():
                print(f"  {group:12s} {pair:18s} {json.dumps(c['worst'])}")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
