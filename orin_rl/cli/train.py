"""``orin-rl train``: its flags, the config assembly, the torchrun launch and the final report."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shlex
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from orin_rl import config as config_mod
from orin_rl.cli.common import UsageError, env_kwargs_arg, plural
from orin_rl.config import Config, ConfigError

log = logging.getLogger("orin_rl")


# Flag → config key for the common fields; everything else goes through --set.
TRAIN_FLAGS = {
    "env": "env.env_id",
    "num_envs": "env.num_envs",
    "vectorization": "env.vectorization",
    "total_steps": "train.total_steps",
    "device": "train.device",
    "seed": "train.seed",
    "buffer_placement": "buffer.placement",
    "env_backend": "env.backend",
    "precision": "train.precision",
    "cuda_graphs": "train.cuda_graphs",
    "overlap": "train.overlap",
    "compile": "train.compile",
    "nvtx": "train.nvtx",
    "num_agents": "train.num_agents",
    "algo": "train.algo",
    "online": "online.enabled",
    "control_rate": "online.control_rate_hz",
    "utd": "online.update_to_data",
    "plant": "online.plant",
    "env_kwargs": "env.kwargs",
}


def train_config(args: argparse.Namespace) -> Config:
    """Assemble the config: defaults < env preset < --config file < flags < --set."""
    from orin_rl.config.presets import preset_overrides

    file_data: dict[str, Any] = {}
    if args.config is not None:
        file_data = config_mod.read_yaml_mapping(args.config)
    # What picks the preset may come from --set, a flag or the file (in that precedence).
    sets = {key.strip(): _yaml_str(raw) for key, _, raw in (i.partition("=") for i in args.set)}
    env_file, train_file = file_data.get("env") or {}, file_data.get("train") or {}
    env_id = sets.get("env.env_id") or args.env or env_file.get("env_id") or Config().env.env_id
    algo = sets.get("train.algo") or args.algo or train_file.get("algo") or "ppo"
    backend = sets.get("env.backend") or args.env_backend or env_file.get("backend") or "gym"
    device = sets.get("train.device") or args.device or train_file.get("device") or "auto"
    chosen = preset_overrides(env_id, algo, backend, device)
    if args.no_preset:  # only what selects the env and the algorithm
        chosen = {k: v for k, v in chosen.items() if k in ("env.env_id", "train.algo")}
    preset = [f"{k}={json.dumps(v)}" for k, v in chosen.items()]
    cfg = config_mod.apply_overrides(Config(), preset)
    if file_data:
        try:
            cfg = config_mod.from_dict(file_data, cfg)
        except ConfigError as exc:
            raise ConfigError(f"{args.config}: {exc}") from None
    values = {name: getattr(args, name) for name in TRAIN_FLAGS}
    if args.env_kwargs is not None:
        values["env_kwargs"] = env_kwargs_arg(args.env_kwargs)
    flags = [f"{TRAIN_FLAGS[n]}={json.dumps(v)}" for n, v in values.items() if v is not None]
    return config_mod.apply_overrides(cfg, flags + list(args.set))


def default_run_folder(env_id: str) -> Path:
    """``runs/ENV-DATE-TIME`` for a run without ``--out``: the id after a ``module:`` prefix,
    characters other than letters, digits, ``.``, ``_`` and ``-`` as ``_`` (no colon in a
    folder name: it breaks tools, ``scp`` and Windows shares)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", env_id.rpartition(":")[2]).strip("._") or "run"
    return Path("runs") / f"{name}-{datetime.now():%Y%m%d-%H%M%S}"


def _yaml_str(raw: str) -> str | None:
    """A ``--set`` value read as YAML, when it is a string (None otherwise)."""
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError:
        return None
    return value if isinstance(value, str) else None


def cmd_train(args: argparse.Namespace) -> int:
    """``orin-rl train``."""
    from orin_rl.runners import train

    if args.resume is not None:
        from orin_rl.runners import run_folder

        # The state first: a missing folder or a bad checkpoint fails before "(resumed)".
        state = run_folder.resume_state(args.resume, _resume_changes(args))
        print(f"run folder: {args.resume} (resumed)", flush=True)
        args.run_folder = args.resume
        summary = train(None, args.resume, resume=True, progress=_progress(args), state=state)
        return _report(summary, args.resume)
    cfg = train_config(args)
    if args.print_config:
        print(config_mod.to_yaml(cfg), end="")
        return 0
    out = args.out or default_run_folder(cfg.env.env_id)
    if args.nproc is not None and args.nproc < 1:
        raise UsageError(f"--nproc must be positive, got {args.nproc}")
    if args.nproc is not None and args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        from orin_rl.runners import resolve_device

        if cfg.train.overlap:  # each rank would refuse it after torchrun's start: say it once
            raise UsageError("--overlap runs in one process: drop --overlap or --nproc")
        resolve_device(cfg.train.device)  # a device that is not there: one line, before launching
        return _launch_torchrun(args, out)
    args.run_folder = out
    summary = train(cfg, out, overwrite=args.overwrite, progress=_progress(args))
    if not summary:  # a rank other than 0 of a distributed run: rank 0 reports
        return 0
    print(f"run folder: {out}")
    return _report(summary, out)


def _resume_changes(args: argparse.Namespace) -> list[str]:
    """What ``--resume`` may change (``run_folder.RESUME_KEYS``), as ``key=value`` overrides:
    ``--total-steps N`` and ``--set`` of those keys; anything else is refused by name."""
    from orin_rl.runners.run_folder import RESUME_KEYS

    others = [n for n in TRAIN_FLAGS if n != "total_steps" and getattr(args, n) is not None]
    if args.config or args.no_preset or others:
        given = "--config" if args.config else "--no-preset" if args.no_preset else others[0]
        raise UsageError(
            f"--resume continues the run with its checkpoint's config; it takes --total-steps "
            f"N (train further) and --set of {', '.join(RESUME_KEYS)}, not "
            f"{given if given.startswith('--') else '--' + given.replace('_', '-')}"
        )
    changes = [f"train.total_steps={args.total_steps}"] if args.total_steps is not None else []
    return changes + list(args.set)


def _progress(args: argparse.Namespace) -> bool | str:
    """A tqdm bar on a terminal; plain log lines where output goes to a file or a pipe (no
    carriage returns in logs); nothing with --no-progress or -q."""
    if args.no_progress or args.quiet:
        return False
    tty = sys.stdout.isatty() and sys.stderr.isatty()
    return "bar" if tty else "lines"


def _launch_torchrun(args: argparse.Namespace, out: Path) -> int:
    """Re-run this command as ``torchrun --nproc-per-node N`` (every rank gets the same out)."""
    import subprocess  # nosec B404: runs this interpreter's torchrun, argument list, no shell

    from orin_rl.distributed import MULTICAST_OFF

    argv = list(args.raw_argv)
    i = argv.index("--nproc") if "--nproc" in argv else None
    if i is not None:
        del argv[i : i + 2]
    else:  # --nproc=N
        argv = [a for a in argv if not a.startswith("--nproc=")]
    if args.out is None:
        argv += ["--out", str(out)]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={args.nproc}", "-m", "orin_rl.cli", *argv]  # fmt: skip
    env = {**os.environ, **MULTICAST_OFF, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    log.info("launching %d processes: %s", args.nproc, " ".join(cmd))
    # nosec B603: the command is sys.executable + torch.distributed.run + our own argv, no shell
    return subprocess.run(cmd, env=env, check=False).returncode  # nosec B603


def _resume_command(run_dir: Path, world_size: int = 1) -> str:
    nproc = f" --nproc {world_size}" if world_size > 1 else ""  # a resume needs the same N
    return f"orin-rl train --resume {shlex.quote(str(run_dir))}{nproc}"


def _solved_line(summary: dict[str, Any]) -> str:
    """ "solved" is the final policy's evaluation against the threshold; a periodic evaluation
    that reached it earlier is said as such, so the two never read as one contradiction."""
    threshold, first = summary["solved_threshold"], summary["solved_at"]
    reached = (
        f"a periodic evaluation reached it at step {first['global_step']:,} "
        f"({first['time_s']:.1f} s)"
        if first
        else ""
    )
    if summary["solved"]:
        return f"yes (threshold {threshold:g}" + (f"; {reached})" if reached else ")")
    if summary.get("eval_stopped_by"):  # a part of the final evaluation decides nothing
        stopped = f"not decided: the final evaluation was stopped (threshold {threshold:g}"
        return stopped + (f"; {reached})" if reached else ")")
    if summary["eval_return_mean"] is None:  # interrupted before the final evaluation
        return f"not evaluated (threshold {threshold:g}" + (f"; {reached})" if reached else ")")
    final = f"the final policy's evaluation is below the threshold {threshold:g}"
    return f"no: {final}" + (f", though {reached}" if reached else "")


def _report(summary: dict[str, Any], run_dir: Path) -> int:
    mean, std = summary["eval_return_mean"], summary["eval_return_std"]
    rows = [
        ("environment", summary["env_id"]),
        ("steps", f"{summary['total_steps']:,}"),
        ("wall time", f"{summary['wall_time_s']:.1f} s"),
        ("steps/s", f"{summary['steps_per_s']:,.0f}"),
        ("stopped by", summary["stop_reason"]),
    ]
    if mean is not None:
        rows.append(
            (
                "eval return",
                f"{mean:.1f} ± {std:.1f} over {plural(summary['eval_episodes'], 'episode')}",
            )
        )
    if summary.get("gym_eval_return_mean") is not None:  # trained on GPU physics
        rows[-1] = (f"eval return ({summary['eval_physics']})", rows[-1][1])
        gym_mean, gym_std = summary["gym_eval_return_mean"], summary["gym_eval_return_std"]
        rows.append(("eval return (gymnasium)", f"{gym_mean:.1f} ± {gym_std:.1f}"))
    if summary["solved_threshold"] is not None:
        rows.append(("solved", _solved_line(summary)))
    on = summary.get("online")
    if on:  # an online run: the real-time side's figures
        lat = on["latency_us"]
        rows += [
            (
                "control loop",
                f"{on['ticks']:,} ticks at {on['control_rate_hz']:g} Hz, "
                f"{on['deadline_misses']} deadline misses ({on['deadline_miss_fraction']:.3%})",
            ),
            (
                "tick latency",
                f"p50 {lat.get('p50', 0):.0f} µs, p99 {lat.get('p99', 0):.0f} µs, "
                f"max {lat.get('max', 0):.0f} µs",
            ),
            (
                "learner",
                f"{on['updates']:,} updates ({on['updates_per_env_step']:.2f} per env "
                f"step, target {on['update_to_data_target']:g}), "
                f"{on['weight_swaps']} weight swaps",
            ),
        ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    if summary["interrupted"]:
        print(f"stopped by {summary['stop_reason']} with a checkpoint; continue with:")
        print(f"  {_resume_command(run_dir, summary.get('world_size') or 1)}")
        return 128 + (15 if summary["stop_reason"] == "SIGTERM" else 2)
    stopped_by = summary.get("eval_stopped_by")
    if stopped_by:  # training finished; its final evaluation did not
        print(
            f"final evaluation stopped by {stopped_by} after "
            f"{plural(summary['eval_episodes'], 'finished episode')}; training had finished "
            "(checkpoint.pt is final)"
        )
        return 128 + (15 if stopped_by == "SIGTERM" else 2)
    return 0
