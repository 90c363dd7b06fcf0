"""Stable-Baselines3 SAC (Pendulum-v1) or DQN (CartPole-v1) with the hyper-parameters of
orin_rl's presets (RL Zoo's, with 64x64 networks), evaluated as orin_rl evaluates: deterministic
episodes on a gymnasium vector env every ``eval_every`` steps, stop after two solved evaluations
in a row. Runs in the benchmark's own venv; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import gymnasium as gym
import numpy as np
from sb3_eval import evaluate
from stable_baselines3 import DQN, SAC
from stable_baselines3.common.callbacks import BaseCallback

SETUPS = {
    "sac": {"env": "Pendulum-v1", "threshold": -200.0, "total": 20_000, "every": 1_000,
            "episodes": 10},
    "dqn": {"env": "CartPole-v1", "threshold": 475.0, "total": 50_000, "every": 2_560,
            "episodes": 20},
}  # fmt: skip


class EvalEvery(BaseCallback):
    def __init__(self, setup: dict, start: float, seed: int):
        super().__init__()
        self.setup, self.start, self.seed = setup, start, seed
        self.next_eval = setup["every"]
        self.solved_at = None
        self.streak = 0

    def _on_step(self) -> bool:
        if self.num_timesteps < self.next_eval:
            return True
        self.next_eval += self.setup["every"]
        s = self.setup
        mean = float(np.mean(evaluate(self.model, s["env"], s["episodes"],
                                      self.seed + 10_000 + self.num_timesteps)))  # fmt: skip
        solved = mean >= s["threshold"]
        self.streak = self.streak + 1 if solved else 0
        if solved and self.solved_at is None:
            self.solved_at = {"global_step": self.num_timesteps,
                              "time_s": round(time.perf_counter() - self.start, 3)}  # fmt: skip
        return self.streak < 2


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--algo", choices=sorted(SETUPS), required=True)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    s = SETUPS[args.algo]
    env = gym.make(s["env"])
    if args.algo == "sac":
        model = SAC("MlpPolicy", env, learning_rate=1e-3, buffer_size=1_000_000,
                    learning_starts=1_000, batch_size=256, tau=0.005, gamma=0.99, train_freq=1,
                    gradient_steps=1, ent_coef="auto", policy_kwargs={"net_arch": [64, 64]},
                    seed=args.seed, device="cpu", verbose=0)  # fmt: skip
    else:
        model = DQN("MlpPolicy", env, learning_rate=2.3e-3, buffer_size=100_000,
                    learning_starts=1_000, batch_size=64, gamma=0.99, target_update_interval=10,
                    train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                    exploration_final_eps=0.04, policy_kwargs={"net_arch": [64, 64]},
                    seed=args.seed, device="cpu", verbose=0)  # fmt: skip
    start = time.perf_counter()
    callback = EvalEvery(s, start, args.seed)
    model.learn(total_timesteps=s["total"], callback=callback)
    train_time = time.perf_counter() - start
    final = evaluate(model, s["env"], 20, args.seed + 2**30)
    print(json.dumps({
        "solved_at": callback.solved_at, "train_time_s": train_time,
        "total_steps": model.num_timesteps, "steps_per_s": model.num_timesteps / train_time,
        "final_eval_mean": float(np.mean(final)),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
