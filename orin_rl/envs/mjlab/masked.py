"""mjlab's reset path as masked device code: every world, a fixed-size mask, no host read.

mjlab resets the worlds that ended by their indices (``reset_buf.nonzero()``), and its
interval events and command resampling pick worlds the same way: a host read and a shape that
changes from step to step, so none of that can be a CUDA graph. Here each of those places runs
over all worlds with a boolean mask instead:

- mjlab's per-world code (the reset and interval event terms, the scene's and the action and
  event managers' resets) runs on every world inside ``RowMask``, which records each tensor
  the code writes (torch's dispatcher sees every in-place op) and afterwards keeps the new
  rows only where the mask is set. The random draws are made for every world and kept for the
  masked ones: the same distribution, as mjlab draws each world independently.
- What mjlab does across worlds or with a host read has a twin here: the managers' episode
  logs (masked means, device tensors), the interval and command timers, the velocity command's
  resampling (its forward-only split) and update (its heading, world-frame and standing
  splits), the termination counts.
- What has no twin keeps mjlab's eager reset: ``MaskedReset.check`` names the term and why, in
  one line, and the step goes on as mjlab's. Supported: mjlab's velocity tasks on flat ground
  (the terrain curriculum of the rough ones is not twinned yet).

Differences from mjlab's eager path, all by design: the sensors' caches are dropped at every
step (mjlab drops them at a step where any world resets, nearly every step at thousands of
worlds), a velocity curriculum's stage applies from its step on (mjlab applies it at the first
reset after), and the episode logs are means over the worlds reset in a step, as mjlab's,
weighted by whether any reset (``log_weight``) since the host does not know.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

PER_WORLD_EVENTS = frozenset(
    {"reset_root_state_uniform", "reset_joints_by_offset", "push_by_setting_velocity"}
)
"""Event terms read and written one world at a time, with no host read (read in mjlab 1.6's
``envs/mdp/events.py``): they run on every world under ``RowMask``."""

PYTHON_CURRICULA = frozenset({"commands_vel"})
"""Curricula that change only Python settings (a command's ranges) from the step counter."""

DEVICE_CURRICULA = frozenset({"terrain_levels_vel"})
"""Curricula with a masked twin here (``MaskedReset._terrain_levels``)."""


class MaskRefused(RuntimeError):
    """The code under a ``RowMask`` wrote a tensor that is not one row per world."""


class RowMask(TorchDispatchMode):
    """Run per-world code on every world and keep its writes only in the masked rows.

    Each tensor an op writes in place is copied before its first write; on exit the rows the
    mask leaves out get their copy back (in the reverse order of the copies, so a view written
    first and its base written later both end right). Capturable: the copies and the blends
    are device ops."""

    def __init__(self, mask: torch.Tensor):
        super().__init__()
        self.mask = mask
        self.n = mask.shape[0]
        self.saved: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._schema.is_mutable:
            for i, arg in enumerate(func._schema.arguments):
                if arg.alias_info is None or not arg.alias_info.is_write:
                    continue
                target = args[i] if i < len(args) else kwargs.get(arg.name)
                if isinstance(target, torch.Tensor):
                    self._save(func, target)
        return func(*args, **kwargs)

    def _save(self, func: Any, t: torch.Tensor) -> None:
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key in self.saved:
            return
        if t.dim() == 0 or t.shape[0] != self.n or t.stride(0) == 0:
            raise MaskRefused(
                f"{func} writes a tensor of shape {tuple(t.shape)}, not one row per world"
            )
        self.saved[key] = (t, t.clone())

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        if exc[0] is not None:
            return
        for t, before in reversed(list(self.saved.values())):
            keep = self.mask.view(self.n, *([1] * (t.dim() - 1)))
            t.copy_(torch.where(keep, t, before))


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the masked rows (0 where none is masked)."""
    m = mask.to(x.dtype)
    return (x * m).sum() / m.sum().clamp(min=1.0)


def _name(fn: Any) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


class MaskedReset:
    """The masked twins of one mjlab env's reset path (module docstring)."""

    def __init__(self, env: Any):
        self.env = env
        self.n = env.num_envs
        self.device = torch.device(env.device)
        self.all_ids = torch.arange(self.n, device=self.device)
        self.any_reset = torch.zeros((), device=self.device)
        self._mask = torch.zeros(self.n, dtype=torch.bool, device=self.device)
        self._any_rows = torch.zeros(self.n, dtype=torch.bool, device=self.device)
        self._count = torch.zeros((), dtype=torch.int64, device=self.device)
        self._count_seen: int | None = None
        self._cached: list[tuple[Any, Any]] = []
        terrain = getattr(env.scene, "terrain", None)
        types = getattr(terrain, "terrain_types", None)
        # the sub-terrain types the worlds stand on (set at the start, read here once)
        self._types = set(types.unique().tolist()) if types is not None else set()

    # ----------------------------------------------------------------- what is supported
    @staticmethod
    def check(env: Any) -> str | None:
        """None where every term of the reset path has a twin, else the first one that has
        not and why (one line)."""
        em = env.event_manager
        for mode in ("reset", "interval"):
            names = em._mode_term_names.get(mode, [])
            for name, cfg in zip(names, em._mode_term_cfgs.get(mode, []), strict=True):
                fn = _name(cfg.func)
                if fn not in PER_WORLD_EVENTS:
                    return f"{mode} event {name!r} ({fn}) has no masked twin"
                if mode == "interval" and cfg.is_global_time:
                    return f"interval event {name!r} runs on a global timer (a host read)"
                if mode == "reset" and cfg.min_step_count_between_reset:
                    return f"reset event {name!r} has min_step_count_between_reset"
        if em._mode_class_term_cfgs.get("reset") or em._mode_class_term_cfgs.get("interval"):
            return "a class-based reset or interval event has no masked twin"
        cm = env.curriculum_manager
        for name, cfg in _curricula(cm):
            if _name(cfg.func) not in PYTHON_CURRICULA | DEVICE_CURRICULA:
                return f"curriculum {name!r} ({_name(cfg.func)}) has no masked twin"
        if getattr(cm, "_class_term_cfgs", None):
            return "a class-based curriculum has no masked twin"
        for name, term in getattr(env.command_manager, "_terms", {}).items():
            if type(term).__name__ != "UniformVelocityCommand":
                return f"command {name!r} ({type(term).__name__}) has no masked twin"
            if term.cfg.init_velocity_prob > 0.0:
                return f"command {name!r} starts worlds moving (init_velocity_prob > 0)"
        om = env.observation_manager
        if any(om._group_obs_class_term_cfgs.values()) or any(
            om._group_obs_class_instances.values()
        ):
            return "a class-based observation term keeps state across a reset"
        if getattr(env.termination_manager, "_class_term_cfgs", None):
            return "a class-based termination has no masked twin"
        if getattr(env.recorder_manager, "_terms", None):
            return "a recorder records the reset (it needs the reset ids on the host)"
        return None

    def settings(self) -> tuple:
        """The Python settings the masked code bakes into a graph (the commands' ranges)."""
        out = []
        for term in getattr(self.env.command_manager, "_terms", {}).values():
            ranges = term.cfg.ranges
            out.append((ranges.lin_vel_x, ranges.lin_vel_y, ranges.ang_vel_z, ranges.heading))
        return tuple(out)

    # ----------------------------------------------------------------- host-side, per step
    def before_step(self) -> None:
        """Python-only work of the reset path (the velocity curricula: the step counter sets
        the commands' ranges) and the device step counter the reset events record."""
        env = self.env
        apply_step_curricula(env, self.all_ids)
        count = env._sim_step_counter // env.cfg.decimation + 1  # at this step's reset
        if count != self._count_seen:  # eager code moved the counter (a warm-up restored it)
            self._count.fill_(count)
        self._count_seen = count + 1

    def curriculum_log(self) -> dict[str, Any]:
        """The curricula's states as mjlab logs them at a reset (Python numbers)."""
        log: dict[str, Any] = {}
        for name, state in self.env.curriculum_manager._curriculum_state.items():
            if isinstance(state, dict):
                for key, value in state.items():
                    log[f"Curriculum/{name}/{key}"] = _number(value)
            elif state is not None:
                log[f"Curriculum/{name}"] = _number(state)
        return log

    # ------------------------------------------------------------------- device segments
    def interval_events(self) -> None:
        """``event_manager.apply("interval")``: each term's timer, the worlds whose timer ran
        out get a new interval and the term (on every world, kept where it fired)."""
        env, em = self.env, self.env.event_manager
        dt = env.step_dt
        for index, cfg in enumerate(em._mode_term_cfgs.get("interval", [])):
            left = em._interval_term_time_left[index]
            left -= dt
            fire = left < 1e-6
            lower, upper = cfg.interval_range_s
            fresh = torch.rand(self.n, device=self.device) * (upper - lower) + lower
            left.copy_(torch.where(fire, fresh, left))
            with RowMask(fire):
                cfg.func(env, self.all_ids, **cfg.params)

    def begin_reset(self) -> torch.Tensor:
        """The worlds to reset, as the mask the simulator's reset reads."""
        env = self.env
        mask = self._mask  # one tensor for every capture: the later segments read it
        mask.copy_(env.reset_buf)
        cm = env.curriculum_manager
        for name, cfg in _curricula(cm):
            if _name(cfg.func) in DEVICE_CURRICULA:
                cm._curriculum_state[name] = self._terrain_levels(mask, **cfg.params)
        env.sim._reset_mask[:] = mask
        self.any_reset.copy_(mask.any().float())
        self._any_rows.copy_(mask.any().expand(self.n))
        return mask

    def sim_reset(self) -> None:
        """``sim.reset`` with the mask set by ``begin_reset`` (Warp's launch, between graphs)."""
        import mujoco_warp as mjwarp
        import warp as wp

        sim = self.env.sim
        with wp.ScopedDevice(sim.wp_device):
            if sim.use_cuda_graph and sim.reset_graph is not None:
                wp.capture_launch(sim.reset_graph)
            else:
                mjwarp.reset_data(sim.wp_model, sim.wp_data, reset=sim._reset_mask_wp)

    def finish_reset(self) -> dict[str, torch.Tensor]:
        """``_reset_idx`` after ``sim.reset`` and the scene's write: the managers' resets and
        their logs, on the masked worlds."""
        env, mask, ids = self.env, self._mask, self.all_ids
        # mjlab's observations read a sensor's data cached at the rewards (before forward) at a
        # step without a reset, and recomputed for every world at a step with one (its reset
        # drops the cache): keep the caches, and refresh_sensors() blends on any reset
        sensors = env.scene.sensors.values()
        self._cached = [(sn, sn._cached_data) for sn in sensors if sn._cache_valid]
        with RowMask(mask):
            env.scene.reset(ids)
        for sensor, data in self._cached:
            sensor._cached_data, sensor._cache_valid = data, True
        em = env.event_manager
        for index, cfg in enumerate(em._mode_term_cfgs.get("reset", [])):
            last = em._reset_term_last_triggered_step_id[index]
            last.copy_(torch.where(mask, self._count.to(last.dtype), last))
            em._reset_term_last_triggered_once[index].logical_or_(mask)
            with RowMask(mask):
                cfg.func(env, ids, **cfg.params)
        env.observation_manager._obs_buffer = None
        with RowMask(mask):
            env.action_manager.reset(ids)
        log = self._reward_reset(mask)
        log.update(self._metrics_reset(mask))
        log.update(self._command_reset(mask))
        with RowMask(mask):
            em.reset(ids)  # the interval timers of the reset worlds
        for key, done in env.termination_manager._term_dones.items():
            log["Episode_Termination/" + key] = (done & mask).sum().float()
        env.episode_length_buf.masked_fill_(mask, 0)
        env._manual_reset_pending.masked_fill_(mask, False)
        # mjlab writes every world's data to the simulator only at a step with a reset; the
        # next sim.forward() reads it (the contact forces the observations see)
        with RowMask(self._any_rows):
            env.scene.write_data_to_sim()
        self._count += 1
        return log

    def refresh_sensors(self) -> None:
        """After ``sim.sense``: the cached sensor data kept by ``finish_reset`` recomputed on
        every world where any world reset (mjlab's reset drops the whole cache), in place."""
        for sensor, data in self._cached:
            fresh = sensor._compute_data()
            for old, new in zip(_tensors(data), _tensors(fresh), strict=True):
                keep = self._any_rows.view(self.n, *([1] * (old.dim() - 1)))
                old.copy_(torch.where(keep, new, old))

    def _reward_reset(self, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        rm, log = self.env.reward_manager, {}
        for key, sums in rm._episode_sums.items():
            log["Episode_Reward/" + key] = masked_mean(sums, mask) / self.env.max_episode_length_s
            sums.masked_fill_(mask, 0.0)
        for cfg in rm._class_term_cfgs:
            with RowMask(mask):
                cfg.func.reset(env_ids=self.all_ids)
        return log

    def _metrics_reset(self, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        mm, log = self.env.metrics_manager, {}
        sums = getattr(mm, "_episode_sums", {})
        if not sums:
            return log
        counts = mm._step_count.float().clamp(min=1.0)
        for idx, key in enumerate(sums):
            reduce = mm._term_cfgs[idx].reduce
            if reduce == "max":
                value = masked_mean(mm._episode_max[key], mask)
                mm._episode_max[key].masked_fill_(mask, float("-inf"))
            elif reduce == "last":
                value = masked_mean(mm._step_values[:, idx], mask)
            elif reduce == "sum":
                value = masked_mean(sums[key], mask)
            else:
                value = masked_mean(sums[key] / counts, mask)
            log["Episode_Metrics/" + key] = value
            sums[key].masked_fill_(mask, 0.0)
        mm._step_count.masked_fill_(mask, 0)
        for buf in mm._substep_accum:
            buf.masked_fill_(mask.view(-1, *([1] * (buf.dim() - 1))), 0.0)
        return log

    def _command_reset(self, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        log: dict[str, torch.Tensor] = {}
        for name, term in self.env.command_manager._terms.items():
            for metric, value in term.metrics.items():
                log[f"Metrics/{name}/{metric}"] = masked_mean(value, mask)
                value.masked_fill_(mask, 0.0)
            term.command_counter.masked_fill_(mask, 0)
            self._resample(term, mask)
        return log

    def commands(self) -> None:
        """``command_manager.compute(dt)`` with the reset worlds' dt zero."""
        env = self.env
        dt = torch.where(self._mask, 0.0, env.step_dt)
        for term in env.command_manager._terms.values():
            term._update_metrics()
            term.time_left -= dt
            self._resample(term, term.time_left <= 0.0)
            self._update_velocity(term)

    def _terrain_levels(
        self, mask: torch.Tensor, command_name: str, asset_cfg: Any = None
    ) -> dict[str, torch.Tensor]:
        """mjlab's ``terrain_levels_vel`` on the masked worlds: up a level after walking
        half a tile, down after less than half the commanded distance; the log's per-type
        means over the types the worlds stand on (fixed at the start: no host read)."""
        env = self.env
        asset = env.scene[asset_cfg.name if asset_cfg is not None else "robot"]
        terrain = env.scene.terrain
        generator = terrain.cfg.terrain_generator
        command = env.command_manager.get_command(command_name)
        walked = torch.norm(asset.data.root_link_pos_w[:, :2] - env.scene.env_origins[:, :2], dim=1)
        move_up = walked > generator.size[0] / 2
        move_down = walked < torch.norm(command[:, :2], dim=1) * env.max_episode_length_s * 0.5
        move_down *= ~move_up
        if env.common_step_counter == 0:  # mjlab freezes the levels at the first reset
            move_up, move_down = torch.zeros_like(move_up), torch.zeros_like(move_down)
        with RowMask(mask):
            terrain.update_env_origins(self.all_ids, move_up, move_down)
        levels = terrain.terrain_levels.float()
        out = {"mean": levels.mean(), "max": levels.max()}
        names = list(generator.sub_terrains.keys())
        if terrain.terrain_origins.shape[1] == len(names):
            for i, name in enumerate(names):
                if i in self._types:
                    out[name] = masked_mean(levels, terrain.terrain_types == i)
        return out

    # --------------------------------------------------- the velocity command's twins
    def _resample(self, term: Any, mask: torch.Tensor) -> None:
        """``CommandTerm._resample`` + ``UniformVelocityCommand._resample_command``."""
        n, dev, cfg = self.n, self.device, term.cfg
        ranges = cfg.ranges

        def uniform(lo: float, hi: float) -> torch.Tensor:
            return torch.empty(n, device=dev).uniform_(lo, hi)

        def keep(new: torch.Tensor, old: torch.Tensor) -> None:
            m = mask.view(n, *([1] * (old.dim() - 1)))
            old.copy_(torch.where(m, new, old))

        keep(uniform(*cfg.resampling_time_range), term.time_left)
        vel = torch.stack(
            [uniform(*ranges.lin_vel_x), uniform(*ranges.lin_vel_y), uniform(*ranges.ang_vel_z)],
            dim=1,
        )
        if cfg.heading_command:
            keep(uniform(*ranges.heading), term.heading_target)
            keep(uniform(0.0, 1.0) <= cfg.rel_heading_envs, term.is_heading_env)
        keep(uniform(0.0, 1.0) <= cfg.rel_standing_envs, term.is_standing_env)
        keep(uniform(0.0, 1.0) <= cfg.rel_world_envs, term.is_world_env)
        keep(vel, term.vel_command_w)
        forward = uniform(0.0, 1.0) <= cfg.rel_forward_envs
        keep(forward, term.is_forward_env)
        fwd = torch.zeros_like(vel)
        fwd[:, 0] = vel[:, 0].abs().clamp(min=0.3)
        keep(torch.where(forward.unsqueeze(1), fwd, vel), term.vel_command_b)
        term.command_counter += mask.to(term.command_counter.dtype)

    def _update_velocity(self, term: Any) -> None:
        """``UniformVelocityCommand._update_command``: the same values, masks for indices."""
        from mjlab.utils.lab_api.math import wrap_to_pi

        cfg, b, w = term.cfg, term.vel_command_b, term.vel_command_w
        heading = term.robot.data.heading_w
        if cfg.heading_command:
            term.heading_error = wrap_to_pi(term.heading_target - heading)
            yaw = torch.clip(
                cfg.heading_control_stiffness * term.heading_error,
                min=cfg.ranges.ang_vel_z[0],
                max=cfg.ranges.ang_vel_z[1],
            )
            b[:, 2].copy_(torch.where(term.is_heading_env, yaw, b[:, 2]))
        if cfg.rel_world_envs > 0.0:
            cos_h, sin_h = torch.cos(heading), torch.sin(heading)
            vx, vy = w[:, 0], w[:, 1]
            world = term.is_world_env
            bx = torch.where(world, cos_h * vx + sin_h * vy, b[:, 0])
            by = torch.where(world, -sin_h * vx + cos_h * vy, b[:, 1])
            b[:, 0].copy_(bx)
            b[:, 1].copy_(by)
        standing = term.is_standing_env.unsqueeze(1)
        b.masked_fill_(standing, 0.0)
        w.masked_fill_(standing, 0.0)


def masked_tail(step: Any, t: float) -> tuple[Any, ...]:
    """``SegmentedStep._step`` after the rewards, with the masked reset path: every call runs
    the same segments and Warp launches, whatever worlds reset, and reads nothing on the host.
    The terminal observation (when the learner reads it) is taken at every step."""
    env, m = step.env, step.masked
    events, begin, finish, commands, sensors = step.masked_segments
    events()
    t = step._clock(t, "events")
    terminal = step._terminal_observation() if step.terminal_needed else None
    t = step._clock(t, "terminal observation")
    begin()
    m.sim_reset()
    reset_log = finish()
    t = step._clock(t, "reset")
    env.sim.forward()
    t = step._clock(t, "forward")
    commands()
    t = step._clock(t, "commands")
    env.sim.sense()
    sensors()
    t = step._clock(t, "sense")
    if step.use_graphs:
        step._check_settings()
    step._rebind()
    return masked_result(step, step.observe(), reset_log, terminal, step._clock(t, "observations"))


def masked_result(
    step: Any, obs: dict, reset_log: dict, terminal: torch.Tensor | None, t: float
) -> tuple[Any, ...]:
    """The masked step's end, on the host: the observations bound where mjlab keeps them, the
    reset's and the curricula's logs, the recorders; what ``env.step`` returns, and the
    terminal observation."""
    env, m = step.env, step.masked
    env.obs_buf = obs
    env.observation_manager._obs_buffer = obs
    env.extras["log"].update(reset_log)
    env.extras["log"].update(m.curriculum_log())
    env.extras["log_weight"] = m.any_reset
    env.recorder_manager.record_post_step()
    step._clock(t, "recorders")
    out = env.obs_buf, env.reward_buf, env.reset_terminated, env.reset_time_outs, env.extras
    return (*out, terminal)


def apply_step_curricula(env: Any, ids: torch.Tensor | None = None) -> None:
    """Run the curricula that set Python settings from the step counter (``commands_vel``)."""
    cm = env.curriculum_manager
    if ids is None:
        ids = torch.arange(env.num_envs, device=env.device)
    for name, cfg in _curricula(cm):
        if _name(cfg.func) in PYTHON_CURRICULA:
            cm._curriculum_state[name] = cfg.func(env, ids, **cfg.params)


def _tensors(data: Any) -> list[torch.Tensor]:
    """A sensor's data as its tensors: itself, or a dataclass's tensor fields in order."""
    if isinstance(data, torch.Tensor):
        return [data]
    fields = getattr(data, "__dataclass_fields__", {})
    return [v for v in (getattr(data, f) for f in fields) if isinstance(v, torch.Tensor)]


def _curricula(cm: Any) -> list[tuple[str, Any]]:
    return list(zip(getattr(cm, "_term_names", []), getattr(cm, "_term_cfgs", []), strict=True))


def _number(value: Any) -> Any:
    """A curriculum's logged value: a CPU tensor's number (no device read), else as is."""
    if isinstance(value, torch.Tensor) and value.device.type == "cpu":
        return value.item()
    return value


__all__ = [
    "MaskRefused",
    "MaskedReset",
    "RowMask",
    "apply_step_curricula",
    "masked_mean",
    "masked_tail",
]
