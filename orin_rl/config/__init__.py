"""Typed configuration for every stage: dataclasses, YAML load/save, ``section.field=value``.

The docstring under each field is its documentation and its CLI help (``field_docs``).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from orin_rl.config.checks import validate as validate  # re-exported: the fields' relations
from orin_rl.config.types import ConfigError as ConfigError  # re-exported: config's errors
from orin_rl.config.types import coerce, comment_lines
from orin_rl.config.types import field_docs as field_docs  # re-exported: the fields' docs
from orin_rl.config.types import read_yaml_mapping as read_yaml_mapping  # re-exported


@dataclass
class EnvConfig:
    """Which environments to train on and how they are vectorised."""

    env_id: str = "CartPole-v1"
    """gymnasium environment id (e.g. CartPole-v1, Acrobot-v1, Pendulum-v1, Hopper-v5)."""
    num_envs: int = 8
    """Number of parallel environments stepped as one batch."""
    backend: str = "gym"
    """Environment implementation: `gym` wraps gymnasium.vector; `gpu` steps GPU-native
    environments on the learner's device, so a rollout never leaves the GPU: torch ones for
    CartPole-v1, Acrobot-v1, Pendulum-v1, MountainCar-v0, MountainCarContinuous-v0, and
    MuJoCo Warp physics for Hopper-v5, HalfCheetah-v5, Walker2d-v5, Ant-v5, Humanoid-v5
    (extra `sim`)."""
    vectorization: Literal["sync", "async", "workers"] = "sync"
    """gymnasium vectorisation: `sync` steps in this process, `async` in worker processes;
    `workers`: rollout workers that run PPO's whole rollout themselves with a numpy copy of
    the policy, writing it into shared memory the learner reads (no message a step;
    orin_rl/envs/worker_pool.py)."""
    num_workers: int = 0
    """Rollout worker processes (`vectorization: workers`); 0: one a CPU core (at most one an
    env)."""
    max_episode_steps: int | None = None
    """Override the environment's time limit (None keeps gymnasium's)."""
    random_episode_start: bool = False
    """Start each world's first training episode at a random step of its time limit, as
    mjlab's own ``train`` does (rsl_rl's ``init_at_random_ep_len``): time-outs then spread over
    the run instead of arriving all at once; mjlab tasks (env.backend mjlab) only."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the environment's constructor (``gymnasium.make(env_id,
    **kwargs)``), e.g. ``{size: 8}``; gymnasium envs only (env.backend gym)."""
    wrappers: list[str | dict[str, Any]] = field(default_factory=list)
    """gymnasium wrappers applied to each environment, innermost first, in training,
    evaluation, export and ``orin-rl run``: importable ``module:Callable`` names (called with
    the env), or ``{wrapper: module:Callable, kwargs: {...}}`` for ones that take arguments."""
    train_wrappers: list[str | dict[str, Any]] | None = None
    """The training envs' wrappers where they differ from ``wrappers`` (same forms; None: the
    same): what shapes learning but not the task, e.g. Atari's lost life ending a training
    episode (``{wrapper: orin_rl.envs.images:atari, kwargs: {episodic_life: true}}``) while
    evaluation, export and ``orin-rl run`` play whole games. Their observations must be the
    evaluation's."""


@dataclass
class PPOConfig:
    """Proximal Policy Optimisation hyper-parameters."""

    num_steps: int = 128
    """Rollout length per environment per iteration."""
    num_epochs: int = 4
    """Passes over each rollout during the update."""
    num_minibatches: int = 4
    """Minibatches per epoch (minibatch size = num_envs * num_steps / num_minibatches)."""
    learning_rate: float = 3e-4
    """Adam learning rate (the start value when annealed)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to zero over the run."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda: bias/variance trade-off of the advantage estimate."""
    clip_coef: float = 0.2
    """Surrogate clipping range epsilon."""
    clip_value_loss: bool = True
    """Clip the value-function update to the same range as the policy."""
    ent_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient."""
    max_grad_norm: float = 0.5
    """Global gradient-norm clip."""
    normalize_advantage: bool = True
    """Normalise advantages to zero mean, unit variance over the rollout."""
    share_encoder: bool = False
    """Image observations: one encoder for the actor and the critic (CleanRL's Atari agents,
    SB3's on-policy CnnPolicy), run once a forward pass; False: each its own."""
    normalize_advantage_per_minibatch: bool = False
    """With ``normalize_advantage``: normalise each minibatch's advantages on their own
    (``(a - mean) / (std + 1e-8)``, std unbiased) instead of the whole rollout's at once, as
    Stable-Baselines3's PPO, PureJaxRL's and rsl_rl's ``normalize_advantage_per_mini_batch``
    do."""
    target_kl: float | None = None
    """Stop the update's epochs early when the approximate KL exceeds this (None: never)."""
    normalize_obs: bool = False
    """Keep a running mean/std of observations and feed the policy normalised inputs."""
    obs_clip: float = 10.0
    """Normalised observations are clipped to +-obs_clip (also inside the exported ONNX)."""
    normalize_reward: bool = False
    """Divide rewards by the running std of the discounted return, as Stable-Baselines3's
    VecNormalize does (logged returns stay raw): value targets near unit scale."""
    reward_clip: float = 10.0
    """Normalised rewards are clipped to +-reward_clip."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer widths of the actor and the critic MLPs."""
    critic_hidden_sizes: list[int] | None = None
    """Hidden widths of the critic where they differ from the actor's (None: hidden_sizes)."""
    desired_kl: float | None = None
    """rsl_rl's adaptive learning rate (``schedule="adaptive"``): after each minibatch the rate
    is divided by 1.5 when the approximate KL to the behaviour policy exceeds 2 * desired_kl,
    and multiplied by 1.5 when it is below desired_kl / 2 (kept within 1e-5 and 1e-2); computed
    on the device (no host read, CUDA graphs keep working). None: fixed or annealed rate."""
    activation: Literal["tanh", "relu", "elu"] = "tanh"
    """Activation of the hidden layers."""
    init_log_std: float = 0.0
    """Initial log standard deviation of the Gaussian head (continuous actions)."""
    rsl_rl: bool = False
    """Learn as rsl_rl 5.4 does (mjlab's preset): torch's default layer init, a learned std
    (not its log), the actor's and the critic's gradients clipped each on its own, Adam eps
    1e-8."""
    normalizer_update: Literal["step", "after_update"] = "step"
    """With ``rsl_rl`` and ``normalize_obs``, when rsl_rl's normalisers fold in observations:
    ``step``, every env step from the post-step observation (rsl_rl 5.4.2, mjlab 1.6's pin: the
    lockstep test holds it); ``after_update``, once an iteration after the update, from the
    rollout's stored observations (rsl_rl 5.5, its PR 225: the statistics stay fixed over the
    rollout and the update, so the first ratio is exactly 1)."""
    behaviour_weight_clip: float | None = 2.0
    """The decoupled clip's (``train.overlap_correction``) weight pi_prox / pi_behaviour is
    truncated at this, as V-trace truncates its importance weights (None: not truncated)."""
    proximal_values: bool = False
    """With the decoupled clip (``train.overlap_correction``), GAE and the value targets are
    recomputed from the learner's critic at the update's start (the behaviour's stays for the
    last step's bootstrap and the time-outs'), not taken from the critic that collected. Off:
    overlapped Hopper with it ended at 673 and 834 (seeds 1, 2; 3,300 and 3,084 without) and
    reached 1,500 in neither (docs/benchmarks/overlap_hopper_seeds_cpu_2core.md)."""
    timeout_bootstrap: Literal["final_obs", "value"] = "final_obs"
    """What a time-limited episode bootstraps from: ``final_obs``, V(the state it reached);
    ``value``, V(the observation the step started from), as rsl_rl (mjlab's runner) does: no
    final observation to compute (an mjlab step then skips its forward and sensing)."""
    fused: Literal["auto", "on", "off"] = "auto"
    """Fused PPO kernels (orin_rl.algorithms.fused: the whole rollout in one kernel, the
    update in a few launches per minibatch step, its gradients as ``fused_grads`` says;
    CartPole-v1, MountainCar-v0 and Acrobot-v1 on the gpu backend): ``auto`` uses them on a
    CUDA learner wherever they apply, logs why not otherwise and falls back to the general
    path if they fail to compile; ``on`` demands them (an error names what is missing; on a
    CPU box in Numba's CUDA simulator); ``off`` keeps the general path (docs/fused.md)."""
    fused_grads: Literal["auto", "kernel", "gemm"] = "kernel"
    """Who computes the fused update's gradients: ``kernel``, the gradient kernel (a block per
    slice of an agent's minibatch; up to 2048 samples per agent, hidden layers up to 128
    wide; beyond, torch's update, as before this option); ``gemm``, batched GEMMs over the
    agents (orin_rl.algorithms.gemm_update: any minibatch and width); ``auto``, the kernel
    where it takes the shape, else the GEMMs. ``kernel`` stays the default until the GEMMs
    have run on a GPU (held to the reference on the CPU only; docs/fused.md)."""
    graph_update: Literal["auto", "off"] = "auto"
    """The update as one CUDA graph per rollout buffer (a CUDA learner, envs on the host:
    runners.graphs.GraphedUpdate); ``auto`` wherever it applies, ``off`` op by op."""
    compile_update: bool = False
    """``torch.compile`` the update's minibatch loss (forward, losses, backward): fused kernels
    for a compile at the first update (docs/fused.md, tools/bench_update.py). fp32 only."""


@dataclass
class ReplayOptions:
    """Replay and update options SAC and DQN share (their own sections add the rest). Each
    section states its own defaults of buffer_size, batch_size, train_freq and learning_rate,
    which differ between them; a field a section redeclares keeps the docstring here unless
    it writes its own."""

    prioritized: bool = False
    """Prioritized replay; priorities are |TD error| (SAC: the mean over its twin critics)."""
    per_alpha: float = 0.6
    """Prioritization exponent."""
    per_beta: float = 0.4
    """Importance-sampling exponent."""
    save_buffer: bool = False
    """Put the replay buffer in checkpoint.pt (so a resume keeps its experience)."""
    save_buffer_max_mb: int = 1024
    """Largest buffer (MiB) written into a checkpoint; a bigger one is left out, with a log line."""
    buffer_size: int = 100_000
    """Replay capacity in transitions."""
    batch_size: int = 64
    """Transitions per gradient step."""
    learning_starts: int = 1_000
    """Environment steps before the first update."""
    train_freq: int = 4
    """Environment steps (summed over envs) between rounds of gradient steps."""
    gradient_steps: int = 1
    """Gradient steps per round (update-to-data ratio = gradient_steps / train_freq)."""
    learning_rate: float = 2.5e-4
    """Adam learning rate."""
    gamma: float = 0.99
    """Discount factor."""


@dataclass
class SACConfig(ReplayOptions):
    """Soft Actor-Critic (``train.algo: sac``, continuous actions)."""

    buffer_size: int = 1_000_000
    batch_size: int = 256
    learning_starts: int = 1_000
    """Environment steps of uniform random actions before the first update."""
    train_freq: int = 1
    learning_rate: float = 3e-4
    """Adam learning rate of the actor, the critics and the temperature."""
    tau: float = 0.005
    """Polyak factor of the target critics: target <- tau * online + (1 - tau) * target."""
    init_alpha: float = 1.0
    """Initial entropy temperature."""
    autotune_alpha: bool = True
    """Learn the temperature so the policy's entropy tracks target_entropy."""
    target_entropy: float | None = None
    """Entropy target of the temperature loss (None: -action_dim)."""
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    """Hidden widths of the actor and the twin critics."""
    critic_dropout: float = 0.0
    """Dropout rate in the critics' hidden layers (DroQ: 0.01 with critic_layer_norm)."""
    critic_layer_norm: bool = False
    """LayerNorm after each hidden layer of the critics (DroQ)."""


@dataclass
class DQNConfig(ReplayOptions):
    """Double DQN (``train.algo: dqn``, discrete actions)."""

    buffer_size: int = 100_000
    batch_size: int = 64
    train_freq: int = 4
    learning_rate: float = 2.5e-4
    target_update_every: int = 1_000
    """Gradient steps between hard target-network copies (when tau is 1)."""
    tau: float = 1.0
    """1: hard copies every target_update_every; below 1: Polyak averaging every step."""
    exploration_fraction: float = 0.1
    """Fraction of total_steps over which epsilon decays linearly."""
    exploration_initial_eps: float = 1.0
    """Epsilon at the start."""
    exploration_final_eps: float = 0.05
    """Epsilon after the decay."""
    n_step: int = 1
    """n-step returns: sum of n discounted rewards, then bootstrap (cut at episode ends)."""
    share_frames: bool = False
    """Frame stacks (uint8 (k, H, W), Atari's 4 x 84 x 84): keep next_obs as its newest frame
    only, rebuilt as obs[1:] + that frame when sampled (checked at every insert; n_step 1):
    a 1M Atari replay takes 35.3 GB instead of 56.5 GB."""
    frame_history: bool = False
    """Frame stacks kept as frames, each once (orin_rl.buffers.frame_history): a replay row
    holds one frame, a transition's next observation's newest or an episode's first, and the
    stacks are read back along the env's rows (checked at every insert; n_step 1, the
    off-policy runner). buffer_size counts rows (transitions plus one an episode): 1M Atari
    transitions of random Breakout play take 7.27 GB (docs/benchmarks/frame_replay_breakout)."""
    max_grad_norm: float = 10.0
    """Gradient-norm clip."""
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    """Hidden widths of the Q network."""


@dataclass
class BufferConfig:
    """Where the rollout storage lives."""

    placement: Literal["auto", "host", "device", "pinned", "managed"] = "auto"
    """Memory: `auto` picks managed on an integrated GPU (Orin), device on a discrete GPU
    (where the learner reads it, whichever envs feed it), host on the CPU; `pinned` (page-locked
    host memory) only when asked, e.g. for a replay buffer larger than the GPU's memory."""


@dataclass
class TrainConfig:
    """The training run: length, device, seeds, logging, checkpoints and evaluation."""

    algo: Literal["ppo", "sac", "dqn"] = "ppo"
    """Algorithm: `ppo` (on-policy), `sac` (continuous actions) or `dqn` (discrete), the last
    two learning from a replay buffer; each reads its own config section."""
    total_steps: int = 100_000
    """Environment steps to train for (summed over all environments)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Learner device: `auto` picks cuda when torch sees a GPU."""
    seed: int = 1
    """Seed for torch, numpy and the environments."""
    overlap: bool = False
    """PPO on CPU physics: the envs collect the next rollout (with the policy one update
    behind) while the learner trains on the last one (orin_rl/runners/overlap.py)."""
    overlap_correction: Literal["decoupled", "off"] = "decoupled"
    """With ``overlap``, how the update treats data from the policy one update behind:
    ``decoupled``, Hilton et al. 2021's decoupled clip (the ratio clipped against the learner's
    weights at the update's start, the surrogate weighted by their probability over the
    behaviour policy's, truncated at ``ppo.behaviour_weight_clip``); ``off``, PPO's ratio
    against the behaviour policy's stored log-probabilities (docs/benchmarks/
    overlap_hopper_seeds_cpu_2core.md)."""
    torch_threads: int = 1
    """CPU threads for torch (small policies run fastest on one; 0 keeps torch's default)."""
    log_every: int = 1
    """Write metrics every this many iterations."""
    checkpoint_every: int = 20
    """Write checkpoint.pt every this many iterations (and always at the end or on a signal)."""
    eval_every: int = 0
    """Evaluate the deterministic policy every this many iterations (0: only at the end)."""
    eval_episodes: int = 20
    """Episodes in each deterministic evaluation."""
    stop_at_threshold: bool = False
    """End training as soon as a periodic evaluation reaches the solved threshold."""
    max_wall_s: float | None = None
    """End training after this many seconds of this process's loop (with the final evaluation
    and checkpoint as usual, stop reason `max_wall_s`); None: no time limit."""
    solved_patience: int = 2
    """Consecutive solved periodic evaluations (each on new episodes) before stopping early."""
    solved_threshold: float | None = None
    """Evaluation return that counts as solved (None: gymnasium's reward_threshold)."""
    tensorboard: bool = True
    """Write TensorBoard event files into the run folder."""
    num_agents: int = 1
    """Train this many independent agents (own weights, optimiser, envs and seeds) as one
    batched program, e.g. the seeds of a sweep; each gets total_steps steps. summary.json lists
    every agent's evaluation; export takes the best one."""
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"
    """Mixed precision of the forward passes and losses: autocast to fp16 or bf16 around the
    networks; the value head and the losses stay fp32; fp16 adds a gradient scaler."""
    matmul: Literal["fp32", "tf32"] = "fp32"
    """float32 matrix products on a CUDA GPU: ``fp32`` exact, ``tf32`` on the tensor cores
    (Ampere and later, Orin included) with inputs rounded to a 10-bit mantissa and float32
    sums, what JAX's default precision does on these GPUs (jax-ml/jax#18934). Parameters,
    losses and the fused kernels stay float32."""
    cuda_graphs: bool = False
    """Capture a whole iteration (rollout, GAE, update) in one CUDA graph and replay it. Needs
    GPU-native environments on the learner's GPU and no target_kl; otherwise the run stays
    eager and the log says why."""
    graph_warm_up: bool = True
    """With ``cuda_graphs``: run the first iteration eagerly and capture the second. Off: the
    graph is captured from the state the first reset produced and replayed from the first
    iteration (the optimizer state made beforehand), without an eager iteration's launches
    from Python; a capture that fails falls back to the eager warm-up with a warning. On by
    default until the cold capture has run on a GPU (held on the CPU with emulated graphs)."""
    compile: bool = False
    """torch.compile the networks and the GPU-native environment step (fuses the many small
    element-wise kernels; costs compile time at start, pays off on long runs with many envs)."""
    nvtx: bool = False
    """Mark rollout, GAE and update with NVTX ranges for Nsight Systems (tools/profile.sh)."""
    power_monitor: Literal["auto", "off"] = "auto"
    """Sample power and temperatures (jtop or tegrastats) where available; report energy and
    steps/s per watt in summary.json."""


@dataclass
class OnlineConfig:
    """Online learning (``train --online``): a real-time actor and a concurrent learner."""

    enabled: bool = False
    """Learn while acting: the actor runs a ControlLoop at control_rate_hz against the plant,
    writing every transition into the replay buffer, while the learner (SAC, or DQN for
    discrete actions) trains beside it."""
    control_rate_hz: float = 50.0
    """Control rate of the actor (ticks per second)."""
    plant: str = "gym"
    """What the actor drives: `gym` (env.env_id stepped in real time), `udp://HOST:PORT` (a
    plant server, e.g. `orin-rl plant-server`) or `module:factory` (your own Plant adapter)."""
    update_to_data: float = 1.0
    """Gradient steps per env step the learner aims at (never above; the achieved ratio is in
    summary.json: a slow learner falls below it)."""
    weight_sync_every: int = 30
    """Env steps between hand-overs of new weights to the actor."""
    watchdog_periods: float = 3.0
    """An actor tick unfinished after this many periods trips the watchdog, which sends the
    safe action in its place (0: no watchdog)."""
    learner_stall_s: float = 10.0
    """The actor sends the safe action while updates are due and the learner has made none for
    this long (0: never)."""
    safe_action: list[float] | None = None
    """Action sent on a stall, a watchdog trip and at the end (None: the middle of the bounds;
    discrete actions: one action index, None: action 0)."""
    action_low: list[float] | None = None
    """Tighter lower action limits than the env's (None: the env's)."""
    action_high: list[float] | None = None
    """Tighter upper action limits than the env's (None: the env's)."""
    log_every_s: float = 1.0
    """Seconds between metrics records of an online run (train.log_every counts iterations,
    which online are env steps)."""
    checkpoint_every_s: float = 60.0
    """Seconds between checkpoints of an online run; each carries the replay buffer (and
    always one at the end, on the stop file or a signal)."""
    stop_file: str = "STOP"
    """Creating this file in the run folder ends learning cleanly, with a checkpoint."""
    actor_cpu: int | None = None
    """Pin the actor thread to this CPU (Linux)."""


@dataclass
class Config:
    """Everything a training run needs; saved as config.yaml in the run folder."""

    env: EnvConfig = field(default_factory=EnvConfig)
    """Environments."""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """PPO hyper-parameters."""
    buffer: BufferConfig = field(default_factory=BufferConfig)
    """Rollout / replay storage placement."""
    sac: SACConfig = field(default_factory=SACConfig)
    """SAC hyper-parameters (used when train.algo is sac)."""
    dqn: DQNConfig = field(default_factory=DQNConfig)
    """DQN hyper-parameters (used when train.algo is dqn)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Run length, device, seeds, logging."""
    online: OnlineConfig = field(default_factory=OnlineConfig)
    """Online learning: real-time actor and concurrent learner (SAC)."""

    @property
    def batch_size(self) -> int:
        """Transitions per iteration: num_envs * num_steps."""
        return self.env.num_envs * self.ppo.num_steps

    @property
    def minibatch_size(self) -> int:
        """Transitions per gradient step: batch_size // num_minibatches."""
        return self.batch_size // self.ppo.num_minibatches

    @property
    def num_iterations(self) -> int:
        """Rollout + update iterations: ceil(total_steps / batch_size)."""
        return max(1, math.ceil(self.train.total_steps / self.batch_size))


SECTIONS = ("env", "ppo", "sac", "dqn", "buffer", "train", "online")


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def set_value(cfg: Config, key: str, value: Any) -> None:
    """Set ``section.field`` on ``cfg`` after checking the key and the value's type."""
    section_name, _, name = key.partition(".")
    if section_name not in SECTIONS or not name:
        raise ConfigError(f"{key}: unknown key (sections are {', '.join(SECTIONS)})")
    section = getattr(cfg, section_name)
    hints = _hints(type(section))
    if name not in hints:
        known = ", ".join(f.name for f in dataclasses.fields(section))
        raise ConfigError(f"{key}: unknown key (known in {section_name}: {known})")
    setattr(section, name, coerce(key, value, hints[name]))


def from_dict(data: dict[str, Any], base: Config | None = None) -> Config:
    """Build a Config from nested dicts (as in config.yaml), on top of ``base`` or the defaults."""
    cfg = _deepcopy(base) if base is not None else Config()
    if not isinstance(data, dict):
        raise ConfigError(f"config: expected a mapping of sections, got {type(data).__name__}")
    for section_name, values in data.items():
        if section_name not in SECTIONS:
            raise ConfigError(
                f"{section_name}: unknown section (sections are {', '.join(SECTIONS)})"
            )
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ConfigError(f"{section_name}: expected a mapping, got {type(values).__name__}")
        for name, value in values.items():
            set_value(cfg, f"{section_name}.{name}", value)
    validate(cfg)
    return cfg


def _deepcopy(cfg: Config) -> Config:
    return from_plain(to_dict(cfg))


def from_plain(data: dict[str, Any]) -> Config:
    """Rebuild a Config from ``to_dict`` output without re-validating (internal copies)."""
    return Config(
        env=EnvConfig(**data["env"]),
        ppo=PPOConfig(**data["ppo"]),
        buffer=BufferConfig(**data["buffer"]),
        train=TrainConfig(**data["train"]),
        sac=SACConfig(**data.get("sac", {})),
        dqn=DQNConfig(**data.get("dqn", {})),
        online=OnlineConfig(**data.get("online", {})),
    )


def to_dict(cfg: Config) -> dict[str, Any]:
    """Nested plain dicts (YAML-ready) of ``cfg``."""
    return dataclasses.asdict(cfg)


def to_yaml(cfg: Config, width: int = 100) -> str:
    """``cfg`` as YAML with each section's and field's description (``field_docs``) as ``#``
    comment lines above it; ``load`` reads it back to an equal Config."""
    lines: list[str] = []
    section_docs = field_docs(Config)
    for section, values in to_dict(cfg).items():
        lines += [""] if lines else []  # a blank line between sections
        lines += comment_lines(section_docs.get(section, ""), "", width)
        lines.append(f"{section}:")
        docs = field_docs(type(getattr(cfg, section)))
        for name, value in values.items():
            lines += comment_lines(docs.get(name, ""), "  ", width)
            dumped = yaml.safe_dump({name: value}, sort_keys=False, width=width)
            lines += [f"  {line}" for line in dumped.splitlines()]
    return "\n".join(lines) + "\n"


def apply_overrides(cfg: Config, overrides: list[str]) -> Config:
    """Apply ``section.field=value`` strings; values are parsed as YAML (``3e-4``, ``[64, 64]``)."""
    cfg = _deepcopy(cfg)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"{item}: expected section.field=value")
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{key}: cannot parse {raw!r} ({exc.__class__.__name__})") from None
        set_value(cfg, key.strip(), value)
    validate(cfg)
    return cfg


def load(path: str | Path, base: Config | None = None) -> Config:
    """Read a YAML config file (``yaml.safe_load``) on top of ``base`` or the defaults."""
    data = read_yaml_mapping(path)
    try:
        return from_dict(data, base)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def save(cfg: Config, path: str | Path) -> None:
    """Write ``cfg`` as YAML with sections in a fixed order."""
    Path(path).write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
