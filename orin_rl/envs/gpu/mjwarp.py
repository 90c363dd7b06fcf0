"""gymnasium's MuJoCo locomotion tasks (v5) on GPU physics: MuJoCo Warp, every env a world.

One ``mujoco_warp`` model is built from gymnasium's own MJCF file (from the installed
gymnasium) and one ``Data`` holds all ``num_envs`` worlds. Its arrays are viewed as torch
tensors once (``wp.to_torch``: zero copies), so observations, rewards, termination and the
masked reset are torch ops on the same memory, and MuJoCo Warp's kernels run on torch's current
CUDA stream: a step orders with the policy's ops without a host sync, and a whole PPO iteration
can be captured in one CUDA graph (``capture_scope``). Outside such a capture, the physics of a
step is replayed from a Warp graph of its own (hundreds of kernels, one launch).

A step reproduces gymnasium's ``MujocoEnv``: ``ctrl = action``, ``frame_skip`` calls of
``mj_step``, then ``mj_rnePostConstraint`` (contact forces), and gymnasium v5's observation,
reward terms, healthy-range termination and reset noise, read from the same (partly stale, as
in gymnasium) ``mjData`` fields. MuJoCo Warp computes in float32.
"""

from __future__ import annotations

import contextlib
import logging
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from orin_rl.envs.base import StepResult
from orin_rl.envs.gpu.base import DeviceState

log = logging.getLogger(__name__)

SIM_HINT = "pip install 'orin-rl[sim]' (warp-lang, mujoco, mujoco-warp)"


def import_sim() -> tuple[Any, Any, Any]:
    """(mujoco, warp, mujoco_warp), imported quietly; a missing one is an EnvError naming the
    extra to install."""
    from orin_rl.envs.base import EnvError

    try:
        import mujoco
        import warp as wp

        if not log.isEnabledFor(logging.DEBUG):  # no banner, no per-module compile lines
            wp.config.log_level = wp.LOG_WARNING
        import mujoco_warp as mjw
    except ImportError as exc:
        missing = exc.name or "a package"
        raise EnvError(
            f"GPU physics needs MuJoCo Warp ({missing} is missing): {SIM_HINT}"
        ) from None
    return mujoco, wp, mjw


def gymnasium_asset(xml_file: str) -> Path:
    """The MJCF file gymnasium's own MuJoCo envs load."""
    return Path(gym.__file__).parent / "envs" / "mujoco" / "assets" / xml_file


class MuJoCoWarpEnv(DeviceState):
    """Base class: a task sets the MJCF file, frame skip and reset noise and defines
    ``_observe``, ``_position`` and ``_reward``.

    ``qpos`` (num_envs, nq) and ``qvel`` (num_envs, nv) are live views of the simulation state,
    the MuJoCo counterpart of the classic envs' ``state``; ``set_qpos_qvel`` puts given states
    in (as gymnasium's ``reset`` + ``set_state`` do) and returns their observations.
    """

    env_id: ClassVar[str]
    xml_file: ClassVar[str]
    frame_skip: ClassVar[int]
    reset_noise_scale: ClassVar[float]
    qvel_noise: ClassVar[str] = "uniform"
    """Reset noise of qvel: ``uniform`` in +-scale, or ``normal`` with std scale."""
    uses_bodies: ClassVar[bool] = False
    """Observation or position read body quantities (xpos, cinert, ...): after a reset they
    are recomputed by forward kinematics, as gymnasium's ``mj_forward`` does."""
    graph_safe: ClassVar[bool] = True
    """Warp launches on torch's stream (or a recorded Warp graph): a step can be captured."""
    eval_physics: ClassVar[str | None] = "mujoco_warp"
    gymnasium_twin: ClassVar[bool] = True

    @property
    def max_episode_steps_default(self) -> int:
        """gymnasium's time limit of the task (1000 where it sets none)."""
        return self.spec.max_episode_steps or 1000

    def _build(self) -> None:
        from orin_rl.envs.base import EnvError

        if self.dtype != torch.float32:
            raise EnvError(f"{self.env_id} on MuJoCo Warp computes in float32, not {self.dtype}")
        mujoco, wp, mjw = import_sim()
        self._wp, self._mjw = wp, mjw
        self.mj_model = self._load_model(mujoco)
        self.dt = float(self.mj_model.opt.timestep) * self.frame_skip
        self._wp_device = "cpu"
        if self.device.type == "cuda":
            index = self.device.index
            self._wp_device = f"cuda:{torch.cuda.current_device() if index is None else index}"
        with wp.ScopedDevice(self._wp_device):
            self.model = mjw.put_model(self.mj_model)
            self.data = mjw.make_data(self.mj_model, nworld=self.num_envs)
        d = self.data
        # Zero-copy views, made once: (num_envs, ...) tensors on the same memory.
        self.qpos = wp.to_torch(d.qpos)
        self.qvel = wp.to_torch(d.qvel)
        self.ctrl = wp.to_torch(d.ctrl)
        self._warmstart = wp.to_torch(d.qacc_warmstart)
        self._time = wp.to_torch(d.time)
        self._qfrc_actuator = wp.to_torch(d.qfrc_actuator)
        self._cfrc_ext = wp.to_torch(d.cfrc_ext)  # (num_envs, nbody, 6)
        self.xpos = wp.to_torch(d.xpos)  # (num_envs, nbody, 3)
        self.xipos = wp.to_torch(d.xipos)
        self.cinert = wp.to_torch(d.cinert)  # (num_envs, nbody, 10)
        self.cvel = wp.to_torch(d.cvel)  # (num_envs, nbody, 6)
        kw = {"device": self.device}
        m = self.mj_model
        self.init_qpos = torch.tensor(m.qpos0, dtype=torch.float32, **kw)
        bounds = m.actuator_ctrlrange.astype(np.float32)
        self.action_space = gym.spaces.Box(bounds[:, 0], bounds[:, 1], dtype=np.float32)
        self._action_low = torch.tensor(bounds[:, 0], **kw)
        self._action_high = torch.tensor(bounds[:, 1], **kw)
        self.body_mass = torch.tensor(m.body_mass, dtype=torch.float32, **kw)
        self._graphs: dict[str, Any] = {}  # Warp graphs of the physics, per program
        self._streams: dict[int, Any] = {}  # Warp wrappers of torch streams, per handle
        self._capturing = False
        self._record_stream: Any = None  # Warp's own stream, for recording Warp graphs
        self._reset_worlds(torch.ones(self.num_envs, dtype=torch.bool, **kw), self._sample_reset())
        self._position_prev = self._position().clone()  # updated in place (CUDA graphs)
        obs_dim = self._observe().shape[1]
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)

    # ------------------------------------------------------------------ task hooks
    @abstractmethod
    def _observe(self) -> torch.Tensor:
        """(num_envs, obs_dim) observations read from the simulation state."""

    @abstractmethod
    def _position(self) -> torch.Tensor:
        """(num_envs, k) the position whose change per ``dt`` is the forward velocity."""

    @abstractmethod
    def _reward(
        self, velocity: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(reward, terminated) after a step with ``velocity`` = d position / dt."""

    def _patch_model(self, model: Any, mujoco: Any) -> None:
        """Change MJCF options MuJoCo Warp does not support (none by default)."""

    # ------------------------------------------------------------------ set-up
    def _load_model(self, mujoco: Any) -> Any:
        from orin_rl.envs.base import EnvError

        path = gymnasium_asset(self.xml_file)
        if not path.is_file():
            raise EnvError(f"{self.env_id}: gymnasium's {path} is missing; reinstall gymnasium")
        model = mujoco.MjModel.from_xml_path(str(path))
        self._patch_model(model, mujoco)
        return model

    # ------------------------------------------------------------------ physics launches
    def _warp_stream(self) -> Any:
        """Warp's view of torch's current stream (cached per stream handle)."""
        stream = torch.cuda.current_stream(self.device)
        ws = self._streams.get(stream.cuda_stream)
        if ws is None:
            ws = self._streams[stream.cuda_stream] = self._wp.stream_from_torch(stream)
        return ws

    def _launch(self, name: str, program) -> None:
        """Run the Warp ``program`` (a function of no arguments) on torch's current stream.

        CPU: directly. CUDA inside ``capture_scope`` (a torch graph capture): directly, so its
        kernels join that graph. CUDA otherwise: the first call runs it (compiling kernels),
        the second records it into a Warp graph (``_record``), every later call replays it.
        """
        wp = self._wp
        if self.device.type == "cpu":
            with wp.ScopedDevice("cpu"):
                program()
            return
        if torch.cuda.is_current_stream_capturing() and not self._capturing:
            raise RuntimeError(
                f"{self.env_id}: a CUDA graph capture must enclose the steps in "
                "env.capture_scope() so that MuJoCo Warp knows about it"
            )
        ws = self._warp_stream()
        with wp.ScopedDevice(self._wp_device), wp.ScopedStream(ws, sync_enter=False):
            if self._capturing:
                program()
                return
            graph = self._graphs.get(name)
            if graph is None:
                if name not in self._graphs:  # first call: run (and compile) eagerly
                    self._graphs[name] = None
                    program()
                    return
                graph = self._graphs[name] = self._record(program)
            wp.capture_launch(graph, stream=ws)

    def _record(self, program) -> Any:
        """``program`` as a Warp graph, recorded on a stream of Warp's own: CUDA cannot capture
        torch's legacy default stream, and a recorded graph replays on any stream."""
        wp = self._wp
        if self._record_stream is None:
            self._record_stream = wp.Stream(self._wp_device)
        stream = self._record_stream
        with wp.ScopedStream(stream, sync_enter=False), wp.ScopedCapture(stream=stream) as capture:
            program()
        return capture.graph

    def _physics(self) -> None:
        mjw, m, d = self._mjw, self.model, self.data
        for _ in range(self.frame_skip):
            mjw.step(m, d)
        # gymnasium: "force-related quantities like cacc are not computed unless there's a
        # force sensor": cfrc_ext (contact forces, in Ant's and Humanoid's observations).
        mjw.rne_postconstraint(m, d)

    def _body_kinematics(self) -> None:
        mjw, m, d = self._mjw, self.model, self.data
        mjw.kinematics(m, d)
        mjw.com_pos(m, d)
        mjw.com_vel(m, d)

    @contextlib.contextmanager
    def capture_scope(self):
        """Enclose the steps of a ``torch.cuda.graph`` capture: MuJoCo Warp's kernels (and
        its solver's conditional nodes) are recorded into that graph."""
        if self.device.type != "cuda":
            yield
            return
        wp = self._wp
        ws = self._warp_stream()
        with wp.ScopedDevice(self._wp_device):
            wp.capture_begin(stream=ws, external=True, capture_mode=wp.CaptureMode.GLOBAL)
            self._capturing = True
            try:
                yield
            finally:
                self._capturing = False
                wp.capture_end(stream=ws)

    # ------------------------------------------------------------------ resets
    def _sample_reset(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(qpos, qvel) start states for every env: init + gymnasium's reset noise."""
        n, s, g = self.num_envs, self.reset_noise_scale, self.generator
        kw = {"generator": g, "device": self.device, "dtype": torch.float32}
        u = torch.rand(n, self.mj_model.nq, **kw)
        qpos = self.init_qpos + (2.0 * u - 1.0) * s
        if self.qvel_noise == "normal":
            qvel = s * torch.randn(n, self.mj_model.nv, **kw)
        else:
            qvel = (2.0 * torch.rand(n, self.mj_model.nv, **kw) - 1.0) * s
        return qpos, qvel

    def _reset_worlds(self, mask: torch.Tensor, start: tuple[torch.Tensor, torch.Tensor]) -> None:
        """Put ``start`` into the worlds where ``mask`` (what ``mj_resetData`` + ``set_state``
        leave behind: zero warm start, control and contact forces), then recompute the body
        quantities the observation reads."""
        qpos, qvel = start
        col = mask.unsqueeze(-1)
        self.qpos.copy_(torch.where(col, qpos, self.qpos))
        self.qvel.copy_(torch.where(col, qvel, self.qvel))
        self._warmstart.masked_fill_(col, 0.0)
        self.ctrl.masked_fill_(col, 0.0)
        self._qfrc_actuator.masked_fill_(col, 0.0)
        self._cfrc_ext.masked_fill_(col.unsqueeze(-1), 0.0)
        self._time.masked_fill_(mask, 0.0)
        if self.uses_bodies:
            # Every world's body quantities are recomputed, but only the reset worlds' are read
            # before the next step's forward pass recomputes them all again.
            self._launch("kinematics", self._body_kinematics)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every env (seeding the env's generator when ``seed`` or ``self.seed`` is set)."""
        self._reseed(seed)
        return self.set_qpos_qvel(*self._sample_reset())

    def set_qpos_qvel(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        """Start every env from the given (num_envs, nq) / (num_envs, nv) states, as gymnasium's
        ``reset`` with ``set_state(qpos, qvel)`` does; returns the observations."""
        all_envs = torch.ones(self.num_envs, dtype=torch.bool, device=self.device)
        start = (qpos.to(self.qpos), qvel.to(self.qvel))
        self._reset_worlds(all_envs, start)
        self._position_prev.copy_(self._position())
        self.elapsed.zero_()
        self.stats.restart()
        return self._observe()

    # ------------------------------------------------------------------ VecEnv contract
    def step(self, actions: torch.Tensor) -> StepResult:
        """Step every env; ended episodes are reset in the same step (``final_obs`` keeps the
        true last observation)."""
        # Gaussian samples are unbounded: clip to the Box like the gymnasium adapter does.
        action = actions.to(self.ctrl).clamp(self._action_low, self._action_high)
        self.ctrl.copy_(action)
        self._launch("physics", self._physics)
        position = self._position().clone()  # a view of the state, which the reset changes
        velocity = (position - self._position_prev) / self.dt
        reward, terminated = self._reward(velocity, action)
        self.elapsed += 1
        # gymnasium's TimeLimit: truncated whenever the limit is reached, terminal or not.
        truncated = self.elapsed >= self.max_episode_steps
        done = terminated | truncated
        final_obs = self._observe()
        self.stats.record(reward, done)
        self.elapsed.masked_fill_(done, 0)
        self._reset_worlds(done, self._sample_reset())
        self._position_prev.copy_(torch.where(done.unsqueeze(-1), self._position(), position))
        obs = torch.where(done.unsqueeze(-1), self._observe(), final_obs)
        return StepResult(obs, reward, terminated, truncated, final_obs)

    def pop_episode_stats(self) -> tuple[list[float], list[int]]:
        """See ``EpisodeStats.pop``."""
        return self.stats.pop()

    def _state_tensors(self) -> dict[str, torch.Tensor]:
        return {
            "qpos": self.qpos,
            "qvel": self.qvel,
            "qacc_warmstart": self._warmstart,
            "position_prev": self._position_prev,
            "elapsed": self.elapsed,
        }

    def close(self) -> None:
        """Drop the Warp graphs (the arrays go with the object)."""
        self._graphs.clear()


# ---------------------------------------------------------------------- the five tasks
def _healthy_reward(healthy: torch.Tensor, weight: float) -> torch.Tensor:
    return healthy.to(torch.float32) * weight


def _ctrl_cost(action: torch.Tensor, weight: float) -> torch.Tensor:
    return weight * action.square().sum(-1)


class _PlanarWalker(MuJoCoWarpEnv):
    """Hopper / Walker2d / HalfCheetah: x = qpos[0], observation qpos[1:] and qvel (frame skip
    and reset noise: Hopper's and Walker2d's)."""

    frame_skip = 4
    reset_noise_scale = 5e-3
    forward_reward_weight: ClassVar[float] = 1.0
    ctrl_cost_weight: ClassVar[float] = 1e-3
    healthy_reward: ClassVar[float] = 1.0
    clip_qvel: ClassVar[bool] = True

    def _observe(self):
        qvel = self.qvel.clamp(-10.0, 10.0) if self.clip_qvel else self.qvel
        return torch.cat((self.qpos[:, 1:], qvel), -1)

    def _position(self):
        return self.qpos[:, :1]

    @abstractmethod
    def _healthy(self) -> torch.Tensor:
        """(num_envs,) bool: inside gymnasium's healthy ranges."""

    def _reward(self, velocity, action):
        healthy = self._healthy()
        reward = (
            self.forward_reward_weight * velocity[:, 0]
            + _healthy_reward(healthy, self.healthy_reward)
            - _ctrl_cost(action, self.ctrl_cost_weight)
        )
        return reward, ~healthy


class Hopper(_PlanarWalker):
    """Hopper-v5: healthy while |qpos[2:], qvel| < 100, height > 0.7 and |angle| < 0.2."""

    env_id = "Hopper-v5"
    xml_file = "hopper.xml"

    def _healthy(self):
        state = torch.cat((self.qpos[:, 2:], self.qvel), -1)
        z, angle = self.qpos[:, 1], self.qpos[:, 2]
        healthy_state = ((state > -100.0) & (state < 100.0)).all(-1)
        return healthy_state & (z > 0.7) & (angle > -0.2) & (angle < 0.2)


class Walker2d(_PlanarWalker):
    """Walker2d-v5: healthy while 0.8 < height < 2 and |angle| < 1."""

    env_id = "Walker2d-v5"
    xml_file = "walker2d_v5.xml"

    def _healthy(self):
        z, angle = self.qpos[:, 1], self.qpos[:, 2]
        return (z > 0.8) & (z < 2.0) & (angle > -1.0) & (angle < 1.0)


class HalfCheetah(_PlanarWalker):
    """HalfCheetah-v5: never terminates; no healthy reward; qvel reset noise is Gaussian."""

    env_id = "HalfCheetah-v5"
    xml_file = "half_cheetah.xml"
    frame_skip = 5
    reset_noise_scale = 0.1
    qvel_noise = "normal"
    ctrl_cost_weight = 0.1
    healthy_reward = 0.0
    clip_qvel = False

    def _healthy(self):
        return torch.ones(self.num_envs, dtype=torch.bool, device=self.device)


class Ant(MuJoCoWarpEnv):
    """Ant-v5: torso xy velocity, contact forces clipped to [-1, 1] in the observation and cost;
    healthy while finite and 0.2 <= height <= 1."""

    env_id = "Ant-v5"
    xml_file = "ant.xml"
    frame_skip = 5
    reset_noise_scale = 0.1
    qvel_noise = "normal"
    uses_bodies = True
    main_body = 1  # "torso"

    def _contact_forces(self):
        return self._cfrc_ext.clamp(-1.0, 1.0)

    def _observe(self):
        forces = self._contact_forces()[:, 1:].flatten(1)
        return torch.cat((self.qpos[:, 2:], self.qvel, forces), -1)

    def _position(self):
        return self.xpos[:, self.main_body, :2]

    def _reward(self, velocity, action):
        state = torch.cat((self.qpos, self.qvel), -1)
        z = self.qpos[:, 2]
        healthy = torch.isfinite(state).all(-1) & (z >= 0.2) & (z <= 1.0)
        contact_cost = 5e-4 * self._contact_forces().square().sum((-2, -1))
        reward = (
            velocity[:, 0] + _healthy_reward(healthy, 1.0) - _ctrl_cost(action, 0.5) - contact_cost
        )
        return reward, ~healthy


class Humanoid(MuJoCoWarpEnv):
    """Humanoid-v5: mass-centre x velocity, observation with cinert, cvel, actuator and contact
    forces; healthy while 1 < height < 2. MuJoCo Warp has no PGS solver: Newton instead."""

    env_id = "Humanoid-v5"
    xml_file = "humanoid.xml"
    frame_skip = 5
    reset_noise_scale = 1e-2
    uses_bodies = True

    def _patch_model(self, model, mujoco):
        if model.opt.solver == mujoco.mjtSolver.mjSOL_PGS:
            log.info("%s: MuJoCo Warp has no PGS solver; using Newton", self.env_id)
            model.opt.solver = mujoco.mjtSolver.mjSOL_NEWTON

    def _observe(self):
        return torch.cat(
            (
                self.qpos[:, 2:],
                self.qvel,
                self.cinert[:, 1:].flatten(1),
                self.cvel[:, 1:].flatten(1),
                self._qfrc_actuator[:, 6:],
                self._cfrc_ext[:, 1:].flatten(1),
            ),
            -1,
        )

    def _position(self):
        mass = self.body_mass
        return (mass[:, None] * self.xipos).sum(-2)[:, :2] / mass.sum()

    def _reward(self, velocity, action):
        z = self.qpos[:, 2]
        healthy = (z > 1.0) & (z < 2.0)
        contact_cost = (5e-7 * self._cfrc_ext.square().sum((-2, -1))).clamp(max=10.0)
        reward = (
            1.25 * velocity[:, 0]
            + _healthy_reward(healthy, 5.0)
            - _ctrl_cost(action, 0.1)  # gymnasium: of data.ctrl, the (clipped) action
            - contact_cost
        )
        return reward, ~healthy


TASKS: dict[str, type[MuJoCoWarpEnv]] = {
    cls.env_id: cls for cls in (Hopper, HalfCheetah, Walker2d, Ant, Humanoid)
}
