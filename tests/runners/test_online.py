"""Online learning: weight hand-over, watchdog, learner stall, stop file, resume, UDP plant."""

from __future__ import annotations

import itertools
import json
import socket
import sys
import threading
import time

import numpy as np
import pytest
import torch
from torch import nn

from orin_rl import config as config_mod
from orin_rl.algorithms.sac import SAC, QNetwork, squashed_gaussian
from orin_rl.checkpoint import load_checkpoint
from orin_rl.config import Config, ConfigError
from orin_rl.runners import online, online_actor, online_learner, run_folder, train, verdict
from orin_rl.runners.logger import read_metrics
from orin_rl.runners.online import OnlineRunner as OnlineTrainer
from orin_rl.runners.online_actor import NumpyMLP, WeightMailbox, squashed_gaussian_np
from orin_rl.runners.plant import Feedback, GymPlant
from orin_rl.runners.plant_udp import PlantTimeout, UdpPlant, serve
from orin_rl.runtime.loop import ControlLoop, LoopConfig


def online_cfg(**sets) -> Config:
    """A short Pendulum online run: small batches, a fast control rate, no evaluation."""
    base = {
        "env.env_id": "Pendulum-v1",
        "env.num_envs": 1,
        "train.algo": "sac",
        "train.total_steps": 400,
        "train.eval_every": 0,
        "train.eval_episodes": 2,
        "train.tensorboard": False,
        "train.log_every": 100,
        "online.log_every_s": 0.1,
        "train.checkpoint_every": 10_000,
        "train.power_monitor": "off",
        "sac.learning_starts": 64,
        "sac.batch_size": 32,
        "sac.hidden_sizes": [16, 16],
        "online.enabled": True,
        "online.control_rate_hz": 1000.0,
        "online.weight_sync_every": 20,
        **sets,
    }
    return config_mod.apply_overrides(Config(), [f"{k}={json.dumps(v)}" for k, v in base.items()])


def dqn_cfg(**sets) -> Config:
    """A short CartPole online DQN run (discrete actions)."""
    base = {
        "env.env_id": "CartPole-v1", "train.algo": "dqn", "train.total_steps": 400,
        "dqn.learning_starts": 64, "dqn.batch_size": 32, "dqn.hidden_sizes": [16, 16],
        "dqn.train_freq": 1, "dqn.target_update_every": 50,
        **sets,
    }  # fmt: skip
    return online_cfg(**base)


# ------------------------------------------------------------------------ hand-over
def _values(net) -> list[np.ndarray]:
    if isinstance(net, NumpyMLP):
        return [a for _, w, b in net.layers if w is not None for a in (w, b)]
    return [p.detach().numpy() for p in net.parameters()]


@pytest.mark.parametrize("as_numpy", [True, False], ids=["numpy", "torch"])
def test_actor_never_sees_a_half_written_network(as_numpy):
    """A publisher fills every parameter with its version number while a reader keeps picking
    the newest network up and checks that all of it holds one version, before and after a
    forward (the GIL is switched every microsecond, so an in-place write would be caught)."""
    net = nn.Sequential(*[nn.Linear(8, 8) for _ in range(40)])
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()  # version 0, the mailbox's first network
    box = WeightMailbox(net, numpy=as_numpy)
    stop = threading.Event()
    seen: set[float] = set()
    torn: list[str] = []

    def reader():
        x = np.zeros((1, 8), dtype=np.float32)
        while not stop.is_set():
            _, current = box.latest()
            first = {float(v.flat[0]) for v in _values(current)}
            if isinstance(current, NumpyMLP):
                current(x)
            else:
                with torch.no_grad():
                    current(torch.from_numpy(x))
            after = {float(v.flat[0]) for v in _values(current)}
            every = {float(u) for v in _values(current) for u in v.flat}
            if len(first) != 1 or first != after or len(every) != 1:
                torn.append(f"{sorted(first)[:3]} -> {sorted(after)[:3]}")
            seen.update(first)

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for version in range(1, 301):
            with torch.no_grad():
                for p in net.parameters():
                    p.fill_(version / 1024)  # exact in float32
            box.publish(net)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(switch)
    assert not torn, torn[:5]
    assert len(seen) > 10  # the reader really saw many versions
    assert box.latest()[0] == 300
    assert {float(v.flat[0]) for v in _values(box.latest()[1])} == {300 / 1024}


def test_published_network_matches_the_learner_and_is_detached():
    net = nn.Sequential(nn.Linear(3, 5), nn.Tanh(), nn.Linear(5, 2))
    x = torch.randn(4, 3)
    for as_numpy in (False, True):
        box = WeightMailbox(net, numpy=as_numpy)
        version = box.publish(net)
        _, copy = box.latest()
        assert version == 1
        got = copy(x.numpy()) if as_numpy else copy(x).numpy()
        np.testing.assert_allclose(got, net(x).detach().numpy(), rtol=1e-5, atol=1e-6)
        if not as_numpy:
            assert not any(p.requires_grad for p in copy.parameters())
        with torch.no_grad():  # the learner moves on: the published copy does not
            net[0].weight.add_(1.0)
        again = copy(x.numpy()) if as_numpy else copy(x).numpy()
        np.testing.assert_array_equal(again, got)


@pytest.mark.parametrize("activation", ["relu", "tanh", "elu"])
def test_numpy_actor_matches_torch_on_fresh_inputs(activation, rng):
    from orin_rl.models.actor_critic import mlp

    net = mlp(5, [32, 32], 4, activation, 1.0)
    x = rng.normal(size=(64, 5)).astype(np.float32) * 3
    want = net(torch.from_numpy(x).double().float()).detach().numpy()
    np.testing.assert_allclose(NumpyMLP(net)(x), want, rtol=1e-5, atol=1e-5)
    # ... and the squashed sample: same mean path, inside the bounds
    mid, half = np.array([0.5, -1.0], np.float32), np.array([1.5, 2.0], np.float32)
    out = NumpyMLP(net)(x)
    sample = squashed_gaussian_np(out, mid, half, np.random.default_rng(0))
    assert np.all(sample >= mid - half) and np.all(sample <= mid + half)
    det, _ = squashed_gaussian(torch.from_numpy(out), torch.from_numpy(mid),
                               torch.from_numpy(half), deterministic=True)  # fmt: skip
    zero_noise = squashed_gaussian_np(out, mid, half, _FixedRng(np.zeros((64, 2))))
    np.testing.assert_allclose(zero_noise, det.numpy(), rtol=1e-5, atol=1e-6)
    # with noise: against a float64 reference of SAC's head (soft-clamped log std, tanh squash)
    noise = rng.normal(size=(64, 2))
    o = out.astype(np.float64)
    log_std = -5.0 + 0.5 * (2.0 - -5.0) * (np.tanh(o[:, 2:]) + 1)
    ref = mid + half * np.tanh(o[:, :2] + np.exp(log_std) * noise)
    got = squashed_gaussian_np(out, mid, half, _FixedRng(noise))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


class _FixedRng:
    def __init__(self, noise):
        self.noise = noise

    def standard_normal(self, shape, dtype):
        assert shape == self.noise.shape
        return self.noise.astype(dtype)


# ------------------------------------------------------------------------ control loop
def test_control_loop_stops_when_asked():
    calls = []
    loop = ControlLoop(
        lambda: len(calls),
        lambda obs: obs,
        calls.append,
        LoopConfig(rate_hz=0, iterations=100),
        should_stop=lambda: len(calls) >= 7,
    )
    result = loop.run()
    assert result.iterations == 7 and calls == list(range(7))


# ------------------------------------------------------------------------ DroQ critics
def test_droq_critic_has_dropout_and_layer_norm_and_they_act():
    q = QNetwork(3, 1, [32, 32], dropout=0.5, layer_norm=True)
    kinds = [type(m).__name__ for m in q.net]
    assert kinds.count("Dropout") == 2 and kinds.count("LayerNorm") == 2
    obs, act = torch.randn(64, 3), torch.randn(64, 1)
    q.train()
    assert not torch.equal(q(obs, act), q(obs, act))  # dropout samples differ in training
    q.eval()
    assert torch.equal(q(obs, act), q(obs, act))
    plain = QNetwork(3, 1, [32, 32])
    assert not any(isinstance(m, (nn.Dropout, nn.LayerNorm)) for m in plain.net)


def test_online_config_is_checked():
    with pytest.raises(ConfigError, match=r"sac\.critic_dropout"):
        config_mod.validate(online_cfg(**{"sac.critic_dropout": 1.0}))
    with pytest.raises(ConfigError, match=r"online\.enabled: SAC \(continuous actions\) or DQN"):
        config_mod.validate(online_cfg(**{"train.algo": "ppo"}))
    with pytest.raises(ConfigError, match=r"dqn\.n_step: online DQN stores one-step"):
        config_mod.validate(dqn_cfg(**{"dqn.n_step": 3}))
    with pytest.raises(ConfigError, match=r"env\.num_envs: .* got 2; add --set env\.num_envs=1"):
        config_mod.validate(online_cfg(**{"env.num_envs": 2}))
    with pytest.raises(ConfigError, match=r"online\.control_rate_hz"):
        config_mod.validate(online_cfg(**{"online.control_rate_hz": 0}))


# ------------------------------------------------------------------------ whole runs
def test_online_run_learns_from_every_tick_and_reports(tmp_path, monkeypatch):
    """A whole online run's summary. The learner's phases add up to its loop's time (read
    from the runner): they once had to exceed half the run's wall time, which on a loaded box
    the final evaluation and start-up could take. The loop's "other" now runs up to the next
    iteration's first reading, so the phases partition the loop's time under any load
    (mutation: wait_for_data not counted -> 0.395 s of phases for a 0.466 s loop, fails)."""
    runners = []
    learn = OnlineTrainer.learn

    def kept(self):
        runners.append(self)
        return learn(self)

    monkeypatch.setattr(OnlineTrainer, "learn", kept)
    summary = train(online_cfg(**{"train.eval_every": 150}), tmp_path / "run", progress=False)
    on = summary["online"]
    for key in ("control_rate_hz", "ticks", "deadline_misses", "latency_us", "weight_swaps",
                "updates", "updates_per_env_step", "wall_to_threshold_s"):  # fmt: skip
        assert key in on, key
    assert summary["stop_reason"] == "total_steps"
    assert summary["total_steps"] >= 400
    # every tick but the first of each episode finishes a transition, and the buffer has them
    state = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert state["algo"]["replay"]["size"] == summary["total_steps"]
    assert on["ticks"] >= summary["total_steps"]
    assert on["updates"] > 0 and on["weight_swaps"] > 0
    assert 0 < on["updates_per_env_step"] <= 1.0 + 1e-9  # never above the target
    assert set(on["latency_us"]) == {"p50", "p99", "max"}
    # the learner's time by phase: every phase it went through, adding up to its wall time
    phases = on["learner_phase_s"]
    assert set(phases) == set(online_learner.LEARNER_PHASES)
    assert min(phases["drain"], phases["update"], phases["publish"], phases["evaluate"]) > 0
    learner_evals = summary["eval_time_s"] - summary["final_eval_time_s"]  # the periodic ones
    assert phases["evaluate"] == pytest.approx(learner_evals, abs=2e-3)
    assert all(v >= 0 for v in phases.values())
    (runner,) = runners
    # six phases, each rounded to the millisecond in the summary
    assert sum(phases.values()) == pytest.approx(runner.learner_loop_s, abs=6 * 5e-4)
    assert 0 < runner.learner_loop_s <= summary["wall_time_s"]


def test_transitions_are_the_plant_s_own(tmp_path):
    """The stored (s, a, r, s') are what the plant did: replaying the stored actions from the
    same seed on a fresh env gives the stored rewards and next observations. The watchdog is
    off: on a loaded box a 3 ms trip drops the transition it falls into (by design, tested
    below), and the stored steps would no longer follow one another."""
    cfg = online_cfg(**{"train.total_steps": 150, "sac.learning_starts": 10_000,
                        "online.watchdog_periods": 0})  # fmt: skip
    trainer = OnlineTrainer(cfg, tmp_path / "run", progress=False)
    trainer.learn()
    replay = trainer.algo.replay
    n = len(replay)
    obs, actions = replay.field("obs")[:n].numpy(), replay.field("actions")[:n].numpy()
    rewards, next_obs = replay.field("rewards")[:n].numpy(), replay.field("next_obs")[:n].numpy()
    env = GymPlant("Pendulum-v1")
    first = env.reset(seed=cfg.train.seed + 100_000)
    np.testing.assert_allclose(obs[0], first, rtol=1e-6)
    for i in range(min(n, 150)):
        env.send(actions[i])
        fb = env.receive()
        assert fb.reward == pytest.approx(float(rewards[i]), rel=1e-5, abs=1e-6)
        np.testing.assert_allclose(next_obs[i], fb.obs, rtol=1e-5, atol=1e-6)
        if i + 1 < n:
            np.testing.assert_allclose(obs[i + 1], fb.obs, rtol=1e-5, atol=1e-6)


class _HangingPlant(GymPlant):
    """Pendulum whose sensor read hangs once (a stuck driver), recording every action sent and
    the thread that sent it."""

    def __init__(self, hang_at: int, hang_s: float, reset_s: float = 0.0):
        super().__init__("Pendulum-v1")
        self.hang_at, self.hang_s, self.reads, self.reset_s = hang_at, hang_s, 0, reset_s
        self.hung_at: int | None = None
        self.sent: list[tuple[str, int, np.ndarray]] = []
        self.resets: list[tuple[int, int]] = []

    def reset(self, seed=None):
        began = time.monotonic_ns()
        time.sleep(self.reset_s)  # a robot walking back to its start pose
        obs = super().reset(seed)
        self.resets.append((began, time.monotonic_ns()))
        return obs

    def receive(self) -> Feedback:
        self.reads += 1
        if self.reads == self.hang_at:
            self.hung_at = time.monotonic_ns()
            time.sleep(self.hang_s)
        return super().receive()

    def send(self, action):
        self.sent.append((threading.current_thread().name, time.monotonic_ns(), np.array(action)))
        super().send(action)


def test_watchdog_sends_the_safe_action_when_the_actor_hangs(tmp_path, monkeypatch):
    plant = _HangingPlant(hang_at=100, hang_s=0.5)
    monkeypatch.setattr(online, "make_plant", lambda *a, **k: plant)
    cfg = online_cfg(
        **{
            "train.total_steps": 200,
            "online.control_rate_hz": 200.0,
            # 100 ms: a loaded 2-core CI box stalls a tick past 15 ms (3 periods) now and then,
            # and a trip outside the hang would be a true trip, not the one under test.
            "online.watchdog_periods": 20.0,
            "online.safe_action": [0.5],
        }
    )
    trainer = OnlineTrainer(cfg, tmp_path / "run", progress=False)
    summary = trainer.learn()
    assert summary["online"]["watchdog_trips"] >= 1
    from_watchdog = [(t, a) for name, t, a in plant.sent if name != "orin-rl-actor"]
    assert from_watchdog and all(np.allclose(a, [0.5]) for _, a in from_watchdog)
    # it sent while the sensor read hung, not at start-up
    assert all(plant.hung_at <= t <= plant.hung_at + 0.5e9 for t, _ in from_watchdog)
    # ... and the stuck tick counts as a deadline miss
    assert summary["online"]["deadline_misses"] >= 1
    # the watchdog's step falls inside one transition: that one is dropped, so every stored
    # transition is one step of Pendulum's dynamics from its (s, a)
    assert trainer._actor.dropped >= 1
    _assert_one_step_each(trainer.algo.replay)


def test_watchdog_during_inference_drops_the_stale_transition(tmp_path, monkeypatch):
    """The actor stalls after reading the sensor and before acting: the watchdog steps the
    plant with the safe action in between, so the action is then applied to a state other
    than the one it was chosen (and would be stored) for. That transition is dropped: every
    stored one is still one step of the plant from its (s, a)."""
    real_infer = online.Actor._infer
    calls = {"n": 0}

    def stalling_infer(self, obs):
        calls["n"] += 1
        if calls["n"] == 120:
            time.sleep(0.4)  # e.g. the GIL held elsewhere, a page fault, a slow weight copy
        return real_infer(self, obs)

    monkeypatch.setattr(online.Actor, "_infer", stalling_infer)
    cfg = online_cfg(**{"train.total_steps": 250, "online.control_rate_hz": 200.0,
                        "online.watchdog_periods": 20.0})  # fmt: skip
    trainer = OnlineTrainer(cfg, tmp_path / "run", progress=False)
    summary = trainer.learn()
    assert summary["online"]["watchdog_trips"] >= 1
    assert trainer._actor.dropped >= 1
    _assert_one_step_each(trainer.algo.replay)


def _assert_one_step_each(replay) -> None:
    n = len(replay)
    obs, actions = replay.field("obs")[:n].numpy(), replay.field("actions")[:n].numpy()
    next_obs = replay.field("next_obs")[:n].numpy()
    env = GymPlant("Pendulum-v1")
    env.reset(seed=0)
    pend = env.env.unwrapped
    for i in range(n):
        cos, sin, thdot = obs[i].astype(np.float64)
        pend.state = np.array([np.arctan2(sin, cos), thdot])
        env.send(actions[i])
        np.testing.assert_allclose(env.receive().obs, next_obs[i], rtol=1e-4, atol=1e-4)


def test_actor_holds_the_safe_action_while_the_learner_stalls(tmp_path, monkeypatch):
    plant = _HangingPlant(hang_at=-1, hang_s=0)
    monkeypatch.setattr(online, "make_plant", lambda *a, **k: plant)
    real_step = SAC._step
    calls = {"n": 0}

    def stalling_step(self, batch):
        calls["n"] += 1
        if calls["n"] == 5:
            time.sleep(0.6)  # the learner hangs (a GPU fault, a lock) while data comes in
        return real_step(self, batch)

    monkeypatch.setattr(SAC, "_step", stalling_step)
    cfg = online_cfg(
        **{
            "train.total_steps": 500,
            "online.control_rate_hz": 500.0,
            "online.learner_stall_s": 0.2,
            "online.safe_action": [-0.25],
        }
    )
    summary = train(cfg, tmp_path / "run", progress=False)
    safe_ticks = summary["online"]["safe_action_ticks"]
    assert safe_ticks >= 1
    actor_sent = [a for name, _, a in plant.sent if name == "orin-rl-actor"]
    assert sum(np.allclose(a, [-0.25]) for a in actor_sent) >= safe_ticks
    # and it acted again once the learner was back: the last actions are not the safe one
    assert not all(np.allclose(a, [-0.25]) for a in actor_sent[-20:])


def test_stop_file_ends_cleanly_and_resume_continues(tmp_path):
    run = tmp_path / "run"
    cfg = online_cfg(**{"train.total_steps": 100_000, "online.control_rate_hz": 500.0})

    def touch_stop():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            metrics = run / "metrics.jsonl"
            lines = metrics.read_text().splitlines() if metrics.exists() else []
            if lines and json.loads(lines[-1])["global_step"] >= 300:
                (run / "STOP").touch()
                return
            time.sleep(0.05)

    threading.Thread(target=touch_stop, daemon=True).start()
    first = train(cfg, run, progress=False)
    assert first["stop_reason"] == "stop_file"
    assert not (run / "STOP").exists()
    state = load_checkpoint(run / "checkpoint.pt")
    steps = state["global_step"]
    assert steps == first["total_steps"] >= 300
    assert state["algo"]["replay"]["size"] == steps  # the experience is in the checkpoint
    weights = {k: v.clone() for k, v in state["algo"]["policy"].items()}

    # Resume: the saved config (online) and everything learned come back; run 200 more steps.
    trainer = OnlineTrainer(Config(), run, resume=True, progress=False)
    assert trainer.cfg.online.enabled and trainer.cfg.train.total_steps == 100_000
    trainer.cfg.train.total_steps = steps + 200
    assert trainer.global_step == steps and len(trainer.algo.replay) == steps
    for k, v in trainer.algo.policy.state_dict().items():
        assert torch.equal(v, weights[k]), k
    assert trainer.algo.grad_steps == state["algo"]["grad_steps"]
    assert trainer.episodes_done() == state["online_episodes"] >= 1  # new seeds, not the old
    second = trainer.learn()
    assert second["stop_reason"] == "total_steps"
    assert second["total_steps"] >= steps + 200
    assert len(trainer.algo.replay) == second["total_steps"]


# ------------------------------------------------------------------------ UDP plant
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start_server() -> tuple[int, threading.Thread]:
    """A Pendulum plant server on a free localhost port, in a thread."""
    port = _free_port()
    ready = threading.Event()
    server = threading.Thread(target=serve, args=("Pendulum-v1", "127.0.0.1", port),
                              kwargs={"ready": ready}, daemon=True)  # fmt: skip
    server.start()
    assert ready.wait(10)
    return port, server


def test_udp_plant_matches_gymnasium_and_trains(tmp_path):
    port, server = _start_server()
    plant = UdpPlant("127.0.0.1", port)
    ref = GymPlant("Pendulum-v1")
    np.testing.assert_allclose(plant.reset(seed=3), ref.reset(seed=3), rtol=1e-6)
    for a in np.linspace(-2, 2, 20, dtype=np.float32):
        plant.send(np.array([a]))
        ref.send(np.array([a]))
        got, want = plant.receive(), ref.receive()
        np.testing.assert_allclose(got.obs, want.obs, rtol=1e-6)
        assert got.reward == pytest.approx(want.reward, rel=1e-6)
        assert (got.terminated, got.truncated) == (want.terminated, want.truncated)
    plant.close()

    cfg = online_cfg(**{"train.total_steps": 200, "online.plant": f"udp://127.0.0.1:{port}"})
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["total_steps"] >= 200 and summary["online"]["plant"].startswith("udp://")
    closer = UdpPlant.__new__(UdpPlant)  # a bare client to send the close request
    closer.address, closer.timeout_s = ("127.0.0.1", port), 2.0
    closer.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closer.sock.settimeout(2.0)
    closer._io = threading.Lock()
    closer._seq = itertools.count(1)
    assert closer._call({"op": "close"}) == {"ok": True, "seq": 1}
    server.join(5)
    assert not server.is_alive()


def test_udp_plant_that_does_not_answer_is_one_line():
    port = _free_port()  # nothing listens there
    with pytest.raises(
        PlantTimeout, match=r"did not answer within 0.2 s; is `orin-rl plant-server`"
    ):
        UdpPlant("127.0.0.1", port, timeout_s=0.2)


@pytest.mark.gpu
def test_online_learner_on_cuda_keeps_the_actor_off_the_gpu(tmp_path):
    """The learner on CUDA (replay buffer, networks, gradient steps there); the actor acts
    with its numpy copy on the host, so no tick waits behind the learner's kernels."""
    cfg = online_cfg(**{"train.device": "cuda", "online.control_rate_hz": 500.0,
                        "train.total_steps": 1500})  # fmt: skip
    trainer = OnlineTrainer(cfg, tmp_path / "run", progress=False)
    assert trainer.algo.replay.storage_device.type == "cuda" or trainer.algo.replay.placement in (
        "managed",
        "pinned",
    )
    summary = trainer.learn()
    assert summary["device"].startswith("cuda")
    assert summary["online"]["updates"] > 0 and summary["online"]["weight_swaps"] > 0
    _, net = trainer.mailbox.latest()
    assert isinstance(net, NumpyMLP)  # the actor's copy is host memory
    assert len(trainer.algo.replay) == summary["total_steps"]


def test_the_learner_moves_transitions_in_batches_and_all_at_the_end(tmp_path, monkeypatch):
    """The loop's drain waits for DRAIN_BATCH queued transitions or DRAIN_EVERY_S; a forced
    drain (the end of the run) takes whatever is queued."""
    trainer = OnlineTrainer(online_cfg(**{"train.total_steps": 100}), tmp_path / "run",
                            progress=False)  # fmt: skip
    trainer.learn()
    stored = len(trainer.algo.replay)
    transition = (np.zeros(3, np.float32), np.zeros(1, np.float32), 0.0,
                  np.zeros(3, np.float32), 0.0)  # fmt: skip
    queue = trainer._actor.queue
    monkeypatch.setattr(online_learner, "DRAIN_EVERY_S", 3600.0)  # no timing window on a busy box
    queue.extend([transition] * (online_learner.DRAIN_BATCH - 1))
    trainer._last_drain = time.perf_counter()
    assert trainer._drain(force=False) == 0 and len(queue) == online_learner.DRAIN_BATCH - 1
    queue.append(transition)
    assert trainer._drain(force=False) == online_learner.DRAIN_BATCH and not queue
    queue.append(transition)
    trainer._last_drain = time.perf_counter() - 3601.0  # the interval has passed
    assert trainer._drain(force=False) == 1
    queue.append(transition)
    assert trainer._drain(force=False) == 0 and trainer._drain() == 1
    assert len(trainer.algo.replay) == stored + online_learner.DRAIN_BATCH + 2


def test_a_gpu_learner_evaluates_a_host_copy_of_its_policy(tmp_path, monkeypatch):
    """With the learner on CUDA the evaluation episodes run a CPU copy of the policy (the
    learner's own on the CPU box stands in for the CUDA one: the choice follows the device)."""
    trainer = OnlineTrainer(online_cfg(), tmp_path / "run", progress=False)
    seen = []

    def spy(policy, env_id, episodes, **kwargs):
        seen.append((policy, kwargs["device"]))
        return [0.0] * episodes

    monkeypatch.setattr(verdict, "evaluate", spy)
    trainer._evaluate(7)  # a CPU learner: its own policy
    trainer.device = torch.device("cuda")
    trainer._evaluate(7)
    (own, own_device), (copy_, copy_device) = seen
    assert own is trainer.policy and own_device.type == "cpu"
    assert copy_ is not trainer.policy and copy_device.type == "cpu"
    for a, b in zip(copy_.state_dict().values(), trainer.policy.state_dict().values(),
                    strict=True):  # fmt: skip
        assert torch.equal(a, b)


def test_online_learner_steps_through_the_algorithms_gradient_step(tmp_path):
    """The online learner takes each step through ``gradient_step``, which picks the CUDA
    graph under --cuda-graphs (it used to call the eager step itself, graphs or not)."""
    trainer = OnlineTrainer(online_cfg(), tmp_path / "run", progress=False)
    algo = trainer.algo
    calls = []
    step = algo.gradient_step

    def counted():
        calls.append(1)
        return step()

    algo.gradient_step = counted
    summary = trainer.learn()
    assert summary["online"]["updates"] > 0 and len(calls) == summary["online"]["updates"]


@pytest.mark.gpu
def test_online_learner_on_cuda_with_graphs_captures_the_step(tmp_path):
    cfg = online_cfg(**{"train.device": "cuda", "train.cuda_graphs": True,
                        "online.control_rate_hz": 500.0, "train.total_steps": 1000})  # fmt: skip
    trainer = OnlineTrainer(cfg, tmp_path / "run", progress=False)
    summary = trainer.learn()
    assert trainer.algo.graphs and trainer.algo._graph is not None
    assert summary["online"]["updates"] > 0 and summary["online"]["weight_swaps"] > 0


def test_watchdog_leaves_a_long_reset_alone(tmp_path, monkeypatch):
    """A reset that takes 60 periods (a robot walking back) is not a stuck tick: no trip, and
    nothing is sent to the plant while it resets."""
    plant = _HangingPlant(hang_at=-1, hang_s=0, reset_s=0.3)
    monkeypatch.setattr(online, "make_plant", lambda *a, **k: plant)
    # A 100 ms watchdog (20 periods), 3x shorter than the reset: at 15 ms a loaded 2-core box
    # trips it on an ordinary tick now and then, which is a true trip, not the one under test.
    cfg = online_cfg(**{"train.total_steps": 450, "online.control_rate_hz": 200.0,
                        "online.watchdog_periods": 20.0})  # fmt: skip
    summary = train(cfg, tmp_path / "run", progress=False)
    assert summary["online"]["watchdog_trips"] == 0
    assert len(plant.resets) >= 2
    for began, ended in plant.resets:
        assert not any(began <= t <= ended for _, t, _ in plant.sent)


def test_a_long_episode_keeps_its_schedule_across_loops(tmp_path, monkeypatch):
    """An episode spans several ControlLoop runs: the split must not send two actions back
    to back (a new loop used to start its first tick at once)."""
    monkeypatch.setattr(online_actor, "TICKS_PER_LOOP", 7)
    plant = _HangingPlant(hang_at=-1, hang_s=0)
    monkeypatch.setattr(online, "make_plant", lambda *a, **k: plant)
    cfg = online_cfg(**{"train.total_steps": 150, "online.control_rate_hz": 100.0})
    train(cfg, tmp_path / "run", progress=False)
    times = np.array([t for name, t, _ in plant.sent if name == "orin-rl-actor"])
    resets = [ended for _, ended in plant.resets]
    gaps = [b - a for a, b in itertools.pairwise(times) if not any(a <= r <= b for r in resets)]
    # A split every 7 ticks: with a schedule restarted at each, about one gap in 7 would be a
    # back-to-back send (~the tick's latency); a late tick on a 2-core box shortens a gap too,
    # but rarely, so the count of near-zero gaps tells the two apart.
    splits = len(gaps) // 7
    back_to_back = sum(g < 2_000_000 for g in gaps)
    assert splits >= 15 and back_to_back < splits / 4, (back_to_back, splits)


def test_action_settings_of_the_wrong_size_are_one_line(tmp_path):
    cfg = online_cfg(**{"online.safe_action": [0.0, 0.0]})
    trainer = OnlineTrainer(cfg, tmp_path / "run", progress=False)
    with pytest.raises(online.OnlineError, match=r"online\.safe_action: 2 values for 1 action"):
        trainer.learn()


def test_gym_plant_is_made_as_training_makes_the_env():
    plant = online.make_plant(
        "gym",
        "Pendulum-v1",
        {
            "max_episode_steps": 17,
            "kwargs": {"g": 3.0},
            "wrappers": [
                {"wrapper": "gymnasium.wrappers:ClipReward", "kwargs": {"min_reward": -1.0}}
            ],
        },
    )
    assert plant.env.unwrapped.g == 3.0
    assert type(plant.env).__name__ == "ClipReward"
    plant.reset(seed=0)
    for _ in range(17):
        plant.send(np.array([2.0], np.float32))
        assert plant.receive().reward >= -1.0  # Pendulum's reward reaches -16 unclipped
    assert plant.receive().truncated


def test_plant_server_survives_bad_requests_and_answers_them():
    port, server = _start_server()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.settimeout(2.0)
    try:
        for payload, seq in ((b"[1]", None), (b"not json", None),
                             (json.dumps({"op": "step", "seq": 9}).encode(), 9)):  # fmt: skip
            sock.sendto(payload, ("127.0.0.1", port))
            reply = json.loads(sock.recv(65_507))
            assert "bad request" in reply["error"] and reply["seq"] == seq
        plant = UdpPlant("127.0.0.1", port)  # the server is still up
        assert plant.reset(seed=0).shape == (3,)
        assert plant._call({"op": "close"})["ok"] is True
        plant.close()
    finally:
        sock.close()
    server.join(5)


def test_incomplete_plant_refused_lockless_plant_gets_a_lock(tmp_path, monkeypatch):
    class NoReceive(online.Plant):
        def reset(self, seed=None):
            return np.zeros(3, np.float32)

        def send(self, action):
            pass

    with pytest.raises(TypeError, match="receive"):
        NoReceive()

    class NoInit(GymPlant):
        def __init__(self):  # forgets Plant.__init__ (and so its lock)
            self.env = GymPlant("Pendulum-v1").env
            self.observation_space = self.env.observation_space
            self.action_space = self.env.action_space
            self._feedback = None

    plant = NoInit()
    monkeypatch.setattr(online, "make_plant", lambda *a, **k: plant)
    summary = train(online_cfg(**{"train.total_steps": 120}), tmp_path / "run", progress=False)
    assert summary["total_steps"] >= 120 and hasattr(plant, "lock")


# ------------------------------------------------------------------------ DQN online
def _assert_cartpole_steps(replay) -> None:
    """Every stored (s, a, r, s') is one CartPole step: the env set to s and stepped with a."""
    n = len(replay)
    obs, actions = replay.field("obs")[:n].numpy(), replay.field("actions")[:n].numpy()
    rewards, next_obs = replay.field("rewards")[:n].numpy(), replay.field("next_obs")[:n].numpy()
    assert replay.field("actions").dtype == torch.int64 and set(actions.tolist()) <= {0, 1}
    env = GymPlant("CartPole-v1")
    env.reset(seed=0)
    cart = env.env.unwrapped
    for i in range(n):
        cart.state, cart.steps_beyond_terminated = obs[i].astype(np.float64), None
        env.send(np.int64(actions[i]))
        fb = env.receive()
        np.testing.assert_allclose(fb.obs, next_obs[i], rtol=1e-5, atol=1e-5)
        assert fb.reward == float(rewards[i])


def test_dqn_online_run_learns_from_the_plant_s_own_steps(tmp_path):
    """``train --algo dqn --online``: the actor picks discrete actions at the control rate, the
    learner takes DQN steps beside it and hands weights over, and every stored transition is
    one step of the plant's dynamics."""
    trainer = OnlineTrainer(dqn_cfg(), tmp_path / "run", progress=False)
    summary = trainer.learn()
    on = summary["online"]
    assert summary["algo"] == "dqn" and summary["total_steps"] >= 400
    assert on["updates"] > 0 and on["weight_swaps"] > 0
    assert 0 < on["updates_per_env_step"] <= 1.0 + 1e-9
    assert len(trainer.algo.replay) == summary["total_steps"]
    _assert_cartpole_steps(trainer.algo.replay)


def test_dqn_actor_is_greedy_on_the_published_q_network(tmp_path):
    """With exploration over, the actor's action is argmax of the Q network it was handed
    (its numpy copy agrees with the learner's torch network on fresh observations)."""
    cfg = dqn_cfg(**{"dqn.learning_starts": 0, "dqn.exploration_initial_eps": 0.0,
                     "dqn.exploration_final_eps": 0.0})  # fmt: skip
    trainer = OnlineTrainer(cfg, tmp_path / "run", progress=False)
    actor = online.Actor(trainer, GymPlant("CartPole-v1"))
    with torch.no_grad():  # the learner moves on; the actor has the old weights until a swap
        for name, p in trainer.algo.q.named_parameters():
            p.normal_(0.0, 1.0) if name.endswith("weight") else p.zero_()
    trainer.mailbox.publish(trainer.algo.q)
    rng = np.random.default_rng(5)
    picked = []
    for _ in range(200):
        obs = rng.normal(size=4).astype(np.float32)
        action = actor._infer(obs)
        with torch.no_grad():
            want = int(trainer.algo.q(torch.from_numpy(obs)[None]).argmax())
        assert int(action) == want
        picked.append(want)
    assert len(set(picked)) == 2  # both actions occur: the check is not a constant
    assert actor.weight_swaps == 1


def test_dqn_online_safe_action_is_an_index(tmp_path):
    trainer = OnlineTrainer(dqn_cfg(**{"online.safe_action": [2]}), tmp_path / "a", progress=False)
    with pytest.raises(online.OnlineError, match=r"online\.safe_action: one action index of "
                       r"CartPole-v1 \(0 to 1\), got \[2"):  # fmt: skip
        trainer.learn()
    cfg = dqn_cfg(**{"online.action_low": [0.0]})
    trainer = OnlineTrainer(cfg, tmp_path / "b", progress=False)
    with pytest.raises(online.OnlineError, match=r"action_low/action_high bound continuous"):
        trainer.learn()
    trainer = OnlineTrainer(dqn_cfg(), tmp_path / "c", progress=False)
    assert online.Actor(trainer, GymPlant("CartPole-v1")).safe_action == 0


def test_dqn_online_evaluates_per_iteration_and_resumes(tmp_path):
    """train.eval_every counts iterations as offline (train_freq env steps each), not ticks;
    a resumed online DQN run keeps its buffer, weights and step count and goes on."""
    run = tmp_path / "run"
    cfg = dqn_cfg(**{"dqn.train_freq": 100, "train.eval_every": 1, "train.eval_episodes": 1,
                     "train.total_steps": 300})  # fmt: skip
    first = train(cfg, run, progress=False)
    evals = [r for r in read_metrics(run / "metrics.jsonl") if "eval/return_mean" in r]
    assert 2 <= len(evals) <= 3, [r["global_step"] for r in evals]  # at 100, 200 (and 300)
    steps = first["total_steps"]
    longer = run_folder.resume_state(run, [f"train.total_steps={steps + 150}"])  # it finished
    trainer = OnlineTrainer(Config(), run, resume=True, progress=False, state=longer)
    assert trainer.cfg.train.algo == "dqn" and len(trainer.algo.replay) == steps
    second = trainer.learn()
    assert second["total_steps"] >= steps + 150
    assert len(trainer.algo.replay) == second["total_steps"]
