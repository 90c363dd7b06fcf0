"""summary.json and curve.png: what a finished (or stopped) run reports, written in one place."""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path
from typing import Any

import torch

from orin_rl import jetson
from orin_rl.runners.logger import plot_curve

log = logging.getLogger(__name__)


def build(
    runner: Any,
    elapsed: float,
    start_step: int,
    session_time: float,
    stop_reason: str,
    eval_returns: list[float],
    per_rank: list[float],
) -> dict[str, Any]:
    """The summary of ``runner``'s run (``runners.base.Runner``): totals, speed, the verdict's
    returns, how it ran (device, buffer, graphs, fused, agents, ranks) and power.

    ``elapsed`` is the run's wall time, its final evaluation included; a final evaluation a
    signal stopped (``eval_stopped_by``) gives the returns of the episodes that had finished
    and decides nothing (``solved`` is false)."""
    cfg = runner.cfg
    interrupted = stop_reason in ("SIGINT", "SIGTERM")
    steps_per_s = (runner.global_step - start_step) / max(session_time, 1e-9)
    mean = statistics.fmean(eval_returns) if eval_returns else None
    complete = bool(eval_returns) and runner.eval_stopped_by is None
    return {
        "env_id": cfg.env.env_id,
        "algo": cfg.train.algo,
        "total_steps": runner.global_step,
        "iterations": runner.algo.iteration,
        "wall_time_s": round(elapsed, 3),
        "steps_per_s": steps_per_s,
        "eval_time_s": round(runner.eval_time_s, 3),
        "final_eval_time_s": round(runner.final_eval_time_s, 3),
        "eval_return_mean": mean,
        "eval_return_std": statistics.pstdev(eval_returns) if eval_returns else None,
        "eval_episodes": len(eval_returns),
        "eval_stopped_by": runner.eval_stopped_by,
        "solved_threshold": runner.threshold,
        "solved": complete and runner.threshold is not None and mean >= runner.threshold,
        "solved_at": runner.solved_at,
        "stop_reason": stop_reason,
        "interrupted": interrupted,
        "device": str(runner.device),
        "buffer_placement": runner.buffer.placement,
        "env_backend": cfg.env.backend,
        "precision": cfg.train.precision,
        "cuda_graphs": runner.graphed(),
        "env_graphs": runner.env.graph_report() if getattr(runner, "env_graphs", None) else None,
        "act_graph": _act_graph(getattr(runner, "algo", None)),
        "training_path": (
            runner.path_choice.to_dict() if getattr(runner, "path_choice", None) else None
        ),
        "compiled": cfg.train.compile,
        "fused": runner._fused_path(),
        "fused_grads": runner._fused_grads(),
        "obs_into_buffer": runner.obs_into_buffer,
        "world_size": runner.dist.world_size,
        "backend": runner.dist.backend or None,
        "num_agents": runner.num_agents,
        "agents": (
            [{"agent": k, "eval_return_mean": r} for k, r in enumerate(runner.agent_returns)]
            if runner.num_agents > 1 and runner.agent_returns and eval_returns
            else None
        ),
        "best_agent": runner._best_agent(),
        "all_agents_steps_per_s": runner.num_agents * steps_per_s,
        "per_rank_steps_per_s": per_rank,
        "param_sync_checks": runner.sync_checks,
        "seed": cfg.train.seed,
        "torch_version": torch.__version__,
        "power": jetson.power_report(runner.monitor, steps_per_s, "steps_per_s"),
        "startup": runner.startup.report() if hasattr(runner, "startup") else None,
    }


def write(run_dir: Path, summary: dict[str, Any], env_id: str) -> None:
    """summary.json (its one writer), then curve.png from metrics.jsonl."""
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    try:
        plot_curve(run_dir / "metrics.jsonl", run_dir / "curve.png", env_id)
    except Exception as exc:  # a plot must never lose a finished run
        log.warning("curve.png not written: %s", exc)


def _act_graph(algo: Any) -> bool | str | None:
    """The policy's act as a CUDA graph each env step (``runners.graphs.GraphedAct``): True when
    it replayed, the reason when its capture failed, None when it was not asked for."""
    graphed = getattr(algo, "graphed_act", None)
    if graphed is None:
        return None
    return graphed.failed or graphed.graph is not None
