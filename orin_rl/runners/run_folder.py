"""The run folder a training run owns: made, refused, resumed, trimmed (docs/design.md: run folder).

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

import yaml

from orin_rl import config as config_mod
from orin_rl.checkpoint import CheckpointError, load_checkpoint, remove_stale_temp_files
from orin_rl.config import Config
from orin_rl.errors import OrinError

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


def _read_checkpoint(run_dir: Path) -> dict[str, Any]:
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


# What a resume may change: how long the run goes on, never what it trains.
RESUME_KEYS = ("train.total_steps", "train.max_wall_s", "train.stop_at_threshold")


def resume_state(run_dir: Path, changes: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The checkpoint a resume continues from, with ``changes`` (``key=value`` of RESUME_KEYS)
    applied to its config: ``train.total_steps`` above the steps done extends a finished run.

    The config is the checkpoint's; an edited config.yaml is refused rather than ignored, and
    a finished run resumed without a longer ``total_steps`` says how to extend it."""
    state = _read_checkpoint(run_dir)
    saved = config_mod.from_plain(state["config"])
    _check_config_file(run_dir, saved)
    done = int(state["global_step"])
    if not changes:
        total = saved.train.total_steps
        if done >= total:
            raise RunFolderError(
                f"{run_dir} is finished ({done:,} of train.total_steps {total:,}); "
                f"to train it further: orin-rl train --resume {run_dir} --total-steps N "
                f"(N > {done:,})"
            )
        return state
    for change in changes:
        key = change.partition("=")[0].strip()
        if key not in RESUME_KEYS:
            raise RunFolderError(
                f"a resume keeps the run's config; it can change {', '.join(RESUME_KEYS)} "
                f"only, not {key} (start a new run with --config {run_dir}/config.yaml)"
            )
    cfg = config_mod.apply_overrides(saved, list(changes))
    if cfg.train.total_steps <= done:
        raise RunFolderError(
            f"{run_dir} has done {done:,} steps: --total-steps must be above that to extend it, "
            f"got {cfg.train.total_steps:,}"
        )
    state["config"] = config_mod.to_dict(cfg)
    state["config_changed"] = True  # config.yaml is rewritten with the first checkpoint
    return state


def _plain(cfg: Config) -> dict[str, Any]:
    """A config as config.yaml holds it (lists, not tuples), for comparison."""
    return yaml.safe_load(yaml.safe_dump(config_mod.to_dict(cfg)))


def _check_config_file(run_dir: Path, saved: Config) -> None:
    """config.yaml edited after the run started: say so instead of silently ignoring it."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return
    try:
        on_disk = config_mod.from_dict(config_mod.read_yaml_mapping(path), Config())
    except (OSError, config_mod.ConfigError):
        on_disk = None
    old = _plain(saved)
    new = _plain(on_disk) if on_disk is not None else None
    if new == old:
        return
    if new is None:  # broken: no point suggesting it as a --config
        raise RunFolderError(
            f"{path} cannot be read; a resume takes its config from the checkpoint: restore "
            "the file, or remove it to resume without it"
        )
    else:
        diffs = [
            f"{section}.{key}: {old[section].get(key)!r} -> {value!r}"
            for section, fields in new.items()
            for key, value in fields.items()
            if old.get(section, {}).get(key) != value
        ]
        what = "was edited (" + "; ".join(diffs[:3]) + (" ..." if len(diffs) > 3 else "") + ")"
    raise RunFolderError(
        f"{path} {what}, but a resume continues with the checkpoint's config; to train longer: "
        f"orin-rl train --resume {run_dir} --total-steps N; to train the edited config from "
        f"scratch: orin-rl train --config {path} --out NEW_FOLDER (restore config.yaml to resume)"
    )


def repair_metrics(run_dir: Path, iteration: int) -> None:
    """Make metrics.jsonl fit to append to before a resume (rank 0).

    Records logged after the checkpoint's ``iteration`` go (a crash between the two: the
    resumed run logs them again). Lines that are not a JSON record move to
    ``metrics.jsonl.corrupt``, with one warning naming them: a torn last line (a crash while it
    was written; appended to, it would have swallowed the next record too) or lines in the
    middle (an edit, a damaged disk). The file is rewritten only when something changes, then
    it ends with a newline.
    """
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return
    data = path.read_bytes()
    lines = data.split(b"\n")
    if lines[-1] == b"":  # the newline that ends the last record
        lines.pop()
    kept: list[bytes] = []
    corrupt: list[int] = []  # line numbers, from 1
    dropped = 0  # records after the checkpoint
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        record = _record(line)
        if record is None:
            corrupt.append(number)
        elif record.get("iteration", 0) <= iteration:
            kept.append(line)
        else:
            dropped += 1
    if not corrupt and not dropped and (not data or data.endswith(b"\n")):
        return
    if corrupt:
        aside = path.with_name(path.name + ".corrupt")
        with aside.open("ab") as f:
            f.write(b"".join(lines[n - 1] + b"\n" for n in corrupt))
        last = max(n for n, line in enumerate(lines, 1) if line.strip())
        log.warning("%s; moved to %s", _corrupt_lines(path, corrupt, last, lines[last - 1]), aside)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_bytes(b"".join(line + b"\n" for line in kept))
    os.replace(tmp, path)


def _record(line: bytes) -> dict[str, Any] | None:
    """The record a metrics.jsonl line holds, or None where it holds none."""
    try:
        record = json.loads(line)
    except ValueError:  # json's errors and undecodable bytes alike
        return None
    return record if isinstance(record, dict) else None


def _corrupt_lines(path: Path, corrupt: list[int], last: int, last_line: bytes) -> str:
    """What the warning says of the ``corrupt`` line numbers of ``path`` (``last``: the number
    of its last line with text, ``last_line``)."""
    torn = corrupt[-1] == last  # what a crash mid-write leaves
    middle = corrupt[:-1] if torn else corrupt
    parts = []
    if middle:
        shown = ", ".join(map(str, middle[:5])) + (" ..." if len(middle) > 5 else "")
        parts.append(
            f"{len(middle)} line{'s' if len(middle) > 1 else ''} in the middle not a JSON "
            f"record (line {shown}: edited, or a damaged disk)"
        )
    if torn:
        start = last_line[:40].decode(errors="replace")
        parts.append(f"its last line ({last}) cut off mid-write by a crash ({start!r}...)")
    return f"{path}: " + " and ".join(parts)
