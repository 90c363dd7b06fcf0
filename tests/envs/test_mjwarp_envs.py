"""MuJoCo Warp locomotion envs against gymnasium's own MuJoCo envs (v5).

MuJoCo Warp runs on Warp's CPU device here (``device="cpu"``) and on CUDA on the H200 (``gpu``
tests). Both sides simulate the same MJCF file, except for two documented differences that the
reference env is given too: Humanoid uses the Newton solver (MuJoCo Warp has no PGS), and Ant's
friction cone is made elliptic, because for pyramidal cones MuJoCo Warp orients the friction
pyramid of a plane-capsule contact differently from MuJoCo C when the capsule stands steeper
than 60 degrees (it falls back to a fixed tangent; C aligns it with the capsule axis), which
changes the contact forces of such steps (measured: qvel off by up to 1.3 in a single substep
with the same contacts and distances).
"""

from __future__ import annotations

import os
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from tests.conftest import HAS_CUDA

if os.environ.get("ORIN_RL_REQUIRE_SIM") == "1":  # CI: the sim extra must be there
    import mujoco_warp  # noqa: F401
else:
    pytest.importorskip("mujoco_warp", reason="needs the sim extra: pip install -e '.[sim]'")

import mujoco
from gymnasium.envs.mujoco.humanoid_v5 import mass_center

from orin_rl import envs
from orin_rl.envs.gpu import MUJOCO_IDS, make_gpu
from orin_rl.envs.gpu.mjwarp import TASKS
from orin_rl.envs.gym_env import EnvError

NUM_ENVS = 4
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _elliptic(cls):
    class Elliptic(cls):
        def _patch_model(self, model, mj):
            super()._patch_model(model, mj)
            model.opt.cone = mj.mjtCone.mjCONE_ELLIPTIC

    return Elliptic


def _pair(env_id: str, device: str, n: int = NUM_ENVS, seed: int = 0):
    """(ours, [gymnasium envs]) simulating the same model."""
    cls = TASKS[env_id]
    if env_id == "Ant-v5":
        cls = _elliptic(cls)
    ours = cls(n, device, seed=seed)
    refs = [gym.make(env_id) for _ in range(n)]
    for r in refs:
        model = r.unwrapped.model
        model.opt.solver = ours.mj_model.opt.solver  # Humanoid: Newton, as MuJoCo Warp
        model.opt.cone = ours.mj_model.opt.cone
    return ours, refs


def _states(refs) -> tuple[torch.Tensor, torch.Tensor]:
    qpos = np.stack([r.unwrapped.data.qpos for r in refs])
    qvel = np.stack([r.unwrapped.data.qvel for r in refs])
    return torch.tensor(qpos, dtype=torch.float32), torch.tensor(qvel, dtype=torch.float32)


def _gym_position(env_id: str, env: gym.Env) -> np.ndarray:
    """The position gymnasium's step differentiates, read from its current (stale) mjData."""
    u = env.unwrapped
    if env_id == "Ant-v5":
        return u.data.body(1).xpos[:2].copy()
    if env_id == "Humanoid-v5":
        return mass_center(u.model, u.data)
    return u.data.qpos[:1].copy()


def _actions(refs, rng) -> np.ndarray:
    """Random actions, a quarter of them beyond the bounds (ours clips like the adapter)."""
    space = refs[0].action_space
    a = rng.uniform(-1.25, 1.25, size=(len(refs), *space.shape)) * space.high
    return a.astype(np.float32)


def _close(ours: np.ndarray, ref: np.ndarray, tol: float) -> bool:
    return bool(np.all(np.abs(ours - ref) <= tol * (1.0 + np.abs(ref))))


def _rel_err(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(ours - ref) / (1.0 + np.abs(ref))))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", MUJOCO_IDS)
def test_each_step_from_gymnasium_state_matches(env_id, device, rng):
    """From gymnasium's state (qpos, qvel, solver warm start and the position its reward
    differentiates), one step gives the same observation, reward and termination; 25 steps x 4
    envs with episodes ending and restarting on the gymnasium side.

    float32 against float64: typical errors are 1e-7..1e-5 (relative); a constraint that sits
    exactly at its boundary (a joint held against its limit) can switch on in one and not the
    other, so a rare step may differ by a few percent (seen once in ~1,000 Ant steps: a limit
    force of 419 in MuJoCo C at pos -0.0, none in float32). Hence: median error < 1e-4, and at
    least 98% of the env-steps within 1e-2.
    """
    ours, refs = _pair(env_id, device)
    for r in refs:
        r.reset(seed=int(rng.integers(2**31)))
    obs_err, rew_err = [], []
    for _ in range(25):
        qpos, qvel = _states(refs)
        ours.set_qpos_qvel(qpos, qvel)
        ours._warmstart.copy_(
            torch.tensor(np.stack([r.unwrapped.data.qacc_warmstart for r in refs]))
        )
        ours._position_prev.copy_(torch.tensor(np.stack([_gym_position(env_id, r) for r in refs])))
        actions = _actions(refs, rng)
        step = ours.step(torch.from_numpy(actions).to(device))
        for i, r in enumerate(refs):
            clipped = np.clip(actions[i], r.action_space.low, r.action_space.high)
            obs, reward, terminated, truncated, _ = r.step(clipped)
            obs_err.append(_rel_err(step.final_obs[i].cpu().numpy(), obs))
            rew_err.append(_rel_err(np.array(float(step.reward[i])), np.array(reward)))
            assert bool(step.terminated[i]) == terminated
            assert not truncated and not bool(step.truncated[i])
            if terminated:
                r.reset(seed=int(rng.integers(2**31)))
    for name, errs in (("observation", obs_err), ("reward", rew_err)):
        errs = np.array(errs)
        assert np.median(errs) < 1e-4, (name, np.median(errs))
        assert np.mean(errs <= 1e-2) >= 0.98, (name, np.sort(errs)[-5:])


@pytest.mark.parametrize("env_id", MUJOCO_IDS)
def test_short_free_run_matches_gymnasium(env_id, rng):
    """From gymnasium's reset state and nothing else, 8 steps follow gymnasium (what the env
    carries from step to step: warm start, previous position, contact forces). The same
    criterion as above, a little wider for errors that a boundary event carries forward."""
    ours, refs = _pair(env_id, "cpu")
    reset_obs = np.stack([r.reset(seed=int(rng.integers(2**31)))[0] for r in refs])
    obs = ours.set_qpos_qvel(*_states(refs))
    assert _close(obs.numpy(), reset_obs, 1e-5)
    live = set(range(NUM_ENVS))
    obs_err, rew_err = [], []
    for _ in range(8):
        actions = _actions(refs, rng)
        step = ours.step(torch.from_numpy(actions))
        for i in sorted(live):
            space = refs[i].action_space
            ob, reward, terminated, _, _ = refs[i].step(np.clip(actions[i], space.low, space.high))
            obs_err.append(_rel_err(step.final_obs[i].numpy(), ob))
            rew_err.append(_rel_err(np.array(float(step.reward[i])), np.array(reward)))
            assert bool(step.terminated[i]) == terminated
            if terminated:
                live.discard(i)
    for name, errs in (("observation", obs_err), ("reward", rew_err)):
        errs = np.array(errs)
        assert np.median(errs) < 1e-4, (name, np.median(errs))
        assert np.mean(errs <= 1e-2) >= 0.9, (name, np.sort(errs)[-5:])


def _gym_obs_of(env_id: str, qpos: np.ndarray, qvel: np.ndarray, ours) -> np.ndarray:
    """gymnasium's observation right after ``reset`` put the env into (qpos, qvel)."""
    ref = gym.make(env_id).unwrapped
    ref.model.opt.solver = ours.mj_model.opt.solver
    ref.reset(seed=0)
    mujoco.mj_resetData(ref.model, ref.data)
    ref.set_state(qpos.astype(np.float64), qvel.astype(np.float64))
    return ref._get_obs()


@pytest.mark.parametrize(("env_id", "fallen_z"), [("Hopper-v5", 0.5), ("Humanoid-v5", 0.8)])
def test_masked_reset_restarts_only_the_ended_envs(env_id, fallen_z):
    """Envs 1 and 3 start below the healthy height: after one step they are terminated and
    restarted from a fresh noisy start (their observation gymnasium's reset observation of that
    state); envs 0 and 2 carry on untouched."""
    ours, refs = _pair(env_id, "cpu", seed=3)
    for i, r in enumerate(refs):
        r.reset(seed=i)
        if i in (1, 3):
            r.unwrapped.data.qpos[2 if env_id == "Humanoid-v5" else 1] = fallen_z
    ours.set_qpos_qvel(*_states(refs))
    zeros = np.zeros(ours.action_space.shape, dtype=np.float32)
    step = ours.step(torch.zeros(NUM_ENVS, *ours.action_space.shape))
    assert step.terminated.tolist() == [False, True, False, True]
    assert ours.elapsed.tolist() == [1, 0, 1, 0]
    for i in (0, 2):  # carried on: the state gymnasium reaches, observation = final one
        refs[i].step(zeros)
        assert _close(ours.qpos[i].numpy(), refs[i].unwrapped.data.qpos, 1e-4)
        assert torch.equal(step.obs[i], step.final_obs[i])
    noise = ours.reset_noise_scale
    for i in (1, 3):
        assert torch.all((ours.qpos[i] - ours.init_qpos).abs() <= noise + 1e-6)
        assert torch.all(ours._warmstart[i] == 0)  # as mj_resetData leaves it
        assert not torch.equal(step.obs[i], step.final_obs[i])
        expected = _gym_obs_of(env_id, ours.qpos[i].numpy(), ours.qvel[i].numpy(), ours)
        assert _close(step.obs[i].numpy(), expected, 1e-4)


@pytest.mark.parametrize(
    ("env_id", "index", "value"),
    [
        ("Hopper-v5", ("qvel", 5), 30.0),  # observed velocity clipped to 10
        ("Hopper-v5", ("qvel", 0), 120.0),  # only the state range is left: terminated
        ("Hopper-v5", ("qpos", 2), 0.3),  # tilted beyond 0.2 rad: terminated
        ("Walker2d-v5", ("qpos", 2), 1.2),  # tilted beyond 1 rad: terminated
        ("Walker2d-v5", ("qvel", 3), -25.0),  # clipped velocity
        ("Ant-v5", ("qpos", 2), 1.3),  # torso above 1: terminated (Ant's range is inclusive)
        ("HalfCheetah-v5", ("qvel", 2), 25.0),  # HalfCheetah clips nothing and never ends
        ("Humanoid-v5", ("qpos", 2), 2.2),  # above 2: terminated
    ],
)
def test_edge_states_match_gymnasium(env_id, index, value):
    """States at the edges of the healthy ranges and the observation clips."""
    ours, refs = _pair(env_id, "cpu", n=1)
    refs[0].reset(seed=0)
    field, k = index
    getattr(refs[0].unwrapped.data, field)[k] = value
    ours.set_qpos_qvel(*_states(refs))
    action = np.zeros(ours.action_space.shape, dtype=np.float32)
    obs, reward, terminated, _, _ = refs[0].step(action)
    step = ours.step(torch.from_numpy(action)[None])
    assert _close(step.final_obs[0].numpy(), obs, 1e-3)
    assert float(step.reward[0]) == pytest.approx(reward, rel=1e-3, abs=1e-3)
    assert bool(step.terminated[0]) == terminated


@pytest.mark.parametrize("env_id", MUJOCO_IDS)
def test_reset_noise_has_gymnasium_distribution(env_id):
    """qpos0 + U(-s, s) for qpos; qvel U(-s, s), or N(0, s^2) for HalfCheetah and Ant."""
    env = make_gpu(env_id, 512, "cpu", seed=11)
    env.reset()
    s = env.reset_noise_scale
    dq = (env.qpos - env.init_qpos).flatten()
    assert dq.abs().max() <= s * (1 + 1e-5)
    assert dq.std().item() == pytest.approx(s / 3**0.5, rel=0.05)
    if env_id in ("HalfCheetah-v5", "Ant-v5"):
        assert env.qvel.std().item() == pytest.approx(s, rel=0.05)
        assert env.qvel.abs().max() > 2 * s
    else:
        assert env.qvel.abs().max() <= s * (1 + 1e-5)
        assert env.qvel.std().item() == pytest.approx(s / 3**0.5, rel=0.05)


def test_time_limit_truncates_then_restarts():
    env = make_gpu("HalfCheetah-v5", 2, "cpu", max_episode_steps=3, seed=1)
    env.reset()
    zeros = torch.zeros(2, 6)
    for t in range(1, 4):
        step = env.step(zeros)
        assert step.truncated.tolist() == [t == 3] * 2
        assert not step.terminated.any()
    assert env.elapsed.tolist() == [0, 0]
    returns, lengths = env.pop_episode_stats()
    assert lengths == [3, 3] and len(returns) == 2


def test_seeded_resets_repeat_and_state_round_trips():
    a = make_gpu("Walker2d-v5", 3, "cpu", seed=7)
    b = make_gpu("Walker2d-v5", 3, "cpu", seed=7)
    assert torch.equal(a.reset(), b.reset())
    actions = torch.full((3, 6), 0.3)
    saved = a.get_state()
    first = [a.step(actions) for _ in range(12)]
    a.set_state(saved)
    again = [a.step(actions) for _ in range(12)]
    for x, y in zip(first, again, strict=True):
        assert torch.equal(x.obs, y.obs) and torch.equal(x.reward, y.reward)
    with pytest.raises(EnvError, match="does not match"):
        make_gpu("Walker2d-v5", 2, "cpu").set_state(saved)


def test_spaces_and_make_match_gymnasium():
    for env_id in MUJOCO_IDS:
        env = envs.make(env_id, 2, backend="gpu", seed=0)
        ref = gym.make(env_id)
        assert env.observation_space.shape == ref.observation_space.shape, env_id
        assert env.action_space == ref.action_space, env_id
        assert env.max_episode_steps == ref.spec.max_episode_steps == 1000
    assert sorted(TASKS) == sorted(MUJOCO_IDS)
    with pytest.raises(EnvError, match="float32"):
        make_gpu("Hopper-v5", 2, "cpu", dtype=torch.float64)


def test_missing_mujoco_warp_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # import fails as if not installed
    with pytest.raises(EnvError, match=r"orin-rl\[sim\]"):
        make_gpu("Hopper-v5", 2, "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA")
@pytest.mark.parametrize("env_id", ["Hopper-v5", "Humanoid-v5"])
def test_steps_captured_in_a_torch_graph_replay_like_eager_steps(env_id):
    """Ten steps recorded in one torch CUDA graph (MuJoCo Warp told through capture_scope)
    and replayed give what ten eager steps give from the same state and generator."""
    n = 64
    env = make_gpu(env_id, n, "cuda", seed=5)
    env.reset()
    actions = torch.zeros(n, *env.action_space.shape, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm-up: compiles, and captures the eager Warp graphs
            env.step(actions)
    torch.cuda.current_stream().wait_stream(side)
    saved = env.get_state()
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(env.generator)
    with torch.cuda.graph(graph), env.capture_scope():
        for _ in range(10):
            out = env.step(actions)
    env.set_state(saved)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = [torch.rand(actions.shape, device="cuda", generator=gen) * 2 - 1 for _ in range(3)]
    graphed = []
    for a in inputs:
        actions.copy_(a)
        graph.replay()
        graphed.append((out.obs.clone(), out.reward.clone(), env.qpos.clone()))
    env.set_state(saved)
    for a, (obs, reward, qpos) in zip(inputs, graphed, strict=True):
        for _ in range(10):
            ref = env.step(a)
        assert torch.allclose(ref.obs, obs, rtol=1e-3, atol=1e-3)
        assert torch.allclose(ref.reward, reward, rtol=1e-3, atol=1e-3)
        assert torch.allclose(env.qpos, qpos, rtol=1e-3, atol=1e-3)
