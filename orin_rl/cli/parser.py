"""The ``orin-rl`` argument parser: its commands, in --help's order, and their flags.

Each command's code lives in its own module (``cli/train.py``, ``cli/run.py``, ...);
``cli/app.py`` runs the one the parser picked. Here: the flags of export, build, run, eval,
bench, doctor, demo and envs; train's are in ``cli/parser_train.py``, the robot commands' in
``cli/robot_args.py``. Torch-free, like all of ``orin_rl.cli``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from orin_rl import __version__
from orin_rl.cli.argtypes import (
    _FINITE,
    _NON_NEGATIVE,
    _NON_NEGATIVE_INT,
    _POSITIVE_INT,
    _batch_or_dynamic,
    _batch_sizes,
    _DefaultsHelpFormatter,
    _int_type,
    _Parser,
)
from orin_rl.cli.parser_common import ENV_KWARGS_HELP, _on_off_flags
from orin_rl.cli.parser_train import train_flags
from orin_rl.cli.robot_args import ROBOT_COMMANDS, robot_run_flags
from orin_rl.envs import backends as env_backends

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
        "TensorRT/CUDA provider options (default: none, the providers' own settings)",
    )
    p.add_argument(
        "--cuda-graph",
        action="store_true",
        help="replay torch / TensorRT / ONNX Runtime CUDA EP inference as CUDA graphs",
    )
    p.add_argument(
        "--zero-copy",
        choices=["auto", "on", "off"],
        default="auto",
        help="bind mapped host memory as GPU I/O (auto: on integrated GPUs such as Orin)",
    )


def _env_override_flags(p: argparse.ArgumentParser, trained: str) -> None:
    """Add run's and eval's ``--env`` and ``--env-kwargs`` (default: what ``trained`` used)."""
    p.add_argument("--env", help=f"gymnasium id (default: the one {trained} was trained on)")
    p.add_argument("--env-kwargs", metavar="JSON", help=ENV_KWARGS_HELP + "; default: training's")


def _inference_flags(p: argparse.ArgumentParser, backend: str, precision: str, device: str) -> None:
    """Add run's and eval's ``--backend`` (auto: ``backend``), ``--precision`` and ``--device``."""
    p.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "onnxruntime", "tensorrt", "torch"],
        help=f"inference backend (auto: {backend})",
    )
    p.add_argument("--precision", choices=["fp32", "fp16", "int8"], help=precision)
    p.add_argument("--device", default="cpu", help=device)


def _export_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `orin-rl export`."""
    p.add_argument("run_dir", type=Path, help="orin-rl train's run folder, or mjlab's .onnx")
    p.add_argument("--out", type=Path, help="bundle folder (default: RUN_DIR/bundle)")
    p.add_argument("--env", metavar="TASK", help="mjlab's .onnx: its task (default: none)")
    p.add_argument("--opset", type=_POSITIVE_INT, default=17, help="ONNX opset (default 17)")
    p.add_argument(
        "--batch",
        type=_batch_or_dynamic,
        default="dynamic",
        help="'dynamic' or a fixed batch size",
    )
    _on_off_flags(
        p,
        {
            "--fp16": "fp16 weights and maths (fp32 I/O)",
            "--int8": "also write a Q/DQ int8 model",
            "--no-clip": "do not clip continuous actions",
        },
    )


def _build_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `orin-rl build`."""
    p.add_argument("source", type=Path, help="bundle folder, policy.json or an .onnx file")
    p.add_argument(
        "--recipe",
        type=Path,
        help="engines/NAME.yaml (flags override it; default: none, the settings below)",
    )
    p.add_argument(
        "--precision",
        choices=["fp32", "fp16", "int8"],
        help="engine precision (int8: calibrated on the bundle's observations, or its Q/DQ "
        "model on TensorRT 11; default: the recipe's, else fp16)",
    )
    p.add_argument(
        "--dla",
        type=_NON_NEGATIVE_INT,
        metavar="CORE",
        help="build for DLA core CORE (default: the recipe's, else the GPU)",
    )
    p.add_argument(
        "--gpu-fallback",
        action="store_true",
        default=None,
        help="with --dla: layers the DLA cannot run go to the GPU (else the build fails)",
    )
    p.add_argument(
        "--batch",
        metavar="MIN,OPT,MAX",
        help="optimisation profile, e.g. 1,4,8 (default: the recipe's, else 1,1,1)",
    )
    p.add_argument(
        "--workspace",
        type=_POSITIVE_INT,
        metavar="MB",
        help="builder workspace (MiB; default: the recipe's, else 256)",
    )
    p.add_argument(
        "--timing-cache",
        metavar="FILE",
        help="timing cache to reuse and update (default: the recipe's, else engines/timing.cache)",
    )
    p.add_argument(
        "--version-compatible",
        action="store_true",
        default=None,
        help="an engine later TensorRT releases of the same major version can load",
    )
    p.add_argument(
        "--calib",
        metavar="RUN_DIR|BUNDLE|NPZ",
        help="int8 calibration data (default: the bundle's calibration.npz)",
    )
    p.add_argument(
        "--out",
        type=Path,
        help="engine file (default: engines/NAME-TARGET-PRECISION.engine, TARGET gpu or dlaN)",
    )


def _run_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `orin-rl run`."""
    p.add_argument(
        "--model",
        required=True,
        type=Path,
        help="bundle, engine, run folder, or one .onnx file of a bundle (policy.int8.onnx)",
    )
    _inference_flags(
        p,
        backend="times those the model and machine allow, keeps the lowest p99",
        precision="run the bundle's model of this precision on ONNX Runtime (int8: "
        "policy.int8.onnx from orin-rl export --int8; default: the bundle's policy.onnx)",
        device="cpu or cuda",
    )
    _env_override_flags(p, "the bundle")
    p.add_argument(
        "--rate",
        type=_FINITE,  # cli/run.py checks the sign, as it does --steps >= 1
        default=100.0,
        help="loop rate in Hz; 0 runs as fast as possible",
    )
    p.add_argument("--steps", type=int, default=1000, help="loop iterations")
    p.add_argument(
        "--plant-device",
        default="cpu",
        choices=["cpu", "cuda"],
        help="where an mjlab task's world steps: cpu (Warp's CPU device) or cuda (default cpu)",
    )
    p.add_argument("--report", type=Path, help="write the JSON report here (default: not written)")
    p.add_argument(
        "--histogram", type=Path, help="write a latency histogram PNG here (default: not drawn)"
    )
    p.add_argument(
        "--cpu", type=_NON_NEGATIVE_INT, help="pin the loop to this CPU (default: not pinned)"
    )
    p.add_argument(
        "--fifo",
        type=_int_type(1, 99),
        metavar="PRIO",
        help="SCHED_FIFO priority 1-99 (needs root; default: the normal scheduler)",
    )
    _on_off_flags(
        p,
        {
            "--mlock": "lock the process's memory (no page faults in a tick)",
            "--safe-on-overrun": "actuate the safe action on overrun",
        },
    )
    robot_run_flags(p)
    _add_backend_options(p)


def _eval_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `orin-rl eval`."""
    p.add_argument("model", type=Path, help="run folder, bundle folder or engine file")
    p.add_argument(
        "--episodes",
        type=int,  # cli/eval.py checks N >= 1
        default=10,
        metavar="N",
        help="episodes to run (default 10)",
    )
    p.add_argument(
        "--seed",
        type=_NON_NEGATIVE_INT,
        default=0,
        metavar="S",
        help="episode i starts from seed S + i",
    )
    _env_override_flags(p, "the policy")
    _inference_flags(
        p,
        backend="the lowest p99 of those available",
        precision="evaluate the bundle's model of this precision on ONNX Runtime (int8: Q/DQ; "
        "default: the bundle's policy.onnx)",
        device="inference device: cpu or cuda",
    )
    _on_off_flags(
        p,
        {
            "--stochastic": "sample actions from the policy's distribution (run folders: needs "
            "checkpoint.pt)",
            "--render": "show the episodes in a window",
        },
    )
    p.add_argument(
        "--video",
        type=Path,
        metavar="DIR",
        help="write one MP4 per episode into DIR (moviepy; default: no video)",
    )
    p.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="write the results as JSON here (default: not written)",
    )


def _bench_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `orin-rl bench`."""
    p.add_argument("--model", required=True, help="bundle, engine, run folder, or cnn-seed")
    p.add_argument(
        "--backends",
        default="onnxruntime,torch",
        help="comma list of backends to time: onnxruntime, torch, tensorrt (default: "
        "onnxruntime,torch)",
    )
    p.add_argument("--device", default="cpu", help="where the backends run: cpu or cuda")
    p.add_argument("--batch", type=_batch_sizes, default="1,128", help="comma list of batch sizes")
    p.add_argument(
        "--iters",
        type=_POSITIVE_INT,
        default=1000,
        help="timed calls per backend and batch size, after a warm-up (default 1000)",
    )
    p.add_argument(
        "--threads",
        type=_NON_NEGATIVE_INT,
        default=1,
        help="CPU threads for ONNX Runtime / torch; 0 leaves the choice to them",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bench/infer"),
        help="output prefix: writes PREFIX.json, PREFIX.md and PREFIX.png",
    )
    _add_backend_options(p)


def _doctor_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `orin-rl doctor`."""
    _on_off_flags(
        p,
        {
            "--json": "machine-readable output",
            "--selftest": "build and run tiny TensorRT engines",
        },
    )
    p.add_argument(
        "--warm",
        nargs="*",
        metavar="TASK",
        help="fill the kernel and bytecode caches a first training run fills: one iteration of "
        "each TASK (default: CartPole-v1, and Humanoid-v5 on GPU physics with CUDA and the sim "
        "extra), in its own process",
    )
    p.add_argument(
        "--device", default="auto", choices=["auto", "cpu", "cuda"], help="--warm's device"
    )


def _demo_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `orin-rl demo`."""
    p.add_argument(
        "--out",
        type=Path,
        default=Path("runs/demo-cartpole"),
        help="run folder (default runs/demo-cartpole)",
    )
    p.add_argument(
        "--device", default="cpu", choices=["auto", "cpu", "cuda"], help="learner device"
    )
    p.add_argument(
        "--rate",
        type=_NON_NEGATIVE,
        default=500.0,
        help="control-loop rate of the run step in Hz; 0 runs as fast as possible",
    )
    p.add_argument("--steps", type=_POSITIVE_INT, default=2000, help="control-loop iterations")
    p.add_argument("--overwrite", action="store_true", help="replace an existing demo folder")


def _envs_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `orin-rl envs`."""
    p.add_argument(
        "--backend", choices=env_backends.names(), help="list one backend's ids (default: all)"
    )


COMMANDS = [
    (
        "train",
        train_flags,
        "train a policy (PPO, SAC or DQN) into a run folder",
        (
            "Train a PPO, SAC or DQN policy on a gymnasium or GPU-native environment "
            "into a run folder (config.yaml, checkpoint.pt, metrics, curve.png, summary.json). "
            "Settings: defaults < the environment's preset < --config < flags < --set. Ctrl-C "
            "stops with a checkpoint; --resume DIR continues."
        ),
    ),
    (
        "export",
        _export_flags,
        "turn a run folder into a verified ONNX deploy bundle",
        (
            "Export the deterministic policy (normaliser folded in) to ONNX, check it "
            "and compare it with PyTorch through ONNX Runtime. Given mjlab's own policy export "
            "(RUN.onnx in an mjlab run folder) and --env TASK, check it against the task and "
            "write it as a bundle that run, bench and build take."
        ),
    ),
    (
        "build",
        _build_flags,
        "build a TensorRT engine (+ sidecar) from a bundle",
        "Build a TensorRT engine for this board. Needs TensorRT (JetPack).",
    ),
    (
        "run",
        _run_flags,
        "run a policy in a real-time control loop (a gymnasium env, an mjlab world, a robot)",
        (
            "Close the loop: sensor -> infer -> actuate at a fixed rate, with latency "
            "statistics, deadline misses and a safe action. Works without PyTorch. With "
            "--plant unitree-g1 the loop drives a G1 (or orin-rl sim-robot) over DDS through "
            "the safety state machine."
        ),
    ),
    (
        "eval",
        _eval_flags,
        "evaluate a policy for N seeded episodes: return and length statistics",
        (
            "Run N episodes of a run folder, bundle or engine on gymnasium's own "
            "environment (also for policies trained on GPU physics), episode i from seed S + i as "
            "the trainer's evaluation does; print return mean/std/min/max and episode lengths. "
            "summary.json's final evaluation used seeds from train.seed + 2**30 (--seed "
            "1073741825 for the default train.seed 1)."
        ),
    ),
    (
        "bench",
        _bench_flags,
        "compare the inference backends on one model",
        (
            "Time infer() of each backend on one model in one process, per batch "
            "size: mean / p50 / p99 latency, throughput and memory; writes JSON, a Markdown table "
            "and a bar chart."
        ),
    ),
    (
        "envs",
        _envs_flags,
        "list the environment ids of each backend (gymnasium, GPU-native, mjlab tasks)",
        "List every environment id orin-rl train --env accepts, by backend: gymnasium's "
        "registry, the GPU-native envs (--env-backend gpu) and mjlab's robot tasks (extra "
        "mjlab; your own task packages through ORIN_RL_MJLAB_TASKS).",
    ),
    (
        "doctor",
        _doctor_flags,
        "what this machine offers, with next steps",
        (
            "Check this machine for what orin_rl can use (CPU, GPU, CUDA, torch, "
            "ONNX Runtime, TensorRT, Jetson board and power mode) and say what to install next."
        ),
    ),
    (
        "demo",
        _demo_flags,
        "train -> export -> run on CartPole-v1, one summary table",
        (
            "The whole chain on CartPole-v1 with its preset: train until solved, "
            "export the bundle, run it in the control loop; one summary table."
        ),
    ),
    *ROBOT_COMMANDS,
]
"""(name, flags, one-line help, description) of each command, in --help's order."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``orin-rl`` argument parser; with ``only``, that command's flags alone (all are
    listed): the others' would import what it does not need (train's: the training config)."""
    parser = _Parser(
        prog="orin-rl",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"orin-rl {__version__}")
    parser.add_argument("--debug", action="store_true", help="full tracebacks on errors")
    chat = parser.add_mutually_exclusive_group()
    chat.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    chat.add_argument(
        "-v", "--verbose", action="store_true", help="debug logs, and known third-party warnings"
    )
    sub = parser.add_subparsers(dest="command", required=True, title="commands", metavar="COMMAND")
    for name, flags, help_line, description in COMMANDS:
        command = sub.add_parser(
            name, help=help_line, description=description, formatter_class=_DefaultsHelpFormatter
        )
        if only is None or name == only:
            flags(command)
    return parser
