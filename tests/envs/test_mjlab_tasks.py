"""orin_rl's own mjlab tasks (``envs/mjlab/tasks.py``): registered beside mjlab's ids, found
by the backend, the preset and ``orin-rl envs``, and built by mjlab on Warp's CPU device."""

from __future__ import annotations

import os

import pytest

if os.environ.get("ORIN_RL_REQUIRE_MJLAB") == "1":  # CI: the mjlab extra must be there
    import mjlab  # noqa: F401
else:
    pytest.importorskip("mjlab", reason="needs the mjlab extra: pip install -e '.[mjlab]'")

from orin_rl.envs import backends as env_backends
from orin_rl.envs.base import EnvOptions
from orin_rl.envs.mjlab import MjlabVecEnv, import_mjlab, task_ids
from orin_rl.envs.mjlab.tasks import REAL_G1_FLAT

G1 = "Mjlab-Velocity-Flat-Unitree-G1"


def test_the_real_g1_task_is_listed_routed_and_preset_as_mjlabs_g1(capsys):
    """Beside mjlab's ids in the registry and in ``orin-rl envs --backend mjlab``; its id goes
    to the mjlab backend and its preset is mjlab's G1 runner configuration (mutation: the
    ``Orin-Velocity-`` prefix left out of the backend's claim: the id went to gymnasium)."""
    from orin_rl import cli
    from orin_rl.config.presets import preset_overrides

    assert REAL_G1_FLAT in task_ids() and G1 in task_ids()
    assert cli.main(["envs", "--backend", "mjlab"]) == 0
    assert f"  {REAL_G1_FLAT}" in capsys.readouterr().out.splitlines()
    assert env_backends.for_id(REAL_G1_FLAT, "gym") == "mjlab"
    preset = preset_overrides(REAL_G1_FLAT, device="cpu")
    rl = import_mjlab().load_rl_cfg(G1)
    assert preset["env.backend"] == "mjlab"
    assert preset["ppo.hidden_sizes"] == list(rl.actor.hidden_dims) == [512, 256, 128]
    assert preset["train.total_steps"] == rl.max_iterations * rl.num_steps_per_env * 4


def test_the_real_g1_actor_reads_only_what_a_g1_reports_and_the_critic_is_mjlabs():
    """The actor: mjlab's G1 actor terms without ``base_lin_vel``, in mjlab's order with
    mjlab's functions, parameters, noise and scales; the critic: mjlab's, ``base_lin_vel``
    included; built by mjlab for 2 worlds, the actor is 3+3+3+29+29+29 = 96 wide, mjlab's G1
    less its 3-wide velocity (mutations: the actor not cut: 99 and ``base_lin_vel``; the
    critic cut with it: no ``base_lin_vel`` there; ``command`` dropped: 93)."""
    registry = import_mjlab()
    for play in (False, True):
        ours, theirs = (registry.load_env_cfg(t, play=play) for t in (REAL_G1_FLAT, G1))
        actor = ours.observations["actor"].terms
        mjlab_actor = theirs.observations["actor"].terms
        assert list(actor) == [k for k in mjlab_actor if k != "base_lin_vel"]
        assert list(actor) == ["base_ang_vel", "projected_gravity", "joint_pos", "joint_vel",
                               "actions", "command"]  # fmt: skip
        for name, term in actor.items():
            assert term == mjlab_actor[name], name  # noise, scale, clip, params: mjlab's
        assert ours.observations["critic"] == theirs.observations["critic"]
        assert "base_lin_vel" in ours.observations["critic"].terms
        assert ours.observations["actor"].enable_corruption == (not play)
        assert ours.commands == theirs.commands  # mjlab's ranges (and its curriculum's)
    vec = MjlabVecEnv(REAL_G1_FLAT, 2, "cpu", EnvOptions(seed=0))
    try:
        manager = vec.env.observation_manager
        dims = dict(zip(manager.active_terms["actor"], manager.group_obs_term_dim["actor"],
                        strict=True))  # fmt: skip
        assert dims == {"base_ang_vel": (3,), "projected_gravity": (3,), "joint_pos": (29,),
                        "joint_vel": (29,), "actions": (29,), "command": (3,)}  # fmt: skip
        assert vec.obs_groups["actor"] == [0, 96]
        assert "base_lin_vel" in manager.active_terms["critic"]
        obs = vec.reset(seed=0)
        assert obs.shape == (2, vec.obs_groups["critic"][1])
    finally:
        vec.close()
