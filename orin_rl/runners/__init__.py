"""Runners: one training loop each, and ``train(cfg)`` that picks it.

- ``on_policy.OnPolicyRunner``: PPO (general, CUDA graphs, fused kernels, many agents);
- ``off_policy.OffPolicyRunner``: SAC and DQN over a replay buffer;
- ``online.OnlineRunner``: a real-time actor against a plant and a concurrent learner.

What they share lives once: ``base`` (set-up, the iteration loop, checkpoint, summary),
``run_folder``, ``checkpointing`` (seeds, RNG state), ``verdict`` (evaluation and the solved
verdict), ``summary``, ``logger`` (metrics.jsonl, TensorBoard, curve.png).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from orin_rl import distributed
from orin_rl.config import Config
from orin_rl.runners.base import Runner, resolve_device
from orin_rl.runners.run_folder import RunFolderError

__all__ = ["RunFolderError", "Runner", "make_runner", "resolve_device", "train"]


def runner_class(cfg: Config) -> type[Runner]:
    """The runner of ``cfg``'s loop: online, on-policy (PPO) or off-policy (SAC, DQN)."""
    if cfg.online.enabled:
        from orin_rl.runners.online import OnlineRunner

        return OnlineRunner
    if cfg.train.algo == "ppo":
        from orin_rl.runners.on_policy import OnPolicyRunner

        return OnPolicyRunner
    from orin_rl.runners.off_policy import OffPolicyRunner

    return OffPolicyRunner


def make_runner(
    cfg: Config | None,
    run_dir: str | Path,
    resume: bool = False,
    progress: bool | str = True,
    state: dict[str, Any] | None = None,
) -> Runner:
    """The runner for ``cfg``, or on ``resume`` for the config saved in the run's checkpoint
    (``state``: that checkpoint, already read by ``run_folder.resume_state``)."""
    from orin_rl import config as config_mod
    from orin_rl.runners import run_folder

    if resume and state is None:
        state = run_folder.resume_state(Path(run_dir))
    if state is not None:
        cfg = config_mod.from_plain(state["config"])
    if cfg is None:
        raise RunFolderError(f"{run_dir}: a fresh run needs a config (or resume=True)")
    return runner_class(cfg)(cfg, run_dir, progress=progress, state=state)


def train(
    cfg: Config | None,
    run_dir: str | Path,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool | str = True,
    extend: list[str] | tuple[str, ...] = (),
    state: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train a policy into ``run_dir`` (see docs/design.md: run folder) and return the summary.

    ``resume`` continues the run from its checkpoint, with its config; ``extend`` changes
    what a resume may change (``run_folder.RESUME_KEYS``: ``["train.total_steps=200000"]``
    trains a finished run further; ``state``: that checkpoint, already read by
    ``run_folder.resume_state``).

    ``progress``: True or ``"bar"`` a tqdm bar, ``"lines"`` a plain log line every 10 s (for
    logs and CI), False neither.
    """
    from orin_rl.runners import run_folder

    run_dir = Path(run_dir)
    if overwrite and not resume and os.environ.get("RANK", "0") == "0":
        run_folder.clear_for_overwrite(run_dir)
    finished = False
    try:
        if resume and state is None:
            state = run_folder.resume_state(run_dir, extend)
        summary = make_runner(cfg, run_dir, resume=resume, progress=progress, state=state).learn()
        finished = True
        return summary
    finally:
        distributed.shutdown(wait_for_peers=finished)
