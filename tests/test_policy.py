"""``orin_rl.load_policy``: the actions of the training policy, whatever form the input takes."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import orin_rl
from orin_rl.checkpoint import load_policy as load_checkpoint
from orin_rl.policy import PolicyError
from tests.conftest import need_module

HAS_TRT = importlib.util.find_spec("tensorrt") is not None
ENVS = {"CartPole-v1": (4,), "Pendulum-v1": (3,)}
SOURCES = [
    "run/torch",
    "run/onnxruntime",
    "run/auto",
    "bundle",
    pytest.param(
        "engine",
        marks=[
            pytest.mark.tensorrt,
            pytest.mark.skipif(
                not HAS_TRT, reason="needs TensorRT (JetPack); no machine of this project has it"
            ),
        ],
    ),
]


def _open(run, source: str):
    if source == "bundle":
        return orin_rl.load_policy(run / "bundle")
    if source == "engine":
        from orin_rl.export.recipes import load_recipe
        from orin_rl.export.tensorrt import build_engine

        engine = run / "policy-fp32.engine"
        if not engine.exists():
            # a profile for one observation and for the tests' batches of up to 32
            recipe = load_recipe(None, precision="fp32", batch=[1, 32, 64])
            build_engine(run / "bundle", engine, recipe)
        return orin_rl.load_policy(engine)
    return orin_rl.load_policy(run, backend=source.split("/")[1])


def _expected(run, obs32: np.ndarray) -> np.ndarray:
    """The training ActorCritic's deterministic actions (the reference, not another backend)."""
    policy, _, _ = load_checkpoint(run)
    with torch.inference_mode():
        return policy.act_deterministic(policy.normalize(torch.from_numpy(obs32))).numpy()


def _same(got, expected, discrete: bool) -> None:
    got = np.asarray(got)
    assert got.shape == expected.shape
    if discrete:
        np.testing.assert_array_equal(got, expected)
    else:  # ONNX Runtime vs PyTorch: the export's fp32 parity tolerance
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("env_id", list(ENVS))
@pytest.mark.parametrize("source", SOURCES)
class TestSameActionsAsTraining:
    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_numpy_batched_and_single(self, tiny_run, env_id, source, dtype, rng):
        run = tiny_run(env_id)
        obs = rng.normal(size=(32, *ENVS[env_id])).astype(dtype)
        expected = _expected(run, obs.astype(np.float32))
        discrete = env_id == "CartPole-v1"
        if discrete:
            assert len(set(expected.tolist())) == 2  # both actions occur: a real comparison
        with _open(run, source) as policy:
            batch = policy.act(obs)
            assert isinstance(batch, np.ndarray)
            _same(batch, expected, discrete)
            for i in range(8):
                one = policy.act(obs[i])
                assert isinstance(one, np.ndarray) and one.shape == expected[i].shape
                _same(one, expected[i], discrete)

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    def test_torch_batched_and_single(self, tiny_run, env_id, source, dtype, rng):
        run = tiny_run(env_id)
        obs = torch.from_numpy(rng.normal(size=(16, *ENVS[env_id]))).to(dtype)
        expected = _expected(run, obs.float().numpy())
        with _open(run, source) as policy:
            batch = policy.act(obs)
            one = policy.act(obs[3])
        assert isinstance(batch, torch.Tensor) and isinstance(one, torch.Tensor)
        assert batch.device == obs.device
        _same(batch.numpy(), expected, env_id == "CartPole-v1")
        _same(one.numpy(), expected[3], env_id == "CartPole-v1")


def test_integer_observations_are_cast(tiny_run):
    run = tiny_run("CartPole-v1")
    obs = np.array([[0, 1, 0, -1], [1, 0, 2, 0]], dtype=np.int64)
    with orin_rl.load_policy(run / "bundle") as policy:
        _same(policy.act(obs), _expected(run, obs.astype(np.float32)), True)


def test_sb3_predict(tiny_run, rng):
    run = tiny_run("CartPole-v1")
    obs = rng.normal(size=(6, 4))
    with orin_rl.load_policy(run / "bundle") as policy:
        action, state = policy.predict(obs, deterministic=True)
    assert state is None
    _same(action, _expected(run, obs.astype(np.float32)), True)


def test_predict_has_sb3s_signature_and_defaults():
    """SB3 2.x: ``predict(observation, state=None, episode_start=None, deterministic=False)``."""
    import inspect

    base_class = need_module("stable_baselines3.common.base_class", "needs SB3")

    def shape(fn):
        params = list(inspect.signature(fn).parameters.values())[1:]  # after self
        return [(p.name, p.default) for p in params]

    assert shape(orin_rl.Policy.predict) == shape(base_class.BaseAlgorithm.predict)
    assert dict(shape(orin_rl.Policy.predict))["deterministic"] is False


def test_predict_samples_by_default(tiny_run, rng):
    """As SB3's ``predict``: without ``deterministic=True`` the actions are draws (the same as
    ``act(obs, deterministic=False)`` under the same torch seed), not the mean."""
    run = tiny_run("Pendulum-v1")
    obs = rng.normal(size=(64, 3)).astype(np.float32)
    with orin_rl.load_policy(run, backend="onnxruntime") as policy:
        torch.manual_seed(5)
        expected = policy.act(obs, deterministic=False)
        torch.manual_seed(5)
        action, state = policy.predict(obs)
        mode, _ = policy.predict(obs, deterministic=True)
    assert state is None
    np.testing.assert_array_equal(action, expected)
    _same(mode, _expected(run, obs), False)
    assert (action != mode).any()


@pytest.mark.parametrize(
    ("source", "why"), [("bundle", "deterministic policy"), ("dqn", "DQN")], ids=["bundle", "dqn"]
)
def test_predict_without_a_distribution_names_the_fix(tiny_run, source, why):
    """A bundle (or engine) holds only the deterministic policy, DQN has no distribution: SB3's
    default ``predict(obs)`` is one line that says to pass ``deterministic=True``."""
    run = tiny_run("CartPole-v1", "dqn") if source == "dqn" else tiny_run("CartPole-v1") / "bundle"
    with orin_rl.load_policy(run, backend="onnxruntime") as policy:
        with pytest.raises(PolicyError, match=why) as info:
            policy.predict(np.zeros(4))
        message = str(info.value)
        assert "predict(obs, deterministic=True)" in message and "\n" not in message
        action, _ = policy.predict(np.zeros(4), deterministic=True)  # the fix works
        assert action.shape == ()


@pytest.mark.parametrize(
    ("obs", "message"),
    [
        (np.zeros(5), r"shape \(5,\) does not fit this policy: it takes \(4,\)"),
        (np.zeros((2, 5)), "does not fit"),
        (np.zeros((2, 2, 4)), "does not fit"),
        (np.array([0.0, np.nan, 0.0, 0.0]), "NaN or Inf"),
        (np.array([[0.0, 0, 0, 0], [np.inf, 0, 0, 0]]), r"row\(s\) \[1\] holds NaN or Inf"),
        (np.array([1e300, 0.0, 0.0, 0.0]), "NaN or Inf"),  # beyond float32: Inf after the cast
        (np.zeros(4, dtype=complex), "not a real number type"),
        (np.array(["a", "b", "c", "d"]), "not a real number type"),
    ],
)
def test_bad_observations_are_one_line_errors(tiny_run, obs, message):
    policy = orin_rl.load_policy(tiny_run("CartPole-v1") / "bundle")
    with policy, pytest.raises(PolicyError, match=message) as info:
        policy.act(obs)
    assert "\n" not in str(info.value)


def test_a_bundle_cannot_sample(tiny_run):
    policy = orin_rl.load_policy(tiny_run("CartPole-v1") / "bundle")
    with policy, pytest.raises(PolicyError, match="pass the run folder"):
        policy.act(np.zeros(4), deterministic=False)


@pytest.mark.parametrize(("env_id", "algo"), [("CartPole-v1", "ppo"), ("Pendulum-v1", "ppo"),
                                              ("Pendulum-v1", "sac")])  # fmt: skip
def test_run_folder_samples_the_training_distribution(tiny_run, env_id, algo, rng):
    """deterministic=False draws from the checkpoint's distribution: the same draws as the
    training policy's own sampling under the same torch seed, and not its mode."""
    run = tiny_run(env_id, algo)
    obs = rng.normal(size=(256, *ENVS[env_id])).astype(np.float32)
    ac, spec, _ = load_checkpoint(run)
    x = ac.normalize(torch.from_numpy(obs))
    torch.manual_seed(123)
    with torch.inference_mode():
        if algo == "sac":
            from orin_rl.algorithms.sac import squashed_gaussian

            low, high = torch.tensor(spec.action_low), torch.tensor(spec.action_high)
            expected, _ = squashed_gaussian(ac.actor(x), (high + low) / 2, (high - low) / 2)
        else:
            expected = ac.distribution(x).sample()
            if spec.action_kind == "continuous":
                expected = expected.clamp(spec.action_low[0], spec.action_high[0])
        mode = ac.act_deterministic(x).numpy()
    with orin_rl.load_policy(run, backend="onnxruntime") as policy:
        torch.manual_seed(123)
        sampled = policy.act(obs, deterministic=False)
        assert sampled.shape == mode.shape
        np.testing.assert_array_equal(sampled, expected.numpy())
        assert (sampled != mode).any()  # a draw, not the argmax / mean
        one = policy.act(obs[0], deterministic=False)
        assert one.shape == mode[0].shape


def test_dqn_has_no_distribution(tiny_run):
    policy = orin_rl.load_policy(tiny_run("CartPole-v1", "dqn"), backend="onnxruntime")
    with policy, pytest.raises(PolicyError, match="DQN"):
        policy.act(np.zeros(4), deterministic=False)


@pytest.mark.parametrize("torch_installed", [False, True])
def test_bundles_act_without_torch(tiny_run, tmp_path, torch_installed):
    """``import orin_rl`` and a deployed bundle's actions need no torch: hidden, it still runs;
    installed, it is not imported (numpy in, numpy out)."""
    bundle = tmp_path / "deployed"  # a bundle on its own, as copied to a robot
    shutil.copytree(tiny_run("CartPole-v1") / "bundle", bundle)
    code = textwrap.dedent(
        f"""
        import sys
        import numpy as np
        if not {torch_installed}:
            sys.modules["torch"] = None
        import orin_rl
        policy = orin_rl.load_policy(r"{bundle}")
        action = policy.act(np.zeros(4, dtype=np.float64))
        assert action.shape == () and action.dtype == np.int64, (action.shape, action.dtype)
        assert policy.act(np.zeros((3, 4))).shape == (3,)
        assert policy.env_id == "CartPole-v1"
        imported = [m for m, mod in sys.modules.items()
                    if mod is not None and m.split(".")[0] == "torch"]
        assert not imported, imported[:5]
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
