"""What a new user met walking the README on the CPU box (issue 51 item 5): ``eval`` silent for
minutes on an mjlab task, ``make demo`` writing a progress bar into a log file, ``doctor``
advising a CUDA torch that was installed, and "1 episodes"."""

from __future__ import annotations

import io

import pytest

from orin_rl.cli.app import main


def test_eval_reports_each_episode(tiny_run):
    """``evaluate_policy`` hands each finished episode to ``on_episode`` and the CLI's
    ``EpisodeProgress`` shows it (an mjlab episode takes seconds on a CPU: ten of them ran
    without a sign of life) (mutation: no ``on_episode`` call: no line)."""
    from orin_rl.cli.common import EpisodeProgress
    from orin_rl.evaluation import evaluate_policy
    from orin_rl.policy import load_policy

    stream = io.StringIO()
    with load_policy(tiny_run("CartPole-v1") / "bundle") as policy:
        evaluate_policy(policy, episodes=3, on_episode=EpisodeProgress(stream, every_s=0.0))
    lines = stream.getvalue().splitlines()
    assert [line.split(":")[0] for line in lines] == [
        f"eval         episode {i}/3" for i in (1, 2, 3)
    ], lines
    assert "\r" not in stream.getvalue()  # piped: plain lines, no carriage return


def test_the_demo_logs_plain_lines_when_piped(monkeypatch, capsys, tmp_path):
    """``make demo > log``: the demo's training drew a tqdm bar (carriage returns) into the
    file; where stdout is not a terminal it now asks for plain progress lines (mutation: the
    demo's ``train`` called without ``progress``: the default bar)."""
    import orin_rl.runners

    seen = {}

    class Stop(Exception):
        pass

    def train(cfg, out, overwrite=False, progress=True, **_):
        seen["progress"] = progress
        raise Stop

    monkeypatch.setattr(orin_rl.runners, "train", train)
    with pytest.raises(Stop):
        main(["demo", "--device", "cpu", "--out", str(tmp_path / "demo")])
    assert seen["progress"] == "lines"


def test_doctor_says_no_gpu_for_a_cuda_torch_without_one(monkeypatch):
    """A CUDA build of torch on a machine without a GPU: the doctor advised "a CUDA build of
    torch" (installed already); it says there is no GPU (mutation: the build not looked at)."""
    torch = pytest.importorskip("torch")
    from orin_rl import doctor

    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    row = next(r for r in doctor.checks() if r.item == "torch")
    assert "no GPU" in row.detail and "CUDA 12.8 build" in row.detail, row
    assert "CUDA build of torch" not in row.next_step, row


def test_one_episode_is_singular(monkeypatch, capsys):
    """``run``'s summary said "over 1 episodes" (mutation: the plural unconditional)."""
    import orin_rl.runtime.run

    lat = {"p50": 1.0, "p99": 2.0, "p999": 3.0, "max": 4.0}
    report = {"backend": "onnxruntime", "iterations": 200, "latency_us": lat,
              "deadline_misses": 0, "overruns": 0, "non_finite_events": 0,
              "episode_returns": [200.0]}  # fmt: skip
    monkeypatch.setattr(orin_rl.runtime.run, "run_policy", lambda *a, **k: report)
    assert main(["run", "--model", "nowhere", "--steps", "200"]) == 0
    out = capsys.readouterr().out
    assert "200.0 over 1 episode\n" in out, out
    from orin_rl.cli.common import plural

    assert plural(1, "episode") == "1 episode" and plural(1200, "step") == "1,200 steps"
