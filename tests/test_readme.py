"""The guides' commands run as written, in order, on the CPU: docs/getting-started.md's list
and docs/custom_env.md's; docs/python-api.md's example runs as written (on a run trained for a
moment); docs/mjlab.md says what mjlab's own tools write and take. (The README's command lines
are the getting-started list's: tests/test_docs.py.)"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GETTING_STARTED = ROOT / "docs" / "getting-started.md"
PYTHON_API = ROOT / "docs" / "python-api.md"
MJLAB_GUIDE = ROOT / "docs" / "mjlab.md"


def test_python_api_example_runs(tiny_run, monkeypatch, tmp_path):
    section = PYTHON_API.read_text().split("# Python API", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "orin_rl.load_policy" in code and "evaluate_policy" in code
    run = tiny_run("CartPole-v1")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "mine").symlink_to(run)
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, "docs/python-api.md", "exec"), scope)  # nosec B102: the project's own guide
    assert scope["action"].shape == () and scope["actions"].shape == (2,)
    assert scope["result"].episodes == 20 and len(scope["result"].lengths) == 20


# ---------------------------------------------------------------- the guides' commands
# Lines that cannot run on a 2-core CPU box, each with the reason; every other command of
# docs/getting-started.md's "What to do next" and docs/custom_env.md runs as written, in order.
CANNOT_RUN_HERE = {
    "source ": "shell activation: the test calls this interpreter's orin_rl.cli",
    "--device cuda": "needs a CUDA GPU (the H200's gpu tests and benchmarks run these)",
    "runs/g1": "the G1 path: tests/robot/test_deploy_readme.py runs the twin and the run",
    "sim-robot": "a twin in the background: tests/robot/test_deploy_readme.py runs it",
    "Hopper-v5": "a 1M-step preset run (docs/benchmarks/locomotion_h200.md)",
    "Acrobot-v1": "a full preset run (tests/runners/test_train_e2e.py trains the presets)",
    "--algo sac": "a full preset run (tests/algorithms/test_offpolicy.py trains SAC)",
    "tensorboard ": "starts a server",
    "orin-rl build": "TensorRT on a Jetson (tests/export/test_tensorrt_logic.py)",
}
VIDEO = "--video"  # runs where moviepy is installed (the [video] extra), else skipped


def _commands(text: str, heading: str) -> list[str]:
    section = text.split(heading, 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.strip() for line in block.splitlines() if line.strip()]


def _run_lines(lines: list[str], cwd: Path) -> list[str]:
    """Run each runnable line in ``cwd`` (``cd`` moves it); return the lines it ran."""
    import importlib.util
    import subprocess
    import sys

    ran = []
    for line in lines:
        argv = shlex.split(line, comments=True)
        if argv[0] == "cd":
            cwd = cwd / argv[1]
            continue
        if any(key in line for key in CANNOT_RUN_HERE):
            continue
        if VIDEO in line and importlib.util.find_spec("moviepy") is None:
            continue
        assert argv[0] == "orin-rl", line
        proc = subprocess.run(
            [sys.executable, "-m", "orin_rl.cli", "-q", *argv[1:]],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"
        ran.append(line)
    return ran


def test_readme_commands_run_as_written_in_order(tmp_path):
    """What to do next: the runs/mine recipe trains (and solves), is trained further,
    exported, evaluated, run and benchmarked, exactly as docs/getting-started.md says."""
    lines = _commands(GETTING_STARTED.read_text(), "## What to do next")
    ran = _run_lines(lines, tmp_path)
    assert any("--out runs/mine" in line for line in ran) and any("bench" in x for x in ran)
    assert len(ran) >= 8, ran
    summary = json.loads((tmp_path / "runs" / "mine" / "summary.json").read_text())
    assert summary["solved"] is True, summary
    assert (tmp_path / "run.png").is_file() and (tmp_path / "eval.json").is_file()


@pytest.mark.parametrize("seed", [2, 3])
def test_readme_recipe_solves_on_other_seeds(tmp_path, seed):
    """The recipe's preset solves within its cap on seeds 1-3 (1 in the test above)."""
    from orin_rl import cli

    lines = _commands(GETTING_STARTED.read_text(), "## What to do next")
    line = next(x for x in lines if "runs/mine" in x)
    argv = shlex.split(line.replace("--seed 1", f"--seed {seed}"), comments=True)[1:]
    assert argv[argv.index("--seed") + 1] == str(seed)
    out = tmp_path / "mine"
    argv[argv.index("--out") + 1] = str(out)
    assert cli.main(["-q", *argv]) == 0
    assert json.loads((out / "summary.json").read_text())["solved"] is True


def test_custom_env_doc_commands_run_as_written(tmp_path):
    """docs/custom_env.md, from its example folder: train with --out, export, eval, run."""
    import shutil

    examples = ROOT / "docs" / "examples"
    shutil.copytree(examples, tmp_path / "docs" / "examples")
    doc = (ROOT / "docs" / "custom_env.md").read_text()
    lines = _commands(doc, "## 2. Train it") + _commands(doc, "## 4. Evaluate")
    ran = _run_lines(lines, tmp_path)
    assert len(ran) >= 3, ran
    assert (tmp_path / "docs" / "examples" / "runs" / "goal" / "bundle" / "policy.json").is_file()


# ---------------------------------------------------------------- mjlab's guide (issue 41)
MJLAB_GO1 = "Mjlab-Velocity-Flat-Unitree-Go1"


def _mjlab_bullet(start: str) -> str:
    """The bullet of docs/mjlab.md that starts with ``start``, on one line."""
    section = MJLAB_GUIDE.read_text()
    bullet = section.split(f"- {start}", 1)[1].split("\n- ", 1)[0].split("\n\n", 1)[0]
    return " ".join(bullet.split())


def test_readme_says_where_mjlabs_train_writes_run_onnx():
    """The command that makes RUN.onnx parses in mjlab's own CLI, and the folder and file the
    guide names are those mjlab's train and runner write."""
    import subprocess
    import sys

    pytest.importorskip("mjlab", reason="needs the mjlab extra")
    from mjlab.rl.runner import MjlabOnPolicyRunner
    from mjlab.scripts.train import TrainConfig

    from orin_rl.envs.mjlab import rl_config

    text = _mjlab_bullet("Trained with mjlab?")
    command = re.search(r"`(python -m mjlab\.scripts\.train [^`]+)`", text).group(1)
    argv = shlex.split(command)
    assert argv[3] == MJLAB_GO1
    help_text = subprocess.run(
        [sys.executable, *argv[1:], "--help"], capture_output=True, text=True, timeout=300
    )
    assert help_text.returncode == 0, help_text.stderr[-2000:]
    assert all(flag in help_text.stdout for flag in argv[4::2]), argv  # --env.scene.num-envs
    root = TrainConfig.__dataclass_fields__["log_root"].default
    assert f"`{root}/<experiment>/<date>_<time>/`" in text
    cfg = rl_config(MJLAB_GO1)
    assert f"`{root}/{cfg.experiment_name}/`" in text and f"{cfg.save_interval} for Go1" in text
    run = f"{root}/{cfg.experiment_name}/2026-12-04_10-00-00"
    folder, name, _ = MjlabOnPolicyRunner._get_export_paths(f"{run}/model_50.pt")
    assert str(folder) == run and name == "2026-12-04_10-00-00.onnx"
    assert "`<date>_<time>.onnx`, the folder's own name" in text


def test_readme_says_which_commands_take_a_bare_run_onnx():
    """``run`` and ``eval`` need --env with mjlab's bare file (it names no task); the command
    lines the guide gives parse (tests/export/test_mjlab_onnx.py runs them on a real export)."""
    from orin_rl.cli.parser import build_parser

    text = _mjlab_bullet("Trained with mjlab?")
    assert "`run`, `bench` and `build` also take the bare file" not in text  # the old claim
    assert "the environment is unknown; pass --env ID" in text
    parser = build_parser()
    for line in re.findall(r"`((?:bench|run|eval|build) [^`]*RUN\.onnx[^`]*)`", text):
        args = parser.parse_args(shlex.split(line.replace("TASK", MJLAB_GO1)))
        if args.command in ("run", "eval"):
            assert args.env == MJLAB_GO1, line


def test_readme_says_how_to_shorten_mjlabs_final_evaluation():
    """The setting the guide names is the config's, with the preset's value, and its
    ``--set`` lines apply; its timings name their source."""
    pytest.importorskip("mjlab", reason="needs the mjlab extra")
    from orin_rl import config as C
    from orin_rl.config.presets import mjlab_preset

    text = _mjlab_bullet("The final evaluation")
    preset = mjlab_preset(MJLAB_GO1, "cpu")["train.eval_episodes"]
    assert f"`train.eval_episodes` worlds of the play configuration ({preset} in the" in text
    for setting in re.findall(r"`--set ([^`]+)`", text):
        C.apply_overrides(C.Config(), [setting.replace("=N", "=200")])
    assert "(benchmarks/mjlab_cpu_eval_times.json)" in text
    timings = json.loads((ROOT / "docs/benchmarks/mjlab_cpu_eval_times.json").read_text())
    assert f"took {round(timings['final_evaluation']['final_eval_time_s'])} s" in text
