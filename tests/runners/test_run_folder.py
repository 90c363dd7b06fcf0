"""The run folder on resume: metrics.jsonl is made fit to append to, and whatever of it is not a
JSON record is kept aside with one warning, never lost in silence (issue 41 item 11)."""

from __future__ import annotations

import json
import logging

from orin_rl import cli
from orin_rl.runners.logger import read_metrics
from orin_rl.runners.run_folder import repair_metrics


def _line(iteration: int) -> bytes:
    return json.dumps({"global_step": 256 * iteration, "iteration": iteration}).encode() + b"\n"


TORN = b'{"global_step": 1280, "iteration": 5, "ti'
"""What a crash leaves while it writes iteration 5's record: no end, no newline."""


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


class TestRepairMetrics:
    def test_a_torn_last_line_is_kept_aside_with_one_warning(self, tmp_path, caplog):
        good = b"".join(_line(i) for i in range(1, 5))
        (tmp_path / "metrics.jsonl").write_bytes(good + TORN)
        repair_metrics(tmp_path, iteration=4)
        assert (tmp_path / "metrics.jsonl").read_bytes() == good  # the next record starts a line
        assert (tmp_path / "metrics.jsonl.corrupt").read_bytes() == TORN + b"\n"
        [warning] = _warnings(caplog)
        assert "its last line (5) cut off mid-write by a crash" in warning
        assert warning.endswith("metrics.jsonl.corrupt")

    def test_lines_in_the_middle_are_kept_aside_and_named(self, tmp_path, caplog):
        bad = [b"{not json", b"[1, 2]", b"\xff\xfe garbage"]
        lines = [_line(1), bad[0] + b"\n", _line(2), bad[1] + b"\n", bad[2] + b"\n", _line(3)]
        (tmp_path / "metrics.jsonl").write_bytes(b"".join(lines))
        repair_metrics(tmp_path, iteration=3)
        assert (tmp_path / "metrics.jsonl").read_bytes() == _line(1) + _line(2) + _line(3)
        assert (tmp_path / "metrics.jsonl.corrupt").read_bytes() == b"\n".join(bad) + b"\n"
        [warning] = _warnings(caplog)
        assert "3 lines in the middle not a JSON record (line 2, 4, 5" in warning
        assert "last line" not in warning

    def test_a_whole_file_is_left_as_it_is(self, tmp_path, caplog):
        good = b"".join(_line(i) for i in range(1, 4))
        (tmp_path / "metrics.jsonl").write_bytes(good)
        repair_metrics(tmp_path, iteration=3)
        assert (tmp_path / "metrics.jsonl").read_bytes() == good
        assert not (tmp_path / "metrics.jsonl.corrupt").exists() and not _warnings(caplog)

    def test_records_after_the_checkpoint_go_and_a_missing_newline_is_added(self, tmp_path):
        (tmp_path / "metrics.jsonl").write_bytes(_line(1) + _line(2) + _line(3).rstrip())
        repair_metrics(tmp_path, iteration=2)  # 3 was logged, then the crash: it is run again
        assert (tmp_path / "metrics.jsonl").read_bytes() == _line(1) + _line(2)
        (tmp_path / "metrics.jsonl").write_bytes(_line(1) + _line(2).rstrip())
        repair_metrics(tmp_path, iteration=2)
        assert (tmp_path / "metrics.jsonl").read_bytes() == _line(1) + _line(2)


def test_resume_after_a_torn_metrics_line_logs_every_iteration_once(tmp_path, caplog):
    """A crash while iteration 5 was logged (the checkpoint is iteration 4's): the resumed run
    logs 5 again. Appended after the torn line, its record joined it and both were lost."""
    run = tmp_path / "run"
    train = ["-q", "train", "--env", "CartPole-v1", "--device", "cpu", "--no-progress",
             "--set", "train.tensorboard=false", "--set", "train.eval_episodes=1"]  # fmt: skip
    assert cli.main([*train, "--total-steps", "1024", "--out", str(run)]) == 0
    with (run / "metrics.jsonl").open("ab") as f:
        f.write(TORN)
    with caplog.at_level(logging.WARNING):
        assert cli.main(["-q", "train", "--resume", str(run), "--total-steps", "2048"]) == 0
    assert [r["iteration"] for r in read_metrics(run / "metrics.jsonl")] == list(range(1, 9))
    assert all(json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines())
    assert (run / "metrics.jsonl.corrupt").read_bytes() == TORN + b"\n"
    [warning] = _warnings(caplog)
    assert "metrics.jsonl: its last line (5) cut off mid-write by a crash" in warning
