"""GPU-native environments against gymnasium: same states in, same answers out."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from orin_rl import envs
from orin_rl.envs.gpu import REGISTRY, make_gpu
from orin_rl.envs.gym_env import EnvError
from tests.conftest import HAS_CUDA

NUM_ENVS = 8
STEPS = 1000  # per env, so 8,000 transitions per environment id


def _random_actions(env_id: str, rng: np.random.Generator, n: int) -> np.ndarray:
    space = REGISTRY[env_id].action_space
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, space.n, size=n)
    # Beyond the bounds too: clipping (and the unclipped MountainCarContinuous penalty) is tested.
    high = float(space.high[0])
    return rng.uniform(-1.5 * high, 1.5 * high, size=(n, 1))


def _gym_state(env: gym.Env) -> np.ndarray:
    return np.asarray(env.unwrapped.state, dtype=np.float64)


@pytest.mark.parametrize("env_id", sorted(REGISTRY))
def test_matches_gymnasium_step_for_step(env_id, rng):
    """From gymnasium's state, every step gives the same observation, reward, terminated and
    truncated (float64 within 1e-6); ended episodes reset in the same step."""
    ref = [gym.make(env_id) for _ in range(NUM_ENVS)]
    for i, e in enumerate(ref):
        e.reset(seed=int(rng.integers(2**31)) + i)
    ours = make_gpu(env_id, NUM_ENVS, dtype=torch.float64, seed=int(rng.integers(2**31)))
    ours.reset()
    ours.state.copy_(torch.from_numpy(np.stack([_gym_state(e) for e in ref])))
    counts = {"terminated": 0, "truncated": 0}
    for _ in range(STEPS):
        actions = _random_actions(env_id, rng, NUM_ENVS)
        step = ours.step(torch.from_numpy(actions))
        for i, e in enumerate(ref):
            a = actions[i] if actions.ndim == 2 else int(actions[i])
            obs, reward, terminated, truncated, _ = e.step(a)
            assert step.final_obs[i].numpy() == pytest.approx(obs, abs=1e-6), (i, env_id)
            assert float(step.reward[i]) == pytest.approx(reward, abs=1e-6)
            assert bool(step.terminated[i]) == terminated
            assert bool(step.truncated[i]) == truncated
            counts["terminated"] += terminated
            counts["truncated"] += truncated
            if terminated or truncated:
                # Ours reset itself inside step: a fresh start state, its clock at zero.
                assert int(ours.elapsed[i]) == 0
                low, high = ours._reset_bounds
                assert bool(((ours.state[i] >= low) & (ours.state[i] <= high)).all())
                assert torch.equal(step.obs[i], ours._observe(ours.state[i : i + 1])[0])
                e.reset(seed=int(rng.integers(2**31)))
            else:
                assert torch.equal(step.obs[i], step.final_obs[i])
        # Same states for the next step (the two RNGs draw different reset states).
        ours.state.copy_(torch.from_numpy(np.stack([_gym_state(e) for e in ref])))
    # Episode ends of both kinds were crossed where the task has them.
    if env_id == "CartPole-v1":
        assert counts["terminated"] > 0
    else:  # random actions rarely reach these goals: the terminal cases are tested below
        assert counts["truncated"] > 0


@pytest.mark.parametrize(
    ("env_id", "state", "action"),
    [
        ("Acrobot-v1", [3.0, 0.1, 0.5, -0.2], 2),  # tip above the bar
        ("MountainCar-v0", [0.499, 0.05, 0, 0], 2),  # rolls over the flag
        ("MountainCarContinuous-v0", [0.449, 0.05, 0, 0], 1.7),  # +100, penalty on 1.7
        ("MountainCar-v0", [-1.19, -0.05, 0, 0], 0),  # hits the left wall: velocity zeroed
    ],
)
def test_goal_and_wall_states_match_gymnasium(env_id, state, action):
    ours = make_gpu(env_id, 1, dtype=torch.float64)
    ref = gym.make(env_id)
    ref.reset(seed=0)
    ours.reset()
    dim = ours.state_dim
    ref.unwrapped.state = np.array(state[:dim], dtype=np.float64)
    ours.state.copy_(torch.tensor([state[:dim]], dtype=torch.float64))
    obs, reward, terminated, truncated, _ = ref.step(
        np.array([action]) if isinstance(action, float) else action
    )
    step = ours.step(torch.tensor([[action]] if isinstance(action, float) else [action]))
    assert step.final_obs[0].numpy() == pytest.approx(obs, abs=1e-6)
    assert float(step.reward[0]) == pytest.approx(reward, abs=1e-6)
    assert (bool(step.terminated[0]), bool(step.truncated[0])) == (terminated, truncated)
    if env_id != "MountainCar-v0" or state[0] > 0:
        assert terminated


def test_truncation_and_termination_together_like_gymnasium():
    """A CartPole that falls on the last allowed step is terminated and truncated (TimeLimit)."""
    ours = make_gpu("CartPole-v1", 1, dtype=torch.float64, max_episode_steps=3)
    ref = gym.make("CartPole-v1", max_episode_steps=3)
    ref.reset(seed=0)
    ours.reset()
    ref.unwrapped.state = np.array([0.0, 0.0, 0.175, 0.3])  # falls on the third push
    ours.state.copy_(torch.tensor([[0.0, 0.0, 0.175, 0.3]], dtype=torch.float64))
    for _ in range(3):
        _, _, term, trunc, _ = ref.step(0)
        step = ours.step(torch.tensor([0]))
        assert (bool(step.terminated[0]), bool(step.truncated[0])) == (term, trunc)
    assert term and trunc


def test_episode_statistics_and_auto_reset(rng):
    """Returns and lengths counted on the device equal a hand count; pop clears them."""
    env = make_gpu("CartPole-v1", 4, seed=3)
    env.reset()
    ret = np.zeros(4)
    length = np.zeros(4, dtype=int)
    last: dict[int, tuple[float, int]] = {}
    for _ in range(300):
        step = env.step(torch.from_numpy(rng.integers(0, 2, size=4)))
        ret += step.reward.numpy()
        length += 1
        for i in np.flatnonzero((step.terminated | step.truncated).numpy()):
            last[int(i)] = (ret[i], int(length[i]))
            ret[i], length[i] = 0.0, 0
    returns, lengths = env.pop_episode_stats()
    expected = [last[i] for i in sorted(last)]
    assert sorted(zip(returns, lengths, strict=True)) == sorted(expected)
    assert env.pop_episode_stats() == ([], [])


def test_seeded_resets_repeat_and_state_round_trips():
    a = make_gpu("Pendulum-v1", 16, seed=7)
    b = make_gpu("Pendulum-v1", 16, seed=7)
    assert torch.equal(a.reset(), b.reset())
    actions = torch.zeros(16, 1)
    for _ in range(250):  # crosses the 200-step limit: resets draw from the generator
        a.step(actions)
    saved = a.get_state()
    first = [a.step(actions).obs for _ in range(60)]
    a.set_state(saved)
    again = [a.step(actions).obs for _ in range(60)]
    assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
    with pytest.raises(EnvError, match="does not match"):
        make_gpu("Pendulum-v1", 8).set_state(saved)


def test_make_selects_the_gpu_backend_and_refuses_unknown_ids():
    env = envs.make("Acrobot-v1", 5, backend="gpu")
    assert env.graph_safe and env.num_envs == 5
    assert env.observation_space == gym.make("Acrobot-v1").observation_space
    assert env.action_space == gym.make("Acrobot-v1").action_space
    obs = env.reset(seed=1)
    assert obs.shape == (5, 6) and obs.dtype == torch.float32
    with pytest.raises(EnvError, match=r"no GPU-native implementation.*CartPole-v1"):
        envs.make("Swimmer-v5", 2, backend="gpu")


def test_float32_tracks_float64():
    """The default float32 envs follow the float64 reference closely over a short horizon."""
    e32 = make_gpu("Acrobot-v1", 64, seed=5)
    e64 = make_gpu("Acrobot-v1", 64, seed=5, dtype=torch.float64)
    e32.reset()
    e64.reset()
    e64.state.copy_(e32.state)
    for t in range(5):
        actions = torch.full((64,), t % 3)
        s32, s64 = e32.step(actions), e64.step(actions)
        assert torch.allclose(s32.obs.double(), s64.obs, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("env_id", sorted(REGISTRY))
def test_cuda_step_is_graph_capturable_and_matches_cpu(env_id):
    """A step captured in a CUDA graph and replayed gives the CPU float64 results."""
    n = 256
    gpu = make_gpu(env_id, n, "cuda", dtype=torch.float64, seed=1)
    cpu = make_gpu(env_id, n, "cpu", dtype=torch.float64, seed=1)
    gpu.reset()
    cpu.reset()
    cpu.state.copy_(gpu.state.cpu())
    space = REGISTRY[env_id].action_space
    shape = (n,) if isinstance(space, gym.spaces.Discrete) else (n, 1)
    static_actions = torch.zeros(shape, device="cuda", dtype=torch.float64)
    if isinstance(space, gym.spaces.Discrete):
        static_actions = static_actions.long()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    saved = gpu.get_state()
    with torch.cuda.stream(side):
        gpu.step(static_actions)  # warm-up
    torch.cuda.current_stream().wait_stream(side)
    gpu.set_state(saved)
    graph = torch.cuda.CUDAGraph()
    if hasattr(graph, "register_generator_state"):
        graph.register_generator_state(gpu.generator)
    with torch.cuda.graph(graph):
        out = gpu.step(static_actions)
    gen = torch.Generator().manual_seed(0)
    for _ in range(50):
        if isinstance(space, gym.spaces.Discrete):
            a = torch.randint(0, space.n, shape, generator=gen)
        else:
            a = torch.rand(shape, generator=gen, dtype=torch.float64) * 4 - 2
        cpu.state.copy_(gpu.state.cpu())
        static_actions.copy_(a)
        graph.replay()
        ref = cpu.step(a)
        assert torch.allclose(out.final_obs.cpu(), ref.final_obs, atol=1e-9)
        assert torch.equal(out.terminated.cpu(), ref.terminated)
        assert torch.allclose(out.reward.cpu(), ref.reward, atol=1e-9)


def test_base_class_cannot_stand_in_for_an_env():
    """A subclass that forgets the dynamics is refused at construction, not mid-training."""
    from orin_rl.envs.gpu.base import TorchVecEnv

    class Half(TorchVecEnv):
        env_id = "CartPole-v1"

        def _observe(self, state):
            return state

    with pytest.raises(TypeError, match="_dynamics"):
        Half(2)
