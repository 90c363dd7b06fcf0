"""The CLI: config assembly order, one-line errors with exit code 2."""

from __future__ import annotations

import argparse
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

from orin_rl import cli
from orin_rl.runners.logger import read_metrics


def parse(*argv):
    return cli.build_parser().parse_args(["train", *argv])


def test_precedence_preset_file_flag_set(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("env:\n  env_id: Acrobot-v1\n  num_envs: 4\nppo:\n  num_steps: 64\n")
    cfg = cli.train_config(
        parse("--config", str(cfg_file), "--num-envs", "2", "--set", "ppo.num_steps=32")
    )
    assert cfg.env.env_id == "Acrobot-v1"
    assert cfg.ppo.normalize_obs is True  # from the Acrobot preset
    assert cfg.env.num_envs == 2  # flag beats file
    assert cfg.ppo.num_steps == 32  # --set beats all (2 x 32 = 64: the preset's 64 minibatches)


@pytest.mark.parametrize(
    ("argv", "preset"),
    [
        (["--env", "Hopper-v5"], "gym"),
        (["--env", "Hopper-v5", "--env-backend", "gpu"], "gpu"),
        (["--set", "env.env_id=Hopper-v5", "--set", 'env.backend="gpu"'], "gpu"),  # via --set
        (["--env", "Hopper-v5", "--no-preset"], None),
    ],
)
def test_presets_follow_env_and_backend(argv, preset):
    """The preset is chosen by env id and backend, wherever they were given."""
    from orin_rl.config.presets import GPU_PRESETS, PRESETS

    cfg = cli.train_config(cli.build_parser().parse_args(["train", *argv]))
    chosen = {"gym": PRESETS, "gpu": GPU_PRESETS}.get(preset, {}).get("Hopper-v5", {})
    defaults = cli.Config()
    assert cfg.env.env_id == "Hopper-v5"
    assert cfg.env.num_envs == chosen.get("env.num_envs", defaults.env.num_envs)
    assert cfg.ppo.num_minibatches == chosen.get(
        "ppo.num_minibatches", defaults.ppo.num_minibatches
    )
    assert cfg.ppo.hidden_sizes == chosen.get("ppo.hidden_sizes", defaults.ppo.hidden_sizes)


def test_print_config(capsys):
    assert cli.main(["train", "--env", "CartPole-v1", "--print-config"]) == 0
    assert "env_id: CartPole-v1" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "ppo.bogus=1"], "ppo.bogus: unknown key"),
        (["--env", "NoSuchEnv-v9", "--out", "{tmp}/r"], "NoSuchEnv-v9"),
        (["--resume", "{tmp}/nothing"], "nothing to resume"),
        (["--device", "cuda", "--out", "{tmp}/r2"], "torch sees no CUDA"),
        # before torchrun starts its processes (which each printed it, then a traceback)
        (["--device", "cuda", "--nproc", "2", "--out", "{tmp}/r3"], "torch sees no CUDA"),
    ],
)
def test_errors_are_one_line_exit_2(tmp_path, capsys, argv, message):
    import torch

    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code = cli.main(["-q", "train", "--no-progress", *[a.format(tmp=tmp_path) for a in argv]])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_existing_run_folder_is_not_clobbered(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("x")
    assert cli.main(["-q", "train", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert cli.main(["-q", "train", "--out", str(tmp_path), "--overwrite", "--no-progress"]) == 2
    assert (tmp_path / "keep.txt").exists()


def _parsers(parser, name="orin-rl"):
    """(name, parser) of the top level and every subcommand."""
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


class TestHelp:
    def test_every_command_and_flag_is_described(self):
        """A walk over the whole parser: a description per command, a help text per flag
        (so a flag added without one fails here)."""
        missing = []
        for name, parser in _parsers(cli.build_parser()):
            if not (parser.description or "").strip():
                missing.append(f"{name}: no description")
            for action in parser._actions:
                if isinstance(action, argparse._SubParsersAction):
                    undescribed = [a.dest for a in action._choices_actions if not a.help]
                    missing += [f"{name} {c}: no one-line help" for c in undescribed]
                elif not (action.help or "").strip() or action.help == argparse.SUPPRESS:
                    missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
        assert not missing, "undocumented: " + "; ".join(missing)

    def test_top_level_help_says_what_each_command_is_for(self, capsys):
        with pytest.raises(SystemExit) as exc:
            cli.main(["--help"])
        out = capsys.readouterr().out
        assert exc.value.code == 0
        assert cli.__doc__.strip() not in out  # not the module docstring
        sub = next(
            a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)
        )
        for choice in sub._choices_actions:
            line = next(line for line in out.splitlines() if line.strip().startswith(choice.dest))
            assert choice.help.split()[0] in line, line

    @pytest.mark.parametrize("command", ["train", "export", "build", "run", "eval", "bench",
                                         "doctor", "demo"])  # fmt: skip
    def test_each_command_help_prints_its_description(self, capsys, command):
        with pytest.raises(SystemExit) as exc:
            cli.main([command, "--help"])
        out = " ".join(capsys.readouterr().out.split())
        parser = dict(_parsers(cli.build_parser()))[f"orin-rl {command}"]
        assert exc.value.code == 0 and " ".join(parser.description.split()) in out

    def test_main_parses_with_the_named_commands_flags_alone(self, capsys):
        """``main`` builds only its command's flags (the others' imported the training config
        into the robot's ``run``); every command is still listed and parses the same."""
        from orin_rl.cli.app import command_of

        assert command_of(["-q", "--debug", "run", "--model", "m"]) == "run"
        assert command_of(["--version"]) is None and command_of(["nope", "run"]) is None
        only = cli.build_parser(only="run")
        argv = ["-q", "run", "--model", "m", "--rate", "0", "--steps", "5"]
        assert vars(only.parse_args(argv)) == vars(cli.build_parser().parse_args(argv))
        with pytest.raises(SystemExit):
            only.parse_args(["train", "--env", "CartPole-v1"])  # not run's: no train flags
        capsys.readouterr()
        sub = next(a for a in only._actions if isinstance(a, argparse._SubParsersAction))
        assert set(sub.choices) == set(cli.COMMANDS)

    def test_train_is_not_described_as_ppo_only(self):
        description = dict(_parsers(cli.build_parser()))["orin-rl train"].description
        assert all(algo in description for algo in ("PPO", "SAC", "DQN"))


def test_ctrl_c_prints_the_resume_command_and_a_resume_prints_its_folder(tmp_path):
    """A real SIGINT to a training process: the output ends with the command that resumes it;
    that command says which folder it continues."""
    run = tmp_path / "my run"  # a space: the printed command quotes it
    base = [sys.executable, "-m", "orin_rl.cli", "-q", "train", "--no-progress"]
    train = [*base, "--total-steps", "200000", "--set", "train.checkpoint_every=1",
             "--set", "train.eval_episodes=1", "--set", "train.tensorboard=false",
             "--out", str(run)]  # fmt: skip

    def interrupt(argv) -> str:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        start = len(read_metrics(run / "metrics.jsonl"))
        deadline = time.monotonic() + 120
        while len(read_metrics(run / "metrics.jsonl")) < start + 2:
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        return out

    out = interrupt(train)
    resume = f"orin-rl train --resume {shlex.quote(str(run))}"
    assert out.splitlines()[-1].strip() == resume
    out = interrupt([*base, "--resume", str(run)])
    assert out.splitlines()[0] == f"run folder: {run} (resumed)"
    assert out.splitlines()[-1].strip() == resume


def test_a_second_ctrl_c_still_names_the_resume_command(tmp_path, monkeypatch, capsys):
    """A second Ctrl-C stops training at once (KeyboardInterrupt): the one error line still
    says how to continue from the last checkpoint."""
    import orin_rl.runners

    def killed(cfg, run_dir, **kwargs):
        run_dir.mkdir()
        (run_dir / "checkpoint.pt").write_bytes(b"the last checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(orin_rl.runners, "train", killed)
    run = tmp_path / "run"
    assert cli.main(["-q", "train", "--out", str(run)]) == 130
    err = capsys.readouterr().err.strip()
    assert err == (
        f"orin-rl train: interrupted; the last checkpoint continues with: "
        f"orin-rl train --resume {run}"
    )


SHORT_TRAIN = [sys.executable, "-m", "orin_rl.cli", "train", "--env", "CartPole-v1",
               "--total-steps", "1024", "--set", "train.tensorboard=false",
               "--set", "train.eval_episodes=1"]  # fmt: skip


class TestProgress:
    def test_plain_lines_where_output_is_not_a_terminal(self, tmp_path):
        """Piped to a file or CI: log lines, no tqdm carriage returns."""
        proc = subprocess.run(
            [*SHORT_TRAIN, "--out", str(tmp_path / "r")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        assert "\r" not in proc.stdout + proc.stderr
        steps = re.findall(
            r"CartPole-v1: step ([\d,]+) / 1,024 \((\d+)%\), [\d,]+ steps/s", proc.stderr
        )
        assert steps[0] == ("256", "25") and steps[-1] == ("1,024", "100")  # first and last

    def test_a_bar_on_a_terminal(self, tmp_path):
        out = _on_terminal([*SHORT_TRAIN, "--out", str(tmp_path / "r")])
        assert re.search(r"CartPole-v1: +\d+%\|", out), out[-2000:]  # tqdm's bar
        assert "step 1,024 / 1,024" not in out

    def test_quiet_shows_neither(self, tmp_path):
        out = _on_terminal([*SHORT_TRAIN[:3], "-q", *SHORT_TRAIN[3:], "--out", str(tmp_path / "r")])
        assert "eval return" in out  # the summary table still comes
        assert "%|" not in out and "step 1,024" not in out


def _on_terminal(argv: list[str]) -> str:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal 120 columns wide; its output."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    proc = subprocess.Popen(argv, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    assert proc.wait(timeout=300) == 0
    return b"".join(chunks).decode(errors="replace")


def test_resume_command_of_a_multi_process_run_keeps_nproc():
    from pathlib import Path

    assert cli._resume_command(Path("runs/a b"), 2) == "orin-rl train --resume 'runs/a b' --nproc 2"
    assert cli._resume_command(Path("runs/x"), 1) == "orin-rl train --resume runs/x"


class TestMissingEnvDependency:
    """A gymnasium env whose family's package is missing: one line naming what to install."""

    def test_box2d_env_names_gymnasium_box2d(self, tmp_path, capsys):
        if _importable("Box2D"):
            pytest.skip("Box2D is installed here")
        code = cli.main(["-q", "train", "--env", "LunarLander-v3", "--out", str(tmp_path / "r")])
        err = capsys.readouterr().err.strip()
        assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
        assert 'gymnasium[box2d]"' in err and "mujoco" not in err.lower(), err

    def test_eval_and_run_path_names_gymnasium_box2d(self):
        from orin_rl.envs.factory import EnvMakeError, make_env

        if _importable("Box2D"):
            pytest.skip("Box2D is installed here")
        with pytest.raises(EnvMakeError) as exc:
            make_env("LunarLander-v3")
        assert 'gymnasium[box2d]"' in str(exc.value) and "mujoco" not in str(exc.value).lower()

    @pytest.mark.parametrize(
        ("env_id", "install"),
        [
            ("LunarLander-v3", 'pip install "gymnasium[box2d]"'),
            ("CarRacing-v3", 'pip install "gymnasium[box2d]"'),
            ("Hopper-v5", "pip install 'orin-rl[mujoco]'"),
            ("ALE/Pong-v5", "pip install 'orin-rl[pixels]'"),
            ("MinAtar/Breakout-v1", "pip install 'orin-rl[pixels]'"),
            ("CartPole-v1", 'pip install "gymnasium[classic-control]"'),
            ("FrozenLake-v1", 'pip install "gymnasium[toy-text]"'),
        ],
    )
    def test_each_family_gets_its_own_package(self, env_id, install):
        from orin_rl.envs.factory import install_hint

        assert install in install_hint(env_id)

    def test_the_orin_rl_extras_named_exist(self):
        from pathlib import Path

        import tomllib

        from orin_rl.envs.factory import INSTALL_HINTS

        pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
        extras = pyproject["project"]["optional-dependencies"]
        named = set(re.findall(r"orin-rl\[(\w+)\]", " ".join(INSTALL_HINTS.values())))
        assert named and named <= set(extras)

    def test_unknown_family_gets_no_guess(self):
        from orin_rl.envs.factory import install_hint

        assert install_hint("mypkg.envs:Thing-v0") is None


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _exit_code(argv) -> int:
    """``cli.main``'s code, whether it returned it or argparse exited with it."""
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


BENCH = ["bench", "--model", "cnn-seed", "--backends", "torch", "--iters", "1", "--batch", "1"]
"""A bench that works (a batch-1 row of the seed CNN on torch); the cases below add one bad flag."""


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ([*BENCH, "--batch", "0"], "--batch"),
        ([*BENCH, "--batch", "1,-4"], "--batch"),
        ([*BENCH, "--iters", "0"], "--iters"),
        ([*BENCH, "--threads", "-1"], "--threads"),
        (["run", "--model", "m", "--steps", "-5"], "--steps"),
        (["run", "--model", "m", "--rate", "-1"], "--rate"),
        (["run", "--model", "m", "--rate", "nan"], "--rate"),
        (["run", "--model", "m", "--cpu", "-2"], "--cpu"),
        (["export", "runs/none", "--batch", "0"], "--batch"),
        (["export", "runs/none", "--opset", "0"], "--opset"),
        (["eval", "m", "--episodes", "0"], "--episodes"),
        (["eval", "m", "--seed", "-1"], "--seed"),
        (["demo", "--steps", "0"], "--steps"),
        (["train", "--num-envs", "0"], "--num-envs"),
        (["train", "--total-steps", "-1"], "--total-steps"),
        (["train", "--control-rate", "0"], "--control-rate"),
        (["plant-server", "--port", "70000"], "--port"),
        (
            ["run", "--model", "m", "--plant", "unitree-g1", "--dds-peers", "no such host!"],
            "--dds-peers",
        ),
        (["sim-robot", "--dds-peers", ","], "--dds-peers"),
    ],
)
def test_nonsense_numbers_are_one_line_exit_2_before_any_work(
    tmp_path, monkeypatch, capsys, argv, flag
):
    """`bench --batch 0` printed a batch-0 row and exited 0; every command's numeric flags
    now stop at the parser with the one-line error (and nothing written)."""
    monkeypatch.chdir(tmp_path)
    code = _exit_code(["-q", *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and flag in err and "Traceback" not in err, err
    assert err.startswith(f"orin-rl {argv[0]}: error: ")
    assert not any(tmp_path.iterdir())  # no bench/, no run folder


def test_run_rate_0_still_means_as_fast_as_possible():
    args = cli.build_parser().parse_args(["run", "--model", "m", "--rate", "0"])
    assert args.rate == 0.0


def test_bench_says_where_it_wrote_its_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["-q", *BENCH]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    written = [tmp_path / "bench" / f"infer.{ext}" for ext in ("json", "md", "png")]
    assert all(p.is_file() for p in written)
    assert all(str(p.relative_to(tmp_path)) in last for p in written), last
