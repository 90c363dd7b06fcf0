"""``orin-rl run``: close the control loop around a gymnasium environment (torch-free)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orin_rl.runtime import load
from orin_rl.runtime.loop import ControlLoop, LoopConfig
from orin_rl.runtime.stats import histogram_png, write_report

log = logging.getLogger(__name__)


@dataclass
class EnvDriver:
    """A single gymnasium env as sensor and actuator, tracking episode returns."""

    env_id: str
    seed: int = 0
    env_config: dict[str, Any] | None = None
    """How training made the env (time limit, kwargs, wrappers: a bundle's ``env_config``)."""

    def __post_init__(self) -> None:
        import gymnasium as gym

        from orin_rl.envs.factory import make_env

        self.env = make_env(self.env_id, self.env_config)
        obs, _ = self.env.reset(seed=self.seed)
        space_dtype = self.env.observation_space.dtype
        dtype = np.uint8 if space_dtype == np.uint8 else np.float32  # frames stay uint8
        self.obs = np.asarray(obs, dtype=dtype)[None]
        self.returns: list[float] = []
        self.episode_ends: list[int] = []
        """Ticks (0-based) whose step ended an episode (the env's reset ran in them)."""
        self._ticks = 0
        self._ret = 0.0
        self._discrete = isinstance(self.env.action_space, gym.spaces.Discrete)

    def sensor(self) -> np.ndarray:
        return self.obs

    def actuate(self, action: np.ndarray) -> None:
        a = action[0]
        a = int(a) if self._discrete else np.asarray(a, dtype=np.float32)
        obs, reward, term, trunc, _ = self.env.step(a)
        self._ret += float(reward)
        self._ticks += 1
        if term or trunc:
            self.episode_ends.append(self._ticks - 1)
            self.returns.append(self._ret)
            self._ret = 0.0
            obs, _ = self.env.reset()
        self.obs[0] = obs

    def report(self) -> dict[str, Any]:
        """What the plant adds to the run's report: the ticks that ended an episode (a
        latency spike there is the env's reset)."""
        return {"episode_end_ticks": self.episode_ends}


def make_driver(
    env_id: str, seed: int, env_config: dict[str, Any], plant_device: str = "cpu"
) -> Any:
    """The plant of ``orin-rl run``: a gymnasium env, or one world of an mjlab task (which
    brings torch with it: mjlab is torch code; the policy still runs torch-free)."""
    from orin_rl.envs import backends as env_backends

    if env_backends.for_id(env_id, "gym") == "mjlab":
        from orin_rl.envs.mjlab.play import MjlabDriver

        return MjlabDriver(env_id, seed, env_config, plant_device)
    return EnvDriver(env_id, seed, env_config)


def run_policy(
    model: str | Path,
    backend: str,
    env_id: str | None,
    rate_hz: float,
    steps: int,
    device: str = "cpu",
    report: str | Path | None = None,
    histogram: str | Path | None = None,
    seed: int = 0,
    loop_options: dict[str, Any] | None = None,
    backend_options: dict[str, Any] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    precision: str | None = None,
    plant_device: str = "cpu",
) -> dict[str, Any]:
    """Run ``steps`` loop iterations; return (and optionally write) the report.

    ``backend_options`` go to ``runtime.load`` (providers, cuda_graph, zero_copy, ...).
    The env is made as in training (the bundle's time limit, kwargs and wrappers) when it is
    the policy's own; ``env_kwargs`` replace the constructor's keyword arguments.
    ``precision`` (``int8``, ``fp16``) runs that model of the bundle on ONNX Runtime.
    ``plant_device``: where an mjlab task's world steps (gymnasium envs step on the CPU).
    """
    from orin_rl import bundle as bundle_mod

    runner = load(model, backend, device, precision=precision, **(backend_options or {}))
    trained_on, env_config = _env_of(model, bundle_mod)
    env_id = env_id or trained_on
    if env_id is None:
        raise bundle_mod.BundleError(f"{model}: the environment is unknown; pass --env ID")
    env_config = dict(env_config) if env_id == trained_on else {}
    if env_kwargs is not None:
        env_config["kwargs"] = env_kwargs
    driver = make_driver(env_id, seed, env_config, plant_device)
    _check_fits(runner, driver, env_id)
    safe = _safe_action(runner)
    runner.safe_action = safe
    cfg = LoopConfig(rate_hz=rate_hz, iterations=steps, **(loop_options or {}))
    from orin_rl import jetson

    monitor = jetson.start_monitor("auto")
    with runner:
        start = time.perf_counter()
        result = ControlLoop(
            driver.sensor, runner.infer, driver.actuate, cfg, safe_action=safe[None]
        ).run()
    elapsed = time.perf_counter() - start
    out = {
        **runner.describe(),
        "power": jetson.power_report(monitor, result.iterations / elapsed, "inferences_per_s"),
        "env_id": env_id,
        "rate_hz": rate_hz,
        **result.to_dict(),
        "episode_returns": driver.returns,
        "non_finite_events": runner.non_finite_events,
        **driver.report(),
    }
    if getattr(runner, "auto_timings", None):
        out["auto_timings"] = runner.auto_timings
    if report:
        write_report(out, report)
    if histogram:
        deadline = 1e6 / rate_hz if rate_hz else None
        histogram_png(
            result.latency_ns,
            histogram,
            f"{out['backend']} on {env_id} at {rate_hz:g} Hz",
            deadline,
        )
    return out


def _check_fits(runner, driver: EnvDriver, env_id: str) -> None:
    """The model's observation shape against the env's, before the loop starts (a dict
    observation's: each key's)."""
    from orin_rl.runtime.base import RuntimeBackendError

    if isinstance(driver.obs, dict) or len(runner.input_specs) > 1:
        want = {s.name: tuple(s.shape[1:]) for s in runner.input_specs}
        obs = driver.obs if isinstance(driver.obs, dict) else {"obs": driver.obs}
        got = {key: tuple(value.shape[1:]) for key, value in obs.items()}
        if want != got:
            driver.env.close()
            raise RuntimeBackendError(
                f"the model takes observations {want}, {env_id} gives {got}: pass --env with "
                "the environment it was trained on"
            )
        return
    want = [d for d in runner.input_spec.shape[1:] if isinstance(d, int)]
    got = list(driver.obs.shape[1:])
    if want and want != got:
        driver.env.close()
        raise RuntimeBackendError(
            f"the model takes observations of shape {tuple(want)}, {env_id} gives "
            f"{tuple(got)}: pass --env with the environment it was trained on"
        )


def _env_of(model, bundle_mod) -> tuple[str | None, dict[str, Any]]:
    """The env id the bundle beside ``model`` was trained on and its ``env_config``."""
    path = Path(model)
    for folder in (path, path / "bundle", path.parent):
        if (folder / "policy.json").is_file():
            info, _ = bundle_mod.load_bundle(folder, verify_hash=False)
            if info.env_id:
                return info.env_id, info.env_config
    return None, {}


def _safe_action(runner) -> np.ndarray:
    spec = runner.output_spec[0]
    shape = [d for d in spec.shape[1:] if isinstance(d, int)]
    return np.zeros(shape, dtype=np.dtype(spec.dtype))
