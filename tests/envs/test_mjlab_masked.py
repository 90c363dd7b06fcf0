"""The masked reset path (``mjlab_masked``) against mjlab's own reset, on Warp's CPU device.

Two copies of one Go1 task, stepped alike from one seed, reset the same worlds: one through
mjlab's ``_reset_idx``, one through the masked twins over every world. What a reset decides
(which worlds, what it zeroes, the episode logs) must agree exactly; what it draws must agree in
distribution (two-sample Kolmogorov-Smirnov per field); the worlds not reset must not move.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

if os.environ.get("ORIN_RL_REQUIRE_MJLAB") == "1":
    import mjlab  # noqa: F401
else:
    pytest.importorskip("mjlab", reason="needs the mjlab extra: pip install -e '.[mjlab]'")

from orin_rl.envs.base import EnvOptions
from orin_rl.envs.mjlab import MjlabVecEnv, task_ids
from orin_rl.envs.mjlab.masked import MaskedReset, RowMask
from tests.envs.test_mjlab import _actions, _mjlab_rollout, assert_mjlabs_until_the_first_reset

GO1 = "Mjlab-Velocity-Flat-Unitree-Go1"
ROUGH = "Mjlab-Velocity-Rough-Unitree-Go1"
N = 64
ROUNDS = 40
"""Resets of half the worlds per copy: 1,280 reset rows per field."""
KS_CRITICAL = 1.95 * np.sqrt(2 / (N // 2 * ROUNDS))
"""Two-sample KS at a 0.1% level: a uniform range shifted by a tenth of its width fails it."""


def _registry() -> list[str]:
    try:
        return task_ids()
    except Exception:  # collected without mjlab: the module is skipped anyway
        return []


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    both = np.sort(np.concatenate([a, b]))
    fa = np.searchsorted(np.sort(a), both, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), both, side="right") / len(b)
    return float(np.abs(fa - fb).max())


def _pair() -> tuple[MjlabVecEnv, MjlabVecEnv]:
    """mjlab's reset (first) and the masked one (second), stepped alike to one state."""
    pair = []
    for masked in (False, True):
        env = MjlabVecEnv(GO1, N, "cpu", EnvOptions(seed=5, max_episode_steps=1000))
        if masked:
            assert env._stepper.mask_resets() is None
        env.reset()
        g = torch.Generator().manual_seed(1)
        for _ in range(2):
            env.step(0.3 * torch.randn(N, env.action_space.shape[0], generator=g))
        pair.append(env)
    return pair[0], pair[1]


def _state(env) -> dict[str, torch.Tensor]:
    """Every per-world tensor a reset writes (Go1 flat), as CPU copies."""
    e = env.env
    cmd = e.command_manager._terms["twist"]
    robot = e.scene["robot"]
    air = e.scene.sensors["feet_ground_contact"]._air_time_state
    out = {
        "qpos": e.sim.data.qpos[:].clone(),
        "qvel": e.sim.data.qvel[:].clone(),
        "episode_length": e.episode_length_buf.clone(),
        "vel_command_b": cmd.vel_command_b.clone(),
        "vel_command_w": cmd.vel_command_w.clone(),
        "heading_target": cmd.heading_target.clone(),
        "is_heading_env": cmd.is_heading_env.clone(),
        "is_standing_env": cmd.is_standing_env.clone(),
        "is_forward_env": cmd.is_forward_env.clone(),
        "command_time_left": cmd.time_left.clone(),
        "command_counter": cmd.command_counter.clone(),
        "error_vel_xy": cmd.metrics["error_vel_xy"].clone(),
        "push_time_left": e.event_manager._interval_term_time_left[0].clone(),
        "prev_action": e.action_manager._prev_action.clone(),
        "joint_pos_target": robot.data.joint_pos_target.clone(),
        "air_time": air.current_air_time.clone(),
        "metric_steps": e.metrics_manager._step_count.clone(),
    }
    for key, sums in e.reward_manager._episode_sums.items():
        out["reward_sum/" + key] = sums.clone()
    return out


DRAWN = {
    "qpos": slice(None),  # the root pose (x, y, yaw in the quaternion) and the joints
    "qvel": slice(None),
    "vel_command_b": slice(None),
    "vel_command_w": slice(None),
    "heading_target": slice(None),
    "is_heading_env": slice(None),
    "is_standing_env": slice(None),
    "is_forward_env": slice(None),
    "command_time_left": slice(None),
    "push_time_left": slice(None),
}
"""Fields a reset draws at random: held in distribution, not bit for bit."""


def _mjlab_reset(env, mask: torch.Tensor) -> dict:
    e = env.env
    e.extras["log"] = {}
    ids = mask.nonzero().squeeze(-1)
    e._reset_idx(ids)
    e.scene.write_data_to_sim()
    return dict(e.extras["log"])


def _masked_reset(env, mask: torch.Tensor) -> dict:
    m = env._stepper.masked
    env.env.reset_buf.copy_(mask)
    m.begin_reset()
    m.sim_reset()
    return m.finish_reset()


@pytest.fixture(scope="module")
def resets():
    """ROUNDS resets of a fresh half of the worlds through each path: (first round's states
    before and after, the logs, every round's reset rows per field)."""
    ours, theirs = _pair()
    g = torch.Generator().manual_seed(2)
    drawn: dict[str, list] = {"mjlab": [], "masked": []}
    first = None
    for r in range(ROUNDS):
        mask = torch.zeros(N, dtype=torch.bool)
        mask[torch.randperm(N, generator=g)[: N // 2]] = True
        before = _state(ours), _state(theirs)
        logs = _mjlab_reset(ours, mask), _masked_reset(theirs, mask)
        after = _state(ours), _state(theirs)
        if r == 0:
            first = (mask, before, after, logs)
        for side, state in zip(("mjlab", "masked"), after, strict=True):
            drawn[side].append({k: state[k][mask].double() for k in DRAWN})
    rows = {
        side: {k: torch.cat([d[k] for d in drawn[side]]).numpy() for k in DRAWN} for side in drawn
    }
    ours.close()
    theirs.close()
    return first, rows


def test_the_worlds_not_reset_keep_every_value_bit_for_bit(resets):
    """Mutation: ``RowMask`` without its blend (every world reset) moves them."""
    (mask, before, after, _), _ = resets
    for side in (0, 1):
        for key, value in before[side].items():
            assert torch.equal(after[side][key][~mask], value[~mask]), (side, key)


def test_what_a_reset_sets_is_mjlabs_exactly(resets):
    """The fields a reset sets without drawing: zeroed counters, sums and targets."""
    (mask, _, after, _), _ = resets
    mjlab, masked = after
    for key in mjlab:
        if key not in DRAWN:
            assert torch.equal(masked[key][mask], mjlab[key][mask]), key
    assert (masked["episode_length"][mask] == 0).all()
    assert (masked["command_counter"][mask] == 1).all()  # zeroed, then one resample


def test_the_episode_logs_are_mjlabs(resets):
    """Mutation: a plain mean over every world for the masked one departs."""
    (_, _, _, (mjlab, masked)), _ = resets
    for key, value in mjlab.items():
        if key.startswith("Curriculum/"):
            continue  # the masked path logs the curricula from the host, every step
        assert key in masked, key
        assert float(masked[key]) == pytest.approx(float(value), rel=1e-5, abs=1e-7), key


def test_what_a_reset_draws_has_mjlabs_distribution(resets):
    """Per field and component, 1,280 reset rows each side. Mutations: the heading range
    shifted by a tenth of its width, or the joint offsets scaled by 1.5: KS fails."""
    _, rows = resets
    worst = []
    for key in DRAWN:
        a, b = rows["mjlab"][key], rows["masked"][key]
        a2, b2 = a.reshape(len(a), -1), b.reshape(len(b), -1)
        for c in range(a2.shape[1]):
            if np.ptp(a2[:, c]) == 0 and np.ptp(b2[:, c]) == 0:
                assert a2[0, c] == b2[0, c], (key, c)  # a constant component: the same one
                continue
            worst.append((_ks(a2[:, c], b2[:, c]), key, c))
    worst.sort(reverse=True)
    assert worst[0][0] < KS_CRITICAL, worst[:3]


def test_the_velocity_command_after_its_timer_is_mjlabs_in_distribution():
    """The command timer's resampling and update (heading, standing, forward-only splits)
    through the masked twin against mjlab's ``command_manager.compute``: the command each
    world holds after many expiries (mutation: the standing worlds not zeroed fails)."""
    ours, theirs = _pair()
    out = {"mjlab": [], "masked": []}
    for _ in range(ROUNDS // 2):
        for side, env in (("mjlab", ours), ("masked", theirs)):
            term = env.env.command_manager._terms["twist"]
            term.time_left.fill_(0.01)
            if side == "mjlab":
                env.env.command_manager.compute(dt=env.env.step_dt)
            else:
                env._stepper.masked._mask.zero_()
                env._stepper.masked.commands()
            out[side].append(term.vel_command_b.clone())
    ours.close()
    theirs.close()
    a, b = (torch.cat(out[s]).numpy() for s in ("mjlab", "masked"))
    stats = [_ks(a[:, c], b[:, c]) for c in range(3)]
    assert max(stats) < 1.95 * np.sqrt(2 / len(a)), stats
    assert (b == 0).all(axis=1).mean() > 0.05  # standing worlds hold a zero command


def test_the_push_is_mjlabs_in_distribution_and_only_where_its_timer_ran_out():
    """The interval push through the masked twin: the velocity change of the worlds whose
    timer ran out against mjlab's ``push_by_setting_velocity``; the other worlds untouched."""
    from mjlab.envs.mdp.events import push_by_setting_velocity

    ours, theirs = _pair()
    em_cfg = ours.env.event_manager._mode_term_cfgs["interval"][0]
    g = torch.Generator().manual_seed(3)
    deltas: dict[str, list] = {"mjlab": [], "masked": []}
    for _ in range(ROUNDS // 2):
        fire = torch.rand(N, generator=g) < 0.5
        for side, env in (("mjlab", ours), ("masked", theirs)):
            robot = env.env.scene["robot"]
            before = robot.data.root_link_vel_w.clone()
            if side == "mjlab":
                push_by_setting_velocity(env.env, fire.nonzero().squeeze(-1), **em_cfg.params)
            else:
                left = env.env.event_manager._interval_term_time_left[0]
                left.copy_(torch.where(fire, 0.0, 100.0) + env.env.step_dt)
                env._stepper.masked.interval_events()
            env.env.sim.forward()
            delta = robot.data.root_link_vel_w - before
            if side == "masked":
                assert torch.equal(delta[~fire], torch.zeros_like(delta[~fire]))
            deltas[side].append(delta[fire])
    ours.close()
    theirs.close()
    a, b = (torch.cat(deltas[s]).double().numpy() for s in ("mjlab", "masked"))
    stats = [_ks(a[:, c], b[:, c]) for c in range(a.shape[1]) if np.ptp(a[:, c]) > 0]
    assert stats and max(stats) < 1.95 * np.sqrt(2 / len(a)), stats


def test_a_term_without_a_twin_keeps_mjlabs_eager_resets():
    """A reset event mjlab's registry has but the masked path does not twin: one line, and
    the step is mjlab's eager one."""
    env = MjlabVecEnv(GO1, 2, "cpu", EnvOptions(seed=1))
    cfg = env.env.event_manager._mode_term_cfgs["reset"][0]
    original = cfg.func
    cfg.func = lambda env, env_ids, **kw: original(env, env_ids, **kw)
    why = env._stepper.mask_resets()
    assert why is not None and "'reset_base'" in why and "no masked twin" in why
    assert env._stepper.masked is None
    env.close()


def test_a_write_that_is_not_one_row_per_world_is_refused():
    mask = torch.tensor([True, False, True])
    rows, scalar = torch.zeros(3, 2), torch.zeros(())
    with RowMask(mask):
        rows.add_(1.0)
    assert rows[:, 0].tolist() == [1.0, 0.0, 1.0]
    with pytest.raises(Exception, match="not one row per world"), RowMask(mask):
        scalar.add_(1.0)


G1 = "Mjlab-Velocity-Flat-Unitree-G1"


@pytest.mark.parametrize(
    "device, task, episode, step",
    [
        ("cpu", GO1, 5, "segments"),
        # G1's self-collision history is rolled (rebound) at every substep while the sensor's
        # stale cache still holds the old tensor: captured all the same (mutation: counting
        # the cache as a holder leaves substep1-3 and rewards eager)
        ("cpu", G1, 2, "segments"),
        # the whole step one capture (mjlab_unit), Warp's work captured by Warp in its place
        ("cpu", GO1, 5, "unit"),
        ("cpu", G1, 2, "unit"),
        ("cpu", ROUGH, 5, "unit"),  # the terrain scan, its curriculum, the upright twin
        pytest.param("cuda", GO1, 5, "segments", marks=pytest.mark.gpu),
        pytest.param("cuda", G1, 2, "segments", marks=pytest.mark.gpu),
        pytest.param("cuda", GO1, 5, "unit", marks=pytest.mark.gpu),
        pytest.param("cuda", G1, 2, "unit", marks=pytest.mark.gpu),
        pytest.param("cuda", ROUGH, 5, "unit", marks=pytest.mark.gpu),
    ],
)
def test_the_masked_step_is_the_same_eager_or_as_graphs(device, task, episode, step):
    """The whole masked step, its segments eager and then captured and replayed as CUDA graphs
    (on the CPU: with the graphs' semantics, ``graph_emulation``), or as one capture a step
    (``step="unit"``: Warp's kernels inside torch's capture; on the CPU Warp's own capture on
    its CPU device): the same observations, rewards and flags bit for bit through three rounds
    of resets; every segment (or the one unit), the reset path's included, is a graph after the
    first step; the episode logs counted only at steps with a reset. On CUDA MuJoCo Warp is not
    bit-reproducible even against itself (see ``test_mjlab._assert_mjlabs_steps``), so there
    the flags are held exactly all along and the values within 2e-3 over the first episode,
    before any masked reset draws. Rough Go1's ``upright`` reward is its graph-safe twin on
    both sides (``mjlab_terms``: mjlab's ``eigh`` reads the host). Mutations (unit): the
    sensor's chained state refused as shared, or the yaw twin not put on the sensors: the unit
    is refused, the step runs as segments; the sensors not refreshed after sense, or the
    terminal observation taken after the reset: the values depart; mjlab's step counter not
    advanced: the counters depart; the Warp calls left out of Warp's capture (recorded launch
    by launch): the replay reads arrays freed since and crashes."""
    from orin_rl.envs.mjlab.terms import use_graph_safe_terms
    from orin_rl.envs.mjlab.unit import turn_on

    runs, counters = {}, {}
    for graphs in (False, True):
        env = MjlabVecEnv(task, 4, device, EnvOptions(seed=3, max_episode_steps=episode))
        if task == ROUGH:
            use_graph_safe_terms(env.env)
        if graphs and device == "cuda":
            plan = env.use_graphs(masked=True, unit=step == "unit")
            assert plan["masked_resets"] == "on" and plan["step"] == step, plan
        else:
            assert env._stepper.mask_resets() is None
        if graphs and device == "cpu":
            env._stepper.emulate_graphs()
            if step == "unit":
                assert turn_on(env._stepper) is None
        env.reset()
        g = torch.Generator().manual_seed(0)
        out = []
        for _ in range(16):
            a = 0.5 * torch.randn(4, env.action_space.shape[0], generator=g)
            s = env.step(a.to(device))
            out.append(
                tuple(x.cpu() for x in (s.obs, s.reward, s.terminated, s.truncated, s.final_obs))
            )
        counters[graphs] = env.env.common_step_counter, env.env._sim_step_counter
        runs[graphs] = (out, env.graph_report(), env.pop_log())
        env.close()
    (eager, _, eager_log), (graphed, report, graphed_log) = runs[False], runs[True]
    assert counters[True] == counters[False]  # mjlab's Python counters (curricula read them)
    for t, (a, b) in enumerate(zip(eager, graphed, strict=True)):
        if device == "cpu":
            assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True)), t
            continue
        assert torch.equal(a[2], b[2]) and torch.equal(a[3], b[3]), t
        if t < episode:
            for x, y in zip(a[:2] + a[4:], b[:2] + b[4:], strict=True):
                torch.testing.assert_close(y, x, rtol=2e-3, atol=2e-3)
    assert report["eager"] == [] and report["refused"] == {}, report
    assert report["step"] == step, report
    graphed_segments = ("step",) if step == "unit" else ("events", "reset", "reset2", "commands")
    assert all(report["replays"][s] >= 14 for s in graphed_segments), report
    assert eager_log == graphed_log if device == "cpu" else eager_log.keys() == graphed_log.keys()
    if device == "cpu" and task == GO1:  # and mjlab's own step until the first reset draws
        want = _mjlab_rollout("cpu", _actions(16, 12))
        steps = [(o, r, te, tr) for o, r, te, tr, _ in eager]
        assert_mjlabs_until_the_first_reset(steps, want, episode, actor=48, exact=True)

    # three steps of the 16 reset worlds: the logged episode reward is a mean over those
    assert "Episode_Reward/track_linear_velocity" in graphed_log
    assert MaskedReset.check(env.env) is None


def test_the_terrain_curriculum_moves_the_masked_worlds_as_mjlabs():
    """Rough Go1's ``terrain_levels_vel`` through its masked twin against mjlab's, from one
    state (worlds moved off their origins by different distances, levels spread): the same
    levels and origins on the masked worlds (where no level wraps to a random one), the others
    untouched, and the same logged means (mutation: up and down swapped fails)."""
    from mjlab.tasks.velocity.mdp.curriculums import terrain_levels_vel

    n = 8
    pair = []
    for _ in range(2):
        env = MjlabVecEnv(
            "Mjlab-Velocity-Rough-Unitree-Go1", n, "cpu", EnvOptions(seed=4, max_episode_steps=50)
        )
        env.reset()
        env.env.common_step_counter = 10
        terrain = env.env.scene.terrain
        terrain.terrain_levels.copy_(torch.arange(n) % (terrain.max_terrain_level - 1) + 1)
        qpos = env.env.sim.data.qpos
        qpos[:, 0] = env.env.scene.env_origins[:, 0] + torch.linspace(0.0, 6.0, n)
        env.env.sim.forward()
        pair.append(env)
    mask = torch.tensor([True, False] * (n // 2))
    theirs, ours = pair
    cfg = theirs.env.curriculum_manager._term_cfgs[0]
    assert cfg.func is terrain_levels_vel
    before = ours.env.scene.terrain.terrain_levels.clone()
    expected = terrain_levels_vel(theirs.env, mask.nonzero().squeeze(-1), **cfg.params)
    m = MaskedReset(ours.env)
    got = m._terrain_levels(mask, **cfg.params)
    levels = [e.env.scene.terrain.terrain_levels for e in pair]
    origins = [e.env.scene.env_origins for e in pair]
    assert torch.equal(levels[1][~mask], before[~mask])
    assert torch.equal(levels[1][mask], levels[0][mask])
    assert torch.equal(origins[1], origins[0])
    assert levels[1][mask].tolist() != before[mask].tolist()  # some world moved
    for key, value in expected.items():
        assert float(got[key]) == pytest.approx(float(value)), key
    for env in pair:
        env.close()


@pytest.mark.parametrize("task", _registry())
def test_every_task_in_mjlabs_registry_steps_or_is_refused_in_one_line(task, caplog):
    """Each registered task, 2 worlds on Warp's CPU device, its reset path masked where its
    terms have twins, the step's segments captured and replayed (emulated graphs): two rounds
    of resets (and the curricula they run) go through, or the task is refused in one line for
    a named reason (a tracking task's motion file; a camera task's images, which the adapter
    does not feed the policy). No task crashes (mutation: the adapter not turning a task's
    failed set-up into ``EnvError`` crashes the tracking tasks)."""
    from orin_rl.envs.base import EnvError

    try:
        env = MjlabVecEnv(task, 2, "cpu", EnvOptions(seed=1, max_episode_steps=2))
    except EnvError as exc:
        why = str(exc)
        assert "\n" not in why, why
        assert ("Tracking" in task and "motion file" in why) or (
            "Yam" in task and "gives image observations" in why
        ), why
        return
    why = env._stepper.mask_resets()
    assert why is None or ("\n" not in why and "no masked twin" in why), why
    env._stepper.emulate_graphs()
    env.reset()
    g = torch.Generator().manual_seed(0)
    ended = 0
    for _ in range(5):
        s = env.step(torch.randn(2, env.action_space.shape[0], generator=g))
        assert torch.isfinite(s.obs).all() and torch.isfinite(s.reward).all()
        ended += int((s.terminated | s.truncated).sum())
    assert ended >= 4  # two rounds of resets of both worlds
    for why in env.graph_report()["refused"].values():  # segments left eager: one line each
        assert all("\n" not in line for line in why), why
    env.close()


def test_a_resume_keeps_the_curricula_where_they_were(tmp_path):
    """Issue 41 item 1: a run's task state (mjlab's step counter, the terrain levels) saved as
    a checkpoint saves it and loaded into a fresh world: the counter, the command ranges its
    curriculum sets from it, the levels and the worlds' origins come back (mutations: the
    curricula not applied at load, the origins not moved, fail)."""
    from orin_rl.envs.mjlab.masked import apply_step_curricula

    n = 8
    old, new = (
        MjlabVecEnv(ROUGH, n, "cpu", EnvOptions(seed=seed, max_episode_steps=50)) for seed in (4, 5)
    )
    for env in (old, new):
        env.reset()

    def ranges(env):
        r = env.env.command_manager.get_term("twist").cfg.ranges
        return r.lin_vel_x, r.lin_vel_y, r.ang_vel_z

    first = ranges(new)
    old.env.common_step_counter = 10**9  # past every stage of the command curriculum
    apply_step_curricula(old.env)
    assert ranges(old) != first and ranges(new) == first  # two worlds' own settings
    terrain = old.env.scene.terrain
    terrain.terrain_levels.copy_(torch.arange(n) % terrain.max_terrain_level)
    terrain.env_origins.copy_(
        terrain.terrain_origins[terrain.terrain_levels, terrain.terrain_types]
    )
    torch.save(old.task_state(), tmp_path / "state.pt")  # as the checkpoint keeps it
    assert not torch.equal(new.env.scene.env_origins, old.env.scene.env_origins)
    new.load_task_state(torch.load(tmp_path / "state.pt"))
    assert new.env.common_step_counter == 10**9 and ranges(new) == ranges(old)
    assert torch.equal(new.env.scene.terrain.terrain_levels, terrain.terrain_levels)
    assert torch.equal(new.env.scene.env_origins, old.env.scene.env_origins)
    for env in (old, new):
        env.close()
