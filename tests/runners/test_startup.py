"""summary.json's start-up breakdown and the train.matmul switch, on a short CPU run."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest
import torch

from orin_rl.runners import train
from orin_rl.runners.startup import Phases, process_age_s
from tests.runners.test_obs_into_buffer import _cfg

PHASES = ("envs_s", "build_s", "setup_s", "learn_setup_s", "first_iteration_s")


def test_process_age_counts_from_the_process_start():
    """The age grows with the wall clock (its clock ticks: 10 ms; a loaded box may oversleep,
    so only a lower bound and a loose upper one)."""
    age = process_age_s()
    assert age is not None and age > 0.0
    time.sleep(0.05)
    assert 0.04 <= process_age_s() - age < 5.0


def test_phases_add_up(monkeypatch):
    """Phases on a fake clock: repeated names add up, each phase ends at the next mark, and
    the total is the process start plus the phases."""
    from orin_rl.runners import startup

    ticks = [10.0, 10.02, 10.025, 10.035]  # made, mark a, mark b, mark a (then any reader)
    clock = SimpleNamespace(
        perf_counter=lambda: ticks.pop(0) if ticks else 11.0,
        clock_gettime=time.clock_gettime,
        CLOCK_BOOTTIME=time.CLOCK_BOOTTIME,
    )
    monkeypatch.setattr(startup, "time", clock)  # startup's own name only
    p = Phases()
    p.mark("a")
    p.mark("b")
    p.mark("a")
    report = p.report()
    assert report["a"] == pytest.approx(0.03) and report["b"] == pytest.approx(0.005)
    assert report["total_s"] == pytest.approx(report["process_start_s"] + report["a"]
                                              + report["b"], abs=2e-3)  # fmt: skip


@pytest.mark.parametrize("matmul", ["tf32", "fp32"])
def test_summary_has_the_startup_phases_and_matmul_is_set(tmp_path, matmul):
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        started = process_age_s()
        report = train(_cfg(**{"train.matmul": matmul}), tmp_path / "run", progress=False)
        assert torch.backends.cuda.matmul.allow_tf32 is (matmul == "tf32")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    s = report["startup"]
    assert list(s) == ["process_start_s", *PHASES, "total_s"]
    assert all(s[k] >= 0.0 for k in PHASES)
    assert s["process_start_s"] >= started  # this test process started before the runner
    assert s["total_s"] == pytest.approx(sum(s[k] for k in ("process_start_s", *PHASES)),
                                         abs=5e-3)  # fmt: skip
    assert s["first_iteration_s"] <= report["wall_time_s"]  # one iteration of the loop's
