"""Proximal Policy Optimisation (clipped surrogate) over a RolloutBuffer.

The trainer calls four verbs and nothing else: ``act``, ``process_env_step``,
``compute_returns``, ``update``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from orin_rl import distributed
from orin_rl.algorithms.adam import FusedAdam
from orin_rl.buffers import RolloutBuffer, Transition
from orin_rl.config import PPOConfig
from orin_rl.envs import StepResult
from orin_rl.models import ActorCritic
from orin_rl.models.distributions import gaussian_kl
from orin_rl.models.normalizer import RewardNormalizer


def clipped_surrogate_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, clip: float
) -> torch.Tensor:
    """PPO policy loss: mean of max(-A * r, -A * clip(r, 1 - eps, 1 + eps)), r = pi / pi_old."""
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    return torch.max(unclipped, clipped).mean()


def behaviour_weights(
    prox_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, clip: float | None
) -> torch.Tensor:
    """The decoupled clip's importance weight min(pi_prox / pi_behaviour, clip) (no clip where
    ``clip`` is None), truncated as V-trace truncates its weights."""
    weights = torch.exp(prox_logprobs - behaviour_logprobs)
    return weights if clip is None else weights.clamp(max=clip)


def value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    clip: float | None,
) -> torch.Tensor:
    """0.5 * mean squared error to ``returns``; with ``clip``, the pessimistic clipped form.

    Clipped: 0.5 * mean(max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)).
    """
    unclipped = (values - returns).square()
    if clip is None:
        return 0.5 * unclipped.mean()
    clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.max(unclipped, (clipped_values - returns).square()).mean()


def approx_kl(logprobs: torch.Tensor, old_logprobs: torch.Tensor) -> torch.Tensor:
    """Low-variance KL(old || new) estimator: mean((r - 1) - log r) (Schulman, 2020)."""
    log_ratio = logprobs - old_logprobs
    return ((torch.exp(log_ratio) - 1.0) - log_ratio).mean()


def cfg_step(cfg: PPOConfig) -> bool:
    """rsl_rl's normalisers update at every env step (5.4.2), not after the update (5.5)."""
    return cfg.normalizer_update == "step"


LOSS_NAMES = ("policy", "value", "entropy", "approx_kl", "clip_fraction")
BEHAVIOUR_NAMES = ("behaviour_kl", "behaviour_weight_clipped")
"""The decoupled clip's statistics of an update: KL(behaviour || proximal), and the fraction
of weights truncated."""


def compile_in_process() -> None:
    """Inductor compiles in this process unless TORCHINDUCTOR_COMPILE_THREADS says otherwise:
    its worker pool (one process per core, each importing torch) cost the H200 8.3 s after the
    training loop against 3.0 s without it, for a loss of a few dozen kernels
    (docs/benchmarks/vs_purejaxrl_envs4096_h200.json)."""
    if "TORCHINDUCTOR_COMPILE_THREADS" not in os.environ:
        import torch._inductor.config as inductor_config

        inductor_config.compile_threads = 1


class PPO:
    """PPO with GAE, clipped value loss, entropy bonus, LR annealing and KL early stop."""

    def __init__(
        self,
        policy: ActorCritic,
        buffer: RolloutBuffer,
        cfg: PPOConfig,
        num_iterations: int,
        device: torch.device,
        precision: str = "fp32",
        capturable: bool = False,
        dist_ctx: distributed.Context | None = None,
    ):
        self.policy = policy
        self.buffer = buffer
        self.cfg = cfg
        self.num_iterations = num_iterations
        self.device = device
        self.dist = dist_ctx or distributed.Context()
        self.capturable = capturable
        """Keep every update step free of host reads (CUDA graph capture): the learning rate is
        a device tensor, gradients are zeroed in place, and there is no KL early stop."""
        # The fused kernel (CPU and CUDA) does the whole Adam step in one op: on a small policy
        # the per-parameter loop of the default implementation costs more than the maths.
        # A device tensor where a graph or the adaptive schedule updates it in place.
        adaptive = cfg.desired_kl is not None
        lr = (
            torch.tensor(cfg.learning_rate, device=device)
            if capturable or adaptive
            else cfg.learning_rate
        )
        self.profile = policy.spec.profile
        """The PPO profile the policy was built by (``models.profile``: generic or rsl_rl's)."""
        eps = self.profile.adam_eps
        # torch's fused Adam kernel without torch.optim's wrapper (which imports the compiler,
        # seconds of start-up: algorithms/adam.py); GradScaler's fp16 path needs torch's class.
        self.optimizer: Any = (
            torch.optim.Adam(policy.parameters(), lr=lr, eps=eps, fused=True, capturable=capturable)
            if precision == "fp16"
            else FusedAdam(policy.parameters(), lr=lr, eps=eps, capturable=capturable)
        )
        # Mixed precision, set up once (nanoGPT): autocast around the forward passes, a
        # gradient scaler that is a no-op unless fp16.
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
        self.precision = precision
        # A CUDA graph cannot capture autocast's weight-cast cache: turn it off when capturing.
        self.autocast = torch.autocast(
            device.type, dtype=dtype, enabled=dtype is not None, cache_enabled=not capturable
        )
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        self.iteration = 0
        self.transition = Transition()
        self._loss_sums = torch.zeros(len(LOSS_NAMES), device=device)
        self._params = list(policy.parameters())
        self._losses = self.minibatch_losses
        if cfg.compile_update:  # validated: fp32 only, so no autocast inside the graph
            self._losses = torch.compile(
                self.minibatch_losses, backend=self.compile_backend, fullgraph=True, dynamic=False
            )
            compile_in_process()
        self.graphed_update: Any = None
        """Runs ``update_steps`` as a CUDA graph where set (runners.graphs.GraphedUpdate)."""
        self.graphed_act: Any = None
        """``runners.graphs.GraphedAct`` of ``policy.act`` (host envs, ``train.cuda_graphs``)."""
        self.value_all_final_obs = False
        """Value every final observation and select (no boolean indexing), even on the CPU."""
        self.normalizes_inside = policy.normalization.inside
        """rsl_rl's normalisers (inside the actor and the critic): they fold in each step's
        post-step observation (``process_env_step``), the rollout keeps raw observations and
        the update normalises them with the statistics at the rollout's end."""
        self.exact_kl = self.profile.exact_kl and not policy.discrete
        """rsl_rl's KL for the adaptive schedule: the exact KL between the stored behaviour
        Gaussian and the current one (the rollout keeps each step's mean), not the estimate."""
        self._behaviour_std: torch.Tensor | None = None
        self.decoupled = False
        """Hilton et al. 2021's decoupled clip (``train.overlap_correction``, set by the
        overlapped runners): ``use_proximal_policy`` before every update."""
        self._behaviour_stats = torch.zeros(len(BEHAVIOUR_NAMES), device=device)
        self.reward_normalizer = (
            RewardNormalizer(
                buffer.num_envs,
                cfg.gamma,
                cfg.reward_clip,
                groups=getattr(policy, "num_agents", 1),  # each agent its own statistics
            ).to(device)
            if cfg.normalize_reward
            else None
        )

    # ----------------------------------------------------------------- rollout verbs
    @torch.inference_mode()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Sample actions for raw ``obs`` (num_envs, *obs_shape) and remember the step."""
        # rsl_rl's normalisers (``normalizes_inside``): no obs_normalizer, ``normalize`` passes
        # the observation through; they fold in the post-step one (process_env_step)
        if self.dist.enabled and self.policy.obs_normalizer is not None:
            # Every rank folds every rank's observations in: the statistics stay identical.
            self.policy.obs_normalizer.update(
                distributed.all_gather_rows(obs, self.dist.world_size)
            )
            obs = self.policy.normalize(obs)
        else:
            obs = self.policy.normalize(obs, update=True)
        with self.autocast:
            if self.exact_kl:
                dist = self.policy.distribution(obs)
                actions = dist.sample()
                logprobs, values = dist.log_prob(actions), self.policy.value(obs)
                self.transition.action_means = dist.mean
            else:
                actions, logprobs, values = (self.graphed_act or self.policy.act)(obs)
        self.transition.obs = obs
        self.transition.actions = actions
        self.transition.logprobs = logprobs
        self.transition.values = values
        return actions

    @torch.inference_mode()
    def process_env_step(self, step: StepResult) -> None:
        """Record the env's answer to the last ``act`` and store the transition."""
        if self.normalizes_inside and cfg_step(self.cfg):  # rsl_rl 5.4: the post-step obs
            self.policy.update_normalizers(step.obs)
        t = self.transition
        t.terminated = step.terminated
        t.episode_end = step.terminated | step.truncated
        t.rewards = step.reward
        if self.reward_normalizer is not None:
            ws = self.dist.world_size
            gather = (lambda x: distributed.all_gather_rows(x, ws)) if self.dist.enabled else None
            t.rewards = self.reward_normalizer(step.reward, t.episode_end, gather)
        # Truncated episodes bootstrap from V(true final observation); terminated ones do not.
        cut = step.truncated & ~step.terminated
        if self.cfg.timeout_bootstrap == "value":  # rsl_rl's: V(the step's first observation)
            # at every time-out, terminal or not (rsl_rl adds gamma * V to each time-out's
            # reward, then cuts the episode): a time-out is then not a terminal for GAE.
            cut = step.truncated
            t.terminated = step.terminated & ~cut
            bootstrap = torch.where(cut, t.values, 0.0)
        elif step.reward.is_cuda or self.value_all_final_obs:
            # No host read: value every final observation, keep the truncated ones.
            bootstrap = torch.where(cut, self.values_of(step.final_obs), 0.0)
        else:
            bootstrap = torch.zeros_like(step.reward, dtype=torch.float32)
            if cut.any():
                bootstrap[cut] = self.values_of(step.final_obs[cut])
        t.bootstrap_values = bootstrap
        self.buffer.add(t)
        t.clear()

    @torch.inference_mode()
    def compute_returns(
        self, last_obs: torch.Tensor | None = None, last_values: torch.Tensor | None = None
    ) -> None:
        """GAE advantages and returns for the finished rollout, bootstrapped from ``last_obs``
        (or from ``last_values``, V(last_obs) as the behaviour policy saw it)."""
        if last_values is None:
            if last_obs is None:
                raise ValueError("compute_returns needs last_obs or last_values")
            last_values = self.values_of(last_obs)
        self.buffer.compute_returns(
            last_values, self.cfg.gamma, self.cfg.gae_lambda, normalize=False
        )
        if self.cfg.normalize_advantage and not self.cfg.normalize_advantage_per_minibatch:
            self.normalize_advantages()

    def values_of(self, obs: torch.Tensor) -> torch.Tensor:
        """(batch,) V of raw (batch, *obs_shape) observations (normaliser applied, no update)."""
        with self.autocast:
            return self.policy.value(self.policy.normalize(obs))

    def normalize_advantages(self) -> None:
        """Advantages to zero mean and unit std over the rollout (over every rank's rollout in
        a distributed run)."""
        self.buffer.normalize_advantages(
            all_reduce=distributed.all_reduce_sum_ if self.dist.enabled else None
        )

    # ------------------------------------------------------------------ update verb
    def learning_rate(self) -> float:
        """Learning rate for the current iteration (linear decay to 0 when annealing; the
        adaptive schedule's current value)."""
        if self.cfg.desired_kl is not None:
            return float(self.optimizer.param_groups[0]["lr"])
        if not self.cfg.anneal_lr:
            return self.cfg.learning_rate
        frac = 1.0 - self.iteration / max(self.num_iterations, 1)
        return self.cfg.learning_rate * max(frac, 0.0)

    def update(self) -> dict[str, float]:
        """Epochs of minibatch gradient steps on the rollout; returns mean losses."""
        lr = self.set_learning_rate()
        if self.decoupled:
            self.use_proximal_policy()
        num_updates, epochs_done = (self.graphed_update or self.update_steps)()
        return self.finish_update(num_updates, epochs_done, lr)

    @torch.no_grad()
    def use_proximal_policy(self) -> None:
        """The decoupled clip (Hilton et al. 2021, "Batch size-invariance for policy
        optimization"), folded into the rollout before the update.

        The proximal policy is this learner's at the update's start, the behaviour policy the
        one that collected the rollout (one update older, overlapped). The loss is
        mean(w * max(-A * r, -A * clip(r, 1 - eps, 1 + eps))), r = pi / pi_prox,
        w = min(pi_prox / pi_behaviour, c). As w > 0 it equals PPO's loss with w * A for A and
        log pi_prox for the stored log-probabilities: both are rewritten here, in place (the
        rollout is cleared after the update), so every update path (eager, compiled, CUDA
        graph) computes it unchanged. rsl_rl's exact KL takes the proximal means too.
        """
        buffer = self.buffer
        obs, actions = buffer.obs.flatten(0, 1), buffer.actions.flatten(0, 1)
        if self.cfg.proximal_values:  # next_values[-1]: V(last obs) or a bootstrap (unused)
            with self.autocast:
                buffer.values.copy_(self.policy.value(obs).view_as(buffer.values))
            self.compute_returns(last_values=buffer.next_values[-1].clone())
        with self.autocast:
            if self.exact_kl:
                dist = self.policy.distribution(obs)
                prox = dist.log_prob(actions)
                buffer.action_means.copy_(dist.mean.view_as(buffer.action_means))
            else:
                prox = self.policy.evaluate(obs, actions)[0]
        behaviour = buffer.logprobs  # (num_steps, num_envs)
        prox = prox.view_as(behaviour).to(behaviour.dtype)
        clip = self.cfg.behaviour_weight_clip
        truncated = (prox - behaviour).exp() > clip if clip is not None else torch.zeros(1)
        self._behaviour_stats.copy_(torch.stack([  # KL(behaviour || proximal): its samples
            approx_kl(prox, behaviour).float(), truncated.float().mean().to(prox.device)
        ]))  # fmt: skip
        buffer.advantages.mul_(behaviour_weights(prox, behaviour, clip))
        behaviour.copy_(prox)

    def prepare_capture(self) -> str | None:
        """Make now what the first update makes lazily, so that a CUDA graph can capture the
        first iteration without an eager one before it; None when done, else why it cannot
        (then the run warms up eagerly, as before)."""
        if not isinstance(self.optimizer, FusedAdam):
            return "torch.optim.Adam (fp16's gradient scaler) creates its state in its step"
        if self.cfg.desired_kl is not None or self.cfg.target_kl is not None:
            return "a KL-driven schedule"
        if self.dist.enabled:  # every rank must take the same path: the eager one is known
            return "a distributed run (NCCL sets its connections up at the first collective)"
        self.optimizer.init_state()
        self.buffer.warm_kernels()
        self._warm_gemms()
        return None

    def _warm_gemms(self) -> None:
        """One forward and backward on the buffer's first stored step, gradients dropped: the
        GEMM libraries' lazy set-up (handles, workspaces) happens now, not inside a capture."""
        obs, actions = self.buffer.obs[0], torch.zeros_like(self.buffer.actions[0])
        with self.autocast:
            logprobs, entropy, values = self.policy.evaluate(*self._as_batch(obs, actions))
        (logprobs.float().sum() + entropy.float().sum() + values.float().sum()).backward()
        self.optimizer.zero_grad(set_to_none=True)

    def _as_batch(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Rows of the buffer (num_envs, ...) as the policy takes a batch."""
        return tensors

    def set_learning_rate(self) -> float:
        """Apply this iteration's learning rate (in place when it is a device tensor)."""
        lr = self.learning_rate()
        for group in self.optimizer.param_groups:
            if isinstance(group["lr"], torch.Tensor):
                group["lr"].fill_(lr)
            else:
                group["lr"] = lr
        return lr

    def update_steps(self) -> tuple[int, int]:
        """The gradient steps of one update; loss sums accumulate on the device.

        Returns (gradient steps taken, epochs completed). With ``capturable`` (or no
        ``target_kl``) nothing here reads the device, so a CUDA graph can capture it.
        """
        cfg = self.cfg
        sums = self._loss_sums
        sums.zero_()
        num_updates = 0
        epochs_done = 0
        kl_index = LOSS_NAMES.index("approx_kl")
        early_stop = cfg.target_kl is not None and not self.capturable
        if self.exact_kl:  # the behaviour's std: the rollout acted with the update's first std
            self._behaviour_std = self.policy.std.detach().clamp(1e-6, 1e6)
        # rsl_rl draws one permutation an update: every epoch the same minibatches
        batches = self.buffer.minibatches(
            cfg.num_epochs, one_order=self.profile.one_minibatch_order
        )
        for i, mb in enumerate(batches):
            sums += torch.stack(self._minibatch_step(mb)).detach()
            num_updates += 1
            if (i + 1) % self.buffer.num_minibatches == 0:
                epochs_done += 1
                if early_stop and sums[kl_index].item() / num_updates > cfg.target_kl:
                    break
        if self.normalizes_inside and not cfg_step(cfg):  # rsl_rl 5.5: after the optimisation,
            # once, from the rollout's stored (pre-step) observations; no host read (graphs)
            self.policy.update_normalizers(self.buffer.obs.flatten(0, 1))
        return num_updates, epochs_done

    def finish_update(self, num_updates: int, epochs_done: int, lr: float) -> dict[str, float]:
        """Close the iteration and read the mean losses (the one host read of an update)."""
        self.buffer.clear()
        self.iteration += 1
        means = (self._loss_sums / num_updates).tolist()
        stats = {f"losses/{name}": value for name, value in zip(LOSS_NAMES, means, strict=True)}
        stats["losses/epochs"] = float(epochs_done)
        if self.decoupled:
            behaviour = self._behaviour_stats.tolist()
            stats |= {f"losses/{n}": v for n, v in zip(BEHAVIOUR_NAMES, behaviour, strict=True)}
        stats["charts/learning_rate"] = (
            self.learning_rate() if self.cfg.desired_kl is not None else lr
        )
        return stats

    loss_scale = 1.0
    """Factor on the minibatch loss (the many-agents form sums its agents' mean losses)."""

    def clip_gradients(self) -> None:
        """Average the gradients over ranks (one all-reduce), then clip their global norm (with
        the rsl_rl profile: the critic's, and the rest's, each on its own)."""
        if self.dist.enabled:  # every rank takes the same step
            distributed.average_gradients(self._params, self.dist.world_size)
        if self.profile.clip_each_network:
            critic = {id(p) for p in self.policy.critic.parameters()}
            actor = [p for p in self._params if id(p) not in critic]
            nn.utils.clip_grad_norm_(actor, self.cfg.max_grad_norm)
            nn.utils.clip_grad_norm_(self.policy.critic.parameters(), self.cfg.max_grad_norm)
            return
        nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.max_grad_norm)

    compile_backend = "inductor"
    """torch.compile's backend for ``ppo.compile_update`` (tests on a CPU box: aot_eager)."""

    def minibatch_losses(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        old_logprobs: torch.Tensor,
        advantages: torch.Tensor,
        old_values: torch.Tensor,
        returns: torch.Tensor,
        old_means: torch.Tensor | None = None,
        old_std: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, ...]:
        """(loss, policy loss, value loss, entropy, KL, clip fraction) of a minibatch; only
        ``loss`` carries gradients. The KL is the estimate mean((r - 1) - log r), or with the
        behaviour Gaussian's ``old_means`` and ``old_std`` the exact KL (rsl_rl's). Tensors in,
        tensors out: ``torch.compile`` takes it whole (``ppo.compile_update``)."""
        cfg = self.cfg
        with self.autocast:  # the heads come back fp32 (ActorCritic), the losses stay fp32
            if old_means is None:
                logprobs, entropy, values = self.policy.evaluate(obs, actions)
            else:
                dist = self.policy.distribution(obs)
                logprobs, entropy, values = (
                    dist.log_prob(actions), dist.entropy(), self.policy.value(obs)
                )  # fmt: skip
        # advantages were normalised over the whole rollout in compute_returns when asked,
        # or are here, this minibatch's on their own (SB3's, rsl_rl's per_mini_batch)
        if cfg.normalize_advantage and cfg.normalize_advantage_per_minibatch:
            advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        pg_loss = clipped_surrogate_loss(logprobs, old_logprobs, advantages, cfg.clip_coef)
        v_loss = value_loss(
            values, old_values, returns, cfg.clip_coef if cfg.clip_value_loss else None
        )
        ent = entropy.mean()
        loss = self.loss_scale * (pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss)
        with torch.no_grad():
            if old_means is None:
                kl = approx_kl(logprobs, old_logprobs)
            else:  # KL(behaviour || current), summed over dimensions, mean over the minibatch
                kl = gaussian_kl(old_means, old_std, dist.mean, dist.std).mean()
            clip_frac = ((logprobs - old_logprobs).exp().sub(1.0).abs() > cfg.clip_coef).float()
        return loss, pg_loss.detach(), v_loss.detach(), ent.detach(), kl, clip_frac.mean()

    def _minibatch_step(self, mb) -> tuple[torch.Tensor, ...]:
        """One gradient step on a minibatch (fields as in ``Batch``); returns the loss terms."""
        loss, pg_loss, v_loss, ent, kl, clip_frac = self._losses(
            mb.obs, mb.actions, mb.logprobs, mb.advantages, mb.values, mb.returns,
            *((mb.action_means, self._behaviour_std) if self.exact_kl else ()),
        )  # fmt: skip
        if self.cfg.desired_kl is not None:  # before the step, from this forward pass (rsl_rl)
            self._adapt_learning_rate(kl)
        # None, not zeros: backward then writes the gradients (no fill and no accumulate kernel
        # per parameter); under CUDA graph capture it allocates them from the graph's private
        # pool, as torch's whole-network capture recipe does.
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)  # clip the true gradients
        self.clip_gradients()
        self.scaler.step(self.optimizer)  # fused Adam skips the step on inf/NaN, no host read
        self.scaler.update()
        return pg_loss, v_loss, ent, kl, clip_frac

    def _adapt_learning_rate(self, kl: torch.Tensor) -> None:
        """rsl_rl's adaptive schedule, on the device: lr / 1.5 when KL > 2 * desired_kl, lr *
        1.5 when 0 < KL < desired_kl / 2, kept within [1e-5, 1e-2]."""
        desired = self.cfg.desired_kl
        lr = self.optimizer.param_groups[0]["lr"]
        lower = torch.clamp(lr / 1.5, min=1e-5)
        higher = torch.clamp(lr * 1.5, max=1e-2)
        new = torch.where(kl > 2.0 * desired, lower, lr)
        new = torch.where((kl < 0.5 * desired) & (kl > 0.0), higher, new)
        for group in self.optimizer.param_groups:
            group["lr"].copy_(new)

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """Policy, optimizer and iteration counter."""
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),
            "iteration": self.iteration,
            **(
                {"reward_normalizer": self.reward_normalizer.state_dict()}
                if self.reward_normalizer is not None
                else {}
            ),
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` saved."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.graphed_update is not None:  # its graphs read the replaced moments
            self.graphed_update.reset()
        if self.capturable or self.cfg.desired_kl is not None:  # keep it a device tensor
            for group in self.optimizer.param_groups:
                group["lr"] = torch.as_tensor(group["lr"], device=self.device).clone()
        if state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        if self.reward_normalizer is not None and "reward_normalizer" in state:
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])
        self.iteration = int(state["iteration"])
