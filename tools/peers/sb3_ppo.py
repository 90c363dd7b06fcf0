"""Stable-Baselines3 PPO on CartPole-v1 with the rl-baselines3-zoo hyper-parameters, evaluated
the same way as orin_rl (20 deterministic episodes on a 20-env gymnasium vector env every
``--eval-every`` steps). Runs in the benchmark's own venv; prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from sb3_eval import evaluate
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env


def linear(start: float):
    return lambda progress_remaining: progress_remaining * start


class EvalEvery(BaseCallback):
    def __init__(self, every: int, episodes: int, threshold: float, start: float, seed: int):
        super().__init__()
        self.every, self.episodes, self.threshold, self.start = every, episodes, threshold, start
        self.seed = seed
        self.next_eval = every
        self.solved_at = None
        self.evals = []

    def _on_step(self) -> bool:
        if self.num_timesteps >= self.next_eval:
            self.next_eval += self.every
            returns = evaluate(
                self.model, "CartPole-v1", self.episodes, self.seed + 10_000 + self.num_timesteps
            )
            mean = float(np.mean(returns))
            self.evals.append(
                (self.num_timesteps, round(time.perf_counter() - self.start, 3), mean)
            )
            if mean >= self.threshold and self.solved_at is None:
                self.solved_at = {"global_step": self.num_timesteps, "time_s": self.evals[-1][1]}
        return True


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-steps", type=int, default=100_000)
    p.add_argument("--eval-every", type=int, default=2560)
    args = p.parse_args()
    env = make_vec_env("CartPole-v1", n_envs=8, seed=args.seed)
    # rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(0.001),
        clip_range=linear(0.2),
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    train_start = time.perf_counter()
    cb = EvalEvery(args.eval_every, 20, 475.0, train_start, args.seed)
    model.learn(args.total_steps, callback=cb)
    train_time = time.perf_counter() - train_start
    final = evaluate(model, "CartPole-v1", 20, args.seed + 2**30)
    print(
        json.dumps(
            {
                "peer": "stable-baselines3 PPO (zoo hyper-parameters)",
                "seed": args.seed,
                "total_steps": model.num_timesteps,
                "train_time_s": round(train_time, 3),
                "steps_per_s": model.num_timesteps / train_time,
                "solved_at": cb.solved_at,
                "final_eval_mean": float(np.mean(final)),
                "evals": cb.evals,
            }
        )
    )


if __name__ == "__main__":
    main()
