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
    from orin_rl.presets import GPU_PRESETS, PRESETS

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
