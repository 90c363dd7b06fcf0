"""``orin-rl eval`` / ``evaluate_policy``: the trainer's evaluation, reproduced from a bundle."""

from __future__ import annotations

import importlib.util
import json
import sys

import numpy as np
import pytest
import torch

import orin_rl
from orin_rl import cli
from orin_rl.checkpoint import load_policy as load_checkpoint
from orin_rl.evaluation import EvalError, evaluate_policy
from orin_rl.policy import PolicyError
from orin_rl.runners.evaluate import evaluate
from orin_rl.runners.verdict import VERDICT_SEED_OFFSET
from tests.conftest import REQUIRE_TEST_TOOLS, need_module

CARTPOLE = ("CartPole-v1", "ppo", "train.eval_episodes=6", "train.total_steps=2048")


def _eval_cli(capsys, *argv) -> tuple[int, str]:
    code = cli.main(["-q", "eval", *map(str, argv)])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("target", ["bundle", "run"])
def test_eval_reproduces_the_training_evaluation(tiny_run, tmp_path, capsys, target):
    """summary.json's final evaluation (seeds train.seed + 2**30 + i) comes out again, episode
    for episode, from the bundle on ONNX Runtime and from the run folder."""
    run = tiny_run(*CARTPOLE)
    summary = json.loads((run / "summary.json").read_text())
    seed = 1 + VERDICT_SEED_OFFSET  # train.seed 1
    policy, _, _ = load_checkpoint(run)
    expected = evaluate(policy, "CartPole-v1", 6, seed, torch.device("cpu"))
    assert len(set(expected)) > 1  # episodes differ: the seeds matter
    report = tmp_path / "eval.json"
    model = run / "bundle" if target == "bundle" else run
    code, out = _eval_cli(capsys, model, "--episodes", 6, "--seed", seed, "--report", report)
    assert code == 0
    data = json.loads(report.read_text())
    assert data["returns"] == expected
    assert data["return_mean"] == summary["eval_return_mean"]
    assert data["return_std"] == summary["eval_return_std"]
    assert data["episodes"] == summary["eval_episodes"] == 6
    assert data["lengths"] == [int(r) for r in expected]  # CartPole: +1 a step
    assert data["return_min"] == min(expected) and data["return_max"] == max(expected)
    assert data["backend"] in ("onnxruntime", "torch")
    row = next(line for line in out.splitlines() if line.startswith("return"))
    assert row.split()[1:] == [f"{v:.1f}" for v in (np.mean(expected), np.std(expected),
                                                     min(expected), max(expected))]  # fmt: skip


def test_gpu_native_run_evaluates_on_gymnasiums_env(tiny_run, capsys, tmp_path):
    """A run trained on the GPU-native CartPole (here on the CPU device) evaluates on
    gymnasium's CartPole: the trainer's final evaluation, again."""
    run = tiny_run(*CARTPOLE, "env.backend=gpu")
    summary = json.loads((run / "summary.json").read_text())
    report = tmp_path / "eval.json"
    seed = 1 + VERDICT_SEED_OFFSET
    assert (
        _eval_cli(capsys, run / "bundle", "--episodes", 6, "--seed", seed, "--report", report)[0]
        == 0
    )
    assert json.loads(report.read_text())["return_mean"] == summary["eval_return_mean"]


def test_time_limit_of_the_run_is_kept(tiny_run):
    """env.max_episode_steps travels in policy.json: the bundle's episodes end where training's
    did (Pendulum's own limit is 200)."""
    run = tiny_run("Pendulum-v1", "ppo", "env.max_episode_steps=37")
    with orin_rl.load_policy(run / "bundle") as policy:
        result = evaluate_policy(policy, episodes=3, seed=5)
    assert result.lengths == [37, 37, 37]
    policy_ac, _, _ = load_checkpoint(run)
    expected = evaluate(policy_ac, "Pendulum-v1", 3, 5, torch.device("cpu"), 37)
    np.testing.assert_allclose(result.returns, expected, rtol=1e-4)  # fp32 ONNX vs torch


def test_stochastic_eval_needs_the_run_folder(tiny_run, capsys):
    run = tiny_run(*CARTPOLE)
    code = cli.main(["-q", "eval", str(run / "bundle"), "--episodes", "1", "--stochastic"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "pass the run folder" in err
    assert cli.main(["-q", "eval", str(run), "--episodes", "2", "--stochastic"]) == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--episodes", "0"], "--episodes must be positive"),
        (["--env", "NoSuchEnv-v9"], "NoSuchEnv-v9"),
        (["--env", "Pendulum-v1"], "shape"),  # a CartPole policy on Pendulum's observations
    ],
)
def test_bad_input_is_one_line_exit_2(tiny_run, capsys, argv, message):
    code = cli.main(["-q", "eval", str(tiny_run(*CARTPOLE) / "bundle"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err


MISSING_VIDEO = [m for m in ("moviepy", "pygame") if importlib.util.find_spec(m) is None]


@pytest.mark.skipif(
    bool(MISSING_VIDEO) and not REQUIRE_TEST_TOOLS,
    reason=f"{' and '.join(MISSING_VIDEO)} not installed (extra: pip install 'orin-rl[video]')",
)
def test_video_files_are_written(tiny_run, tmp_path, capsys):
    videos = tmp_path / "videos"
    report = tmp_path / "eval.json"
    run = tiny_run(*CARTPOLE)
    code, out = _eval_cli(
        capsys, run / "bundle", "--episodes", 2, "--video", videos, "--report", report
    )
    assert code == 0
    files = sorted(videos.glob("*.mp4"))
    assert [f.name for f in files] == ["CartPole-v1-episode-0.mp4", "CartPole-v1-episode-1.mp4"]
    assert all(f.stat().st_size > 1000 for f in files)
    assert json.loads(report.read_text())["videos"] == [str(f) for f in files]
    assert "2 MP4" in out


def test_video_without_moviepy_names_the_extra(tiny_run, tmp_path, capsys, monkeypatch):
    """Where moviepy is missing (hidden here: the test set-up installs the video extra, so this
    ran nowhere), ``--video`` is one line naming the extra (mutation: the check removed:
    gymnasium's DependencyNotInstalled comes out of the run instead)."""
    find_spec = importlib.util.find_spec
    for name in [m for m in sys.modules if m == "moviepy" or m.startswith("moviepy.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "moviepy", None)  # its import fails, as where missing
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "moviepy" else find_spec(name, *a),
    )
    code = cli.main(["-q", "eval", str(tiny_run(*CARTPOLE) / "bundle"), "--video", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "orin-rl[video]" in err


def test_a_callers_env_stays_open(tiny_run):
    """evaluate_policy closes the envs it makes, never one the caller passed in."""
    import gymnasium as gym

    run = tiny_run(*CARTPOLE)
    policy = orin_rl.load_policy(run / "bundle")
    env = gym.make("CartPole-v1")
    closed = []
    env.close = lambda: closed.append(True)  # what a closed env would record
    evaluate_policy(policy, env, episodes=1, seed=0)
    assert not closed
    env.reset(seed=0)  # still usable
    policy.close()


class TestStableBaselines3Parity:
    """SB3's ``evaluate_policy`` keywords and return values, and its VecEnvs."""

    def test_n_eval_episodes_and_the_mean_std_tuple(self, tiny_run):
        run = tiny_run(*CARTPOLE)
        with orin_rl.load_policy(run / "bundle") as policy:
            result = evaluate_policy(policy, "CartPole-v1", episodes=4, seed=3)
            mean, std = evaluate_policy(policy, "CartPole-v1", n_eval_episodes=4, seed=3)
            returns, lengths = evaluate_policy(
                policy, "CartPole-v1", n_eval_episodes=4, seed=3, return_episode_rewards=True
            )
        assert len(set(result.returns)) > 1  # a real comparison
        assert (mean, std) == (result.return_mean, result.return_std)
        # SB3: np.mean, np.std (population); fmean may differ in the last bit
        assert (mean, std) == pytest.approx((np.mean(result.returns), np.std(result.returns)))
        assert (result[0], result[1]) == (mean, std)
        assert (returns, lengths) == (result.returns, result.lengths)
        assert isinstance(returns, list) and isinstance(lengths, list)

    def test_episodes_and_n_eval_episodes_together_is_an_error(self, tiny_run):
        policy = orin_rl.load_policy(tiny_run(*CARTPOLE) / "bundle")
        with policy, pytest.raises(EvalError, match="n_eval_episodes") as info:
            evaluate_policy(policy, episodes=3, n_eval_episodes=3)
        assert "\n" not in str(info.value)

    def test_sb3s_positional_deterministic_is_not_taken_for_a_seed(self, tiny_run):
        """SB3's fourth positional argument is ``deterministic``; here it is ``seed``."""
        policy = orin_rl.load_policy(tiny_run(*CARTPOLE) / "bundle")
        with policy, pytest.raises(EvalError, match="deterministic=") as info:
            evaluate_policy(policy, "CartPole-v1", 2, True)
        assert "\n" not in str(info.value)

    def test_sampled_evaluation(self, tiny_run):
        """``deterministic=False`` samples where the policy can (a run folder) and is one line
        naming the fix where it cannot (a bundle)."""
        run = tiny_run(*CARTPOLE)
        with orin_rl.load_policy(run, backend="onnxruntime") as policy:
            torch.manual_seed(0)
            sampled = evaluate_policy(policy, n_eval_episodes=6, seed=1, deterministic=False)
            mode = evaluate_policy(policy, n_eval_episodes=6, seed=1)
        assert not sampled.deterministic and sampled.returns != mode.returns
        policy = orin_rl.load_policy(run / "bundle")
        with (
            policy,
            pytest.raises(PolicyError, match=r"predict\(obs, deterministic=True\)") as info,
        ):
            evaluate_policy(policy, n_eval_episodes=1, deterministic=False)
        assert "\n" not in str(info.value)

    @pytest.mark.parametrize("env", [42, "vector"], ids=["int", "gymnasium-vector-env"])
    def test_other_envs_are_one_line_errors(self, tiny_run, env):
        import gymnasium as gym

        if env == "vector":
            env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
        policy = orin_rl.load_policy(tiny_run(*CARTPOLE) / "bundle")
        with policy, pytest.raises(EvalError, match=r"gymnasium\.Env") as info:
            evaluate_policy(policy, env, n_eval_episodes=2)
        assert "\n" not in str(info.value) and "VecEnv" in str(info.value)

    @pytest.mark.parametrize(
        ("run_args", "n_envs", "episodes", "monitor"),
        [(CARTPOLE, 3, 7, False), (CARTPOLE, 1, 3, False), (("Pendulum-v1",), 2, 3, True)],
        ids=["cartpole-3-envs", "cartpole-1-env", "pendulum-monitor"],
    )
    def test_sb3_vecenv_as_sb3_counts_it(self, tiny_run, run_args, n_envs, episodes, monitor):
        """On an SB3 VecEnv the episodes are those of SB3's own ``evaluate_policy`` (run here with
        this policy's ``predict``): split evenly over the sub-envs, listed as they end, read
        from a Monitor's ``info["episode"]`` where there is one. Sub-env k's first episode is
        the gymnasium env's episode of seed + k."""
        import gymnasium as gym

        sb3_evaluation = need_module("stable_baselines3.common.evaluation", "needs SB3")
        from stable_baselines3.common.monitor import Monitor
        from stable_baselines3.common.vec_env import DummyVecEnv

        env_id = run_args[0]

        def venv():
            wrap = Monitor if monitor else (lambda e: e)
            return DummyVecEnv([lambda: wrap(gym.make(env_id))] * n_envs)

        seed = 11
        with orin_rl.load_policy(tiny_run(*run_args) / "bundle") as policy:
            theirs_env = venv()
            theirs_env.seed(seed)  # SB3 leaves the seeding to the caller
            theirs = sb3_evaluation.evaluate_policy(
                policy, theirs_env, episodes, return_episode_rewards=True, warn=False
            )
            ours = evaluate_policy(
                policy, venv(), n_eval_episodes=episodes, seed=seed, return_episode_rewards=True
            )
            result = evaluate_policy(policy, venv(), n_eval_episodes=episodes, seed=seed)
            one_each = evaluate_policy(policy, venv(), n_eval_episodes=n_envs, seed=seed)
            gym_env = evaluate_policy(policy, env_id, episodes=n_envs, seed=seed)
        assert len(ours[0]) == len(ours[1]) == episodes and len(set(ours[0])) > 1
        np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-6)  # Monitor rounds to 1e-6
        assert ours[1] == [int(n) for n in theirs[1]]
        assert result.returns == ours[0] and result.lengths == ours[1]
        assert result.env_id == env_id and result.episodes == episodes
        assert tuple(result) == pytest.approx((np.mean(ours[0]), np.std(ours[0])), rel=1e-12)
        # one episode per sub-env: the gymnasium env's episodes of seeds seed .. seed + n - 1
        assert sorted(one_each.lengths) == sorted(gym_env.lengths)
        np.testing.assert_allclose(sorted(one_each.returns), sorted(gym_env.returns), rtol=1e-6)
