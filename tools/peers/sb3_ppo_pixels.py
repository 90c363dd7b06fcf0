"""Stable-Baselines3 PPO on MinAtar's uint8 frames with orin_rl's MinAtar preset: the same
frames (``orin_rl.envs.images.minatar``), the same network (``orin_rl.models.cnn.ImageEncoder``
as SB3's features extractor, one for the actor and one for the critic, linear heads on its 128
features, SB3's own orthogonal init) and the same PPO settings (16 envs x 128 steps, 4 epochs of
4 minibatches, lr 5e-4 annealed to 0, clip 0.2 on the policy and the value, entropy 0.01).

SB3 scales image observations itself unless told not to: ``normalize_images=False`` leaves the
x / 255 to the encoder, as in orin_rl. Saves the model (``--out``) for the benchmark's common
evaluator and prints one JSON line (training wall time, steps/s).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from orin_rl.config.presets import PRESETS
from orin_rl.envs.factory import make_env
from orin_rl.models.cnn import ImageEncoder


class Encoder(BaseFeaturesExtractor):
    """orin_rl's image encoder as SB3's features extractor."""

    def __init__(self, observation_space, kind: str = "small"):
        encoder = ImageEncoder(observation_space.shape, kind)
        super().__init__(observation_space, encoder.features)
        self.encoder = encoder

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        return self.encoder(observations)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="MinAtar/Breakout-v1")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--total-steps", type=int, required=True)
    parser.add_argument("--out", required=True, help="where the trained model is saved (.zip)")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch's threads (orin_rl's train.torch_threads default: 1)")  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    preset = PRESETS[args.env]
    env_config = {"wrappers": preset["env.wrappers"]}
    num_envs, num_steps = preset["env.num_envs"], preset["ppo.num_steps"]
    lr = preset["ppo.learning_rate"]
    venv = make_vec_env(lambda: make_env(args.env, env_config), n_envs=num_envs, seed=args.seed)
    model = PPO(
        "CnnPolicy",
        venv,
        n_steps=num_steps,
        batch_size=num_envs * num_steps // preset["ppo.num_minibatches"],
        n_epochs=preset["ppo.num_epochs"],
        learning_rate=lambda remaining: remaining * lr,
        gamma=0.99,
        gae_lambda=0.95,
        clip_range=0.2,
        clip_range_vf=0.2,  # orin_rl's clip_value_loss (CleanRL's), SB3's default is none
        ent_coef=preset["ppo.ent_coef"],
        vf_coef=0.5,
        max_grad_norm=0.5,
        policy_kwargs={
            "features_extractor_class": Encoder,
            "share_features_extractor": False,
            "net_arch": {"pi": [], "vf": []},
            "normalize_images": False,
        },
        seed=args.seed,
        device="cpu",
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(total_timesteps=args.total_steps)
    train_time = time.perf_counter() - start
    model.save(args.out)
    steps = model.num_timesteps
    print(json.dumps({"train_time_s": train_time, "total_steps": steps,
                      "steps_per_s": steps / train_time,
                      "torch_threads": torch.get_num_threads()}))  # fmt: skip


if __name__ == "__main__":
    main()
