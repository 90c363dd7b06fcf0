"""``orin-rl`` command line: parse, build the config, call a stage function. Nothing more."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from orin_rl import __version__
from orin_rl import config as config_mod
from orin_rl.config import Config, ConfigError
from orin_rl.errors import OrinError

log = logging.getLogger("orin_rl")

DESCRIPTION = """\
Reinforcement learning on the robot's own computer: train a policy, export it as a
checked ONNX bundle, build a TensorRT engine, evaluate it, and run it in a real-time
control loop."""
EPILOG = """\
a first session:
  orin-rl doctor                                what this machine can use
  orin-rl train --env CartPole-v1 --out runs/mine
  orin-rl export runs/mine                      runs/mine/bundle
  orin-rl eval runs/mine/bundle --episodes 20
  orin-rl run --model runs/mine/bundle --rate 1000 --steps 10000

'orin-rl COMMAND --help' describes a command and its options."""

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
ENV_KWARGS_HELP = (
    "JSON object of keyword arguments for the environment's constructor, e.g. "
    """'{"size": 8}' (config env.kwargs)"""
)


class UsageError(OrinError, ValueError):
    """Bad command-line input; reported as one line with exit code 2."""


def _add_train(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a policy (PPO, SAC or DQN) into a run folder",
        description="Train a PPO, SAC or DQN policy on a gymnasium or GPU-native environment "
        "into a run folder (config.yaml, checkpoint.pt, metrics, curve.png, summary.json). "
        "Settings: defaults < the environment's preset < --config < flags < --set. Ctrl-C "
        "stops with a checkpoint; --resume DIR continues.",
    )
    p.add_argument(
        "--env",
        help="gymnasium id, e.g. CartPole-v1 (default), or module:EnvId for your own "
        "(module registers EnvId with gymnasium.register; docs/custom_env.md)",
    )
    p.add_argument("--env-kwargs", metavar="JSON", help=ENV_KWARGS_HELP)
    p.add_argument(
        "--algo",
        choices=["ppo", "sac", "dqn"],
        help="ppo (default), sac (continuous actions) or dqn (discrete), on a replay buffer",
    )
    p.add_argument("--num-envs", type=int, help="parallel environments")
    p.add_argument("--vectorization", choices=["sync", "async"], help="gymnasium vectorisation")
    p.add_argument(
        "--env-backend",
        choices=["gym", "gpu"],
        help="gym: gymnasium.vector on the CPU; gpu: GPU-native torch envs on the learner device",
    )
    p.add_argument(
        "--precision", choices=["fp32", "fp16", "bf16"], help="mixed precision (autocast)"
    )
    p.add_argument(
        "--cuda-graphs",
        action="store_true",
        default=None,
        help="capture each iteration in one CUDA graph (needs --env-backend gpu on CUDA)",
    )
    p.add_argument(
        "--compile", action="store_true", default=None, help="torch.compile networks and envs"
    )
    p.add_argument(
        "--nvtx", action="store_true", default=None, help="NVTX ranges for Nsight Systems"
    )
    p.add_argument(
        "--num-agents",
        type=int,
        metavar="K",
        help="train K independent agents in one batched program (seeds / sweeps)",
    )
    p.add_argument(
        "--online",
        action="store_true",
        default=None,
        help="learn while acting: a real-time actor drives the plant at --control-rate while "
        "the learner (--algo sac, or dqn for discrete actions) trains beside it "
        "(see docs/online.md)",
    )
    p.add_argument(
        "--control-rate", type=float, metavar="HZ", help="the online actor's rate (default 50)"
    )
    p.add_argument(
        "--utd",
        type=float,
        metavar="RATIO",
        help="online: gradient steps per env step the learner aims at (default 1)",
    )
    p.add_argument(
        "--plant",
        metavar="SPEC",
        help="online: gym (the env in real time, default), udp://HOST:PORT or module:factory",
    )
    p.add_argument("--total-steps", type=int, help="environment steps to train for")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], help="learner device")
    p.add_argument("--seed", type=int, help="random seed")
    p.add_argument(
        "--buffer-placement",
        choices=["auto", "host", "device", "pinned", "managed"],
        help="rollout buffer memory",
    )
    p.add_argument("--out", type=Path, help="run folder (default: runs/ENV-TIMESTAMP)")
    p.add_argument("--config", type=Path, help="YAML config file")
    p.add_argument("--resume", type=Path, metavar="DIR", help="continue the run in DIR")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override any config field, e.g. --set ppo.learning_rate=3e-4 (repeatable)",
    )
    p.add_argument(
        "--nproc",
        type=int,
        metavar="N",
        help="train with N processes on torch.distributed (one per GPU with NCCL, gloo on "
        "the CPU), launched through torchrun",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing run folder")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bar (where the output is not a terminal, training logs plain "
        "progress lines instead of a bar; -q hides both)",
    )
    p.add_argument("--print-config", action="store_true", help="print the config and exit")
    p.add_argument(
        "--no-preset",
        action="store_true",
        help="start from the dataclass defaults, not the environment's preset (orin_rl/presets.py)",
    )


def _add_export(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="turn a run folder into a verified ONNX deploy bundle",
        description="Export the deterministic policy (normaliser folded in) to ONNX, check it "
        "and compare it with PyTorch through ONNX Runtime.",
    )
    p.add_argument("run_dir", type=Path, help="run folder written by orin-rl train")
    p.add_argument("--out", type=Path, help="bundle folder (default: RUN_DIR/bundle)")
    p.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    p.add_argument("--batch", default="dynamic", help="'dynamic' or a fixed batch size")
    p.add_argument("--fp16", action="store_true", help="fp16 weights and maths (fp32 I/O)")
    p.add_argument("--int8", action="store_true", help="also write a Q/DQ int8 model")
    p.add_argument("--no-clip", action="store_true", help="do not clip continuous actions")


def _add_build(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build",
        help="build a TensorRT engine (+ sidecar) from a bundle",
        description="Build a TensorRT engine for this board. Needs TensorRT (JetPack).",
    )
    p.add_argument("source", type=Path, help="bundle folder, policy.json or an .onnx file")
    p.add_argument("--recipe", type=Path, help="engines/NAME.yaml (flags override it)")
    p.add_argument(
        "--precision",
        choices=["fp32", "fp16", "int8"],
        help="engine precision (int8: calibrated on the bundle's observations, or its Q/DQ "
        "model on TensorRT 11)",
    )
    p.add_argument("--dla", type=int, metavar="CORE", help="build for DLA core CORE")
    p.add_argument(
        "--gpu-fallback",
        action="store_true",
        default=None,
        help="with --dla: layers the DLA cannot run go to the GPU (else the build fails)",
    )
    p.add_argument("--batch", metavar="MIN,OPT,MAX", help="optimisation profile, e.g. 1,1,1")
    p.add_argument("--workspace", type=int, metavar="MB", help="builder workspace (MiB)")
    p.add_argument("--timing-cache", metavar="FILE", help="timing cache to reuse and update")
    p.add_argument(
        "--version-compatible",
        action="store_true",
        default=None,
        help="an engine later TensorRT releases of the same major version can load",
    )
    p.add_argument("--calib", metavar="RUN_DIR|BUNDLE|NPZ", help="int8 calibration data")
    p.add_argument("--out", type=Path, help="engine file (default engines/NAME-PRECISION.engine)")


def _add_run(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "run",
        help="run a policy in a real-time control loop around a gymnasium env",
        description="Close the loop: sensor -> infer -> actuate at a fixed rate, with latency "
        "statistics, deadline misses and a safe action. Works without PyTorch.",
    )
    p.add_argument(
        "--model",
        required=True,
        type=Path,
        help="bundle, engine, run folder, or one .onnx file of a bundle (policy.int8.onnx)",
    )
    p.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "onnxruntime", "tensorrt", "torch"],
        help="inference backend (auto: times those the model and machine allow, keeps the "
        "lowest p99)",
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "fp16", "int8"],
        help="run the bundle's model of this precision on ONNX Runtime (int8: policy.int8.onnx "
        "from orin-rl export --int8)",
    )
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--env", help="gymnasium id (default: the one the bundle was trained on)")
    p.add_argument("--env-kwargs", metavar="JSON", help=ENV_KWARGS_HELP + "; default: training's")
    p.add_argument(
        "--rate", type=float, default=100.0, help="loop rate in Hz (0: as fast as possible)"
    )
    p.add_argument("--steps", type=int, default=1000, help="loop iterations")
    p.add_argument("--report", type=Path, help="write the JSON report here")
    p.add_argument("--histogram", type=Path, help="write a latency histogram PNG here")
    p.add_argument("--cpu", type=int, help="pin the loop to this CPU")
    p.add_argument("--fifo", type=int, metavar="PRIO", help="SCHED_FIFO priority (needs root)")
    p.add_argument(
        "--mlock", action="store_true", help="lock the process's memory (no page faults in a tick)"
    )
    p.add_argument(
        "--safe-on-overrun", action="store_true", help="actuate the safe action on overrun"
    )
    _add_backend_options(p)


def _add_backend_options(p: argparse.ArgumentParser) -> None:
    """Backend settings shared by ``run`` and ``bench``."""
    p.add_argument(
        "--providers",
        metavar="LIST",
        help="ONNX Runtime providers to try in order, e.g. tensorrt,cuda,cpu (default: by device)",
    )
    p.add_argument(
        "--ort-recipe",
        type=Path,
        metavar="FILE",
        help="engines/NAME.yaml whose precision, DLA core and profile set ONNX Runtime's "
        "TensorRT/CUDA provider options",
    )
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        help="replay torch / TensorRT inference as CUDA graphs (needs --device cuda)",
    )
    p.add_argument(
        "--zero-copy",
        choices=["auto", "on", "off"],
        default="auto",
        help="bind mapped host memory as GPU I/O (auto: on integrated GPUs such as Orin)",
    )


def _backend_options(args: argparse.Namespace, batch: int) -> dict[str, Any]:
    """``runtime.load`` options from the ``run`` / ``bench`` flags."""
    options: dict[str, Any] = {"batch": batch, "cuda_graph": args.cuda_graph}
    options["zero_copy"] = {"auto": None, "on": True, "off": False}[args.zero_copy]
    if args.providers:
        options["providers"] = [p.strip() for p in args.providers.split(",") if p.strip()]
    if args.ort_recipe:
        from orin_rl.export.recipes import ep_settings, load_recipe

        options["ort_settings"] = ep_settings(load_recipe(args.ort_recipe))
    return options


def _add_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a policy for N seeded episodes: return and length statistics",
        description="Run N episodes of a run folder, bundle or engine on gymnasium's own "
        "environment (also for policies trained on GPU physics), episode i from seed S + i as "
        "the trainer's evaluation does; print return mean/std/min/max and episode lengths. "
        "summary.json's final evaluation used seeds from train.seed + 2**30 (--seed "
        "1073741825 for the default train.seed 1).",
    )
    p.add_argument("model", type=Path, help="run folder, bundle folder or engine file")
    p.add_argument(
        "--episodes", type=int, default=10, metavar="N", help="episodes to run (default 10)"
    )
    p.add_argument(
        "--seed", type=int, default=0, metavar="S", help="episode i starts from seed S + i"
    )
    p.add_argument("--env", help="gymnasium id (default: the one the policy was trained on)")
    p.add_argument("--env-kwargs", metavar="JSON", help=ENV_KWARGS_HELP + "; default: training's")
    p.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "onnxruntime", "tensorrt", "torch"],
        help="inference backend (auto: the lowest p99 of those available)",
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "fp16", "int8"],
        help="evaluate the bundle's model of this precision on ONNX Runtime (int8: Q/DQ)",
    )
    p.add_argument("--device", default="cpu", help="inference device: cpu or cuda")
    p.add_argument(
        "--stochastic",
        action="store_true",
        help="sample actions from the policy's distribution (run folders: needs checkpoint.pt)",
    )
    p.add_argument("--render", action="store_true", help="show the episodes in a window")
    p.add_argument(
        "--video", type=Path, metavar="DIR", help="write one MP4 per episode into DIR (moviepy)"
    )
    p.add_argument("--report", type=Path, metavar="FILE", help="write the results as JSON here")


def _add_bench(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="compare the inference backends on one model",
        description="Time infer() of each backend on one model in one process, per batch "
        "size: mean / p50 / p99 latency, throughput and memory; writes JSON, a Markdown table "
        "and a bar chart.",
    )
    p.add_argument("--model", required=True, help="bundle, engine, run folder, or cnn-seed")
    p.add_argument(
        "--backends",
        default="onnxruntime,torch",
        help="comma list of backends to time: onnxruntime, torch, tensorrt (default: "
        "onnxruntime,torch)",
    )
    p.add_argument("--device", default="cpu", help="where the backends run: cpu or cuda")
    p.add_argument("--batch", default="1,128", help="comma list of batch sizes")
    p.add_argument(
        "--iters",
        type=int,
        default=1000,
        help="timed calls per backend and batch size, after a warm-up (default 1000)",
    )
    p.add_argument("--threads", type=int, default=1, help="CPU threads for ONNX Runtime / torch")
    p.add_argument("--out", type=Path, default=Path("bench/infer"), help="output prefix")
    _add_backend_options(p)


def _add_doctor(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "doctor",
        help="what this machine offers, with next steps",
        description="Check this machine for what orin_rl can use (CPU, GPU, CUDA, torch, "
        "ONNX Runtime, TensorRT, Jetson board and power mode) and say what to install next.",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--selftest", action="store_true", help="build and run tiny TensorRT engines")


def _add_demo(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="train -> export -> run on CartPole-v1, one summary table",
        description="The whole chain on CartPole-v1 with its preset: train until solved, "
        "export the bundle, run it in the control loop; one summary table.",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("runs/demo-cartpole"),
        help="run folder (default runs/demo-cartpole)",
    )
    p.add_argument(
        "--device", default="cpu", choices=["auto", "cpu", "cuda"], help="learner device"
    )
    p.add_argument("--rate", type=float, default=500.0, help="control-loop rate for the run step")
    p.add_argument("--steps", type=int, default=2000, help="control-loop iterations")
    p.add_argument("--overwrite", action="store_true", help="replace an existing demo folder")


def _add_plant_server(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plant-server",
        help="serve a gymnasium env as a UDP plant for `train --online --plant udp://...`",
        description="Run a gymnasium environment as a plant in its own process, speaking the "
        "UDP protocol of orin_rl/runners/plant_udp.py: the worked example of a robot adapter "
        "(docs/online.md). Stops on a close request or Ctrl-C.",
    )
    p.add_argument("--env", default="Pendulum-v1", help="gymnasium id (default Pendulum-v1)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=5555, help="UDP port (default 5555)")
    p.add_argument("--max-episode-steps", type=int, help="override the env's time limit")


def cmd_plant_server(args: argparse.Namespace) -> int:
    """``orin-rl plant-server``."""
    from orin_rl.runners.plant_udp import serve

    print(f"plant server: {args.env} on udp://{args.host}:{args.port} (Ctrl-C stops it)")
    try:
        serve(args.env, args.host, args.port, args.max_episode_steps)
    except KeyboardInterrupt:
        return 130
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``orin-rl`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="orin-rl",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"orin-rl {__version__}")
    parser.add_argument("--debug", action="store_true", help="full tracebacks on errors")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    _add_train(sub)
    _add_export(sub)
    _add_build(sub)
    _add_run(sub)
    _add_eval(sub)
    _add_bench(sub)
    _add_doctor(sub)
    _add_demo(sub)
    _add_plant_server(sub)
    return parser


def train_config(args: argparse.Namespace) -> Config:
    """Assemble the config: defaults < env preset < --config file < flags < --set."""
    from orin_rl.presets import preset_overrides

    file_data: dict[str, Any] = {}
    if args.config is not None:
        file_data = config_mod.read_yaml_mapping(args.config)
    # What picks the preset may come from --set, a flag or the file (in that precedence).
    sets = {key.strip(): _yaml_str(raw) for key, _, raw in (i.partition("=") for i in args.set)}
    env_file, train_file = file_data.get("env") or {}, file_data.get("train") or {}
    env_id = sets.get("env.env_id") or args.env or env_file.get("env_id") or Config().env.env_id
    algo = sets.get("train.algo") or args.algo or train_file.get("algo") or "ppo"
    backend = sets.get("env.backend") or args.env_backend or env_file.get("backend") or "gym"
    chosen = preset_overrides(env_id, algo, backend)
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


def env_kwargs_arg(raw: str | None) -> dict[str, Any] | None:
    """``--env-kwargs``: a JSON object, or one line saying what was wrong."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--env-kwargs is not valid JSON ({exc.msg}): {raw!r}") from None
    if not isinstance(value, dict):
        raise UsageError(f"--env-kwargs takes a JSON object like '{{\"size\": 8}}', got {raw!r}")
    return value


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
        flags_given = any(getattr(args, n) is not None for n in TRAIN_FLAGS)
        if args.config or args.set or args.no_preset or flags_given:
            raise UsageError(
                "--resume continues the run with its saved config.yaml; drop the other options"
            )
        print(f"run folder: {args.resume} (resumed)", flush=True)
        args.run_folder = args.resume
        summary = train(Config(), args.resume, resume=True, progress=_progress(args))
        return _report(summary, args.resume)
    cfg = train_config(args)
    if args.print_config:
        print(yaml.safe_dump(config_mod.to_dict(cfg), sort_keys=False), end="")
        return 0
    out = args.out or Path("runs") / f"{cfg.env.env_id}-{datetime.now():%Y%m%d-%H%M%S}"
    if args.nproc is not None and args.nproc < 1:
        raise UsageError(f"--nproc must be positive, got {args.nproc}")
    if args.nproc is not None and args.nproc > 1 and "WORLD_SIZE" not in os.environ:
        from orin_rl.runners.trainer import resolve_device

        resolve_device(cfg.train.device)  # a device that is not there: one line, before launching
        return _launch_torchrun(args, out)
    args.run_folder = out
    summary = train(cfg, out, overwrite=args.overwrite, progress=_progress(args))
    if not summary:  # a rank other than 0 of a distributed run: rank 0 reports
        return 0
    print(f"run folder: {out}")
    return _report(summary, out)


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
            ("eval return", f"{mean:.1f} ± {std:.1f} over {summary['eval_episodes']} episodes")
        )
    if summary.get("gym_eval_return_mean") is not None:  # trained on GPU physics
        rows[-1] = (f"eval return ({summary['eval_physics']})", rows[-1][1])
        gym_mean, gym_std = summary["gym_eval_return_mean"], summary["gym_eval_return_std"]
        rows.append(("eval return (gymnasium)", f"{gym_mean:.1f} ± {gym_std:.1f}"))
    if summary["solved_threshold"] is not None:
        solved = summary["solved_at"]
        when = (
            f" (first at step {solved['global_step']:,}, {solved['time_s']:.1f} s)"
            if solved
            else ""
        )
        verdict = "yes" if summary["solved"] else "no"
        rows.append(("solved", f"{verdict} (threshold {summary['solved_threshold']}){when}"))
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
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``orin-rl export``."""
    from orin_rl.export.onnx import export_bundle

    batch: int | str = args.batch
    if batch != "dynamic":
        try:
            batch = int(batch)
        except ValueError:
            raise UsageError(
                f"--batch must be 'dynamic' or an integer, got {args.batch!r}"
            ) from None
    result = export_bundle(
        args.run_dir, args.out, args.opset, batch, args.fp16, args.int8, not args.no_clip
    )
    info = result.info
    print(f"bundle: {result.bundle_dir}")
    print(
        f"  policy.onnx  {result.onnx_bytes / 1024:.1f} KiB, opset {info.opset}, {info.precision}"
    )
    print(f"  parity       max abs error {info.parity_max_abs_error:.3g} vs PyTorch")
    for name, variant in info.variants.items():
        print(f"  {variant['onnx_file']}  {name}: {variant['parity']}")
    print(f"  export time  {result.export_time_s:.1f} s")
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    """``orin-rl build``."""
    from orin_rl.export.recipes import load_recipe

    batch = None
    if args.batch:
        try:
            batch = [int(v) for v in args.batch.split(",")]
        except ValueError:
            raise UsageError(f"--batch takes MIN,OPT,MAX integers, got {args.batch!r}") from None
        if len(batch) == 1:
            batch = batch * 3
    recipe = load_recipe(
        args.recipe,
        precision=args.precision,
        dla_core=args.dla,
        gpu_fallback=args.gpu_fallback,
        batch=batch,
        workspace_mb=args.workspace,
        timing_cache=args.timing_cache,
        version_compatible=args.version_compatible,
        calib=args.calib,
    )
    from orin_rl.export.tensorrt import build_engine, describe

    name = args.source.stem if args.source.suffix else args.source.name
    where = f"dla{recipe.dla_core}" if recipe.dla_core is not None else "gpu"
    out = args.out or Path("engines") / f"{name}-{where}-{recipe.precision}.engine"
    sidecar = build_engine(args.source, out, recipe)
    print(f"engine: {out}")
    print(describe(sidecar))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """``orin-rl run`` (torch-free unless the torch backend is chosen)."""
    from orin_rl.runtime.run import run_policy

    if args.rate < 0:
        raise UsageError(f"--rate must be >= 0 (0: as fast as possible), got {args.rate:g}")
    if args.steps <= 0:
        raise UsageError(f"--steps must be positive, got {args.steps}")
    loop = {
        "cpu": args.cpu,
        "fifo_priority": args.fifo,
        "lock_memory": args.mlock,
        "safe_action_on_overrun": args.safe_on_overrun,
    }
    report = run_policy(
        args.model,
        args.backend,
        args.env,
        args.rate,
        args.steps,
        args.device,
        args.report,
        args.histogram,
        loop_options=loop,
        backend_options=_backend_options(args, batch=1),  # the loop feeds one observation
        env_kwargs=env_kwargs_arg(args.env_kwargs),
        precision=args.precision,
    )
    lat = report["latency_us"]
    returns = report["episode_returns"]
    mean_return = (
        f"{np.mean(returns):.1f} over {len(returns)} episodes" if returns else "no episode ended"
    )
    where = report.get("provider") or report.get("mode") or ""
    if report.get("precision"):
        where += f", {report['precision']}"
    print(f"backend      {report['backend']} ({where})")
    print(f"iterations   {report['iterations']} at {args.rate:g} Hz")
    print(
        f"latency µs   p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}  "
        f"p99.9 {lat['p999']:.1f}  max {lat['max']:.1f}"
    )
    print(
        f"misses       {report['deadline_misses']} deadline, {report['overruns']} overruns, "
        f"{report['non_finite_events']} non-finite"
    )
    print(f"return       {mean_return}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """``orin-rl eval`` (torch-free for bundles and engines)."""
    from orin_rl.evaluation import evaluate_policy
    from orin_rl.policy import load_policy

    if args.episodes <= 0:
        raise UsageError(f"--episodes must be positive, got {args.episodes}")
    env_kwargs = env_kwargs_arg(args.env_kwargs)
    with load_policy(args.model, args.backend, args.device, precision=args.precision) as policy:
        result = evaluate_policy(
            policy,
            args.env,
            args.episodes,
            args.seed,
            deterministic=not args.stochastic,
            render=args.render,
            video_dir=args.video,
            env_kwargs=env_kwargs,
        )
        described = policy.backend.describe()
    if args.report:
        args.report.write_text(json.dumps({**described, **result.to_dict()}, indent=2) + "\n")
    r, n = np.asarray(result.returns), np.asarray(result.lengths)
    mode = "sampled" if args.stochastic else "deterministic"
    extra = described.get("provider") or described.get("mode") or described.get("device") or ""
    if described.get("precision"):
        extra += f", {described['precision']}"
    print(f"environment  {result.env_id}")
    print(f"backend      {described['backend']}" + (f" ({extra})" if extra else ""))
    print(f"episodes     {result.episodes}, seeds {args.seed}..{args.seed + result.episodes - 1}, "
          f"{mode} actions")  # fmt: skip
    print(f"{'':<11}{'mean':>10}{'std':>10}{'min':>10}{'max':>10}")
    print(f"{'return':<11}{r.mean():>10.1f}{r.std():>10.1f}{r.min():>10.1f}{r.max():>10.1f}")
    print(f"{'length':<11}{n.mean():>10.1f}{n.std():>10.1f}{n.min():>10d}{n.max():>10d}")
    if result.videos:
        print(f"videos       {len(result.videos)} MP4 in {args.video}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """``orin-rl bench``."""
    from orin_rl.runtime import bench, load

    try:
        batches = [int(b) for b in args.batch.split(",")]
    except ValueError:
        raise UsageError(f"--batch takes integers, got {args.batch!r}") from None
    names = [b.strip() for b in args.backends.split(",") if b.strip()]
    if args.model == "cnn-seed":
        backends = _cnn_seed_backends(names, args.device, args.threads)
        title = "seed CNN policy (3 conv + 2 FC, 3x256x256)"
    else:
        options = _backend_options(args, batch=batches[0])
        backends = {
            n: load(args.model, n, args.device, threads=args.threads, **options) for n in names
        }
        title = f"{args.model}"
    rows = bench.run_bench(backends, batches, args.iters)
    bench.write_results(rows, args.out, title)
    print(bench.markdown(rows, title))
    return 0


def _cnn_seed_backends(names: list[str], device: str, threads: int) -> dict:
    import tempfile

    import torch

    from orin_rl.bundle import BundleInfo
    from orin_rl.export.onnx import _specs, _to_onnx
    from orin_rl.models.cnn import SeedCNNPolicy
    from orin_rl.runtime.onnxruntime_backend import OnnxRuntimeBackend
    from orin_rl.runtime.torch_backend import TorchBackend

    torch.manual_seed(0)
    model = SeedCNNPolicy().eval()
    backends = {}
    if "onnxruntime" in names:
        onnx_model = _to_onnx(model, list(model.input_shape), "dynamic", 17, discrete=False)
        path = Path(tempfile.mkdtemp()) / "cnn_seed.onnx"
        path.write_bytes(onnx_model.SerializeToString())
        inputs, outputs = _specs(onnx_model)
        info = BundleInfo(
            path.name, "", 17, "fp32", inputs, outputs, {"kind": "continuous"}, None, 0.0
        )
        backends["onnxruntime"] = OnnxRuntimeBackend(path, info, device, threads)
    if "torch" in names:
        backends["torch"] = TorchBackend.from_module(
            model, list(model.input_shape), device, threads=threads
        )
    return backends


def cmd_doctor(args: argparse.Namespace) -> int:
    """``orin-rl doctor``."""
    from orin_rl import doctor

    rows = doctor.checks()
    tests = doctor.selftest() if args.selftest else []
    if args.json:
        print(
            json.dumps(
                {"checks": doctor.as_json(rows), "selftest": doctor.as_json(tests)}, indent=2
            )
        )
    else:
        print(doctor.table(rows + tests))
    failed = [t for t in tests if t.status in ("missing", "warn") and t.item != "selftest"]
    return 1 if failed else 0


def cmd_demo(args: argparse.Namespace) -> int:
    """``orin-rl demo``: the whole chain with the CartPole preset."""
    from orin_rl.export.onnx import export_bundle
    from orin_rl.runners import train
    from orin_rl.runtime.run import run_policy

    parsed = build_parser().parse_args(["train", "--env", "CartPole-v1", "--device", args.device])
    summary = train(train_config(parsed), args.out, overwrite=args.overwrite)
    exported = export_bundle(args.out)
    report = run_policy(exported.bundle_dir, "auto", None, args.rate, args.steps)
    lat = report["latency_us"]
    returns = report["episode_returns"]
    verdict = "solved" if summary["solved"] else "not solved"
    rows = [
        (
            "train",
            f"{summary['total_steps']:,} steps in {summary['wall_time_s']:.1f} s "
            f"({summary['steps_per_s']:,.0f} steps/s) on {summary['device']}",
        ),
        (
            "",
            f"eval return {summary['eval_return_mean']:.1f} ± {summary['eval_return_std']:.1f} "
            f"over {summary['eval_episodes']} episodes: {verdict}",
        ),
        (
            "export",
            f"{exported.bundle_dir}/policy.onnx, {exported.onnx_bytes / 1024:.1f} KiB, "
            f"max error vs PyTorch {exported.info.parity_max_abs_error:.2g}",
        ),
        (
            "run",
            f"{report['backend']} at {args.rate:g} Hz, {report['iterations']} iterations: "
            f"p50 {lat['p50']:.0f} µs, p99 {lat['p99']:.0f} µs, {report['deadline_misses']} misses",
        ),
        (
            "",
            f"episode return {np.mean(returns):.1f} over {len(returns)} episodes"
            if returns
            else "no episode ended",
        ),
    ]
    print()
    for stage, text in rows:
        print(f"{stage:<7} {text}")
    print(
        f"\nnext: orin-rl run --model {exported.bundle_dir} --rate 1000 --steps 10000 "
        "--histogram run.png"
    )
    return 0 if summary["solved"] else 1


COMMANDS = {
    "demo": cmd_demo,
    "doctor": cmd_doctor,
    "train": cmd_train,
    "export": cmd_export,
    "build": cmd_build,
    "run": cmd_run,
    "eval": cmd_eval,
    "bench": cmd_bench,
    "plant-server": cmd_plant_server,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point: run a subcommand; known errors print one line and exit with 2."""
    args = build_parser().parse_args(argv)
    args.raw_argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return COMMANDS[args.command](args)
    except (OrinError, OSError) as exc:  # OSError: full disk, permissions, missing files
        if args.debug:
            raise
        print(f"orin-rl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C outside training (which handles its own signals)
        if args.debug:
            raise
        run = getattr(args, "run_folder", None)
        resume = ""
        if run is not None and (Path(run) / "checkpoint.pt").is_file():  # a second Ctrl-C
            resume = f"; the last checkpoint continues with: {_resume_command(run)}"
        print(f"orin-rl {args.command}: interrupted{resume}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
