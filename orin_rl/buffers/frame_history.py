"""Frame stacks stored as frames (``dqn.frame_history``): two frames a transition, not two stacks.

A frame-stack observation (uint8 (k, H, W): Atari's 4 x 84 x 84 through gymnasium's
``FrameStackObservation``) repeats k - 1 frames of the step before it. Here each replay slot keeps
its observation's newest frame and its next observation's newest frame; the k - 1 older frames of
the stack are the newest frames of the same env's previous slots. The runner adds one row per env
per vector step, so env e's previous slot is ``slot - num_envs`` (mod the capacity).

Each slot records ``depth``, how many previous slots of its episode the stack reaches (0 to k - 1);
positions older than that repeat the episode's first frame, as ``FrameStackObservation`` pads a
fresh episode with its reset frame (``padding_type="reset"``, gymnasium's default). Every insert
rebuilds the observation from the stored frames and compares it with the real one: a mismatch is a
``ReplayError`` (observations that are not such a stack), except in the first k - 1 steps of an
env after the buffer was made (a resumed run's envs are mid-episode: their stacks reach back before
the buffer), whose slots are stored but marked unusable (depth 255).

A slot is unusable too once the ring has overwritten a slot its stack reads (the k - 1 oldest
rounds of a full buffer): ``serial`` (the vector step that wrote a slot) tells. A sampled unusable
slot is drawn again, uniformly, until usable (up to ``REDRAWS`` rounds; then a usable slot of the
same batch): uniform sampling over the usable slots. Uniform replay only: prioritized replay
is refused with it (its weights and priorities are those of the slots it drew).

Bytes: 2 H W + 9 a transition (Atari: 14,121, and the scalars' 20: 14,141), against
k H W + H W + 20 with ``share_frames`` (35,300) and 2 k H W + 20 without (56,468): a 1M Atari
replay is 14.1 GB (35.3 GB, 56.5 GB).
"""

from __future__ import annotations

import torch

from orin_rl.buffers.replay import (
    PrioritizedReplayBuffer,
    ReplayBatch,
    ReplayBuffer,
    ReplayError,
)

UNUSABLE = 255
"""``depth`` of a slot whose stack cannot be rebuilt (an env's first steps after a resume)."""
REDRAWS = 16
"""Draws again for the unusable slots of a batch (each round redraws those still unusable)."""


def fields(obs_shape: tuple[int, ...]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """The replay fields standing for ``obs`` and ``next_obs`` (k, H, W)."""
    if len(obs_shape) != 3 or obs_shape[0] < 2:
        raise ReplayError(f"frame_history needs uint8 frame stacks (k, H, W), k >= 2, not "
                          f"{obs_shape}")  # fmt: skip
    frame = tuple(obs_shape[1:])
    return {
        "frame": (frame, torch.uint8),
        "next_frame": (frame, torch.uint8),
        "depth": ((), torch.uint8),
        "serial": ((), torch.int64),
    }


class FrameHistory:
    """Writes and rebuilds the frame-stack fields of ``replay`` (module docstring) for
    ``num_envs`` envs adding one row each per vector step."""

    def __init__(self, replay: ReplayBuffer, obs_shape: tuple[int, ...], num_envs: int):
        if isinstance(replay, PrioritizedReplayBuffer):
            raise ReplayError("frame_history takes uniform replay: set dqn.prioritized false")
        self.replay = replay
        self.k = int(obs_shape[0])
        self.num_envs = num_envs
        if replay.capacity < 2 * self.k * num_envs:
            raise ReplayError(
                f"frame_history: a buffer of {replay.capacity} holds fewer than 2 k x num_envs "
                f"= {2 * self.k * num_envs} transitions; raise dqn.buffer_size"
            )
        dev = replay.storage_device
        self.adds = 0
        """Vector steps written (the next ``serial``)."""
        self._chain = torch.zeros(num_envs, dtype=torch.int64, device=dev)
        self._ended = torch.ones(num_envs, dtype=torch.bool, device=dev)
        self._fresh = torch.ones(num_envs, dtype=torch.bool, device=dev)
        """Envs whose stack may reach back before this buffer (cleared by an episode end or a
        chain of k - 1 slots)."""
        self.unusable_writes = 0
        """Slots stored unusable (a resumed env's first steps)."""

    def rows(self, obs: torch.Tensor, next_obs: torch.Tensor, ended: torch.Tensor) -> dict:
        """The replay fields of one vector step: ``obs`` and ``next_obs`` (num_envs, k, H, W)
        uint8, ``ended`` (num_envs,) bool (terminated or truncated)."""
        replay, k, n = self.replay, self.k, self.num_envs
        if len(obs) != n:
            raise ReplayError(f"frame_history: one row per env a step ({n}), got {len(obs)}")
        dev = replay.storage_device
        if self.adds == 0 and len(replay):  # a restored buffer: serials go on past its own
            self.adds = int(replay.field("serial")[: len(replay)].max()) + 2
        obs, next_obs = obs.to(dev), next_obs.to(dev)
        if not torch.equal(next_obs[:, :-1], obs[:, 1:]):
            raise ReplayError(
                "frame_history: next_obs is not obs shifted by one frame (observations that "
                "are not a frame stack on their first axis); set dqn.frame_history false"
            )
        slots = (torch.arange(n, device=dev) + replay.pos) % replay.capacity
        chain = torch.where(self._ended, 0, (self._chain + 1).clamp(max=k - 1))
        rebuilt = self._stack(slots, chain, obs[:, -1])
        ok = (rebuilt == obs).flatten(1).all(1)
        excused = self._fresh & (chain < k - 1)  # may reach back before the buffer
        if bool((~ok & ~excused).any()):
            raise ReplayError(
                "frame_history: an observation is not its env's earlier frames plus a new one "
                "(a frame stack padded with its reset frame, FrameStackObservation's); set "
                "dqn.frame_history false"
            )
        self.unusable_writes += int((~ok).sum())
        ended = ended.to(dev, torch.bool)
        self._fresh &= ~(ended | (chain == k - 1))
        self._chain, self._ended = chain, ended
        depth = torch.where(ok, chain, UNUSABLE).to(torch.uint8)
        serial = torch.full((n,), self.adds, dtype=torch.int64, device=dev)
        self.adds += 1
        return {"frame": obs[:, -1], "next_frame": next_obs[:, -1], "depth": depth,
                "serial": serial}  # fmt: skip

    def _stack(
        self, slots: torch.Tensor, depth: torch.Tensor, newest: torch.Tensor
    ) -> torch.Tensor:
        """(len(slots), k, H, W): the stacks of ``slots`` of the given depths, their newest
        frames ``newest`` (the stored ones, or those being written)."""
        frames = self.replay.field("frame")
        out = [newest]
        for j in range(1, self.k):
            back = depth.clamp(max=j)
            src = (slots - back * self.num_envs) % self.replay.capacity
            older = frames[src]
            out.append(torch.where((back == 0).view(-1, 1, 1), newest, older))
        return torch.stack(out[::-1], dim=1)

    def usable(self, slots: torch.Tensor) -> torch.Tensor:
        """(len(slots),) bool: the stack of each slot can be rebuilt from the buffer."""
        depth = self.replay.field("depth")[slots].long()
        serial = self.replay.field("serial")
        reach = torch.where(depth == UNUSABLE, 0, depth)
        oldest = (slots - reach * self.num_envs) % self.replay.capacity
        return (depth != UNUSABLE) & (serial[oldest] == serial[slots] - reach)

    def sample(self, batch: ReplayBatch) -> ReplayBatch:
        """``batch`` (drawn uniformly from the replay) with its unusable slots drawn again
        until usable (rejection sampling: uniform over the usable slots) and ``obs`` and
        ``next_obs`` rebuilt; the indices are the slots used."""
        replay = self.replay
        dev = replay.storage_device
        slots = batch.indices.to(dev)
        ok = self.usable(slots)
        for _ in range(REDRAWS):
            if bool(ok.all()):
                break
            again = torch.randint(0, len(replay), slots.shape, device=dev)
            slots = torch.where(ok, slots, again)
            ok = self.usable(slots)
        if not bool(ok.all()):
            if not bool(ok.any()):
                raise ReplayError(
                    "frame_history: no transition whose stack can be rebuilt yet (a restored "
                    "buffer's first steps); raise learning_starts"
                )
            slots = torch.where(ok, slots, slots[ok][0])
        data = replay.gather(slots)
        depth = replay.field("depth")[slots].long()
        obs = self._stack(slots, depth, replay.field("frame")[slots]).to(replay.device)
        data["obs"] = obs
        data["next_obs"] = torch.cat([obs[:, 1:], data["next_frame"].unsqueeze(1)], dim=1)
        return ReplayBatch(data, slots.to(replay.device), batch.weights)
