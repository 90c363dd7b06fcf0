"""mjlab's robot tasks (Isaac Lab's manager API on MuJoCo Warp) as an orin_rl VecEnv.

``--env Mjlab-Velocity-Flat-Unitree-Go1`` (any id in mjlab's task registry, a user's own
registered task package and orin_rl's own tasks, ``mjlab.tasks``, included) runs the task's
own code unchanged: its rewards, terminations, curricula, events and commands. The adapter only

- concatenates the ``actor`` and ``critic`` observation groups into one vector and declares
  where each lies (``obs_groups``), so the rollout storage keeps both and the policy's actor
  reads its group while the critic reads the privileged one (asymmetric actor-critic); a
  camera task's groups (images and states) are a dict observation instead (``mjlab.images``);
- steps the task with mjlab's own ``env.step`` (auto-reset, so every number is mjlab's: the
  same draws in the same order), and keeps the terminal observation of the worlds that time
  out, for bootstrapping: just before mjlab resets them, the observation groups are computed
  from the final physics state (a ``forward``, without advancing any history, delay or
  command timer) with torch's generators forked, so mjlab's random stream is untouched (a
  command term shows the command of the step's start: a heading-driven yaw command is
  updated after the reset point, by a few 1e-3 in the Go1 test);
- keeps episode returns and mjlab's ``extras["log"]`` scalars (``Episode_Reward/*``,
  ``Metrics/*``, ``Curriculum/*``, ``Episode_Termination/*``) on the device until a log reads
  them.

Evaluation batches use the task's play configuration (no randomisation), cut at the training
configuration's episode length (play episodes never time out); their logs count the first
episode of each world (``mjlab.episodes``): terminations as rates, the command metrics (the
tracking error) as means over those episodes.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import math
import os
import re
from collections.abc import Iterator
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from orin_rl.envs.base import EnvError, EnvOptions, StepResult, VecEnv
from orin_rl.envs.gpu.base import EpisodeStats
from orin_rl.envs.mjlab.episodes import EpisodeLog
from orin_rl.envs.mjlab.noise import init_warp, known_warnings_filtered

log = logging.getLogger(__name__)

PREFIX = ("Mjlab-", "Orin-Velocity-")
"""mjlab's task ids and orin_rl's own mjlab tasks (``mjlab.tasks``) start with one of these;
``envs.make`` sends them to this backend."""
INSTALL_HINT = "install the mjlab extra: pip install 'orin-rl[mjlab]'"
ACTOR_GROUPS = ("actor", "policy")
"""Observation group the policy reads (mjlab 1.6 names it ``actor``; older tasks ``policy``)."""
CRITIC_GROUP = "critic"
TASK_PACKAGES_ENV = "ORIN_RL_MJLAB_TASKS"
"""Comma-separated modules imported before the registry is read: a user's own task packages
(each calls ``mjlab.tasks.registry.register_mjlab_task``)."""


@functools.cache
def import_mjlab() -> Any:
    """mjlab's task registry, after importing mjlab's tasks and the user's task packages.

    A missing mjlab (or one of its packages) is one line naming the extra to install."""
    os.environ.setdefault("MUJOCO_GL", "disable")  # no display is needed to train or run
    os.environ.setdefault("WANDB_MODE", "disabled")
    try:
        import warp as wp

        if not log.isEnabledFor(logging.DEBUG):  # no banner, no per-module compile lines
            wp.config.log_level = wp.LOG_WARNING
        init_warp()  # now, without its no-driver line on a CPU box (unless -v)
        with _quiet():
            import mjlab.tasks  # noqa: F401  # registers mjlab's own tasks
            from mjlab.tasks import registry

            from orin_rl.envs.mjlab.tasks import register

            register()  # orin_rl's own (Orin-Velocity-Flat-Unitree-G1-Real), beside mjlab's
    except ImportError as exc:
        raise EnvError(f"mjlab tasks need mjlab ({exc}); {INSTALL_HINT}") from None
    from orin_rl.envs.mjlab.pin import check_version

    check_version()  # the segmented step copies mjlab 1.6.0's: another release, one line
    import importlib

    for module in filter(None, os.environ.get(TASK_PACKAGES_ENV, "").split(",")):
        try:
            importlib.import_module(module.strip())
        except ImportError as exc:
            raise EnvError(f"{TASK_PACKAGES_ENV}: cannot import {module!r} ({exc})") from None
    return registry


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """mjlab prints its managers' tables and seeds to stdout: into the debug log instead; and
    the known third-party warnings (``mjlab.noise``) are not shown, unless -v."""
    if log.isEnabledFor(logging.DEBUG):
        yield
        return
    with contextlib.redirect_stdout(io.StringIO()), known_warnings_filtered():
        yield


def task_ids() -> list[str]:
    """Every task id in mjlab's registry (mjlab's and the user's packages')."""
    return import_mjlab().list_tasks()


def check_task(env_id: str) -> None:
    """An unknown id is one line naming the command that lists the known ones."""
    if env_id not in task_ids():
        raise EnvError(
            f"{env_id!r} is not a registered mjlab task; `orin-rl envs --backend mjlab` lists "
            f"them (a task package of your own: set {TASK_PACKAGES_ENV}=your.module)"
        )


def rl_config(env_id: str) -> Any:
    """The task's rsl_rl runner configuration (network sizes, PPO settings)."""
    check_task(env_id)
    return import_mjlab().load_rl_cfg(env_id)


GRAPHS_ENV = "ORIN_RL_MJLAB_GRAPHS"
MASKED_ENV = "ORIN_RL_MJLAB_MASKED"
"""``1``: ``--cuda-graphs`` captures the mjlab step's segments (experimental)."""


def _build(make: Any, cfg: Any, device: str, env_id: str) -> Any:
    """mjlab's env; where the first state's contacts overflow the task's per-world contact
    capacity (``sim.nconmax``: a world dropped on rough terrain) built again with what MuJoCo
    Warp asked for and a quarter more. A task that cannot be built is one line."""
    for attempt in (1, 2):
        try:
            with _quiet():
                return make(cfg=cfg, device=device)
        except Exception as exc:  # a task's own set-up failing (a tracking task's motion file)
            first = (str(exc).splitlines() or [""])[0][:300]
            need = re.search(r"nconmax overflow \(nconmax must be >= (\d+)\)", first)
            if attempt == 1 and need and int(need[1]) > (cfg.sim.nconmax or 0):
                old, cfg.sim.nconmax = cfg.sim.nconmax, math.ceil(int(need[1]) * 1.25)
                log.info("%s: %s contacts at the start, over its sim.nconmax %s: built with %d",
                         env_id, need[1], old, cfg.sim.nconmax)  # fmt: skip
                continue
            hint = (
                "; a tracking task needs its motion file configured in its task package"
                if "motion" in first.lower() or "Tracking" in env_id
                else ""
            )
            raise EnvError(
                f"{env_id}: mjlab could not build the task ({type(exc).__name__}: {first}){hint}"
            ) from None
    raise AssertionError("the second build returns or raises")


class MjlabVecEnv(VecEnv):
    """One mjlab ``ManagerBasedRlEnv`` of ``num_envs`` worlds behind the VecEnv contract."""

    eval_physics: ClassVar[str | None] = "mjlab"
    has_own_graphs: ClassVar[bool] = True

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        device: torch.device | str,
        options: EnvOptions | None = None,
    ):
        options = options or EnvOptions()
        registry = import_mjlab()
        check_task(env_id)
        from mjlab.envs import ManagerBasedRlEnv

        self.env_id = env_id
        self.device = torch.device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise EnvError(f"{env_id} on {device}: torch sees no CUDA GPU; use cpu (Warp's CPU)")
        self.num_envs = num_envs
        train_cfg = registry.load_env_cfg(env_id)
        cfg = registry.load_env_cfg(env_id, play=options.evaluation)
        step_dt = cfg.sim.mujoco.timestep * cfg.decimation
        if options.max_episode_steps is not None:
            cfg.episode_length_s = options.max_episode_steps * step_dt
        elif options.evaluation:  # play episodes never end by time: cut them as training does
            cfg.episode_length_s = train_cfg.episode_length_s
        cfg.scene.num_envs = num_envs
        if options.seed is not None:
            cfg.seed = options.seed
        self.cfg = cfg
        self.step_dt = step_dt
        self.max_episode_steps = math.ceil(cfg.episode_length_s / step_dt)
        self.env = _build(ManagerBasedRlEnv, cfg, str(self.device), env_id)
        self._groups = self._observation_groups()
        dims = {name: self.env.observation_manager.group_obs_dim[g] for name, g in self._groups}
        actor_dim, critic_dim = (int(np.prod(dims[k])) for k in ("actor", "critic"))
        self.obs_groups = {"actor": [0, actor_dim], "critic": [actor_dim, actor_dim + critic_dim]}
        """Where each group lies in the concatenated observation: [start, stop) (a camera
        task's: the keys of its dict observation each network reads)."""
        self.observation_space = gym.spaces.Box(
            -np.inf, np.inf, (actor_dim + critic_dim,), np.float32
        )
        rl_cfg = registry.load_rl_cfg(env_id)
        from orin_rl.envs.mjlab.images import DictObservation

        self.images = DictObservation.of_task(self.env.observation_manager, env_id, rl_cfg)
        """A camera task's dict observation (None: the flat one above)."""
        if self.images is not None:
            self.observation_space = self.images.space
            self.obs_groups = self.images.obs_groups
            self._final_obs_needed = False
        act_dim = self.env.action_manager.total_action_dim
        # As mjlab's rsl_rl wrapper: actions clamped to +-clip_actions where the task asks.
        self.clip_actions = rl_cfg.clip_actions
        bound = np.inf if self.clip_actions is None else float(self.clip_actions)
        self.action_space = gym.spaces.Box(-bound, bound, (act_dim,), np.float32)
        self._check_no_delays()
        from orin_rl.envs.mjlab.graph import SegmentedStep

        critic_group = self._groups[1][1]
        self._stepper = SegmentedStep(self.env, critic_group)
        self._critic = slice(actor_dim, actor_dim + critic_dim)  # of the flat observation
        self.stats = EpisodeStats(num_envs, self.device)
        self._log_sum: dict[str, float] = {}
        self._log_count: dict[str, int] = {}
        self._vector_sums: dict[tuple[str, ...], list] = {}  # keys -> [float64 sums, count]
        self._seeded = options.seed is not None
        self._random_start = options.random_episode_start and not options.evaluation
        self._episode_log = EpisodeLog(self.env) if options.evaluation else None

    def _observation_groups(self) -> list[tuple[str, str]]:
        """(role, mjlab group) for the actor and the critic; a task the policy cannot read is
        one line."""
        manager = self.env.observation_manager
        groups = dict(manager.group_obs_dim)
        actor = next((g for g in ACTOR_GROUPS if g in groups), None)
        if actor is None:
            raise EnvError(
                f"{self.env_id}: no observation group named {' or '.join(ACTOR_GROUPS)} (it has "
                f"{', '.join(groups) or 'none'}); orin_rl's policy reads the actor group"
            )
        critic = CRITIC_GROUP if CRITIC_GROUP in groups else actor
        for role, group in (("actor", actor), ("critic", critic)):
            if not manager.group_obs_concatenate[group] or len(groups[group]) != 1:
                raise EnvError(
                    f"{self.env_id}: observation group {group!r} ({role}) has shape "
                    f"{groups[group]}; orin_rl's MLP policy needs one flat vector per group"
                )
        return [("actor", actor), ("critic", critic)]

    def _check_no_delays(self) -> None:
        """A delayed observation term cannot be read twice in a step without advancing its
        buffer: such a task's terminal observation cannot be taken (one line)."""
        manager = self.env.observation_manager
        for _, group in self._groups:
            for cfg in manager._group_obs_term_cfgs[group]:
                if cfg.delay_max_lag > 0:
                    raise EnvError(
                        f"{self.env_id}: observation group {group!r} has a delayed term; orin_rl "
                        "cannot take its terminal observation without advancing the delay"
                    )

    def _concat(self, obs: dict[str, torch.Tensor]) -> torch.Tensor:
        """(num_envs, actor_dim + critic_dim): the actor group, then the critic group (a camera
        task's: its rows of bytes)."""
        if self.images is not None:
            return self.images.pack(obs)
        return torch.cat([obs[g].float() for _, g in self._groups], dim=-1)

    images: Any = None
    _final_obs_needed = True

    @property
    def final_obs_needed(self) -> bool:  # type: ignore[override]  # VecEnv's attribute
        """See ``VecEnv.final_obs_needed``; a camera task has none (the terminal observation is
        the critic group computed again before mjlab's reset, ``mjlab.graph``: no frame of the
        camera group): asking for one is one line."""
        return self._final_obs_needed

    @final_obs_needed.setter
    def final_obs_needed(self, needed: bool) -> None:
        if needed and self.images is not None:
            raise EnvError(
                f"{self.env_id}: a time-out's final observation is the critic group computed "
                "again before the reset, without the camera's frame: set "
                "ppo.timeout_bootstrap=value (rsl_rl's, the task preset's)"
            )
        self._final_obs_needed = needed

    # ------------------------------------------------------------------ VecEnv contract
    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every world (mjlab seeds its generators when ``seed`` is given); with
        ``random_episode_start`` each world's episode counter then starts at a random step of
        the time limit."""
        if self._seeded and seed is None:
            seed = self.cfg.seed
        self._seeded = False
        with _quiet():  # mjlab prints the seed
            obs, _ = self.env.reset(seed=seed)
        if self._random_start:  # as rsl_rl's init_at_random_ep_len: in place (graphs read it)
            lengths = self.env.episode_length_buf
            lengths.copy_(torch.randint_like(lengths, high=int(self.env.max_episode_length)))
        self.stats.restart()
        if self._episode_log is not None:
            self._episode_log.restart()
        return self._concat(obs)

    def step(self, actions: torch.Tensor) -> StepResult:
        """mjlab's ``step`` (``mjlab.graph.SegmentedStep``: the same work, in segments that
        run as CUDA graphs after ``use_graphs``).

        ``final_obs`` of a world that timed out holds the critic group's observation of the
        state it reached (what PPO bootstraps from); its actor part, and the rows of worlds
        that ended by termination, are the next observation (nothing reads them). With
        ``final_obs_needed`` False it is the next observation throughout (not computed)."""
        actions = actions.to(self.device)
        if self.clip_actions is not None:
            actions = torch.clamp(actions, -self.clip_actions, self.clip_actions)
        self._stepper.terminal_needed = self.final_obs_needed
        if self._episode_log is not None:
            self._episode_log.before_step()
        obs, reward, terminated, truncated, extras, terminal = self._stepper.step(actions)
        # mjlab hands out its own buffers, which the next step overwrites: copies.
        reward, terminated, truncated = (
            reward.float().clone(),
            terminated.clone(),
            truncated.clone(),
        )
        next_obs = self._concat(obs)
        done = terminated | truncated
        final_obs = next_obs
        if terminal is not None:
            final_obs = next_obs.clone()
            final_obs[:, self._critic] = torch.where(
                truncated.unsqueeze(-1), terminal.float(), next_obs[:, self._critic]
            )
        self.stats.record(reward, done)
        self._accumulate(extras.get("log", {}), extras.get("log_weight"))
        if self._episode_log is not None:
            self._episode_log.after_step(done)
        return StepResult(next_obs, reward, terminated, truncated, final_obs)

    def use_graphs(
        self, masked: bool | None = None, unit: bool | None = None
    ) -> dict[str, Any] | None:
        """Run the step's device work as CUDA graphs (CUDA only; each segment captured the
        second time it runs): the segments that become graphs and those that stay eager, or
        None on the CPU and with ``ORIN_RL_MJLAB_GRAPHS=0`` (mjlab's eager step throughout).
        With ``masked`` (the default; ``ORIN_RL_MJLAB_MASKED=0`` turns it off) the reset path
        runs as masked device code too (``mjlab.masked``) where the task's terms have twins;
        terms with a graph-safe twin (``mjlab.terms``: rough terrain's ``upright``) use it.
        With ``unit`` (default: from ``ORIN_RL_MJLAB_STEP``, ``segments`` unless it says
        ``unit``) the whole step is one capture, Warp's kernels inside torch's
        (``mjlab.unit``), where it can be; else the segments.
        The ``gpu`` test holds the graphed step against mjlab's own (H200, Go1 and G1)."""
        if self.device.type != "cuda" or os.environ.get(GRAPHS_ENV) == "0":
            return None
        from orin_rl.envs.mjlab.terms import use_graph_safe_terms

        self._stepper.use_graphs = True
        twins = use_graph_safe_terms(self.env)  # terms that would read the host (rough upright)
        if masked is None:
            masked = os.environ.get(MASKED_ENV) != "0"
        why = self._stepper.mask_resets() if masked else "masked resets off"
        plan = self._stepper.describe_plan()
        from orin_rl.envs.mjlab.unit import mode_from_env, turn_on

        if unit is None:
            unit = mode_from_env() == "unit"
        step = (turn_on(self._stepper) or "unit") if unit else "segments"
        return {**plan, "masked_resets": why or "on", "graph_safe_terms": twins, "step": step}

    def deploy_contract(self) -> dict[str, Any] | None:
        """What a robot needs to run this task's policy (``policy.json``'s ``deploy``); None for
        a task without a robot driven by joint positions."""
        from orin_rl.envs.mjlab.contract import deploy_contract

        contract = deploy_contract(self.env, self.env_id)
        return None if contract is None else contract.to_dict()

    def warm_up(self) -> None:
        """Steps that load the kernels and, with graphs on, capture every segment of the step:
        two plain steps, then two that end every world at its time limit (the reset path's
        captures). The worlds are left where these steps left them: reset them afterwards."""
        zeros = torch.zeros((self.num_envs, *self.action_space.shape), device=self.device)
        counters = self.env.common_step_counter, self.env._sim_step_counter  # curricula read
        for timeout in (False, False, True, True):
            if timeout:  # in place: graphs read it
                self.env.episode_length_buf.fill_(int(self.env.max_episode_length) - 1)
            self.step(zeros)
        self.env.common_step_counter, self.env._sim_step_counter = counters

    def task_state(self) -> dict[str, Any]:
        """What mjlab's runner keeps for its curricula (the step counter the command ranges
        follow) and the terrain curriculum's levels and types, on the CPU."""
        state: dict[str, Any] = {"common_step_counter": int(self.env.common_step_counter)}
        terrain = getattr(self.env.scene, "terrain", None)
        if getattr(terrain, "terrain_levels", None) is not None:
            state["terrain_levels"] = terrain.terrain_levels.cpu().clone()
            state["terrain_types"] = terrain.terrain_types.cpu().clone()
        return state

    def load_task_state(self, state: dict[str, Any]) -> None:
        """The counter back, the step-counter curricula (command ranges) applied at once, the
        worlds moved to their saved terrain levels (in place: graphs read these tensors); a
        checkpoint of another number of worlds keeps the counter only."""
        from orin_rl.envs.mjlab.masked import apply_step_curricula

        env = self.env
        env.common_step_counter = int(state["common_step_counter"])
        apply_step_curricula(env)
        terrain = getattr(env.scene, "terrain", None)
        levels = state.get("terrain_levels")
        if levels is None or getattr(terrain, "terrain_levels", None) is None:
            return
        if levels.shape != terrain.terrain_levels.shape:
            log.warning("terrain levels of %d worlds not restored into %d", len(levels),
                        len(terrain.terrain_levels))  # fmt: skip
            return
        terrain.terrain_levels.copy_(levels)
        terrain.terrain_types.copy_(state["terrain_types"])
        origins = terrain.terrain_origins[terrain.terrain_levels, terrain.terrain_types]
        terrain.env_origins.copy_(origins)

    def graph_report(self) -> dict[str, Any]:
        """What ran as CUDA graphs (after the capture) and what stayed eager."""
        return self._stepper.describe()

    def _accumulate(self, log_items: dict[str, Any], weight: torch.Tensor | None = None) -> None:
        """Add a step's logged scalars to the running sums: the tensors stacked into one
        float64 vector on their device (three kernel launches, no host read, however many
        terms the task logs), Python numbers in Python. ``weight`` (a device 0/1: did any
        world reset) counts the masked reset path's episode logs only at a step with a reset,
        as mjlab logs them."""
        keys, tensors = [], []
        for key, value in log_items.items():
            if isinstance(value, torch.Tensor):
                if value.numel() == 1:
                    keys.append(key)
                    tensors.append(value.detach().reshape(()))
            elif isinstance(value, int | float):
                self._log_sum[key] = self._log_sum.get(key, 0.0) + value
                self._log_count[key] = self._log_count.get(key, 0) + 1
        if not tensors:
            return
        if any(t.dtype != tensors[0].dtype for t in tensors):
            tensors = [t.to(torch.float64) for t in tensors]
        stacked = torch.stack(tensors).to(torch.float64)
        count: Any = 1
        if weight is not None:
            count = weight.detach().to(torch.float64)
            stacked = stacked * count
        group = tuple(keys)  # a task logs the same terms at every reset: one running vector
        if group in self._vector_sums:
            self._vector_sums[group][0].add_(stacked)
            self._vector_sums[group][1] = self._vector_sums[group][1] + count
        else:
            self._vector_sums[group] = [stacked, count]

    def pop_log(self) -> dict[str, float]:
        """Means of mjlab's logged scalars since the last call, under mjlab's own names; an
        evaluation batch's terminations and command metrics per episode (``EpisodeLog``)."""
        sums: dict[str, float] = dict(self._log_sum)
        counts = dict(self._log_count)
        for group, (total, count) in self._vector_sums.items():
            if isinstance(count, torch.Tensor):
                count = count.item()
                if count == 0:  # no world reset since the last call: nothing to average
                    continue
            for key, value in zip(group, total.tolist(), strict=True):
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + count
        out = {k: float(v) / counts[k] for k, v in sums.items()}
        self._log_sum, self._log_count, self._vector_sums = {}, {}, {}
        if self._episode_log is not None:  # rates and means over episodes, not over steps
            out = {k: v for k, v in out.items() if k not in self._episode_log.names()}
            out.update(self._episode_log.pop())
        return out

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """See ``EpisodeStats.pop``."""
        return self.stats.pop()

    def close(self) -> None:
        self.env.close()


def make_vec_env(
    env_id: str, num_envs: int, device: torch.device | str, options: EnvOptions
) -> MjlabVecEnv:
    """The ``mjlab`` backend (``orin_rl.envs.backends``)."""
    if options.kwargs or options.wrappers:
        raise EnvError(
            "env.kwargs and env.wrappers apply to gymnasium envs; an mjlab task is configured "
            "in its own package: drop them"
        )
    return MjlabVecEnv(env_id, num_envs, device, options)
