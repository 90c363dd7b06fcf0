"""mjlab's robot tasks through orin_rl, on Warp's CPU device here (CUDA on the H200).

The adapter must not change the task: its step is held against mjlab's own auto-reset
``env.step`` from the same seed (rewards, flags, observations after the resets).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from tests.conftest import HAS_CUDA, require_extra

require_extra("mjlab", "mjlab")  # CI (ORIN_RL_REQUIRE_MJLAB=1): the mjlab extra must be there

from orin_rl import envs  # noqa: E402
from orin_rl.envs.base import EnvError, EnvOptions  # noqa: E402
from orin_rl.envs.mjlab import MjlabVecEnv, import_mjlab, task_ids  # noqa: E402

GO1 = "Mjlab-Velocity-Flat-Unitree-Go1"
N = 4
EPISODE = 5
"""Steps per episode in these tests: every env times out at steps 5, 10, 15."""


def _actions(steps: int, dim: int, seed: int = 0, n: int = N) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [0.5 * torch.randn(n, dim, generator=g) for _ in range(steps)]


def _mjlab_rollout(device: str, actions: list[torch.Tensor], task: str = GO1) -> list[tuple]:
    """mjlab's own env (auto-reset on), seeded as ours: (obs, reward, terminated, truncated)."""
    from mjlab.envs import ManagerBasedRlEnv

    registry = import_mjlab()
    cfg = registry.load_env_cfg(task)
    cfg.scene.num_envs = actions[0].shape[0]
    cfg.seed = 3
    cfg.episode_length_s = EPISODE * cfg.sim.mujoco.timestep * cfg.decimation
    env = ManagerBasedRlEnv(cfg=cfg, device=device)
    obs, _ = env.reset(seed=3)
    out = []
    for a in actions:
        obs, reward, terminated, truncated, _ = env.step(a.to(device))
        flat = torch.cat([obs["actor"], obs["critic"]], dim=-1)
        # clones: mjlab overwrites these buffers at the next step (.cpu() of a CPU tensor is it)
        out.append(
            (flat.cpu(), reward.cpu().clone(), terminated.cpu().clone(), truncated.cpu().clone())
        )
    env.close()
    return out


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_adapters_step_is_mjlabs_step(device):
    """Same seed, same actions: our step gives mjlab's own auto-reset step's rewards, flags
    and observations, bit for bit, through three rounds of resets (taking the terminal
    observation changes nothing of mjlab's)."""
    ours = MjlabVecEnv(GO1, N, device, EnvOptions(seed=3, max_episode_steps=EPISODE))
    actions = _actions(3 * EPISODE + 2, ours.action_space.shape[0])
    ours.reset()
    got = [ours.step(a) for a in actions]
    ours.close()
    _assert_mjlabs_steps(got, _mjlab_rollout(device, actions), exact=device == "cpu")


def assert_mjlabs_until_the_first_reset(got, want, episode, actor, exact) -> None:
    """The masked reset path's step (``got``: obs, reward, terminated, truncated) against
    mjlab's ``env.step``: the flags all along; the rewards over the first episode; the critic's
    observation (no noise) until the reset step's draws. The actor's noise is not compared: the
    masked twins draw on every step, mjlab only when a timer runs out, so the noise comes from
    another place in the random stream (the twins are held to mjlab in distribution)."""
    for t, (ours, (obs, reward, terminated, truncated)) in enumerate(zip(got, want, strict=True)):
        ours = [x.cpu() for x in ours]
        assert torch.equal(ours[3], truncated), t
        if exact or t < episode:  # CUDA: later states differ within its run-to-run spread
            assert torch.equal(ours[2], terminated), t
        pairs = [(ours[1], reward.float())] if t < episode else []
        if t < episode - 1:
            pairs.append((ours[0][:, actor:], obs[:, actor:].float()))
        for a, b in pairs:
            if exact:
                assert torch.equal(a, b), t
            else:
                torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3)


def _assert_mjlabs_steps(got: list, want: list, exact: bool) -> None:
    # Warp's CPU kernels are deterministic: bit for bit. On CUDA mjlab is not bit-reproducible
    # even against itself (seen on the H200: rewards 1e-8 apart from the second step), so the
    # first episode is held within 2e-3 (a contact force differed by 7.7e-4, 4.7e-4 relative).
    ended = 0
    for t, (step, (obs, reward, terminated, truncated)) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(step.terminated.cpu(), terminated), t
        assert torch.equal(step.truncated.cpu(), truncated), t
        if exact:
            assert torch.equal(step.reward.cpu(), reward.float()), t
            assert torch.equal(step.obs.cpu(), obs.float()), t
        elif t < EPISODE:
            torch.testing.assert_close(step.reward.cpu(), reward.float(), rtol=2e-3, atol=2e-3)
            torch.testing.assert_close(step.obs.cpu(), obs.float(), rtol=2e-3, atol=2e-3)
        done = (step.terminated | step.truncated).cpu()
        ended += int(done.sum())
        assert torch.equal(step.final_obs.cpu()[~done], step.obs.cpu()[~done])
    assert ended >= 3 * len(got[0].reward)  # the time-outs at steps 5, 10 and 15 were compared


ROUGH = "Mjlab-Velocity-Rough-Unitree-Go1"


@pytest.mark.parametrize(
    "task, step",
    [
        (GO1, "segments"),
        ("Mjlab-Velocity-Flat-Unitree-G1", "segments"),
        (GO1, "unit"),
        ("Mjlab-Velocity-Flat-Unitree-G1", "unit"),
        (ROUGH, "unit"),  # its upright reward reads the host (eigh): today's fallback
    ],
)
def test_the_graphs_semantics_keep_mjlabs_step(task, step, caplog):
    """The segments captured and replayed with the CUDA graphs' semantics (``EmulatedGraph``
    on the CPU: the recorded ops replayed on the recorded tensors, the Python around them not
    rerun): mjlab's rewards, flags and observations bit for bit through three rounds of resets,
    the terminal observations and the task's logged metrics those of the eager step, every
    segment a graph (mutations: without the chained-state copy-back the swing-height reward
    departs at the third step; without the Python effects made again after a replay, or with
    one capture for every sensor-cache state, the observations depart). With mjlab's eager
    resets the one unit (``step="unit"``) holds the action, the decimation loop (mjlab's Warp
    work captured by Warp in its place, one Warp graph per ``sim.step``) and the rewards; on
    rough Go1 its capture is refused in one line (mjlab's ``upright`` reads the host) and the
    step runs as segments, mjlab's bit for bit all the same (mutations: the counters advanced
    once less by the unit: mjlab's counters depart; the Warp calls left out of Warp's capture,
    recorded launch by launch: the replay reads arrays freed since and crashes)."""
    import warp as wp

    from orin_rl.envs.mjlab.unit import turn_on

    actions = None
    runs, counters = {}, {}
    for graphs in (False, True):
        ours = MjlabVecEnv(task, N, "cpu", EnvOptions(seed=3, max_episode_steps=EPISODE))
        actions = actions or _actions(3 * EPISODE + 2, ours.action_space.shape[0])
        if graphs:
            ours._stepper.emulate_graphs()
            if step == "unit":
                assert turn_on(ours._stepper) is None
        ours.reset()
        logs = []
        steps = []
        for a in actions:
            steps.append(ours.step(a))
            logs.append(sorted(ours.env.extras["log"]))
        counters[graphs] = ours.env.common_step_counter, ours.env._sim_step_counter
        runs[graphs] = (steps, logs, ours.graph_report())
        ours.close()
    (eager, eager_logs, _), (graphed, graphed_logs, report) = runs[False], runs[True]
    _assert_mjlabs_steps(graphed, _mjlab_rollout("cpu", actions, task), exact=True)
    assert counters[True] == counters[False]  # mjlab's Python counters (curricula read them)
    if task == ROUGH:  # the one unit refused, in one line; the rewards segment stays eager
        assert report["step"] == "segments" and "_linalg_eigh" in report["refused"]["physics"][0]
        warned = [r.message for r in caplog.records if "one-unit step off" in r.getMessage()]
        assert len(warned) == 1 and "\n" not in warned[0], warned
        # the segments after it: the unit's warm-up was one more eager step than theirs
        assert "rewards" in report["eager"] and report["replays"]["action"] >= len(actions) - 3
        return
    assert report["eager"] == [] and report["refused"] == {}, report
    assert report["captures"]["observations"] == 2  # one after resets, one without
    assert report["step"] == step
    for t, (a, b) in enumerate(zip(eager, graphed, strict=True)):
        assert torch.equal(a.final_obs, b.final_obs), t
    assert graphed_logs == eager_logs
    assert any(k.startswith("Metrics/") for k in graphed_logs[3])
    # every step after the first ran each segment as a replay (no silent eager fallback)
    assert all(report["replays"][s] >= len(actions) - 2 for s in report["graphs"][:-1]), report
    # no Warp kernel inside a segment: the emulation could not undo what its recording wrote;
    # in the unit, Warp's work only as Warp's own graphs, one per sim.step
    unit = ours._stepper.unit
    variants = [(s, v) for s in ours._stepper._every for v in s.variants.values() if v]
    assert variants and all(v.graph.warp_launches == 0 for s, v in variants if s is not unit)
    units = [v for s, v in variants if s is unit]
    assert bool(units) == (step == "unit")  # one capture per sensor-cache state
    for v in units:
        warp = [op for op in v.graph.ops if op[0] == "warp"]
        assert len(warp) == ours._stepper.decimation, len(warp)
        assert all(op[1] is wp.capture_launch for op in warp)


def _twin_rollouts(actions, between) -> tuple[list, list, dict]:
    """The same Go1 worlds stepped eagerly and with emulated graphs, ``between(env, t)``
    called on both before step ``t``: (eager steps, graphed steps, graph report)."""
    runs = []
    for graphs in (False, True):
        ours = MjlabVecEnv(GO1, N, "cpu", EnvOptions(seed=3, max_episode_steps=EPISODE))
        if graphs:
            ours._stepper.emulate_graphs()
        ours.reset()
        steps = []
        for t, a in enumerate(actions):
            between(ours, t)
            steps.append(ours.step(a))
        runs.append((steps, ours.graph_report()))
        ours.close()
    return runs[0][0], runs[1][0], runs[1][1]


@pytest.mark.parametrize(
    "change", ["curriculum", "eager action", "host read", "host read after the warm-up"]
)
def test_graphs_follow_what_eager_code_changes_between_replays(change):
    """A curriculum tripling a reward's weight after the capture (a constant in the captured
    graph: the segment is captured again under the new settings), an action segment that
    turns eager after the capture (it rebinds the processed actions the substep graphs read:
    they are restored before the next replay), a task term reading a device value on the host
    from the start (the warm-up sees it: no capture is tried) or only from the capture on
    (the capture fails: the segment stays eager, the capture's Python undone, and the resets
    after it go on drawing random numbers, which a failed CUDA capture would have broken):
    the graphed step stays the eager one, bit for bit (mutations: no settings check; no
    restore after an eager segment; no undo of a failed capture; no ``capture.recover`` after
    it: the first reset's random draw raises torch's offset error; no warm-up watch)."""
    actions = _actions(2 * EPISODE + 2, 12)
    read_from = 1 if change == "host read after the warm-up" else 0

    def between(ours, t):
        if change.startswith("host read") and t == read_from:
            metrics, env = ours.env.metrics_manager.compute, ours.env

            def reading():  # as a term that logs a Python float would
                env.extras["log"]["Metrics/host_read"] = float(env.reward_buf.sum())
                metrics()

            ours.env.metrics_manager.compute = reading
        if t != 3:
            return
        if change == "curriculum":
            cfg = next(c for c in ours.env.reward_manager._term_cfgs if c.weight > 0)
            cfg.weight *= 3.0
        elif ours._stepper.use_graphs:
            ours._stepper.segments[0].refused = ["made eager by the test"]

    eager, graphed, report = _twin_rollouts(actions, between)
    for t, (a, b) in enumerate(zip(eager, graphed, strict=True)):
        assert torch.equal(a.reward, b.reward), t
        assert torch.equal(a.obs, b.obs), t
    if change == "curriculum":
        assert report["captures"]["rewards"] == 2, report
    if change == "host read":
        assert "warm-up reads device values" in report["refused"]["rewards"][0], report
        assert "_local_scalar_dense" in report["refused"]["rewards"][0], report
    if change == "host read after the warm-up":
        assert "capture failed" in report["refused"]["rewards"][0], report
    assert sum(int(s.truncated.sum()) for s in graphed[2:]) > 0  # resets (random draws) after it


@pytest.mark.gpu
@pytest.mark.parametrize("step", ["segments", "unit"])
@pytest.mark.parametrize("masked", [True, False])
@pytest.mark.parametrize("task", [GO1, "Mjlab-Velocity-Flat-Unitree-G1"])
def test_the_graphed_step_is_mjlabs_step(task, masked, step):
    """The step's segments captured as CUDA graphs and replayed (the reset path masked, the
    default, or mjlab's eager one), or the step as one capture (``step="unit"``: Warp's
    kernels inside torch's capture; with mjlab's eager resets the physics and rewards):
    against mjlab's own eager ``env.step`` from the same seed, the same resets and, within
    CUDA's run-to-run spread, the same rewards and observations (first episode; masked:
    ``assert_mjlabs_until_the_first_reset``); the segments, or the unit, really ran as
    graphs."""
    n = 64
    ours = MjlabVecEnv(task, n, "cuda", EnvOptions(seed=3, max_episode_steps=EPISODE))
    actions = _actions(3 * EPISODE + 2, ours.action_space.shape[0], n=n)
    plan = ours.use_graphs(masked=masked, unit=step == "unit")
    assert {"action", "rewards"} <= set(plan["graphs"]) and plan["step"] == step, plan
    ours.reset()
    got = [ours.step(a) for a in actions]
    report = ours.graph_report()
    actor = ours.env.observation_manager.group_obs_dim["actor"][0]
    ours.close()
    if step == "unit":
        assert report["step"] == "unit" and report["refused"] == {}, report
        unit = "step" if masked else "physics"
        assert report["replays"][unit] >= len(actions) - 3, report
    else:
        assert report["graphs"] == plan["graphs"], report
    want = _mjlab_rollout("cuda", actions, task)
    if masked:
        steps = [(s.obs, s.reward, s.terminated, s.truncated) for s in got]
        assert_mjlabs_until_the_first_reset(steps, want, EPISODE, actor, exact=False)
        return
    for t, (step, (obs, reward, terminated, truncated)) in enumerate(zip(got, want, strict=True)):
        assert torch.equal(step.truncated.cpu(), truncated), t
        if t < EPISODE:
            assert torch.equal(step.terminated.cpu(), terminated), t
            torch.testing.assert_close(step.reward.cpu(), reward.float(), rtol=2e-3, atol=2e-3)
            torch.testing.assert_close(step.obs.cpu(), obs.float(), rtol=2e-3, atol=2e-3)
    assert int(got[EPISODE - 1].truncated.sum()) > 0  # the first time-outs were compared


def test_time_outs_keep_the_terminal_observation():
    """The critic part of a timed-out world's final observation is the one mjlab's manual-reset
    mode returns for the state it reached (play configuration: no observation noise), not its
    next start; the actor part is the next observation (only the critic reads final_obs)."""
    from mjlab.envs import ManagerBasedRlEnv

    ours = MjlabVecEnv(
        GO1, N, "cpu", EnvOptions(seed=5, max_episode_steps=EPISODE, evaluation=True)
    )
    actions = _actions(EPISODE, ours.action_space.shape[0], seed=1)
    ours.reset()
    steps = [ours.step(a) for a in actions]
    critic = slice(*ours.obs_groups["critic"])
    actor = slice(*ours.obs_groups["actor"])
    ours.close()
    assert bool(steps[-1].truncated.all()) and not bool(steps[-2].truncated.any())
    cfg = import_mjlab().load_env_cfg(GO1, play=True)
    cfg.scene.num_envs, cfg.seed, cfg.auto_reset = N, 5, False
    cfg.episode_length_s = EPISODE * cfg.sim.mujoco.timestep * cfg.decimation
    env = ManagerBasedRlEnv(cfg=cfg, device="cpu")
    env.reset(seed=5)
    for a in actions:
        obs, *_ = env.step(a)
    terminal = obs["critic"].float()
    env.close()
    final, start = steps[-1].final_obs, steps[-1].obs
    assert torch.equal(final[:, actor], start[:, actor])
    final, start = final[:, critic], start[:, critic]
    assert (final - start).abs().amax() > 0.1  # a reset start is not the terminal state
    # The velocity command (values 45:48 of Go1's critic group) is the one of the step's
    # start: mjlab updates a heading-driven yaw command after the reset point. Every other
    # value is the terminal state's.
    command = torch.zeros(final.shape[-1], dtype=torch.bool)
    command[45:48] = True
    torch.testing.assert_close(final[:, ~command], terminal[:, ~command], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(final[:, command], terminal[:, command], rtol=0, atol=1e-2)


def test_no_terminal_observation_where_the_learner_reads_none():
    """rsl_rl's bootstrap (``ppo.timeout_bootstrap=value``) reads no final observation: the
    step then skips the terminal forward and sensing, and final_obs is the next observation."""
    env = MjlabVecEnv(GO1, N, "cpu", EnvOptions(seed=5, max_episode_steps=EPISODE))
    env.final_obs_needed = False
    env.reset()
    env._stepper.timings = {}
    steps = [env.step(a) for a in _actions(EPISODE, env.action_space.shape[0], seed=1)]
    env.close()
    assert bool(steps[-1].truncated.all())
    assert torch.equal(steps[-1].final_obs, steps[-1].obs)
    assert "terminal observation" not in env._stepper.timings


def test_groups_spaces_and_the_tasks_own_logs():
    env = MjlabVecEnv(GO1, N, "cpu", EnvOptions(seed=1, max_episode_steps=3))
    manager = env.env.observation_manager
    actor, critic = manager.group_obs_dim["actor"][0], manager.group_obs_dim["critic"][0]
    assert env.obs_groups == {"actor": [0, actor], "critic": [actor, actor + critic]}
    assert env.observation_space.shape == (actor + critic,)
    assert env.action_space.shape == (env.env.action_manager.total_action_dim,)
    obs = env.reset()
    assert obs.shape == (N, actor + critic) and obs.dtype == torch.float32
    for a in _actions(3, env.action_space.shape[0]):
        env.step(a)
    logged = env.pop_log()
    assert any(k.startswith("Episode_Reward/") for k in logged), logged
    assert "Metrics/twist/error_vel_xy" in logged
    assert all(np.isfinite(v) for v in logged.values())
    assert env.pop_log() == {}  # popped
    returns, lengths = env.pop_episode_stats()
    assert lengths == [3] * N and len(returns) == N
    # Means per name since the last pop, whatever mix of tensors and numbers a step logs.
    env._accumulate({"a": torch.tensor(1.0), "b": torch.tensor([2]), "c": 3, "d": torch.ones(2)})
    env._accumulate({"a": torch.tensor(3.0), "b": torch.tensor([4]), "c": 5})
    env._accumulate({"b": torch.tensor(True), "a": torch.tensor(8.0, dtype=torch.float64)})
    assert env.pop_log() == {"a": 4.0, "b": 7 / 3, "c": 4.0}
    env.close()


def test_random_episode_start_spreads_the_first_time_outs():
    """As mjlab's train (rsl_rl's init_at_random_ep_len): after reset each world's episode
    counter starts at a random step of its limit, so time-outs do not all come at once; the
    play configuration (evaluation) and the default start at 0."""
    limit, n = 40, 64
    options = EnvOptions(seed=3, max_episode_steps=limit, random_episode_start=True)
    env = MjlabVecEnv(GO1, n, "cpu", options)
    env.reset()
    lengths = env.env.episode_length_buf.clone()
    assert int(lengths.min()) >= 0 and int(lengths.max()) < limit
    assert len(set(lengths.tolist())) > 10  # spread, not one value
    captured = env.env.episode_length_buf
    env.reset()  # in place: a captured graph keeps reading the same tensor
    assert env.env.episode_length_buf is captured
    env.close()
    for options in (
        EnvOptions(seed=3, max_episode_steps=limit),
        EnvOptions(seed=3, max_episode_steps=limit, random_episode_start=True, evaluation=True),
    ):
        env = MjlabVecEnv(GO1, 4, "cpu", options)
        env.reset()
        assert int(env.env.episode_length_buf.abs().sum()) == 0
        env.close()


def test_an_unknown_task_names_the_list_command():
    assert GO1 in task_ids()
    with pytest.raises(EnvError, match=r"orin-rl envs --backend mjlab"):
        envs.make("Mjlab-Velocity-Flat-Unitree-Go9", 2, "cpu")


def test_the_envs_command_lists_mjlabs_tasks(capsys):
    from orin_rl import cli  # in-process (a subprocess importing mjlab cost 24 s of the suite)

    assert cli.main(["envs", "--backend", "mjlab"]) == 0
    assert f"  {GO1}" in capsys.readouterr().out.splitlines()


def test_a_tracking_task_without_its_motion_file_is_one_line():
    with pytest.raises(EnvError, match=r"could not build the task .*motion file"):
        envs.make("Mjlab-Tracking-Flat-Unitree-G1", 2, "cpu")


@pytest.mark.skipif(HAS_CUDA, reason="checks the CPU box's answer to a CUDA request")
def test_the_step_mode_switch_reads_its_env_variable(monkeypatch):
    """``ORIN_RL_MJLAB_STEP``: segments (today's step) unless it says unit; another value is
    one line naming the two (mutation: unit by default fails)."""
    from orin_rl.envs.mjlab.unit import STEP_ENV, mode_from_env

    monkeypatch.delenv(STEP_ENV, raising=False)
    assert mode_from_env() == "segments"
    monkeypatch.setenv(STEP_ENV, "unit")
    assert mode_from_env() == "unit"
    monkeypatch.setenv(STEP_ENV, "one")
    with pytest.raises(ValueError, match="segments, unit") as raised:
        mode_from_env()
    assert "\n" not in str(raised.value)


def test_a_step_the_unit_cannot_hold_stays_in_segments_in_one_line(caplog):
    """An observation term with history (a Python-side pointer no graph advances): the masked
    step's unit would hold the observations, so the step stays in segments after one warning
    naming the segment; with mjlab's eager resets the unit holds only the physics, which it
    can (mutations: the segments' plan not consulted; the physics unit refused for the
    observations' sake: fail)."""
    from orin_rl.envs.mjlab.graph import SegmentedStep
    from orin_rl.envs.mjlab.unit import turn_on

    env = MjlabVecEnv(GO1, 2, "cpu", EnvOptions(seed=1))
    env.env.observation_manager._group_obs_term_cfgs["actor"][0].history_length = 2
    for masked in (True, False):
        step = SegmentedStep(env.env, "critic")
        if masked:
            assert step.mask_resets() is None
        why = turn_on(step)
        if masked:
            assert why is not None and "'observations'" in why and "history" in why, why
            assert step.unit is None
        else:
            assert why is None and step.unit is not None and step.unit.name == "physics"
    warned = [r.getMessage() for r in caplog.records if "one-unit step off" in r.getMessage()]
    assert len(warned) == 1 and "\n" not in warned[0], warned
    env.close()


def test_cuda_without_a_gpu_is_one_line():
    with pytest.raises(EnvError, match="torch sees no CUDA GPU"):
        envs.make(GO1, 2, "cuda")


def test_env_kwargs_are_refused_in_one_line():
    with pytest.raises(EnvError, match="mjlab task is configured in its own package"):
        envs.make(GO1, 2, "cpu", env_kwargs={"x": 1})


def test_mjlab_ids_go_to_the_mjlab_backend_and_the_preset_is_the_tasks_rl_cfg():
    from orin_rl.config.presets import preset_overrides

    preset = preset_overrides(GO1)
    rl = import_mjlab().load_rl_cfg(GO1)
    assert preset["env.backend"] == "mjlab"
    assert preset["ppo.hidden_sizes"] == list(rl.actor.hidden_dims)
    assert preset["ppo.activation"] == "elu"
    assert preset["ppo.desired_kl"] == rl.algorithm.desired_kl
    assert preset["ppo.num_steps"] == rl.num_steps_per_env
    assert preset["ppo.vf_coef"] == 2 * rl.algorithm.value_loss_coef  # rsl_rl's MSE has no 1/2
    assert preset["env.random_episode_start"] is True  # mjlab's train: init_at_random_ep_len
    assert preset["ppo.timeout_bootstrap"] == "value"  # rsl_rl's, as mjlab's runner
    assert preset["ppo.rsl_rl"] is True  # rsl_rl's init, std, clipping, Adam
    assert rl.actor.distribution_cfg["std_type"] == "scalar"  # what ppo.rsl_rl learns


def test_a_robot_task_trains_4096_worlds_on_a_gpu_and_a_few_on_the_cpu(capsys):
    """mjlab's task configs say one world (a viewer's number): the README's command trained
    one robot (issue 41, item 2; before: num_envs 1 on both). --print-config shows what runs."""
    from orin_rl import cli

    for device, want in (("cuda", 4096), ("cpu", 4)):
        assert cli.main(["-q", "train", "--env", GO1, "--device", device, "--print-config"]) == 0
        out = capsys.readouterr().out
        assert f"num_envs: {want}" in out, out[:2000]


def test_run_on_a_task_that_is_not_locomotion_reports_terminations_not_falls(tmp_path):
    """Cartpole-Balance has no velocity command: ``run`` printed "falls 0; tracking error no
    episode ended" (issue 41, item 13); now its early ends are terminations."""
    from tests.robot.conftest import linear_bundle

    env = envs.make("Mjlab-Cartpole-Balance", 1, "cpu")
    assert env.deploy_contract() is None  # no robot on a wire: the export writes none
    obs_dim = env.obs_groups["actor"][1] - env.obs_groups["actor"][0]
    act_dim = env.action_space.shape[0]
    env.close()
    contract = {"observations": [{"dim": obs_dim, "history_length": 0}],
                "joint_names": ["j"] * act_dim}  # fmt: skip
    from orin_rl.bundle import load_bundle

    bundle = linear_bundle(tmp_path / "bundle", contract)
    info, _ = load_bundle(bundle)
    info.env_id, info.deploy = "Mjlab-Cartpole-Balance", {}
    (bundle / "policy.json").write_text(info.to_json())  # written again: its hash with it
    proc = subprocess.run(
        [sys.executable, "-m", "orin_rl.cli", "-q", "run", "--model", str(bundle), "--backend",
         "onnxruntime", "--rate", "0", "--steps", "20"], capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "terminations" in proc.stdout and "falls" not in proc.stdout, proc.stdout


def test_the_plants_warm_up_changes_nothing_of_the_run():
    """``orin-rl run``'s mjlab plant steps before the first tick (kernel loads, the graphs'
    captures), then starts from the seeded reset: the first observation and the first
    step are those of a world that never warmed up."""
    from orin_rl.envs.mjlab.play import MjlabDriver, MjlabGymEnv

    # the task's start-up randomisation (encoder bias, friction) draws when a world is built:
    # both worlds are built with the run's seed
    cold = MjlabGymEnv(GO1, seed=7)
    first, _ = cold.reset(seed=7)
    driver = MjlabDriver(GO1, seed=7)
    np.testing.assert_array_equal(driver.sensor()[0], first)
    action = np.full(cold.action_space.shape, 0.3, np.float32)
    driver.actuate(action[None])
    np.testing.assert_array_equal(driver.sensor()[0], cold.step(action)[0])
    assert driver.returns == [] and driver.falls == 0
    cold.close()
    driver.env.close()


def test_the_warm_up_captures_every_segment_with_and_without_resets():
    """``warm_up`` (the deploy plant's, before the first tick) leaves nothing to capture in
    the loop: every segment a graph, the observations once for a step with resets and once
    for one without (emulated graphs on the CPU)."""
    ours = MjlabVecEnv(GO1, 1, "cpu", EnvOptions(seed=3, evaluation=True))
    ours._stepper.emulate_graphs()
    ours.reset()
    ours.warm_up()
    report = ours.graph_report()
    ours.close()
    assert report["eager"] == [] and report["refused"] == {}, report
    assert report["captures"]["observations"] == 2 and report["captures"]["terminal"] == 1


def _task_state(run) -> dict:
    return torch.load(run / "checkpoint.pt", weights_only=False)["task_state"]


def test_train_export_eval_through_the_cli(tmp_path, capsys):
    """A few iterations of Go1 on the CPU: the task's logs in metrics.jsonl, an evaluation on
    the play configuration with the tracking error, a bundle for the actor group only."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q"]
    train = [*cmd, "train", "--no-progress", "--env", GO1, "--device", "cpu", "--num-envs", "4",
             "--total-steps", "64", "--out", str(run), "--set", "ppo.num_steps=8",
             "--set", "env.max_episode_steps=12", "--set", "train.eval_episodes=2",
             "--set", "ppo.hidden_sizes=[32,32]", "--set", "train.tensorboard=false",
             "--cuda-graphs"]  # fmt: skip
    proc = subprocess.run(train, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # --cuda-graphs on the CPU says it is off (issue 41, item 7: silently off before)
    assert "CUDA graphs off: the mjlab world steps eagerly (CPU)" in proc.stderr
    summary = json.loads((run / "summary.json").read_text())
    assert summary["env_backend"] == "mjlab" and summary["eval_episodes"] == 2
    assert "eval/Metrics/twist/error_vel_xy" in summary["eval_log"]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("Episode_Reward/track_linear_velocity" in r for r in records)
    assert all(r["charts/learning_rate"] > 0 for r in records)
    # a resume continues the task's curricula (issue 41 item 1: mjlab's step counter restarted)
    assert _task_state(run)["common_step_counter"] == 16  # 64 steps of 4 worlds
    resume = [*cmd, "train", "--no-progress", "--resume", str(run), "--total-steps", "96"]
    proc = subprocess.run(resume, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _task_state(run)["common_step_counter"] == 24
    # export, run and eval in this process: each subprocess paid mjlab's import again
    from orin_rl import cli

    assert cli.main(["-q", "export", str(run)]) == 0
    info = json.loads((run / "bundle" / "policy.json").read_text())
    actor_dim = 48  # Go1's actor group; the critic's 72 more values never reach the robot
    assert info["inputs"][0]["shape"][-1] == actor_dim
    assert len(info["normalizer"]["mean"]) == actor_dim
    assert info["parity"]["max_rel_error"] < 1e-4
    deploy = info["deploy"]  # what a robot needs, from the task itself (Go1: no SDK2 motor map)
    assert len(deploy["joint_names"]) == 12 and deploy["step_dt"] == pytest.approx(0.02)
    assert sum(t["dim"] for t in deploy["observations"]) == actor_dim
    assert deploy["robot"] is None and deploy["precision"] == {"full": True}
    assert "Infinity" not in (run / "bundle" / "policy.json").read_text()  # strict JSON
    report = tmp_path / "run.json"
    capsys.readouterr()
    run_cmd = ["-q", "run", "--model", str(run / "bundle"), "--backend", "onnxruntime",
               "--rate", "200", "--steps", "30", "--report", str(report)]  # fmt: skip
    assert cli.main(run_cmd) == 0
    out = capsys.readouterr().out
    assert "falls" in out and "tracking error" in out, out
    ran = json.loads(report.read_text())
    assert ran["iterations"] == 30 and ran["falls"] >= 0
    assert len(ran["episode_returns"]) == 2  # 30 ticks of 12-step episodes (the bundle's limit)
    assert ran["tracking_error_vel_xy"] is not None
    evaluated = tmp_path / "eval.json"
    eval_cmd = ["-q", "eval", str(run / "bundle"), "--episodes", "2", "--report", str(evaluated)]
    assert cli.main(eval_cmd) == 0
    assert "tracking" in capsys.readouterr().out
    result = json.loads(evaluated.read_text())
    assert result["episodes"] == 2 and result["lengths"] == [12, 12]  # the bundle's time limit
    assert result["task_log"]["Metrics/twist/error_vel_xy"] >= 0


@pytest.mark.skipif(HAS_CUDA, reason="the CPU box's check; the H200 runs the gpu tests")
def test_a_missing_mjlab_names_the_extra(monkeypatch):
    import builtins

    from orin_rl.envs import mjlab as mjlab_env

    real_import = builtins.__import__

    def no_mjlab(name, *args, **kwargs):
        if name.startswith("mjlab"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    mjlab_env.import_mjlab.cache_clear()
    monkeypatch.setattr(builtins, "__import__", no_mjlab)
    try:
        with pytest.raises(EnvError, match=r"pip install 'orin-rl\[mjlab\]'"):
            mjlab_env.task_ids()
    finally:
        monkeypatch.setattr(builtins, "__import__", real_import)
        mjlab_env.import_mjlab.cache_clear()


def test_list_indices_become_cached_device_tensors_with_the_same_values():
    """What makes mjlab's reward terms capturable (``x[:, asset_cfg.body_ids, :]``): inside the
    context a list of ints indexing a tensor on the device is a cached int64 tensor, for reads
    and writes, with the values plain indexing gives; other indices and devices are left
    alone, and torch's indexing is itself again afterwards. A Python number assigned becomes
    a device scalar."""
    from orin_rl.envs.capture_constants import device_list_indices

    x = torch.arange(60.0).reshape(3, 4, 5)
    want = x[:, [2, 0], :], x[[1, 1], 3], x[:, [True, False, True, False]]
    cache: dict = {}
    y = x.clone()
    original = torch.Tensor.__getitem__
    with device_list_indices(cache, torch.device("cpu")):
        got = x[:, [2, 0], :], x[[1, 1], 3], x[:, [True, False, True, False]]
        y[:, [3, 1], 0] = -1.0
        again = x[:, [2, 0], :]
    assert torch.Tensor.__getitem__ is original
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
    assert torch.equal(again, want[0])
    lists = {k[1]: v for k, v in cache.items() if isinstance(k[0], torch.device)}
    assert set(lists) == {(2, 0), (1, 1), (3, 1)}  # bools stay a mask
    assert all(v.dtype == torch.int64 for v in lists.values())
    # the assigned -1.0: a cached scalar on the tensor's device and dtype (on CUDA a Python
    # number would be a CPU tensor index_put_ copies over, which no capture takes)
    (scalar,) = [v for k, v in cache.items() if k[0] == "scalar"]
    assert scalar.dim() == 0 and scalar.dtype == y.dtype and scalar.item() == -1.0
    z = x.clone()
    z[:, [3, 1], 0] = -1.0
    assert torch.equal(y, z)
    cache.clear()
    with device_list_indices(cache, torch.device("cuda")):  # another device: untouched
        assert torch.equal(x[:, [2, 0], :], want[0])
    assert cache == {}


def test_tensors_of_python_numbers_become_cached_device_copies():
    """mjlab's ``_sample_se3_range`` builds ``torch.tensor(range_list, device=...)`` at every
    reset, a pageable copy no capture takes: inside the context it is made once and each call
    gets its own device copy with the same values, dtype and sign of zero; tensors, other
    devices and non-numbers are left to torch, which is itself again afterwards."""
    from orin_rl.envs.capture_constants import device_list_indices

    factory = torch.tensor
    cache: dict = {}
    with device_list_indices(cache, torch.device("cpu")):
        first = torch.tensor([[0.5, -1.0], [0.0, 2.0]], device="cpu")
        first.add_(10.0)  # a caller's in-place write must not reach the next caller
        second = torch.tensor([[0.5, -1.0], [0.0, 2.0]], device="cpu")
        zeros = torch.tensor([-0.0], device="cpu"), torch.tensor([0.0], device="cpu")
        ints = torch.tensor([3, 4], device="cpu", dtype=torch.int64)
        passed = torch.tensor(torch.ones(2), device="cpu")
    assert torch.tensor is factory
    assert torch.equal(second, factory([[0.5, -1.0], [0.0, 2.0]]))
    assert second.dtype == torch.float32 and ints.dtype == torch.int64
    assert torch.signbit(zeros[0]).item() and not torch.signbit(zeros[1]).item()
    assert torch.equal(passed, torch.ones(2))
    assert sum(1 for k in cache if k[0] == "tensor") == 4  # made once each, the tensor not
    cache.clear()
    with device_list_indices(cache, torch.device("cuda")):  # another device: untouched
        assert torch.equal(torch.tensor([1.0], device="cpu"), factory([1.0]))
    assert cache == {}


def test_rebound_tensors_go_back_into_the_tensors_a_graph_holds():
    """mjlab's terrain-height sensor binds fresh hit positions at every ``sense()``; a graph
    would keep reading the ones it captured. ``TensorBindings.restore`` puts the new values
    into the captured tensor and binds it back (a shape change is refused, not copied)."""
    from orin_rl.envs.mjlab.graph import TensorBindings

    ours = MjlabVecEnv(GO1, N, "cpu", EnvOptions(seed=3))
    ours.reset()
    actions = _actions(3, ours.action_space.shape[0])
    ours.step(actions[0])
    sensor = next(s for s in ours.env.scene.sensors.values() if hasattr(s, "_hit_pos_w"))
    bindings = TensorBindings(ours.env, torch.device("cpu"))
    held = sensor._hit_pos_w
    assert any(t is held for *_, t in bindings.records)
    ours.step(actions[1])
    assert sensor._hit_pos_w is not held  # sense() bound a new tensor
    new = sensor._hit_pos_w.clone()
    assert not torch.equal(new, held)
    assert bindings.restore()
    assert sensor._hit_pos_w is held and torch.equal(held, new)
    sensor._hit_pos_w = torch.zeros(1, 3)
    assert not bindings.restore() and bindings.mismatched
    ours.close()


def test_one_seed_builds_and_steps_the_same_play_world_twice():
    """``orin-rl eval``/``run``'s world (issue 41 item 3: eval of one bundle with one seed gave
    61.55, then 60.70): two builds with one seed step alike, as the task's startup events
    (friction, masses) draw at the build (mutation: the build unseeded fails)."""
    from orin_rl.envs.mjlab.play import MjlabGymEnv

    runs = []
    for _ in range(2):
        env = MjlabGymEnv(GO1, {"max_episode_steps": 8}, seed=5)
        obs, _ = env.reset(seed=5)
        steps = [env.step(np.full(env.action_space.shape, 0.3, np.float32))[:2] for _ in range(6)]
        runs.append((obs, [o for o, _ in steps], [r for _, r in steps]))
        env.close()
    (obs_a, seen_a, rewards_a), (obs_b, seen_b, rewards_b) = runs
    assert np.array_equal(obs_a, obs_b) and rewards_a == rewards_b
    assert all(np.array_equal(a, b) for a, b in zip(seen_a, seen_b, strict=True))


def test_a_start_with_more_contacts_than_the_task_allows_is_built_with_room(monkeypatch, caplog):
    """Issue 41 item 3: a Rough ``run`` exited 2 on MuJoCo Warp's "nconmax overflow (nconmax
    must be >= 37)" with a hint about tracking tasks' motion files. A task whose per-world
    contact capacity is under its first state's contacts (Go1 standing: its feet, over a
    capacity of 1) is built with what MuJoCo Warp asked for and a quarter more, and says so
    (mutation: no second build fails with the one-line error)."""
    registry = import_mjlab()
    load = registry.load_env_cfg

    def tight(task_id, **kwargs):
        cfg = load(task_id, **kwargs)
        cfg.sim.nconmax = 1
        return cfg

    monkeypatch.setattr(registry, "load_env_cfg", tight)
    with caplog.at_level("INFO", logger="orin_rl.envs.mjlab"):
        env = MjlabVecEnv(GO1, 1, "cpu", EnvOptions(seed=0))
    need = env.env.sim.cfg.nconmax
    env.close()
    assert need > 1 and f"over its sim.nconmax 1: built with {need}" in caplog.text
