"""The gymnasium adapter against plain gymnasium envs stepped by hand."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from orin_rl.envs import EnvError, GymVecEnv, make


@pytest.mark.parametrize(
    ("env_id", "max_steps"), [("CartPole-v1", None), ("Pendulum-v1", 40), ("Acrobot-v1", 30)]
)
def test_same_transitions_as_single_envs(rng, env_id, max_steps):
    """Every step equals the single env's step; ended envs report the true final observation
    and already hold the next episode's first observation (no reset transition)."""
    n, seed = 3, int(rng.integers(1 << 30))
    vec = make(env_id, n, seed=seed, max_episode_steps=max_steps)
    kwargs = {"max_episode_steps": max_steps} if max_steps else {}
    singles = [gym.make(env_id, **kwargs) for _ in range(n)]
    obs = vec.reset()
    expected = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(singles)])
    np.testing.assert_allclose(obs.numpy(), expected, rtol=1e-6)
    ended = 0
    for _ in range(150):
        actions = np.stack([vec.action_space.sample() for _ in range(n)])
        step = vec.step(torch.as_tensor(actions))
        for i, env in enumerate(singles):
            o, r, term, trunc, _ = env.step(actions[i])
            assert step.reward[i].item() == pytest.approx(r, rel=1e-6)
            assert bool(step.terminated[i]) == term and bool(step.truncated[i]) == trunc
            np.testing.assert_allclose(step.final_obs[i].numpy(), o, rtol=1e-5, atol=1e-6)
            if term or trunc:
                ended += 1
                o, _ = env.reset()
            np.testing.assert_allclose(step.obs[i].numpy(), o, rtol=1e-5, atol=1e-6)
    assert ended > 0, "the test must cross at least one episode end"
    returns, lengths = vec.pop_episode_stats()
    assert len(returns) == len(lengths) == ended
    vec.close()


def test_episode_stats_sum_rewards():
    vec = make("CartPole-v1", 2, seed=3)
    vec.reset()
    total = np.zeros(2)
    finished = []
    for _ in range(200):
        step = vec.step(torch.zeros(2, dtype=torch.int64))
        total += step.reward.numpy()
        done = (step.terminated | step.truncated).numpy()
        finished += total[done].tolist()
        total[done] = 0
    returns, _ = vec.pop_episode_stats()
    assert returns == pytest.approx(finished) and len(returns) > 2
    assert vec.pop_episode_stats() == ([], [])


def test_continuous_actions_are_clipped():
    vec = make("Pendulum-v1", 1, seed=0)
    vec.reset()
    vec.step(torch.tensor([[100.0]]))
    # Pendulum applies u = clip(u, -2, 2); after clipping the stored last_u is 2.0.
    assert vec._env.unwrapped.envs[0].unwrapped.last_u == pytest.approx(2.0)


def test_async_vectorization_matches_sync():
    actions = torch.tensor([0, 1, 1, 0])
    out = []
    for mode in ("sync", "async"):
        vec = make("CartPole-v1", 4, seed=5, vectorization=mode)
        vec.reset()
        out.append(vec.step(actions).obs)
        vec.close()
    torch.testing.assert_close(out[0], out[1])


def _staged_run(env_id, n, seed, max_steps, actions, slots):
    """Outputs of a staged adapter, copied out step by step (``slots``: obs_out per step, or
    None for the env's own storage)."""
    vec = make(env_id, n, seed=seed, max_episode_steps=max_steps)
    vec.stage_outputs("host")
    out = [vec.reset().clone()]
    for i, a in enumerate(actions):
        step = vec.step(torch.as_tensor(a), obs_out=slots[i])
        out.append([t.clone() for t in (step.obs, step.reward, step.terminated, step.truncated,
                                        step.final_obs)])  # fmt: skip
    vec.close()
    return out


@pytest.mark.parametrize(("env_id", "max_steps"), [("CartPole-v1", 25), ("Pendulum-v1", 15)])
def test_staged_outputs_equal_the_copied_ones(rng, env_id, max_steps):
    """``stage_outputs`` (CPU writes into storage made once; managed memory on Orin) gives the
    same steps as the copying adapter: observations, rewards, flags, true final observations,
    whether the observations go into the env's storage or into a slot it is handed."""
    n, seed = 3, int(rng.integers(1 << 30))
    probe = make(env_id, n, seed=seed, max_episode_steps=max_steps)
    actions = [np.stack([probe.action_space.sample() for _ in range(n)]) for _ in range(60)]
    probe.close()
    outside = torch.zeros(len(actions), n, *probe.observation_space.shape)  # a buffer's slots
    slots = [(outside[i].numpy(), outside[i]) if i % 2 else None for i in range(len(actions))]
    staged = _staged_run(env_id, n, seed, max_steps, actions, slots)
    vec = make(env_id, n, seed=seed, max_episode_steps=max_steps)
    torch.testing.assert_close(staged[0], vec.reset(), rtol=0, atol=0)
    ended = 0
    for a, got in zip(actions, staged[1:], strict=True):
        step = vec.step(torch.as_tensor(a))
        want = (step.obs, step.reward, step.terminated, step.truncated, step.final_obs)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w, rtol=0, atol=0)
        ended += int((step.terminated | step.truncated).sum())
    assert ended > 0, "the test must cross an episode end (final_obs differs from obs there)"


def test_staged_outputs_are_views_valid_for_two_calls():
    """Returned tensors are the staged storage itself, two sets alternating: a step's outputs
    survive the next step (the learner still holds obs and next obs) and are reused after."""
    vec = make("CartPole-v1", 2, seed=1)
    vec.stage_outputs("host")
    obs0 = vec.reset()
    kept = obs0.clone()
    first = vec.step(torch.zeros(2, dtype=torch.int64))
    torch.testing.assert_close(obs0, kept, rtol=0, atol=0)  # not overwritten by the next call
    assert first.obs.data_ptr() != obs0.data_ptr()
    second = vec.step(torch.zeros(2, dtype=torch.int64))
    assert second.obs.data_ptr() == obs0.data_ptr() and second.reward.data_ptr() != \
        first.reward.data_ptr()  # fmt: skip
    storage = vec._staged["obs"].tensor
    assert storage.data_ptr() <= first.obs.data_ptr() < storage.data_ptr() + storage.nbytes


def test_every_write_comes_after_the_fence(monkeypatch):
    """Each reset/step waits for the GPU (``host_write_fence``) before its first write into the
    staged storage: on a Jetson the CPU must not touch managed memory while a kernel runs."""
    from orin_rl.buffers import memory

    events: list[str] = []
    copyto = np.copyto
    monkeypatch.setattr(memory, "host_write_fence", lambda device: events.append("fence"))
    vec = make("CartPole-v1", 2, seed=4, max_episode_steps=5)
    vec.stage_outputs("host")

    def recording_copyto(dst, src, **kw):
        events.append("write")
        copyto(dst, src, **kw)

    monkeypatch.setattr(np, "copyto", recording_copyto)
    calls = [lambda: vec.reset()] + [lambda: vec.step(torch.zeros(2, dtype=torch.int64))] * 8
    for call in calls:
        events.clear()
        call()
        assert events[0] == "fence" and events.count("fence") == 1 and "write" in events


def test_obs_out_receives_the_observations():
    """``obs_out`` (the rollout buffer's next slot): the env writes there and returns that very
    tensor; the other outputs stay in the env's storage."""
    vec = make("CartPole-v1", 3, seed=2)
    vec.stage_outputs("host")
    vec.reset()
    slot = torch.full((3, 4), -9.0)
    step = vec.step(torch.ones(3, dtype=torch.int64), obs_out=(slot.numpy(), slot))
    assert step.obs is slot and bool((slot != -9.0).all())
    ref = make("CartPole-v1", 3, seed=2)
    ref.reset()
    torch.testing.assert_close(slot, ref.step(torch.ones(3, dtype=torch.int64)).obs)


class TestErrors:
    def test_obs_out_needs_staging(self):
        vec = make("CartPole-v1", 1, seed=0)
        vec.reset()
        slot = torch.zeros(1, 4)
        with pytest.raises(EnvError, match="stage_outputs"):
            vec.step(torch.zeros(1, dtype=torch.int64), obs_out=(slot.numpy(), slot))

    def test_staging_needs_float_observations(self):
        vec = make("FrozenLake-v1", 1, seed=0)
        with pytest.raises(EnvError, match="float32 or uint8 observations"):
            vec.stage_outputs("host")

    def test_unknown_env(self):
        with pytest.raises(EnvError, match="NoSuchEnv"):
            make("NoSuchEnv-v0", 1)

    def test_next_step_mode_is_refused(self):
        vec = gym.make_vec("CartPole-v1", 2, vectorization_mode="sync")
        with pytest.raises(EnvError, match="SAME_STEP"):
            GymVecEnv(vec)

    def test_bad_num_envs(self):
        with pytest.raises(EnvError, match="num_envs"):
            make("CartPole-v1", 0)


class _DictObservationEnv(gym.Env):
    """A frame and a state (SB3's ``MultiInputPolicy`` kind of env)."""

    observation_space = gym.spaces.Dict({
        "camera": gym.spaces.Box(0, 255, (1, 4, 4), np.uint8),
        "state": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    })  # fmt: skip
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def test_a_dict_observation_is_one_line_naming_the_flattening_wrapper():
    """The gymnasium adapter takes one array: a Dict space is refused before a step, with the
    wrapper that flattens it (which then runs)."""
    same_step = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    vec = gym.vector.SyncVectorEnv([_DictObservationEnv] * 2, **same_step)
    with pytest.raises(EnvError) as exc:
        GymVecEnv(vec)
    assert "\n" not in str(exc.value)
    assert "env.wrappers: [gymnasium.wrappers:FlattenObservation]" in str(exc.value)
    flat = gym.vector.SyncVectorEnv(
        [lambda: gym.wrappers.FlattenObservation(_DictObservationEnv())] * 2, **same_step
    )
    assert GymVecEnv(flat).reset(seed=0).shape == (2, 18)
