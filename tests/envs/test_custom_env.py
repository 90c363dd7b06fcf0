"""Your own environment: ``module:EnvId``, ``env.kwargs`` / ``--env-kwargs``, ``env.wrappers``,
with the example of docs/custom_env.md (docs/examples/goal_seek.py)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml

from orin_rl import cli, envs
from orin_rl.envs.factory import make_env
from tests.conftest import REQUIRE_TEST_TOOLS

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"
ENV_ID = "goal_seek:GoalSeek-v0"
WRAPPERS = [
    {"wrapper": "goal_seek:ScaleReward", "kwargs": {"scale": 2.0}},
    "gymnasium.wrappers:TimeAwareObservation",  # appends the time step: observations (3,)
]


@pytest.fixture
def in_examples(monkeypatch):
    """Run from docs/examples, as the docs say, with sys.path and the module restored after."""
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.setattr(sys, "path", list(sys.path))


SHORT = [
    *("--num-envs", "4", "--total-steps", "512", "--no-progress"),
    *("--set", "ppo.num_steps=32", "--set", "train.eval_episodes=4"),
    *("--set", "train.tensorboard=false"),
]


def _train(tmp_path: Path, *extra: str) -> int:
    wrappers = f"env.wrappers={json.dumps(WRAPPERS)}"
    kwargs = ("--env-kwargs", '{"size": 5}')
    argv = ["-q", "train", "--env", ENV_ID, *kwargs, "--set", wrappers, *SHORT]
    return cli.main([*argv, "--out", str(tmp_path / "run"), *extra])


def test_the_docs_example_trains_exports_evaluates_and_runs(in_examples, tmp_path, capsys):
    """Through the CLI: train a few iterations, export, evaluate and run, each with the
    constructor kwargs and both wrappers applied."""
    assert _train(tmp_path) == 0
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["total_steps"] == 512 and summary["env_id"] == ENV_ID
    env_cfg = yaml.safe_load((run / "config.yaml").read_text())["env"]
    assert env_cfg["kwargs"] == {"size": 5} and env_cfg["wrappers"] == WRAPPERS
    import torch

    state = torch.load(run / "checkpoint.pt", weights_only=True)
    assert state["policy_spec"]["obs_shape"] == [3]  # TimeAwareObservation was there

    assert cli.main(["-q", "export", str(run)]) == 0
    info = json.loads((run / "bundle" / "policy.json").read_text())
    assert info["env_config"] == {"kwargs": {"size": 5}, "wrappers": WRAPPERS}

    report = tmp_path / "eval.json"
    seed = summary["seed"] + 2**30  # the final evaluation's seeds
    capsys.readouterr()
    argv = ["-q", "eval", str(run / "bundle"), "--episodes", "4", "--seed", str(seed)]
    assert cli.main([*argv, "--report", str(report)]) == 0
    data = json.loads(report.read_text())
    assert data["return_mean"] == summary["eval_return_mean"]
    for ret, length in zip(data["returns"], data["lengths"], strict=True):
        # scaled by 2: -0.1 a step, +1 at the goal (-0.1 * 50 when the time limit hits)
        reached = 2.0 * (1.0 - 0.1 * (length - 1))
        assert ret == pytest.approx(reached) or (length == 50 and ret == pytest.approx(-10.0))

    run_report = tmp_path / "run.json"
    argv = ["-q", "run", "--model", str(run / "bundle"), "--rate", "0", "--steps", "200"]
    assert cli.main([*argv, "--report", str(run_report)]) == 0
    assert json.loads(run_report.read_text())["iterations"] == 200


def test_kwargs_and_wrappers_reach_every_env(in_examples):
    vec = envs.make(ENV_ID, 3, env_kwargs={"size": 6}, wrappers=WRAPPERS)
    try:
        for sub in vec._vec.envs:
            assert sub.unwrapped.size == 6
            assert sub.env.scale == 2.0  # ScaleReward sits under TimeAwareObservation
        assert vec.observation_space.shape == (3,)
    finally:
        vec.close()
    one = make_env(ENV_ID, {"kwargs": {"size": 6}, "wrappers": WRAPPERS})
    assert one.unwrapped.size == 6 and one.observation_space.shape == (3,)
    assert make_env(ENV_ID, {"kwargs": {"size": 6}}, kwargs={"size": 3}).unwrapped.size == 3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", 'env.wrappers=["goal_seek:Nope"]'], "'goal_seek' has no 'Nope'"),
        (["--set", 'env.wrappers=["no_such_module_xyz:W"]'], "no module 'no_such_module_xyz'"),
        (["--set", "env.wrappers=[nocolon]"], "not a module:Callable name"),
        (
            ["--set", 'env.wrappers=[{wrapper: "goal_seek:ScaleReward", kwargs: {nope: 1}}]'],
            "wrapper goal_seek:ScaleReward: ",
        ),
        (["--env-kwargs", "[1]"], "--env-kwargs takes a JSON object"),
        (["--env-kwargs", "{size: 5}"], "--env-kwargs is not valid JSON"),
        (["--env-kwargs", '{"bogus": 1}'], "check env.kwargs"),
        (["--env", "no_such_module_xyz:X-v0"], "no module 'no_such_module_xyz'"),
        (["--env-backend", "gpu", "--env", "CartPole-v1"], "GPU-native envs take neither"),
    ],
)
def test_bad_custom_env_input_is_one_line_exit_2(in_examples, tmp_path, capsys, extra, message):
    assert _train(tmp_path, *extra) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "run").exists()  # nothing half-made


@pytest.mark.skipif(
    importlib.util.find_spec("moviepy") is None and not REQUIRE_TEST_TOOLS,
    reason="moviepy not installed (extra: pip install 'orin-rl[video]')",
)
def test_video_of_the_custom_env(in_examples, tmp_path, capsys):
    """The example draws its own frames (numpy): only moviepy is needed for its MP4s."""
    assert _train(tmp_path) == 0
    assert cli.main(["-q", "export", str(tmp_path / "run")]) == 0
    videos = tmp_path / "videos"
    argv = ["-q", "eval", str(tmp_path / "run" / "bundle"), "--episodes", "2"]
    assert cli.main([*argv, "--video", str(videos)]) == 0
    files = sorted(videos.glob("*.mp4"))
    assert [f.name for f in files] == ["GoalSeek-v0-episode-0.mp4", "GoalSeek-v0-episode-1.mp4"]
    assert all(f.stat().st_size > 500 for f in files)


@pytest.mark.filterwarnings("ignore:.*Overriding environment")
def test_custom_module_is_found_in_the_current_folder(in_examples, monkeypatch):
    """The orin-rl script does not put the current folder on sys.path; the env's module is
    looked for there after the path (appended: nothing installed is shadowed)."""
    from orin_rl.envs.factory import import_module

    monkeypatch.delitem(sys.modules, "goal_seek", raising=False)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(EXAMPLES))])
    assert import_module("goal_seek", ENV_ID).__file__ == str(EXAMPLES / "goal_seek.py")
    assert sys.path[-1] == str(EXAMPLES)


def test_a_config_naming_the_former_image_envs_module_still_works():
    """The pixel wrappers moved from ``orin_rl.image_envs`` to ``orin_rl.envs.images``: a config
    written before (``orin_rl.image_envs:rendered``) makes the same env as the new name."""
    pytest.importorskip("pygame")  # classic control's renderer
    from orin_rl.envs import images
    from orin_rl.envs.factory import PROJECT_MODULES, import_object

    assert PROJECT_MODULES["orin_rl.image_envs"]() is images
    for name in ("atari", "minatar", "rendered"):
        found = import_object(f"orin_rl.image_envs:{name}", "env.wrappers[0]")
        assert found is getattr(images, name)
    shapes = []
    for module in ("orin_rl.image_envs", "orin_rl.envs.images"):
        wrapper = {"wrapper": f"{module}:rendered", "kwargs": {"size": 16, "grey": True}}
        config = {"kwargs": {"render_mode": "rgb_array"}, "wrappers": [wrapper]}
        env = make_env("Pendulum-v1", config)
        shapes.append(env.reset(seed=0)[0].shape)
        env.close()
    assert shapes == [(16, 16, 1), (16, 16, 1)]


def test_several_agents_evaluate_with_the_wrappers(tmp_path):
    """--num-agents evaluates CartPole on its GPU-native batch, which has no wrappers: with
    wrappers set, each agent is evaluated on the wrapped gymnasium envs instead."""
    argv = ["-q", "train", "--env", "CartPole-v1", "--num-agents", "2", "--no-preset",
            "--set", 'env.wrappers=["gymnasium.wrappers:TimeAwareObservation"]', *SHORT,
            "--out", str(tmp_path / "run")]  # fmt: skip
    assert cli.main(argv) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert len(summary["agents"]) == 2 and summary["eval_episodes"] == 8
