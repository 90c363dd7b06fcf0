"""Measure ``dqn.frame_history``'s replay: rows on real Atari episodes, memory at 1M transitions.

Two parts, each through the same ``FrameHistory.rows`` the learner's ``process_env_step``
uses, each checked exact (the last ``--check`` transitions' obs and next_obs, kept as full
stacks, against the ones the ring rebuilds):

- episodes: the Atari DQN preset's training env (``ALE/<game>-v5``, ``frameskip=1``,
  ``orin_rl.envs.images:atari`` with ``episodic_life``: a lost life ends the episode) plays
  random actions over ``--envs`` envs into a ring of ``--rows`` rows until it is full: the rows
  a transition (one a transition, one an episode start). Random play loses lives fastest, so
  its episodes are the shortest (the most start rows) training meets.
- memory: a ring sized for ``--transitions`` (1M) at that many rows a transition, filled by
  ``--memory-envs`` envs of random 84x84 frames under gymnasium's ``FrameStackObservation``
  whose episodes end with probability 1 / (the measured mean episode): the replay's bytes
  (``nbytes``) and the process's resident memory grown while allocating and filling it.

Writes JSON and Markdown under ``--out``.

    python tools/bench_frame_replay.py --game Breakout --out docs/benchmarks
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from orin_rl.algorithms.dqn import DQN
from orin_rl.buffers.frame_history import START
from orin_rl.buffers.replay import ReplayBatch
from orin_rl.config import DQNConfig
from orin_rl.envs import StepResult, make
from orin_rl.models import PolicySpec

ROOT = Path(__file__).resolve().parents[1]


def rss_bytes() -> int:
    """Resident memory of this process (VmRSS)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


class RandomFrames(gym.Env):
    """Random (84, 84) uint8 frames; an episode ends (terminated) with probability ``p`` a
    step, or is cut (truncated) at ``limit`` steps."""

    observation_space = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self, p: float, limit: int = 10_000):
        self.p, self.limit = p, limit

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.np_random.integers(0, 256, (84, 84), dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        frame = self.np_random.integers(0, 256, (84, 84), dtype=np.uint8)
        return frame, 0.0, bool(self.np_random.random() < self.p), self.t >= self.limit, {}


class ListEnvs:
    """Auto-resetting envs stepped one by one: a VecEnv's ``reset``/``step`` for the memory
    part (``StepResult`` with the final observations). tests/algorithms/test_pixels.py steps
    its envs with it, importing ``tools.bench_frame_replay``: no bare import of a sibling tool
    here."""

    def __init__(self, envs: list[gym.Env], seed: int):
        self.envs, self.seed = envs, seed

    def reset(self) -> torch.Tensor:
        return torch.stack([torch.as_tensor(env.reset(seed=self.seed + i)[0])
                            for i, env in enumerate(self.envs)])  # fmt: skip

    def step(self, actions: torch.Tensor) -> StepResult:
        obs, final, term, trunc = [], [], [], []
        for env, action in zip(self.envs, actions.tolist(), strict=True):
            o, _, te, tr, _ = env.step(action)
            final.append(torch.as_tensor(o))
            if te or tr:
                o, _ = env.reset()
            obs.append(torch.as_tensor(o))
            term.append(te)
            trunc.append(tr)
        n = len(self.envs)
        return StepResult(torch.stack(obs), torch.zeros(n), torch.tensor(term),
                          torch.tensor(trunc), torch.stack(final), {})  # fmt: skip


def fill(envs, spec: PolicySpec, num_envs: int, rows: int, check: int, seed: int) -> dict:
    """Random actions from ``envs`` into a DQN's frame-history replay of ``rows`` rows until it
    is full; the rows, bytes, resident memory and exactness (module docstring)."""
    cfg = DQNConfig(buffer_size=rows, frame_history=True)
    gc.collect()
    rss_before = rss_bytes()
    algo = DQN(spec, cfg, num_envs, torch.device("cpu"), "host", 1, total_steps=10 * rows)
    fh, replay = algo.frame_history, algo.replay
    obs, truth, steps, episodes = envs.reset(), {}, 0, 0
    actions = gym.spaces.Discrete(spec.action_dim, seed=seed)
    start = time.perf_counter()
    while fh.adds < rows:
        act = torch.tensor([actions.sample() for _ in range(num_envs)])
        step = envs.step(act)
        ended = step.terminated | step.truncated
        batch = {"obs": obs, "actions": act, "rewards": step.reward.float(),
                 "next_obs": step.final_obs, "terminated": step.terminated.float(),
                 "discounts": torch.full((num_envs,), cfg.gamma)}  # fmt: skip
        pos = replay.pos
        replay.add(fh.rows(batch, ended))
        for slot in range(pos, pos + (replay.pos - pos) % replay.capacity):  # overwritten
            truth.pop(slot % replay.capacity, None)
        if rows - fh.adds < 2 * check:  # the last transitions, kept whole
            for e in range(num_envs):
                slot = (replay.pos - num_envs + e) % replay.capacity
                truth[slot] = (obs[e].clone(), step.final_obs[e].clone())
        obs, steps, episodes = step.obs, steps + 1, episodes + int(ended.sum())
    fill_s = time.perf_counter() - start
    rss_growth = rss_bytes() - rss_before
    slots = torch.tensor(sorted(truth))[-check:]
    usable = slots[fh.usable(slots)]
    rebuilt = fh.sample(ReplayBatch({}, usable))
    exact = all(
        torch.equal(o, truth[s][0]) and torch.equal(n, truth[s][1])
        for s, o, n in zip(usable.tolist(), rebuilt["obs"], rebuilt["next_obs"], strict=True)
    )
    starts_held = int((replay.field("depth")[: len(replay)] == START).sum())
    held = len(replay) - starts_held
    return {
        "rows": rows, "num_envs": num_envs, "vector_steps": steps,
        "transitions_written": steps * num_envs, "episodes_ended": episodes,
        "mean_episode_steps": steps * num_envs / max(episodes, 1),
        "rows_written": fh.adds, "start_rows_written": fh.start_rows,
        "rows_per_transition": fh.adds / (steps * num_envs),
        "transitions_held": held, "start_rows_held": starts_held,
        "bytes_per_row": replay.nbytes // replay.capacity, "replay_nbytes": replay.nbytes,
        "rss_growth_bytes": rss_growth,
        "kept_full_stacks_bytes": sum(o.nbytes + n.nbytes for o, n in truth.values()),
        "bytes_per_transition_held": replay.nbytes / held,
        "checked": len(slots), "checked_usable": len(usable), "exact": exact, "fill_s": fill_s,
    }  # fmt: skip


def measure(game: str, rows: int, num_envs: int, transitions: int, memory_envs: int,
            check: int, seed: int) -> dict:  # fmt: skip
    """The episodes part on ``game``, then the memory part at ``transitions`` (module
    docstring)."""
    atari = make(f"ALE/{game}-v5", num_envs, seed=seed, vectorization="async",
                 env_kwargs={"frameskip": 1},
                 wrappers=[{"wrapper": "orin_rl.envs.images:atari",
                            "kwargs": {"episodic_life": True}}])  # fmt: skip
    spec = PolicySpec.from_spaces(atari.observation_space, atari.action_space, hidden_sizes=[])
    episodes = fill(atari, spec, num_envs, rows, check, seed)
    atari.close()
    per = episodes["rows_per_transition"]
    ring = math.ceil(transitions * per) + memory_envs  # and each env's first start row
    p = 1 / episodes["mean_episode_steps"]
    frames = [gym.wrappers.FrameStackObservation(RandomFrames(p), 4) for _ in range(memory_envs)]
    spec = PolicySpec.from_spaces(frames[0].observation_space, gym.spaces.Discrete(4),
                                  hidden_sizes=[])  # fmt: skip
    memory = fill(ListEnvs(frames, seed), spec, memory_envs, ring, check, seed)
    return {"game": game, "transitions": transitions, "episodes": episodes, "memory": memory,
            "host": platform.node(), "cpus": os.cpu_count()}  # fmt: skip


def markdown(result: dict) -> str:
    """The result as a Markdown report."""
    e, m = result["episodes"], result["memory"]
    return "\n".join([
        f"# dqn.frame_history: {result['game']}'s episodes, {result['transitions']:,} "
        "transitions in memory",
        "",
        f"`python tools/bench_frame_replay.py --game {result['game']} --rows {e['rows']} "
        f"--envs {e['num_envs']} --transitions {result['transitions']} --memory-envs "
        f"{m['num_envs']}` on {result['host']} ({result['cpus']} CPUs): random play of the "
        "Atari DQN preset's training env (episodic life) into a host-memory frame-history "
        "replay until its ring is full; then a ring sized for the transitions at the rows a "
        "transition measured, filled with random frames under gymnasium's "
        "FrameStackObservation, episodes of the measured mean length.",
        "",
        "| measure | episodes (real Atari) | memory (random frames) |",
        "|---|---|---|",
        f"| ring rows | {e['rows']:,} | {m['rows']:,} |",
        f"| transitions written | {e['transitions_written']:,} | {m['transitions_written']:,} |",
        f"| episodes ended (lives) | {e['episodes_ended']:,} (mean "
        f"{e['mean_episode_steps']:.1f} steps) | {m['episodes_ended']:,} (mean "
        f"{m['mean_episode_steps']:.1f} steps) |",
        f"| rows a transition written | {e['rows_per_transition']:.4f} | "
        f"{m['rows_per_transition']:.4f} |",
        f"| rows held: transitions + episode starts | {e['transitions_held']:,} + "
        f"{e['start_rows_held']:,} | {m['transitions_held']:,} + {m['start_rows_held']:,} |",
        f"| bytes a row | {e['bytes_per_row']:,} | {m['bytes_per_row']:,} |",
        f"| replay bytes (nbytes) | {e['replay_nbytes'] / 1e9:.3f} GB | "
        f"{m['replay_nbytes']:,} ({m['replay_nbytes'] / 1e9:.3f} GB) |",
        f"| resident memory grown, allocating and filling (the checked full stacks in it) | "
        f"{e['rss_growth_bytes'] / 1e9:.3f} GB ({e['kept_full_stacks_bytes'] / 1e6:.0f} MB) | "
        f"{m['rss_growth_bytes'] / 1e9:.3f} GB ({m['kept_full_stacks_bytes'] / 1e6:.0f} MB) |",
        f"| bytes a held transition | {e['bytes_per_transition_held']:,.1f} | "
        f"{m['bytes_per_transition_held']:,.1f} |",
        f"| last transitions rebuilt exactly (usable / checked) | {e['exact']} "
        f"({e['checked_usable']} / {e['checked']}) | {m['exact']} ({m['checked_usable']} / "
        f"{m['checked']}) |",
        f"| fill time | {e['fill_s']:.0f} s | {m['fill_s']:.0f} s |",
        "",
    ])  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", default="Breakout")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--envs", type=int, default=2)
    parser.add_argument("--transitions", type=int, default=1_000_000)
    parser.add_argument("--memory-envs", type=int, default=64)
    parser.add_argument("--check", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks")
    parser.add_argument("--name", default=None)
    args = parser.parse_args()
    result = measure(args.game, args.rows, args.envs, args.transitions, args.memory_envs,
                     args.check, args.seed)  # fmt: skip
    out = args.out / (args.name or f"frame_replay_{args.game.lower()}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
