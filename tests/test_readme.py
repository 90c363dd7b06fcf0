"""The README's Python API example runs as written (on a run trained for a moment)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_python_api_example_runs(tiny_run, monkeypatch, tmp_path):
    section = README.read_text().split("## Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "orin_rl.load_policy" in code and "evaluate_policy" in code
    run = tiny_run("CartPole-v1")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "mine").symlink_to(run)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)  # nosec B102: the project's own README
    assert scope["action"].shape == () and scope["actions"].shape == (2,)
    assert scope["result"].episodes == 20 and len(scope["result"].lengths) == 20
