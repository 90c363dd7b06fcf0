"""Frames stay uint8 from the env to the learner: PPO's rollout storage and minibatches, DQN's
replay buffer (the bytes of a scaled-down 1M-transition Atari buffer as stated)."""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest
import torch

from orin_rl import config as config_mod
from orin_rl.algorithms import PPO
from orin_rl.algorithms.dqn import DQN
from orin_rl.buffers.replay import ReplayBatch, ReplayError
from orin_rl.config import Config, DQNConfig
from orin_rl.envs import StepResult
from orin_rl.models import PolicySpec
from orin_rl.runners import train
from tests.conftest import require_pixels
from tools.bench_frame_replay import ListEnvs

require_pixels("minatar", "MinAtar is in the pixels extra")

ATARI = (4, 84, 84)
"""A stack of 4 grey 84x84 frames (orin_rl.envs.images.atari)."""
FRAME_BYTES = 4 * 84 * 84  # 28,224 bytes of uint8 (112,896 as float32)
SCALAR_BYTES = 8 + 4 + 4 + 4  # actions int64, rewards, terminated, discounts float32
ATARI_TRANSITION_BYTES = 2 * FRAME_BYTES + SCALAR_BYTES  # obs + next_obs: 56,468
"""Bytes of one stored Atari transition: 1M of them are 56.47 GB (float32 frames: 225.8 GB)."""


def _minatar_cfg(**over) -> Config:
    cfg = Config()
    values = {
        "env.env_id": "MinAtar/Breakout-v1", "env.wrappers": ["orin_rl.envs.images:minatar"],
        "env.num_envs": 2, "ppo.num_steps": 8, "ppo.num_minibatches": 2, "ppo.num_epochs": 1,
        "ppo.hidden_sizes": [], "train.device": "cpu", "train.total_steps": 32,
        "train.eval_every": 0, "train.eval_episodes": 1, "train.tensorboard": False,
        **over,
    }  # fmt: skip
    for key, value in values.items():
        config_mod.set_value(cfg, key, value)
    return cfg


class TestPPOFrames:
    def test_rollout_and_minibatches_hold_the_envs_uint8_frames(self, tmp_path, monkeypatch):
        """The env writes its uint8 frames into the rollout storage; the update reads uint8
        minibatches: no float copy of a frame anywhere on the way (4 bytes a pixel)."""
        seen = {}
        update = PPO.update

        def spy(self):
            seen["storage"] = self.buffer.obs.dtype, self.buffer.obs.nbytes
            seen["minibatch"] = next(iter(self.buffer.minibatches(1))).obs.dtype
            seen["frames"] = self.buffer.obs.clone()
            return update(self)

        monkeypatch.setattr(PPO, "update", spy)
        summary = train(_minatar_cfg(), tmp_path / "run", progress=False)
        assert summary["obs_into_buffer"] is True  # the env wrote straight into the storage
        # (num_steps, num_envs, C, 10, 10) one byte a pixel
        assert seen["storage"] == (torch.uint8, 8 * 2 * 4 * 10 * 10)
        assert seen["minibatch"] == torch.uint8
        assert set(seen["frames"].unique().tolist()) <= {0, 255}  # MinAtar's 0/1, x 255


def _atari_dqn(capacity: int, n_step: int = 1, share_frames: bool = False) -> DQN:
    space = gym.spaces.Box(0, 255, ATARI, np.uint8)
    spec = PolicySpec.from_spaces(space, gym.spaces.Discrete(6), hidden_sizes=[])
    cfg = DQNConfig(buffer_size=capacity, batch_size=4, n_step=n_step, learning_starts=0,
                    share_frames=share_frames)  # fmt: skip
    return DQN(spec, cfg, 2, torch.device("cpu"), "host", 1, total_steps=100)


class TestAtariReplayBytes:
    @pytest.mark.parametrize("n_step", [1, 3])
    def test_scaled_down_1m_buffer_holds_the_stated_bytes(self, n_step):
        """1,000 transitions (1M / 1,000) take exactly 1,000 x 56,468 bytes, and frames go in,
        are kept and come out as uint8 after real env steps and a gradient step."""
        algo = _atari_dqn(1_000, n_step)
        assert algo.replay.nbytes == 1_000 * ATARI_TRANSITION_BYTES  # 56.47 MB
        frames = torch.randint(0, 256, (2, *ATARI), dtype=torch.uint8)
        for t in range(6):
            algo.act(frames)
            nxt = torch.randint(0, 256, (2, *ATARI), dtype=torch.uint8)
            ended = torch.tensor([t == 4, False])
            algo.process_env_step(StepResult(nxt, torch.ones(2), ended, torch.zeros(2, dtype=torch.bool), nxt, {}))  # fmt: skip
            frames = nxt
        assert len(algo.replay) > 0 and algo.replay.nbytes == 1_000 * ATARI_TRANSITION_BYTES
        batch = algo.replay.sample(4)
        assert batch["obs"].dtype == batch["next_obs"].dtype == torch.uint8
        algo.update()
        assert algo.grad_steps == algo.cfg.gradient_steps


def test_sac_trains_on_rendered_frames(tmp_path, monkeypatch):
    """SAC on Pendulum's rendered frames, 48x48 RGB (``orin_rl.envs.images:rendered``): the
    actor and each Q network take the uint8 frames through an image
    encoder of their own, the replay holds uint8, and the run trains, checkpoints and
    evaluates."""
    pytest.importorskip("pygame")  # classic control's renderer
    from orin_rl.algorithms.sac import SAC

    seen = {}
    step = SAC._step

    def spy(self, batch):
        seen["obs"] = batch["obs"].dtype
        seen["encoders"] = self.q1.encoder is not None and self.q2_target.encoder is not None
        seen["bytes"] = self.replay.nbytes
        return step(self, batch)

    monkeypatch.setattr(SAC, "_step", spy)
    cfg = Config()
    values = {
        "env.env_id": "Pendulum-v1", "env.num_envs": 1, "env.kwargs": {"render_mode": "rgb_array"},
        "env.wrappers": [{"wrapper": "orin_rl.envs.images:rendered", "kwargs": {"size": 48}}],
        "env.max_episode_steps": 40, "train.algo": "sac", "sac.buffer_size": 1000,
        "sac.learning_starts": 64, "sac.batch_size": 16,
        "sac.hidden_sizes": [32], "train.device": "cpu", "train.total_steps": 96,
        "train.eval_episodes": 1, "train.eval_every": 0, "train.tensorboard": False,
    }  # fmt: skip
    for key, value in values.items():
        config_mod.set_value(cfg, key, value)
    summary = train(cfg, tmp_path / "run", progress=False)
    # obs and next_obs 48 x 48 x 3 uint8 + action, reward, terminated, discount (4 bytes
    # each): 13,840 bytes a transition, 13.8 GB for SAC's default 1M (docs/training.md)
    assert seen == {"obs": torch.uint8, "encoders": True, "bytes": 1_000 * 13_840}
    assert summary["total_steps"] == 96 and summary["eval_return_mean"] is not None


def test_sacs_critic_loss_trains_the_q_encoders_and_not_the_actors():
    """One gradient step on uint8 frames: the Q networks' encoders move (the critic's loss),
    their targets move by tau towards them, and the actor's encoder, its own, moves by the
    actor's loss."""
    from orin_rl.algorithms.sac import SAC
    from orin_rl.config import SACConfig

    torch.manual_seed(0)
    space = gym.spaces.Box(0, 255, (3, 16, 16), np.uint8)
    spec = PolicySpec.from_spaces(space, gym.spaces.Box(-1, 1, (2,), np.float32),
                                  hidden_sizes=[32], activation="relu", squash=True)  # fmt: skip
    cfg = SACConfig(buffer_size=64, batch_size=8, learning_starts=0, hidden_sizes=[32], tau=0.5)
    algo = SAC(spec, cfg, 2, torch.device("cpu"), "host", 1)
    assert spec.encoder == "small" and algo.q1.encoder is not None
    for _ in range(8):
        obs = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
        algo.act(obs)
        nxt = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
        done = torch.zeros(2, dtype=torch.bool)
        algo.process_env_step(StepResult(nxt, torch.randn(2), done, done, nxt, {}))
    assert algo.replay.field("obs").dtype == torch.uint8
    q_enc = [p.detach().clone() for p in algo.q1.encoder.parameters()]
    target_enc = [p.detach().clone() for p in algo.q1_target.encoder.parameters()]
    actor_enc = [p.detach().clone() for p in algo.policy.actor[0].parameters()]
    algo.update()
    moved = [
        not torch.equal(a, b) for a, b in zip(q_enc, algo.q1.encoder.parameters(), strict=True)
    ]
    assert all(moved)
    for before, online, target in zip(target_enc, algo.q1.encoder.parameters(),
                                      algo.q1_target.encoder.parameters(), strict=True):  # fmt: skip
        torch.testing.assert_close(target, 0.5 * before + 0.5 * online.detach())
    assert any(not torch.equal(a, b) for a, b in
               zip(actor_enc, algo.policy.actor[0].parameters(), strict=True))  # fmt: skip


class TestSharedFrames:
    """``dqn.share_frames``: next_obs kept as its newest frame, rebuilt as obs[1:] + it."""

    @staticmethod
    def _stacks(steps: int, envs: int = 2) -> list[torch.Tensor]:
        """Observations of a 4-frame stack moving one frame a step (FrameStackObservation's)."""
        g = torch.Generator().manual_seed(0)
        frames = torch.randint(0, 256, (steps + 3, envs, 84, 84), dtype=torch.uint8, generator=g)
        return [frames[t : t + 4].transpose(0, 1).contiguous() for t in range(steps)]

    def test_bytes_and_next_obs_rebuilt_exactly(self):
        algo = _atari_dqn(1_000, share_frames=True)
        # obs (28,224) + the next frame (7,056) + scalars (20): 1M transitions are 35.3 GB
        assert algo.replay.nbytes == 1_000 * (FRAME_BYTES + 84 * 84 + SCALAR_BYTES)
        stacks = self._stacks(9)
        for obs, nxt in itertools.pairwise(stacks):
            algo.act(obs)
            done = torch.zeros(2, dtype=torch.bool)
            algo.process_env_step(StepResult(nxt, torch.ones(2), done, done, nxt, {}))
        stored = algo.replay.sample(8)
        truth = {bytes(o.numpy()): n for o, n in zip(torch.cat(stacks[:-1]), torch.cat(stacks[1:]), strict=True)}  # fmt: skip
        expected = torch.stack([truth[bytes(o.numpy())] for o in stored["obs"]])
        assert torch.equal(algo.next_obs(stored), expected)

    def test_observations_that_are_not_a_stack_are_refused(self):
        algo = _atari_dqn(1_000, share_frames=True)
        obs, nxt = (torch.randint(0, 256, (2, *ATARI), dtype=torch.uint8) for _ in range(2))
        algo.act(obs)
        done = torch.zeros(2, dtype=torch.bool)
        with pytest.raises(ReplayError, match="not obs shifted by one frame"):
            algo.process_env_step(StepResult(nxt, torch.ones(2), done, done, nxt, {}))


class _Frames(gym.Env):
    """Random (6, 6) uint8 frames; an episode ends (terminated) with probability 0.15 a step,
    or is cut (truncated) at 9 steps."""

    observation_space = gym.spaces.Box(0, 255, (6, 6), np.uint8)
    action_space = gym.spaces.Discrete(2)

    resets = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self.resets += 1
        return self.np_random.integers(0, 256, (6, 6), dtype=np.uint8), {}

    def step(self, action):
        self.t += 1
        frame = self.np_random.integers(0, 256, (6, 6), dtype=np.uint8)
        return frame, 1.0, bool(self.np_random.random() < 0.15), self.t >= 9, {}


def _stacked_envs(n: int, padding: str = "reset") -> list[gym.Env]:
    envs = [gym.wrappers.FrameStackObservation(_Frames(), 4, padding_type=padding)
            for _ in range(n)]  # fmt: skip
    for i, env in enumerate(envs):
        env.reset(seed=i)
    return envs


def _frame_history_dqn(capacity: int, envs: int, frame_history: bool = True) -> DQN:
    space = gym.spaces.Box(0, 255, (4, 6, 6), np.uint8)
    spec = PolicySpec.from_spaces(space, gym.spaces.Discrete(2), hidden_sizes=[])
    cfg = DQNConfig(buffer_size=capacity, batch_size=4, learning_starts=0,
                    frame_history=frame_history)  # fmt: skip
    return DQN(spec, cfg, envs, torch.device("cpu"), "host", 1, total_steps=100)


def _step_all(
    algo: DQN, envs: list[gym.Env], obs: torch.Tensor, truth: dict, plain: DQN | None = None
) -> torch.Tensor:
    """One vector step of gymnasium's FrameStackObservation envs into ``algo`` (reset on an
    episode's end, the final observation stored as next_obs); ``truth``: slot → (obs,
    next_obs, the transition's row in ``plain``) of the transitions the ring holds, ``plain`` a
    full-stack buffer (no frame_history, no wrap) given the same step."""
    n, capacity, pos = len(envs), algo.replay.capacity, algo.replay.pos
    step = ListEnvs(envs, seed=0).step(torch.zeros(n, dtype=torch.int64))  # action 0 in each
    step.reward = torch.rand(n)
    nxt, final = step.obs, step.final_obs
    seed = int(torch.randint(2**31, ()))
    for learner in (algo, plain) if plain is not None else (algo,):
        with torch.random.fork_rng():  # the same epsilon-greedy draws: the same actions
            torch.manual_seed(seed)
            learner.act(obs)
        learner.process_env_step(step)
    for slot in range(pos, pos + (algo.replay.pos - pos) % capacity):  # rows overwritten
        truth.pop(slot % capacity, None)
    for e in range(n):  # the step's transition rows are its last n (after its start rows)
        row = plain.replay.pos - n + e if plain is not None else None
        truth[(algo.replay.pos - n + e) % capacity] = (obs[e].clone(), final[e].clone(), row)
    return nxt


ROW_BYTES = 84 * 84 + 1 + 4 + 8 + SCALAR_BYTES  # frame, depth, back, serial, scalars: 7,089
"""Bytes of one ``dqn.frame_history`` row of Atari frames (a transition, or an episode's start)."""


class TestFrameHistory:
    """``dqn.frame_history``: each frame once, one a row; a transition's stack read from its
    env's earlier rows."""

    def test_bytes_of_a_scaled_down_1m_atari_buffer(self):
        """7,089 bytes a row (an 84x84 frame, depth, back, serial, the scalars): 1,000 rows
        (1M / 1,000) take 7.089 MB, so 1M rows take 7.09 GB. A row is a transition or an
        episode's start (the next test); Breakout's random play wrote 1.0261 rows a transition
        (docs/benchmarks/frame_replay_breakout.md), so 1M transitions take 1,026,200 rows,
        7.27 GB (two frames a transition took 14,141 bytes: 14.1 GB)."""
        space = gym.spaces.Box(0, 255, ATARI, np.uint8)
        spec = PolicySpec.from_spaces(space, gym.spaces.Discrete(6), hidden_sizes=[])
        cfg = DQNConfig(buffer_size=1_000, batch_size=4, learning_starts=0, frame_history=True)
        algo = DQN(spec, cfg, 2, torch.device("cpu"), "host", 1, total_steps=100)
        assert algo.replay.nbytes == 1_000 * ROW_BYTES == 7_089_000
        assert algo.replay.field("frame").dtype == torch.uint8
        assert 1_026_200 * ROW_BYTES == 7_274_731_800 < 7.5e9

    def test_every_transition_the_ring_holds_is_the_full_stack_buffers(self):
        """The same recorded episodes (gymnasium's FrameStackObservation, reset padding; 3 envs,
        episodes of 1 to 9 steps, terminated or truncated) into frame_history's ring of 48 rows
        (289 rows written: wrapped 6 times) and into a full-stack buffer: after every step each
        transition the ring holds rebuilds to the full-stack buffer's (obs, next_obs and
        scalars, exactly), but for at most k of each env's oldest (whose chains the ring
        overwrote); start rows are never sampled; the rows are the transitions plus one an
        episode start. A drawn batch is exact too, and a gradient step runs on it."""
        torch.manual_seed(0)
        envs, truth, k, n = _stacked_envs(3), {}, 4, 3
        algo, plain = _frame_history_dqn(48, n), _frame_history_dqn(300, n, frame_history=False)
        plain.policy.load_state_dict(algo.policy.state_dict())
        obs = torch.stack([torch.as_tensor(e.reset(seed=10 + i)[0]) for i, e in enumerate(envs)])

        def resets() -> int:
            return sum(env.unwrapped.resets for env in envs)

        first, fh, checked = resets(), algo.frame_history, 0
        for _ in range(80):
            before = resets()
            obs = _step_all(algo, envs, obs, truth, plain)
            slots = torch.arange(len(algo.replay))
            usable = slots[fh.usable(slots)]
            assert set(usable.tolist()) <= set(truth) and len(truth) - len(usable) <= n * k
            rebuilt = fh.sample(ReplayBatch({}, usable))
            assert torch.equal(rebuilt.indices, usable)
            ref = plain.replay.gather(torch.tensor([truth[s][2] for s in usable.tolist()]))
            assert rebuilt.data.keys() == ref.keys()
            assert all(torch.equal(rebuilt[name], ref[name]) for name in ref)
            checked += len(usable)
        assert fh.adds == 80 * n + fh.start_rows and fh.start_rows == n + before - first
        assert fh.adds > 5 * 48 and checked > 80 * 30 and fh.unusable_writes == 0
        batch = algo._sample()
        for slot, o, nx in zip(batch.indices.tolist(), batch["obs"], batch["next_obs"], strict=True):  # fmt: skip
            assert torch.equal(o, truth[slot][0]) and torch.equal(nx, truth[slot][1])
        algo.update()
        assert algo.grad_steps > 0

    def test_a_resumed_envs_first_slots_are_never_sampled(self):
        """A new buffer meeting envs mid-episode: their first 3 slots' stacks reach back before
        the buffer; they are stored unusable, and sampling returns other slots."""
        envs, truth = _stacked_envs(2), {}
        obs = torch.stack(
            [torch.as_tensor(env.reset(seed=50 + i)[0]) for i, env in enumerate(envs)]
        )
        warm = _frame_history_dqn(40, 2)
        for _ in range(3):  # the envs are now 3 steps into their episodes (or later ones)
            obs = _step_all(warm, envs, obs, {})
        algo = _frame_history_dqn(40, 2)
        for _ in range(12):
            obs = _step_all(algo, envs, obs, truth)
        assert algo.frame_history.unusable_writes > 0
        bad = [slot for slot in range(24) if not algo.frame_history.usable(torch.tensor([slot]))]
        for _ in range(20):
            batch = algo._sample()
            assert not set(batch.indices.tolist()) & set(bad)
            for slot, o in zip(batch.indices.tolist(), batch["obs"], strict=True):
                assert torch.equal(o, truth[slot][0])

    def test_a_stack_padded_otherwise_is_refused(self):
        """FrameStackObservation(padding_type="zero"): a new episode's stack is not its reset
        frame repeated; once past the first episode, the insert says so."""
        algo, envs = _frame_history_dqn(60, 1), _stacked_envs(1, padding="zero")
        obs = torch.as_tensor(envs[0].reset(seed=3)[0]).unsqueeze(0)
        with pytest.raises(ReplayError, match="frame_history: an observation is not"):
            for _ in range(40):
                obs = _step_all(algo, envs, obs, {})


def test_frame_history_goes_on_after_a_restored_buffer():
    """A checkpoint's buffer restored into a new learner: the new slots' serials go on past the
    stored ones (a stored slot is never taken for a new slot's earlier step), the envs' first
    slots after the restore are unusable until their stacks are whole, and every sample is
    the observation stored at its slot."""
    envs, truth = _stacked_envs(2), {}
    obs = torch.stack([torch.as_tensor(env.reset(seed=70 + i)[0]) for i, env in enumerate(envs)])
    before = _frame_history_dqn(40, 2)
    for _ in range(30):  # wraps the ring of 40 slots once
        obs = _step_all(before, envs, obs, truth)
    after = _frame_history_dqn(40, 2)
    after.replay.load_state_dict(before.replay.state_dict())
    stored = int(after.replay.field("serial").max())
    obs = _step_all(after, envs, obs, truth)
    assert int(after.replay.field("serial").max()) > stored + 1
    for _ in range(10):
        obs = _step_all(after, envs, obs, truth)
    for _ in range(20):
        batch = after._sample()
        for slot, o, n in zip(batch.indices.tolist(), batch["obs"], batch["next_obs"], strict=True):
            assert torch.equal(o, truth[slot][0]) and torch.equal(n, truth[slot][1])


@pytest.mark.parametrize("restored_rounds", [8, 30])  # 16 of 40 slots; a ring wrapped once
def test_frame_history_samples_right_after_a_restore_are_the_stored_ones(restored_rounds):
    """The step after a restore: the envs' new slots are unusable (their stacks reach back
    before the restore) and the ring may have overwritten what the oldest slots' stacks read;
    every sample is still exactly a stored observation (the unusable ones drawn again), never
    a slot past the buffer's size."""
    envs, truth = _stacked_envs(2), {}
    obs = torch.stack([torch.as_tensor(env.reset(seed=90 + i)[0]) for i, env in enumerate(envs)])
    before = _frame_history_dqn(40, 2)
    for _ in range(restored_rounds):
        obs = _step_all(before, envs, obs, truth)
    after = _frame_history_dqn(40, 2)
    after.replay.load_state_dict(before.replay.state_dict())
    for _ in range(3):  # the new slots' chains are not whole yet
        obs = _step_all(after, envs, obs, truth)
        for _ in range(50):
            batch = after._sample()
            assert int(batch.indices.max()) < len(after.replay)
            for slot, o, n in zip(batch.indices.tolist(), batch["obs"], batch["next_obs"], strict=True):  # fmt: skip
                assert torch.equal(o, truth[slot][0]) and torch.equal(n, truth[slot][1])


@pytest.mark.parametrize("kwargs, shape", [({}, (32, 32, 3)), ({"grey": True}, (32, 32, 1)),
                                           ({"grey": True, "stack": 3}, (3, 32, 32))])  # fmt: skip
def test_rendered_frames_come_in_shapes_an_image_encoder_takes(kwargs, shape):
    """Pendulum's rendered frames, resized to 32: RGB, grey (a channel axis kept), a grey
    stack; a stack of RGB frames (4 axes) is refused in one line."""
    pytest.importorskip("pygame")  # classic control's renderer
    from orin_rl.envs.images import rendered
    from orin_rl.models.cnn import image_encoder_kind

    env = rendered(gym.make("Pendulum-v1", render_mode="rgb_array"), size=32, **kwargs)
    obs, _ = env.reset(seed=0)
    assert obs.shape == env.observation_space.shape == shape and obs.dtype == np.uint8
    assert image_encoder_kind(shape, "uint8") == "small"
    with pytest.raises(ValueError, match="a stack of RGB frames has 4 axes"):
        rendered(gym.make("Pendulum-v1", render_mode="rgb_array"), stack=2)
