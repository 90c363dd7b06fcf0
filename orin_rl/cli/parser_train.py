"""The flags of ``orin-rl train``, in groups: the environment and algorithm, speed-ups, online
learning, the budget, and the run folder. Each flag that sets a config field shows that field's
default (``argtypes._train_default``, which imports the training config when train's flags are
built). Torch-free, like all of ``orin_rl.cli``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from orin_rl.cli.argtypes import _NON_NEGATIVE_INT, _POSITIVE, _POSITIVE_INT, _train_default
from orin_rl.cli.parser_common import ENV_KWARGS_HELP, _on_off_flags
from orin_rl.envs import backends as env_backends


def _config_flag(
    p: argparse.ArgumentParser, flag: str, key: str, text: str, preset: bool = False, **kwargs: Any
) -> None:
    """Add a train flag that sets config field ``key``: help ``text``, then the field's default."""
    p.add_argument(flag, help=f"{text} {_train_default(key, preset=preset)}", **kwargs)


def train_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `orin-rl train`."""
    _train_env_flags(p)
    _train_speed_flags(p)
    _train_online_flags(p)
    _train_budget_flags(p)
    _train_folder_flags(p)


def _train_env_flags(p: argparse.ArgumentParser) -> None:
    """train's environment (which, how many, how they step) and algorithm."""
    p.add_argument(
        "--env",
        help="gymnasium id, e.g. CartPole-v1 (default), or module:EnvId for your own "
        "(module registers EnvId with gymnasium.register; docs/custom_env.md)",
    )
    p.add_argument("--env-kwargs", metavar="JSON", help=ENV_KWARGS_HELP + "; default: none")
    p.add_argument(
        "--algo",
        choices=["ppo", "sac", "dqn"],
        help="ppo (default), sac (continuous actions) or dqn (discrete), on a replay buffer",
    )
    _config_flag(
        p, "--num-envs", "env.num_envs", "parallel environments", preset=True, type=_POSITIVE_INT
    )
    _config_flag(
        p,
        "--vectorization",
        "env.vectorization",
        "gymnasium vectorisation (workers act too)",
        choices=["sync", "async", "workers"],
    )
    p.add_argument(
        "--env-backend",
        choices=env_backends.names(),
        help="gym: gymnasium.vector on the CPU; gpu: GPU-native torch envs on the learner "
        "device (default: gym; mjlab for Mjlab- and Orin-Velocity- ids)",
    )


def _train_speed_flags(p: argparse.ArgumentParser) -> None:
    """train's speed-ups: precision, CUDA graphs, compilation, overlap, profiling, agents."""
    _config_flag(
        p,
        "--precision",
        "train.precision",
        "mixed precision (autocast)",
        choices=["fp32", "fp16", "bf16"],
    )
    _on_off_flags(
        p,
        {
            "--cuda-graphs": "capture each iteration in one CUDA graph (--env-backend gpu on "
            "CUDA); with envs stepping on the host, the policy's act each env step",
            "--compile": "torch.compile networks and envs",
            "--overlap": "PPO on CPU physics: collect the next rollout while the learner updates",
            "--nvtx": "NVTX ranges for Nsight Systems",
        },
        default=None,
    )
    _config_flag(
        p,
        "--num-agents",
        "train.num_agents",
        "train K independent agents in one batched program (seeds / sweeps)",
        type=_POSITIVE_INT,
        metavar="K",
    )


def _train_online_flags(p: argparse.ArgumentParser) -> None:
    """train's online learning: learn while a real-time actor drives the plant."""
    _on_off_flags(
        p,
        {
            "--online": "learn while acting: a real-time actor drives the plant at "
            "--control-rate while the learner (--algo sac, or dqn for discrete actions) trains "
            "beside it (see docs/online.md)"
        },
        default=None,
    )
    _config_flag(
        p,
        "--control-rate",
        "online.control_rate_hz",
        "the online actor's rate",
        type=_POSITIVE,
        metavar="HZ",
    )
    _config_flag(
        p,
        "--utd",
        "online.update_to_data",
        "online: gradient steps per env step the learner aims at",
        type=_POSITIVE,
        metavar="RATIO",
    )
    p.add_argument(
        "--plant",
        metavar="SPEC",
        help="online: gym (the env in real time, default), udp://HOST:PORT or module:factory",
    )


def _train_budget_flags(p: argparse.ArgumentParser) -> None:
    """train's length, device, seed and buffer memory."""
    _config_flag(
        p,
        "--total-steps",
        "train.total_steps",
        "environment steps to train for",
        preset=True,
        type=_POSITIVE_INT,
    )
    _config_flag(
        p,
        "--device",
        "train.device",
        "learner device (auto: cuda where torch sees a GPU)",
        choices=["auto", "cpu", "cuda"],
    )
    _config_flag(p, "--seed", "train.seed", "random seed", preset=True, type=_NON_NEGATIVE_INT)
    _config_flag(
        p,
        "--buffer-placement",
        "buffer.placement",
        "rollout buffer memory",
        choices=["auto", "host", "device", "pinned", "managed"],
    )


def _train_folder_flags(p: argparse.ArgumentParser) -> None:
    """train's run folder and config: where it writes, what it reads, how it reports."""
    p.add_argument("--out", type=Path, help="run folder (default: runs/ENV-TIMESTAMP)")
    p.add_argument("--config", type=Path, help="YAML config file (default: none)")
    p.add_argument(
        "--resume", type=Path, metavar="DIR", help="continue the run in DIR (default: a new run)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override any config field, e.g. --set ppo.learning_rate=3e-4 (repeatable)",
    )
    p.add_argument(
        "--nproc",
        type=int,  # cli/train.py checks N >= 1
        metavar="N",
        help="train with N processes on torch.distributed (one per GPU with NCCL, gloo on "
        "the CPU), launched through torchrun (default: 1, this process)",
    )
    _on_off_flags(
        p,
        {
            "--overwrite": "replace an existing run folder",
            "--no-progress": "no progress bar (where the output is not a terminal, training logs "
            "plain progress lines instead of a bar; -q hides both)",
            "--print-config": "print the config as YAML, each field's description as a comment, "
            "and exit",
            "--no-preset": "start from the dataclass defaults, not the environment's preset "
            "(orin_rl/config/presets.py)",
        },
    )
