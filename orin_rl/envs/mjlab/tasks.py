"""orin_rl's own mjlab tasks, registered in mjlab's task registry beside mjlab's ids.

``Orin-Velocity-Flat-Unitree-G1-Real``: mjlab's G1 flat velocity task (its own configuration:
rewards, events, terminations, curricula, commands, noise, the rsl_rl runner settings) whose
actor observes only what a real G1 reports in low-level mode, as Unitree's own mjlab fork
(unitree_rl_mjlab) trains it: ``base_ang_vel`` (the IMU's gyro), ``projected_gravity`` (the
IMU's quaternion), ``joint_pos``, ``joint_vel``, ``actions`` (the last action) and
``command``, in mjlab's order with mjlab's noise and scales. With the motion service released
a G1 publishes no ``rt/sportmodestate``, so it has no base linear velocity: ``base_lin_vel``
leaves the actor and stays with the critic, which keeps every privileged term. The command
ranges are mjlab's (and its command curriculum): the task differs from mjlab's G1 in the
actor's input alone, so the two compare; a first run on a robot commands less (``--velocity-
command``), and the contract's ranges clamp whatever comes.

mjlab keeps a play configuration inside each id (no ``-Play`` id): so does this one.
"""

from __future__ import annotations

from typing import Any

REAL_G1_FLAT = "Orin-Velocity-Flat-Unitree-G1-Real"
"""mjlab's G1 flat velocity task with the actor a real G1 can feed (module docstring)."""
ROBOT_ACTOR_TERMS = (
    "base_ang_vel",
    "projected_gravity",
    "joint_pos",
    "joint_vel",
    "actions",
    "command",
)
"""mjlab's velocity actor terms a robot in low-level mode reports (``rt/lowstate``, the
operator's command, the policy's own output)."""


def robot_actor(cfg: Any) -> Any:
    """``cfg`` (an mjlab velocity ``ManagerBasedRlEnvCfg``) with its actor group cut to
    ``ROBOT_ACTOR_TERMS``, mjlab's order and settings kept; the critic untouched."""
    terms = cfg.observations["actor"].terms
    missing = [name for name in ROBOT_ACTOR_TERMS if name not in terms]
    if missing:  # mjlab renamed a term: fail at registration, not on the robot
        raise KeyError(f"mjlab's velocity actor has no {', '.join(missing)}")
    cfg.observations["actor"].terms = {k: v for k, v in terms.items() if k in ROBOT_ACTOR_TERMS}
    return cfg


def register() -> list[str]:
    """Register orin_rl's tasks in mjlab's registry (once; a second call is a no-op); their
    ids."""
    from mjlab.tasks import registry
    from mjlab.tasks.velocity.config.g1.env_cfgs import unitree_g1_flat_env_cfg
    from mjlab.tasks.velocity.config.g1.rl_cfg import unitree_g1_ppo_runner_cfg
    from mjlab.tasks.velocity.rl import VelocityOnPolicyRunner

    if REAL_G1_FLAT not in registry.list_tasks():
        rl_cfg = unitree_g1_ppo_runner_cfg()
        rl_cfg.experiment_name = "g1_velocity_real"
        registry.register_mjlab_task(
            task_id=REAL_G1_FLAT,
            env_cfg=robot_actor(unitree_g1_flat_env_cfg()),
            play_env_cfg=robot_actor(unitree_g1_flat_env_cfg(play=True)),
            rl_cfg=rl_cfg,
            runner_cls=VelocityOnPolicyRunner,
        )
    return [REAL_G1_FLAT]
