"""Training a finished run further (``--resume RUN --total-steps N``), and what a resume refuses:
an edited config.yaml, a finished run without a longer total, a setting it cannot change."""

from __future__ import annotations

import pytest
import torch
import yaml

from orin_rl import cli
from orin_rl import config as C
from orin_rl.runners import train
from orin_rl.runners.logger import read_metrics

KEYS = ("global_step", "iteration", "losses/policy", "losses/value", "losses/approx_kl")


def _cfg(total_steps: int) -> C.Config:
    return C.apply_overrides(
        C.Config(),
        [
            "env.env_id=CartPole-v1",
            "env.num_envs=4",
            "ppo.num_steps=32",
            "ppo.anneal_lr=false",  # a schedule over total_steps would bend at the extension
            f"train.total_steps={total_steps}",
            "train.eval_every=2",
            "train.eval_episodes=2",
            "train.tensorboard=false",
        ],
    )


def _rows(run):
    return [{k: r.get(k) for k in KEYS} for r in read_metrics(run / "metrics.jsonl")]


def test_a_finished_run_extended_continues_exactly(tmp_path, capsys):
    """1,024 steps, then --resume --total-steps 2,048: the same curve and parameters as one
    run of 2,048 steps; config.yaml says 2,048 afterwards."""
    train(_cfg(2048), tmp_path / "straight", progress=False)
    train(_cfg(1024), tmp_path / "extended", progress=False)
    run = tmp_path / "extended"
    assert cli.main(["-q", "train", "--resume", str(run), "--total-steps", "2048"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"run folder: {run} (resumed)"
    assert _rows(run) == _rows(tmp_path / "straight")
    assert len(_rows(run)) == 16
    a = torch.load(tmp_path / "straight" / "checkpoint.pt", weights_only=False)["algo"]
    b = torch.load(run / "checkpoint.pt", weights_only=False)["algo"]
    assert all(torch.equal(a["policy"][k], b["policy"][k]) for k in a["policy"])
    assert yaml.safe_load((run / "config.yaml").read_text())["train"]["total_steps"] == 2048
    # ... and the run is consistent again: no "config.yaml was edited" on the next resume
    assert cli.main(["-q", "train", "--resume", str(run), "--total-steps", "2560"]) == 0


@pytest.fixture
def finished(tmp_path):
    run = tmp_path / "run"
    train(_cfg(256), run, progress=False)
    return run


def test_a_finished_run_resumed_names_the_way_to_extend_it(finished, capsys):
    assert cli.main(["-q", "train", "--resume", str(finished)]) == 2
    out, err = capsys.readouterr()
    assert "(resumed)" not in out  # the line came before the error it contradicts
    assert "is finished (256 of train.total_steps 256)" in err
    assert f"orin-rl train --resume {finished} --total-steps N" in err


def test_an_edited_config_yaml_is_refused_not_ignored(finished, capsys):
    path = finished / "config.yaml"
    data = yaml.safe_load(path.read_text())
    data["train"]["total_steps"] = 200000
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert cli.main(["-q", "train", "--resume", str(finished)]) == 2
    err = capsys.readouterr().err
    assert "train.total_steps: 256 -> 200000" in err and "--total-steps N" in err


def test_a_broken_config_yaml_is_not_offered_as_a_config(finished, capsys):
    """A config.yaml that does not parse: the message said to train it with --config (issue
    41, item 10); now it says to restore or remove it, and without it the resume goes on."""
    (finished / "config.yaml").write_text("train: [unclosed\n")
    assert cli.main(["-q", "train", "--resume", str(finished)]) == 2
    err = capsys.readouterr().err
    assert "cannot be read" in err and "--config" not in err, err
    (finished / "config.yaml").unlink()
    assert cli.main(["-q", "train", "--resume", str(finished), "--total-steps", "384"]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--num-envs", "8"], "not --num-envs"),
        (["--set", "ppo.learning_rate=1e-3"], "not ppo.learning_rate"),
        (["--total-steps", "128"], "must be above that"),
    ],
)
def test_a_resume_changes_only_how_long_the_run_goes_on(finished, capsys, argv, message):
    assert cli.main(["-q", "train", "--resume", str(finished), *argv]) == 2
    out, err = capsys.readouterr()
    assert message in err and "(resumed)" not in out


@pytest.mark.parametrize("what", ["missing", "corrupt", "bundle"])
def test_no_resumed_line_before_a_resume_error(tmp_path, capsys, what):
    run = tmp_path / "run"
    if what == "corrupt":
        run.mkdir()
        (run / "checkpoint.pt").write_bytes(b"not a checkpoint")
    if what == "bundle":
        run.mkdir()
        (run / "policy.json").write_text("{}")
    assert cli.main(["-q", "train", "--resume", str(run)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
