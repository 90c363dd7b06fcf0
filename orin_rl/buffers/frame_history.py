"""Frame stacks stored as frames (``dqn.frame_history``): each frame once, one a replay row.

A frame-stack observation (uint8 (k, H, W): Atari's 4 x 84 x 84 through gymnasium's
``FrameStackObservation``) repeats k - 1 frames of the step before it, and a transition's
next observation is its observation shifted by one frame. So each env's frames form a chain of
replay rows, one frame a row:

- a transition row keeps its next observation's newest frame (at an episode's end the final
  frame, the one a truncated episode bootstraps from) and ``back``, how many rows before it its
  env's previous row of the chain is;
- a start row keeps the newest frame of the observation a chain starts from (an episode's reset
  frame, or an env's first observation in this buffer); it is no transition (``depth`` 0,
  ``back`` 0: never sampled) and costs one row an episode.

A transition row's ``depth`` is its rows back to its chain's start row, at most k (255: its
stack cannot be rebuilt, below).

The stack of transition row r: next_obs is the frames of r and of the k - 1 rows before it on
its chain, obs the frames of the k rows before it; a walk that reaches the start row stays
there, which pads the stack with its first frame, as ``FrameStackObservation`` pads a fresh
episode with its reset frame (``padding_type="reset"``, gymnasium's default). Each vector step
writes the start rows of the envs beginning a chain, then one transition row an env.

Every insert rebuilds the observation from the stored frames and compares it with the real
one: a mismatch is a ``ReplayError`` (observations that are not such a stack), except for an
env's first k - 1 transitions after the buffer was made (a resumed run's envs are mid-episode:
their stacks reach back before the buffer), which are stored but marked unusable (depth 255).

``serial`` numbers the rows as written; a walk checks that every row it reads still holds the
serial it expects, so a transition whose chain the ring has overwritten (at most k of an env's
oldest rows) is unusable. A sampled start row or unusable transition is drawn again, uniformly,
until usable (up to ``REDRAWS`` rounds; then a usable slot of the same batch): uniform sampling
over the usable transitions. Uniform replay only: prioritized replay is refused with it (its
weights and priorities are those of the slots it drew).

Bytes: H W + 13 a row (frame, depth 1, back 4, serial 8) plus the scalars' 20: Atari 7,089. A
replay holding T transitions of E episodes takes T + E rows (``buffer_size`` counts rows):
Breakout's random play wrote 1.026 rows a transition, 7.27 GB for 1M transitions
(docs/benchmarks/frame_replay_breakout.md), against 2 H W + 29 a transition with two frames
(the layout this replaced: 14,141, 14.1 GB), k H W + H W + 20 with ``share_frames`` (35,300)
and 2 k H W + 20 without (56,468).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from orin_rl.buffers.replay import (
    PrioritizedReplayBuffer,
    ReplayBatch,
    ReplayBuffer,
    ReplayError,
)

START = 0
"""``depth`` of a start row (a chain's first frame; no transition)."""
UNUSABLE = 255
"""``depth`` of a transition whose stack cannot be rebuilt (an env's first steps after a resume)."""
REDRAWS = 16
"""Draws again for the unusable slots of a batch (each round redraws those still unusable)."""
LAYOUT = ("frame", "depth", "back", "serial")
"""The replay fields of the layout (the rest are the transition's scalars)."""


def fields(obs_shape: tuple[int, ...]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The replay fields standing for ``obs`` and ``next_obs`` (k, H, W)."""
    if len(obs_shape) != 3 or not 2 <= obs_shape[0] < UNUSABLE:
        raise ReplayError(f"frame_history needs uint8 frame stacks (k, H, W), 2 <= k < "
                          f"{UNUSABLE}, not {obs_shape}")  # fmt: skip
    return {
        "frame": (tuple(obs_shape[1:]), torch.uint8),
        "depth": ((), torch.uint8),
        "back": ((), torch.int32),
        "serial": ((), torch.int64),
    }


class FrameHistory:
    """Writes and rebuilds the frame-stack fields of ``replay`` (module docstring) for
    ``num_envs`` envs adding one transition each per vector step."""

    def __init__(self, replay: ReplayBuffer, obs_shape: tuple[int, ...], num_envs: int):
        if isinstance(replay, PrioritizedReplayBuffer):
            raise ReplayError("frame_history takes uniform replay: set dqn.prioritized false")
        self.replay = replay
        self.k = int(obs_shape[0])
        self.num_envs = num_envs
        if replay.capacity < 2 * self.k * num_envs:
            raise ReplayError(
                f"frame_history: a buffer of {replay.capacity} rows holds fewer than 2 k x "
                f"num_envs = {2 * self.k * num_envs}; raise dqn.buffer_size"
            )
        dev = replay.storage_device
        self.adds = 0
        """Rows written (the next row's ``serial``)."""
        self.start_rows = 0
        """Start rows written (one an episode, and one an env's first step)."""
        self.unusable_writes = 0
        """Transitions stored unusable (a resumed env's first steps)."""
        self._serial = torch.zeros(num_envs, dtype=torch.int64, device=dev)
        self._slot = torch.zeros(num_envs, dtype=torch.int64, device=dev)
        """Serial and slot of each env's newest row."""
        self._depth = torch.zeros(num_envs, dtype=torch.int64, device=dev)
        """Each env's newest row's ``depth`` (its rows back to its chain's start row, at most
        k)."""
        self._ended = torch.ones(num_envs, dtype=torch.bool, device=dev)
        """Envs whose next transition starts a chain."""
        self._fresh = torch.ones(num_envs, dtype=torch.bool, device=dev)
        """Envs whose stack may reach back before this buffer (cleared by an episode end or a
        chain of k rows)."""

    def rows(self, batch: Mapping[str, torch.Tensor], ended: torch.Tensor) -> dict:
        """The replay rows of one vector step: ``batch`` holds the transitions (``obs`` and
        ``next_obs`` (num_envs, k, H, W) uint8, the scalar fields), ``ended`` (num_envs,) bool
        (terminated or truncated). Returns the start rows (scalars zero) then the transitions,
        ``obs`` and ``next_obs`` replaced by the layout's fields."""
        replay, n = self.replay, self.num_envs
        dev = replay.storage_device
        if self.adds == 0 and len(replay):  # a restored buffer: serials go on past its own
            self.adds = int(replay.field("serial")[: len(replay)].max()) + 1
        obs, next_obs = batch["obs"].to(dev), batch["next_obs"].to(dev)
        starting = self._ended
        depth = torch.where(starting, 1, (self._depth + 1).clamp(max=self.k))
        ok = self._check(obs, next_obs, starting, depth)
        starts = starting.nonzero().squeeze(1)
        s = len(starts)
        serial = self.adds + s + torch.arange(n, device=dev)
        # an env's previous row: its start row written now, or its newest transition
        prev = torch.where(starting, self.adds + starting.cumsum(0) - 1, self._serial)
        out = {}
        for name, value in batch.items():
            if name not in ("obs", "next_obs"):
                value = value.to(dev)
                out[name] = torch.cat([value.new_zeros((s, *value.shape[1:])), value])
        out["frame"] = torch.cat([obs[starts, -1], next_obs[:, -1]])
        out["depth"] = torch.cat([depth.new_full((s,), START),
                                  torch.where(ok, depth, UNUSABLE)]).to(torch.uint8)  # fmt: skip
        out["back"] = torch.cat([depth.new_zeros(s), serial - prev]).to(torch.int32)
        out["serial"] = torch.cat([self.adds + torch.arange(s, device=dev), serial])
        ended = ended.to(dev, torch.bool)
        self._fresh &= ~(ended | (depth == self.k))
        self._serial, self._depth, self._ended = serial, depth, ended
        self._slot = (replay.pos + s + torch.arange(n, device=dev)) % replay.capacity
        self.adds += s + n
        self.start_rows += s
        return out

    def _check(
        self,
        obs: torch.Tensor,
        next_obs: torch.Tensor,
        starting: torch.Tensor,
        depth: torch.Tensor,
    ) -> torch.Tensor:
        """(num_envs,) bool: each observation is the one its chain rebuilds (``depth``, the new
        transitions'); a ``ReplayError`` for one that is not, unless its stack may reach back
        before this buffer (then it is stored unusable)."""
        if len(obs) != self.num_envs:
            raise ReplayError(f"frame_history: one row per env a step ({self.num_envs}), got "
                              f"{len(obs)}")  # fmt: skip
        if not torch.equal(next_obs[:, :-1], obs[:, 1:]):
            raise ReplayError(
                "frame_history: next_obs is not obs shifted by one frame (observations that "
                "are not a frame stack on their first axis); set dqn.frame_history false"
            )
        ok = (self._rebuilt(obs[:, -1], starting) == obs).flatten(1).all(1)
        excused = self._fresh & (depth < self.k)  # may reach back before the buffer
        if bool((~ok & ~excused).any()):
            raise ReplayError(
                "frame_history: an observation is not its env's earlier frames plus a new one "
                "(a frame stack padded with its reset frame, FrameStackObservation's); set "
                "dqn.frame_history false"
            )
        self.unusable_writes += int((~ok).sum())
        return ok

    def _walk(self, slots: torch.Tensor, steps: int) -> tuple[list[torch.Tensor], torch.Tensor]:
        """The slots of the rows 0 to ``steps`` back along the chains of the rows at ``slots``
        (a start row's chain stays on it), and (len(slots),) bool: every row read still holds
        the serial the walk expects (not overwritten by the ring)."""
        back, serial = self.replay.field("back"), self.replay.field("serial")
        expected = serial[slots]
        chain, intact = [slots], torch.ones_like(slots, dtype=torch.bool)
        for _ in range(steps):
            step = back[slots].long()
            slots = (slots - step) % self.replay.capacity
            expected = expected - step
            intact &= serial[slots] == expected
            chain.append(slots)
        return chain, intact

    def _rebuilt(self, newest: torch.Tensor, starting: torch.Tensor) -> torch.Tensor:
        """(num_envs, k, H, W): the observations the stored chains give for this step, their
        newest frames ``newest`` (those of the start rows for the ``starting`` envs)."""
        chain, _ = self._walk(self._slot, self.k - 1)
        stack = self.replay.field("frame")[torch.stack(chain[::-1], dim=1)]
        padded = newest.unsqueeze(1).expand_as(stack)
        return torch.where(starting.view(-1, 1, 1, 1), padded, stack)

    def usable(self, slots: torch.Tensor) -> torch.Tensor:
        """(len(slots),) bool: each slot is a transition whose stack can be rebuilt."""
        return self._checked(slots)[0]

    def _checked(self, slots: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``usable(slots)`` and the chains its walk read (the sample's frames reuse them)."""
        depth = self.replay.field("depth")[slots]
        chain, intact = self._walk(slots, self.k)
        return (depth != START) & (depth != UNUSABLE) & intact, chain

    def sample(self, batch: ReplayBatch) -> ReplayBatch:
        """``batch`` (drawn uniformly from the replay) with its start rows and unusable slots
        drawn again until usable (rejection sampling: uniform over the usable transitions)
        and ``obs`` and ``next_obs`` rebuilt; the indices are the slots used."""
        replay = self.replay
        dev = replay.storage_device
        slots = batch.indices.to(dev)
        ok, chain = self._checked(slots)
        for _ in range(REDRAWS):
            if bool(ok.all()):
                break
            again = torch.randint(0, len(replay), slots.shape, device=dev)
            slots = torch.where(ok, slots, again)
            ok, chain = self._checked(slots)
        if not bool(ok.all()):
            if not bool(ok.any()):
                raise ReplayError(
                    "frame_history: no transition whose stack can be rebuilt yet (a restored "
                    "buffer's first steps); raise learning_starts"
                )
            slots = torch.where(ok, slots, slots[ok][0])
            chain, _ = self._walk(slots, self.k)
        data = {n: v for n, v in replay.gather(slots).items() if n not in LAYOUT}
        # (batch, k + 1, H, W): the frames of the rows k back to the sampled one
        frames = replay.field("frame")[torch.stack(chain[::-1], dim=1)].to(replay.device)
        data["obs"], data["next_obs"] = frames[:, :-1], frames[:, 1:]
        return ReplayBatch(data, slots.to(replay.device), batch.weights)
