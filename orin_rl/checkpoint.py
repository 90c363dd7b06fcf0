"""The checkpoint file format: written atomically (a reader sees the old checkpoint or the new
one, never a torn one) and read with ``torch.load(weights_only=True)``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from orin_rl.errors import OrinError


class CheckpointError(OrinError, ValueError):
    """A checkpoint file is missing, unreadable or not an orin_rl checkpoint."""


FORMAT = "orin_rl.checkpoint/1"


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write ``state`` to ``path`` atomically: temp file in the same folder, fsync, rename."""
    path = Path(path)
    state = {"format": FORMAT, **state}
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot write a checkpoint here ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except (OSError, RuntimeError) as exc:
        # Disk full, file-size limit, I/O error (torch's zip writer reports a short write as a
        # RuntimeError): the previous file is untouched, the temp file goes.
        Path(tmp).unlink(missing_ok=True)
        kept = "the previous checkpoint is kept" if path.exists() else "no checkpoint yet"
        reason = getattr(exc, "strerror", None) or "write failed: is the disk full?"
        raise CheckpointError(f"{path}: checkpoint not written ({reason}); {kept}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_stale_temp_files(path: str | Path) -> list[Path]:
    """Delete the temp files ``save_checkpoint`` left beside ``path`` when a process was
    killed mid-write (they would pile up, one per crash); returns what it removed. Call it
    only where no other process writes the same checkpoint."""
    path = Path(path)
    stale = sorted(path.parent.glob(f".{path.name}.*.tmp"))
    for tmp in stale:
        tmp.unlink(missing_ok=True)
    return stale


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``torch.load(weights_only=True)`` (no arbitrary code runs)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: no checkpoint file")
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for a corrupt or foreign file
        raise CheckpointError(
            f"{path}: not a loadable checkpoint ({exc.__class__.__name__}); "
            "it may be truncated or from another tool"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: not an orin_rl checkpoint (format {FORMAT} expected)")
    return state


def load_policy(run_dir: str | Path, device: str | torch.device = "cpu"):
    """Rebuild the trained ActorCritic of a run folder (or a checkpoint.pt path).

    Returns (policy in eval mode, its PolicySpec, the run's config dict).
    """
    from orin_rl.models import ActorCritic, PolicySpec

    path = Path(run_dir)
    ckpt = path / "checkpoint.pt" if path.is_dir() else path
    state = load_checkpoint(ckpt, map_location=device)
    try:
        spec = PolicySpec(**state["policy_spec"])
        policy = ActorCritic(spec).to(device)
        num_agents = int(state.get("num_agents") or 1)
        if num_agents > 1:  # a --num-agents run: its best agent (by the final evaluation)
            from orin_rl.models.batched import BatchedActorCritic

            agents = BatchedActorCritic(spec, num_agents).to(device)
            agents.load_state_dict(state["algo"]["policy"])
            policy.load_state_dict(agents.agent_state_dict(int(state.get("best_agent") or 0)))
        else:
            policy.load_state_dict(state["algo"]["policy"])
    except (KeyError, TypeError, RuntimeError) as exc:
        raise CheckpointError(f"{ckpt}: checkpoint does not hold a policy ({exc})"[:300]) from None
    policy.eval()
    return policy, spec, state.get("config", {})
