"""The run folder a training run owns: made, refused, resumed, trimmed (DESIGN.md: run folder).

Every runner reaches its folder through these functions, so what may be deleted, what counts as
"a run" and what a resume reads are decided in one place.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from orin_rl import config as config_mod
from orin_rl.checkpoint import CheckpointError, load_checkpoint, remove_stale_temp_files
from orin_rl.config import Config
from orin_rl.errors import OrinError
from orin_rl.runners.logger import read_metrics

log = logging.getLogger(__name__)


class RunFolderError(OrinError, ValueError):
    """The run folder cannot be used as asked (exists, missing, or from another run)."""


def clear_for_overwrite(run_dir: Path) -> None:
    """``--overwrite``: delete an earlier run in ``run_dir``, never a folder that is not one."""
    if not run_dir.exists():
        return
    if not (run_dir / "config.yaml").exists() and any(run_dir.iterdir()):
        raise RunFolderError(f"{run_dir}: not a run folder (no config.yaml); not deleting it")
    shutil.rmtree(run_dir)


def check_empty(run_dir: Path) -> None:
    """Refuse a non-empty folder before building anything (nothing is written yet)."""
    if run_dir.exists() and any(run_dir.iterdir()):
        raise RunFolderError(
            f"{run_dir}: run folder is not empty; pass --resume to continue it, "
            "--overwrite to replace it, or another --out"
        )


def create(run_dir: Path, cfg: Config) -> None:
    """Create the folder and config.yaml once envs and algorithm exist, so a bad env id or an
    algorithm that does not fit the env leaves no half-made run folder behind."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config_mod.save(cfg, run_dir / "config.yaml")


def load_resume_state(run_dir: Path) -> dict[str, Any]:
    """The checkpoint a resume continues from (stale temp files of a killed writer removed)."""
    ckpt = run_dir / "checkpoint.pt"
    if os.environ.get("RANK", "0") == "0":  # the one writer of this folder
        for tmp in remove_stale_temp_files(ckpt):
            log.info("removed %s, left by a process killed while it wrote a checkpoint", tmp)
    if not ckpt.exists():
        raise RunFolderError(f"{run_dir}: nothing to resume (no checkpoint.pt)")
    try:
        return load_checkpoint(ckpt)
    except CheckpointError as exc:
        raise RunFolderError(str(exc)) from None


def trim_metrics(run_dir: Path, iteration: int) -> None:
    """Drop records logged after the checkpoint (a crash between the two), then append."""
    path = run_dir / "metrics.jsonl"
    records = read_metrics(path)
    kept = [r for r in records if r.get("iteration", 0) <= iteration]
    if len(kept) != len(records):
        tmp = path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(tmp, path)
