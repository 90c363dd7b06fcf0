"""What the CLI writes and says around the work: output folders checked before it, the solved
line after it, the default run folder's name."""

from __future__ import annotations

import pytest

from orin_rl import cli
from orin_rl.cli.train import _solved_line, default_run_folder


def test_run_makes_its_output_folders_before_the_loop(tiny_run, tmp_path):
    """``--histogram missing_dir/run.png`` ran the whole loop, then failed with a bare
    "[Errno 2]"; the folders are made first, so the outputs land."""
    run = tiny_run("CartPole-v1")
    hist, report = tmp_path / "new" / "run.png", tmp_path / "other" / "deep" / "run.json"
    argv = ["-q", "run", "--model", str(run / "bundle"), "--steps", "20", "--rate", "0",
            "--histogram", str(hist), "--report", str(report)]  # fmt: skip
    assert cli.main(argv) == 0
    assert hist.is_file() and report.is_file()


def test_an_unusable_output_fails_before_the_work(tiny_run, tmp_path, capsys, monkeypatch):
    import orin_rl.evaluation
    import orin_rl.runtime.run

    def no_work(*args, **kwargs):
        raise AssertionError("the work started before its output was checked")

    monkeypatch.setattr(orin_rl.runtime.run, "run_policy", no_work)
    monkeypatch.setattr(orin_rl.evaluation, "evaluate_policy", no_work)
    run = tiny_run("CartPole-v1")
    blocker = tmp_path / "file"
    blocker.write_text("a file where a folder should be")
    argv = ["-q", "run", "--model", str(run / "bundle"), "--histogram", str(blocker / "r.png")]
    assert cli.main(argv) == 2
    assert "--histogram" in capsys.readouterr().err
    argv = ["-q", "eval", str(run / "bundle"), "--episodes", "1", "--report", str(tmp_path)]
    assert cli.main(argv) == 2
    assert "is a folder" in capsys.readouterr().err


SUMMARY = {"solved_threshold": -200.0, "eval_return_mean": -250.0}


@pytest.mark.parametrize(
    ("solved", "solved_at", "want"),
    [
        (False, {"global_step": 4005, "time_s": 12.3},
         "no: the final policy's evaluation is below the threshold -200, though a periodic "
         "evaluation reached it at step 4,005 (12.3 s)"),
        (True, {"global_step": 4005, "time_s": 12.3},
         "yes (threshold -200; a periodic evaluation reached it at step 4,005 (12.3 s))"),
        (False, None, "no: the final policy's evaluation is below the threshold -200"),
    ],
)  # fmt: skip
def test_the_solved_line_never_contradicts_itself(solved, solved_at, want):
    """After an online resume the report said "solved no (threshold -200.0) (first at step
    4,005 ...)": "no" and "first at" in one breath."""
    assert _solved_line({**SUMMARY, "solved": solved, "solved_at": solved_at}) == want


@pytest.mark.parametrize(
    ("env_id", "name"),
    [("goal_seek:GoalSeek-v0", "GoalSeek-v0"), ("CartPole-v1", "CartPole-v1"),
     ("pkg.tasks:Robot/Walk v2", "Robot_Walk_v2")],
)  # fmt: skip
def test_the_default_run_folder_has_no_colon(env_id, name):
    folder = default_run_folder(env_id)
    assert folder.parent.name == "runs" and folder.name.startswith(f"{name}-")
    assert ":" not in str(folder)
