"""Relations between configuration fields (``validate``): what each section may hold given
the others. ``orin_rl.config`` re-exports it and calls it after every load and override."""

from __future__ import annotations

from typing import Any

from orin_rl.config.types import ConfigError, check_wrapper
from orin_rl.envs import backends as env_backends


def validate(cfg: Any) -> None:
    """Check relations between the fields of ``cfg`` (a ``config.Config``; not imported here:
    config imports this module); raise ConfigError naming the key."""
    _check_ranges(cfg)
    _check_env(cfg)
    _check_networks(cfg)
    _check_off_policy(cfg)
    _check_online(cfg)
    _check_dqn(cfg)
    _check_algo_features(cfg)
    _check_ppo(cfg)


def _check_ranges(cfg: Any) -> None:
    """The numeric fields that must be positive or within [0, 1]."""
    positive = {
        "env.num_envs": cfg.env.num_envs,
        "ppo.num_steps": cfg.ppo.num_steps,
        "ppo.num_epochs": cfg.ppo.num_epochs,
        "ppo.num_minibatches": cfg.ppo.num_minibatches,
        "train.total_steps": cfg.train.total_steps,
        "train.log_every": cfg.train.log_every,
        "train.checkpoint_every": cfg.train.checkpoint_every,
        "train.eval_episodes": cfg.train.eval_episodes,
        "train.solved_patience": cfg.train.solved_patience,
        "train.num_agents": cfg.train.num_agents,
    }
    for key, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{key}: must be positive, got {value}")
    for key, value in {
        "ppo.learning_rate": cfg.ppo.learning_rate,
        "ppo.clip_coef": cfg.ppo.clip_coef,
        "ppo.max_grad_norm": cfg.ppo.max_grad_norm,
        "ppo.obs_clip": cfg.ppo.obs_clip,
        "ppo.reward_clip": cfg.ppo.reward_clip,
    }.items():
        if not value > 0:
            raise ConfigError(f"{key}: must be positive, got {value}")
    for key, value in {"ppo.gamma": cfg.ppo.gamma, "ppo.gae_lambda": cfg.ppo.gae_lambda}.items():
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"{key}: must be within [0, 1], got {value}")
    if cfg.train.max_wall_s is not None and not cfg.train.max_wall_s > 0:
        raise ConfigError(f"train.max_wall_s: must be positive, got {cfg.train.max_wall_s}")
    if cfg.train.eval_every < 0 or cfg.train.torch_threads < 0:
        raise ConfigError("train.eval_every and train.torch_threads must be >= 0")
    if (steps := cfg.env.max_episode_steps) is not None and steps <= 0:
        raise ConfigError(f"env.max_episode_steps: must be positive, got {steps}")


def _check_env(cfg: Any) -> None:
    """The env section: vectorisation, workers, backend and wrappers."""
    if (
        cfg.env.vectorization == "workers"
        and env_backends.for_id(cfg.env.env_id, cfg.env.backend) != "gym"
    ):
        raise ConfigError("env.vectorization=workers: gymnasium envs only (env.backend gym)")
    if cfg.env.num_workers < 0:
        raise ConfigError(f"env.num_workers must be >= 0, got {cfg.env.num_workers}")
    if cfg.env.random_episode_start and env_backends.for_id(cfg.env.env_id, "gym") != "mjlab":
        raise ConfigError(f"env.random_episode_start: mjlab tasks only, not {cfg.env.env_id}")
    if cfg.env.backend not in env_backends.names():
        raise ConfigError(
            f"env.backend: {cfg.env.backend!r} is not one of {', '.join(env_backends.names())}"
        )
    for key in ("wrappers", "train_wrappers"):
        for i, wrapper in enumerate(getattr(cfg.env, key) or []):
            check_wrapper(f"env.{key}[{i}]", wrapper)


def _check_networks(cfg: Any) -> None:
    """The network widths, and the compiled update's precision."""
    if any(h <= 0 for h in cfg.ppo.hidden_sizes):  # []: the heads on the inputs (an image
        # encoder's features, as SB3's CnnPolicy)
        raise ConfigError(f"ppo.hidden_sizes: need positive widths, got {cfg.ppo.hidden_sizes}")
    if cfg.ppo.compile_update and (precision := cfg.train.precision) != "fp32":
        raise ConfigError(f"ppo.compile_update: needs train.precision=fp32, not {precision}")


def _check_off_policy(cfg: Any) -> None:
    """The replay sections (sac, dqn): sizes, frequencies, tau and the critic's dropout."""
    for section in ("sac", "dqn"):
        sub = getattr(cfg, section)
        for name in ("buffer_size", "batch_size", "train_freq", "gradient_steps"):
            if getattr(sub, name) <= 0:
                raise ConfigError(f"{section}.{name}: must be positive, got {getattr(sub, name)}")
        if not 0 < sub.tau <= 1:
            raise ConfigError(f"{section}.tau: must be within (0, 1], got {sub.tau}")
    if not 0.0 <= (dropout := cfg.sac.critic_dropout) < 1.0:
        raise ConfigError(f"sac.critic_dropout: must be within [0, 1), got {dropout}")


def _check_online(cfg: Any) -> None:
    """train.overlap's algorithm, and what online learning (online.enabled) needs."""
    on = cfg.online
    if cfg.train.overlap and (cfg.train.algo != "ppo" or on.enabled):
        raise ConfigError("train.overlap: PPO's rollouts only, not --algo sac/dqn or --online")
    if on.enabled:
        if cfg.train.algo not in ("sac", "dqn"):
            raise ConfigError(
                f"online.enabled: SAC (continuous actions) or DQN (discrete), train.algo is "
                f"{cfg.train.algo}"
            )
        if cfg.train.algo == "dqn" and cfg.dqn.n_step != 1:
            raise ConfigError(
                f"dqn.n_step: online DQN stores one-step transitions, got {cfg.dqn.n_step}; "
                "set dqn.n_step=1"
            )
        if cfg.env.num_envs != 1:
            raise ConfigError(
                f"env.num_envs: online learning drives one plant, got {cfg.env.num_envs}; "
                "add --set env.num_envs=1"
            )
        for key, value in {
            "online.control_rate_hz": on.control_rate_hz,
            "online.update_to_data": on.update_to_data,
            "online.weight_sync_every": on.weight_sync_every,
        }.items():
            if not value > 0:
                raise ConfigError(f"{key}: must be positive, got {value}")
        if not (on.log_every_s > 0 and on.checkpoint_every_s > 0):
            raise ConfigError("online.log_every_s and online.checkpoint_every_s must be positive")
        if on.watchdog_periods < 0 or on.learner_stall_s < 0:
            raise ConfigError("online.watchdog_periods and online.learner_stall_s must be >= 0")


def _check_dqn(cfg: Any) -> None:
    """DQN's n-step returns and frame storage (share_frames, frame_history)."""
    if cfg.dqn.n_step < 1:
        raise ConfigError(f"dqn.n_step: must be >= 1, got {cfg.dqn.n_step}")
    for name in ("share_frames", "frame_history"):
        if getattr(cfg.dqn, name) and (cfg.dqn.n_step != 1 or cfg.online.enabled):
            raise ConfigError(f"dqn.{name}: one-step transitions of the off-policy runner only "
                              "(set dqn.n_step=1, drop --online)")  # fmt: skip
    if cfg.dqn.frame_history and cfg.dqn.prioritized:
        raise ConfigError("dqn.frame_history: uniform replay only (prioritized replay's weights "
                          "and priorities belong to the slots it drew); set dqn.prioritized "
                          "false")  # fmt: skip
    if cfg.dqn.share_frames and cfg.dqn.frame_history:
        raise ConfigError("dqn.share_frames and dqn.frame_history: pick one (frame_history "
                          "keeps less: 1 frame a transition against k + 1)")  # fmt: skip


def _check_algo_features(cfg: Any) -> None:
    """Training features one algorithm lacks: several agents, CUDA graphs."""
    if cfg.train.algo != "ppo" and cfg.train.num_agents > 1:
        raise ConfigError(f"train.algo {cfg.train.algo}: --num-agents is PPO-only")
    if cfg.train.algo == "dqn" and cfg.train.cuda_graphs:
        raise ConfigError("train.cuda_graphs: PPO and SAC only (DQN's target copy is a branch)")


def _check_ppo(cfg: Any) -> None:
    """PPO's learning-rate rule, normalisers, minibatches and what several agents support."""
    if cfg.ppo.desired_kl is not None:
        if not cfg.ppo.desired_kl > 0:
            raise ConfigError(f"ppo.desired_kl: must be positive, got {cfg.ppo.desired_kl}")
        if cfg.ppo.anneal_lr:
            raise ConfigError(
                "ppo.desired_kl (adaptive learning rate) and ppo.anneal_lr both set the rate: "
                "set ppo.anneal_lr=false"
            )
        if cfg.train.num_agents > 1:
            raise ConfigError("ppo.desired_kl: not supported with train.num_agents > 1")
    if cfg.ppo.normalizer_update != "step" and not (cfg.ppo.rsl_rl and cfg.ppo.normalize_obs):
        raise ConfigError(
            "ppo.normalizer_update: sets when rsl_rl's normalisers update; set ppo.rsl_rl=true "
            "and ppo.normalize_obs=true, or drop it"
        )
    per_minibatch = cfg.ppo.normalize_advantage_per_minibatch or None
    for name, value in (("target_kl", cfg.ppo.target_kl), ("rsl_rl", cfg.ppo.rsl_rl or None),
                        ("normalize_advantage_per_minibatch", per_minibatch)):  # fmt: skip
        if cfg.train.num_agents > 1 and value is not None:
            raise ConfigError(f"ppo.{name}: not supported with train.num_agents > 1; unset it")
    if cfg.batch_size % cfg.ppo.num_minibatches:
        raise ConfigError(
            f"ppo.num_minibatches: {cfg.ppo.num_minibatches} does not divide the batch of "
            f"{cfg.batch_size} (env.num_envs * ppo.num_steps)"
        )
    if cfg.ppo.normalize_advantage_per_minibatch:
        if not cfg.ppo.normalize_advantage:
            raise ConfigError(
                "ppo.normalize_advantage_per_minibatch: says where advantages are normalised; "
                "set ppo.normalize_advantage true, or drop it"
            )
        if cfg.batch_size // cfg.ppo.num_minibatches < 2:
            raise ConfigError("ppo.normalize_advantage_per_minibatch: a minibatch of one sample "
                              "has no std; lower ppo.num_minibatches")  # fmt: skip
