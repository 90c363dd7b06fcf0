"""What SAC and DQN share: replay storage, the env-step verb, n-step returns, checkpoints.

The trainer's verbs keep their meaning: ``act`` picks actions, ``process_env_step`` stores the
transitions in the replay buffer, ``compute_returns`` has nothing to do (targets are computed per
sampled batch), and ``update`` runs a round of gradient steps once ``learning_starts`` steps
have been collected.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from orin_rl.buffers import PrioritizedReplayBuffer, ReplayBuffer, frame_history
from orin_rl.buffers.frame_history import FrameHistory
from orin_rl.buffers.replay import ReplayBatch, ReplayError
from orin_rl.capture import capture
from orin_rl.envs import StepResult
from orin_rl.models import PolicySpec

log = logging.getLogger(__name__)


class NStepAccumulator:
    """Turns 1-step transitions of ``num_envs`` envs into n-step ones (Sutton & Barto 7.1).

    A window of the last n steps per env; an entry leaves it as
    (s_t, a_t, sum_{i<k} gamma^i r_{t+i}, s_{t+k}, terminated, gamma^k) with k = n, or fewer
    when the episode ends first (every entry still in the window leaves then).
    """

    def __init__(self, n: int, gamma: float):
        self.n, self.gamma = n, gamma
        self.window: dict[str, torch.Tensor] | None = None
        self.valid: torch.Tensor | None = None

    def push(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        ended: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        """Add one batched step; return the transitions that complete (flat batch)."""
        n = self.n
        if self.window is None:
            self.window = {
                name: torch.zeros((n, *x.shape), dtype=x.dtype, device=x.device)
                for name, x in (("obs", obs), ("actions", actions), ("rewards", rewards))
            }
            self.valid = torch.zeros((n, len(obs)), dtype=torch.bool, device=obs.device)
        w, valid = self.window, self.valid
        for name, x in (("obs", obs), ("actions", actions), ("rewards", rewards)):
            w[name] = torch.cat([w[name][1:], x.unsqueeze(0)])
        valid = torch.cat([valid[1:], torch.ones_like(valid[:1])])
        # Returns from each window position to now: R_j = r_j + gamma * R_{j+1}.
        returns = torch.zeros_like(w["rewards"], dtype=torch.float32)
        acc = torch.zeros_like(rewards, dtype=torch.float32)
        for j in range(n - 1, -1, -1):
            acc = torch.where(valid[j], w["rewards"][j].float() + self.gamma * acc, acc)
            returns[j] = acc
        steps = torch.arange(n, 0, -1, device=obs.device).unsqueeze(1).expand_as(valid)
        # A full window (its oldest slot filled) emits its oldest entry; an ended episode
        # emits every entry it still holds.
        oldest = torch.zeros_like(valid)
        oldest[0] = True
        emit = valid & (oldest | ended.unsqueeze(0))
        j_idx, e_idx = emit.nonzero(as_tuple=True)
        out = {
            "obs": w["obs"][j_idx, e_idx],
            "actions": w["actions"][j_idx, e_idx],
            "rewards": returns[j_idx, e_idx],
            "next_obs": next_obs[e_idx],
            "terminated": terminated[e_idx].float(),
            "discounts": torch.pow(self.gamma, steps[j_idx, e_idx].float()),
        }
        self.valid = valid & ~ended.unsqueeze(0)  # a new episode starts with an empty window
        return out


def newest_frame(obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """(batch, H, W) newest frame of ``next_obs`` (batch, k, H, W), after checking that the rest
    of it is ``obs`` shifted by one frame (a frame stack's step: FrameStackObservation's, its
    final observation included), so ``OffPolicyAlgorithm.next_obs`` rebuilds it exactly."""
    if not torch.equal(next_obs[:, :-1], obs[:, 1:]):
        raise ReplayError(
            "share_frames: next_obs is not obs shifted by one frame (observations that are not "
            "a frame stack on their first axis); set share_frames false"
        )
    return next_obs[:, -1]


class OffPolicyAlgorithm:
    """Base of SAC and DQN; subclasses build ``policy`` and define ``act`` and ``_step``."""

    policy: torch.nn.Module

    def __init__(
        self,
        spec: PolicySpec,
        cfg: Any,
        num_envs: int,
        device: torch.device,
        placement: str,
        log_every: int,
        n_step: int = 1,
        graphs: bool = False,
        precision: str = "fp32",
    ):
        self.cfg = cfg
        self.graphs = graphs
        # Mixed precision as in PPO: autocast around the networks (their heads come back fp32),
        # a gradient scaler only for fp16; no autocast weight cache inside a CUDA graph.
        dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
        self.autocast = torch.autocast(
            device.type, dtype=dtype, enabled=dtype is not None, cache_enabled=not graphs
        )
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
        """Replay the gradient step from a CUDA graph (SAC on CUDA with uniform replay)."""
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static: dict[str, torch.Tensor] = {}
        self._static_out: torch.Tensor | None = None
        self.spec = spec
        self.device = device
        self.num_envs = num_envs
        self.rollout_steps = max(1, cfg.train_freq // num_envs)
        """Vector-env steps per iteration (one round of gradient steps follows)."""
        self.log_every = log_every
        discrete = spec.action_kind == "discrete"
        obs_shape = tuple(spec.obs_shape)
        obs_dtype = getattr(torch, spec.obs_dtype)  # uint8 frames stay uint8 (replay_bytes)
        fields = {
            "obs": (obs_shape, obs_dtype),
            "actions": ((), torch.int64) if discrete else ((spec.action_dim,), torch.float32),
            "rewards": ((), torch.float32),
            "next_obs": (obs_shape, obs_dtype),
            "terminated": ((), torch.float32),
            "discounts": ((), torch.float32),
        }
        self.share_frames = bool(getattr(cfg, "share_frames", False))
        """next_obs kept as its newest frame (``newest_frame``), rebuilt by ``next_obs``."""
        if self.share_frames:
            if spec.obs_dtype != "uint8" or len(obs_shape) != 3:
                raise ReplayError(f"share_frames needs uint8 frame stacks (k, H, W), not "
                                  f"{spec.obs_dtype} {obs_shape}")  # fmt: skip
            del fields["next_obs"]
            fields["next_frame"] = (obs_shape[1:], obs_dtype)
        self.frame_history: FrameHistory | None = None
        if getattr(cfg, "frame_history", False):
            if spec.obs_dtype != "uint8":
                raise ReplayError(f"frame_history needs uint8 frame stacks, not {spec.obs_dtype}")
            for name in ("obs", "next_obs"):
                del fields[name]
            fields.update(frame_history.fields(obs_shape))
        if cfg.prioritized:
            self.replay: ReplayBuffer = PrioritizedReplayBuffer(
                cfg.buffer_size, fields, device, placement,
                alpha=cfg.per_alpha, beta=cfg.per_beta,
            )  # fmt: skip
        else:
            self.replay = ReplayBuffer(cfg.buffer_size, fields, device, placement)
        if "frame" in fields:
            self.frame_history = FrameHistory(self.replay, obs_shape, num_envs)
        self.nstep = NStepAccumulator(n_step, cfg.gamma) if n_step > 1 else None
        self.iteration = 0
        self.env_steps = 0
        self.grad_steps = 0
        self._last: tuple[torch.Tensor, torch.Tensor] | None = None
        self._loss_sums: torch.Tensor | None = None
        self._loss_count = 0

    # ----------------------------------------------------------------- rollout verbs
    @torch.inference_mode()
    def process_env_step(self, step: StepResult) -> None:
        """Store (s, a, r, s', terminated, discount); s' is the true final obs at episode ends."""
        obs, actions = self._last
        ended = step.terminated | step.truncated
        if self.nstep is not None:
            batch = self.nstep.push(
                obs, actions, step.reward, step.final_obs, step.terminated, ended
            )
        else:
            batch = {
                "obs": obs,
                "actions": actions,
                "rewards": step.reward.float(),
                "next_obs": step.final_obs,
                "terminated": step.terminated.float(),
                "discounts": torch.full_like(step.reward, self.cfg.gamma, dtype=torch.float32),
            }
        if self.share_frames:
            batch["next_frame"] = newest_frame(batch["obs"], batch.pop("next_obs"))
        elif self.frame_history is not None:
            batch = self.frame_history.rows(batch, ended)  # start rows, then the transitions
        if len(batch["actions"]):
            self.replay.add(batch)
        self.env_steps += self.num_envs

    def next_obs(self, batch: ReplayBatch) -> torch.Tensor:
        """(batch, *obs_shape) next observations of a sampled batch; with ``share_frames``
        obs[1:] + the stored newest frame (what ``newest_frame`` checked at the insert)."""
        if not self.share_frames:
            return batch["next_obs"]
        return torch.cat([batch["obs"][:, 1:], batch["next_frame"].unsqueeze(1)], dim=1)

    def compute_returns(self, last_obs: torch.Tensor) -> None:
        """Nothing to do: targets are computed for each sampled batch."""

    # ------------------------------------------------------------------ update verb
    def update(self) -> dict[str, float]:
        """A round of ``gradient_steps`` updates once ``learning_starts`` steps are stored; the
        mean losses are read from the device every ``log_every`` iterations."""
        cfg = self.cfg
        if self.env_steps >= cfg.learning_starts and len(self.replay) >= cfg.batch_size:
            for _ in range(cfg.gradient_steps):
                losses = self.gradient_step()
                self._loss_sums = losses if self._loss_sums is None else self._loss_sums + losses
                self._loss_count += 1
                self.grad_steps += 1
        self.iteration += 1
        stats: dict[str, float] = {"charts/gradient_steps": float(self.grad_steps)}
        if self._loss_count and self.iteration % self.log_every == 0:
            means = (self._loss_sums / self._loss_count).tolist()
            stats.update({f"losses/{k}": v for k, v in zip(self.loss_names, means, strict=True)})
            self._loss_sums, self._loss_count = None, 0
        stats.update(self._extra_stats())
        return stats

    def _sample(self):
        batch = self.replay.sample(self.cfg.batch_size)
        if self.frame_history is not None:
            return self.frame_history.sample(batch)
        return batch

    def gradient_step(self) -> torch.Tensor:
        """One gradient step on a fresh batch; its losses (on the device, not synchronised):
        a CUDA graph replay with graphs (the batch copied into the graph's inputs), else
        eager."""
        batch = self._sample()
        return self._graphed_step(batch) if self.graphs else torch.stack(self._step(batch))

    def _graphed_step(self, batch: ReplayBatch) -> torch.Tensor:
        """One gradient step as a CUDA graph replay: the sampled batch is copied into static
        tensors the graph reads. The first call runs the step eagerly on a side stream (the
        warm-up: it creates gradients and optimizer state) and then captures it."""
        if self._graph is not None:
            for name, value in batch.data.items():
                self._static[name].copy_(value)
            self._graph.replay()
            return self._static_out.clone()
        self._static = {name: value.clone() for name, value in batch.data.items()}
        static_batch = ReplayBatch(self._static, batch.indices)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            out = torch.stack(self._step(static_batch))
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with capture(graph):  # a failure leaves torch's generators as found
                self._static_out = torch.stack(self._step(static_batch))
        except Exception as exc:  # slower, not wrong
            log.warning("CUDA graph capture of the update failed (%s); running eagerly", exc)
            self.graphs = False
            return out
        self._graph = graph
        log.info("captured the gradient step in a CUDA graph")
        return out

    def _weights(self, batch) -> torch.Tensor | None:
        return batch.weights

    def _update_priorities(self, batch, td: torch.Tensor) -> None:
        if isinstance(self.replay, PrioritizedReplayBuffer):
            self.replay.update_priorities(batch.indices, td.detach().abs())

    def _extra_stats(self) -> dict[str, float]:
        return {}

    # ------------------------------------------------------------------ checkpoints
    def _buffer_state(self) -> dict | None:
        cfg = self.cfg
        if not cfg.save_buffer:
            return None
        mib = self.replay.nbytes / 2**20
        if mib > cfg.save_buffer_max_mb:
            log.warning(
                "replay buffer (%.0f MiB) above save_buffer_max_mb=%d: not in the checkpoint",
                mib,
                cfg.save_buffer_max_mb,
            )
            return None
        return self.replay.state_dict()

    def _counters(self) -> dict[str, int]:
        return {
            "iteration": self.iteration,
            "env_steps": self.env_steps,
            "grad_steps": self.grad_steps,
        }

    def _load_counters(self, state: dict) -> None:
        self.iteration = int(state["iteration"])
        self.env_steps = int(state["env_steps"])
        self.grad_steps = int(state["grad_steps"])
        if state.get("replay") is not None:
            self.replay.load_state_dict(state["replay"])
            log.info("replay buffer restored: %d transitions", len(self.replay))
