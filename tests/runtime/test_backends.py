"""The backend contract, for every backend available here (TensorRT: marked, skipped)."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from orin_rl.runtime import RuntimeBackendError, load
from orin_rl.runtime.torch_backend import TorchBackend

BACKENDS = [
    "onnxruntime",
    "torch",
    pytest.param(
        "tensorrt",
        marks=[
            pytest.mark.tensorrt,
            pytest.mark.skipif(
                importlib.util.find_spec("tensorrt") is None,
                reason="needs TensorRT and an engine built on this board (no machine here has it)",
            ),
        ],
    ),
]


@pytest.fixture(params=BACKENDS)
def backend(request, run_with_bundle):
    model = run_with_bundle
    if request.param == "tensorrt":
        from orin_rl.export.recipes import load_recipe
        from orin_rl.export.tensorrt import build_engine

        model = run_with_bundle / "policy.engine"
        # The contract runs batches of 1, 3, 7 and 64: the profile must cover them.
        recipe = load_recipe(None, precision="fp32", batch=[1, 8, 64])
        build_engine(run_with_bundle / "bundle", model, recipe)
    return load(model, request.param, safe_action=np.array(0))


class TestContract:
    def test_lifecycle_and_specs(self, backend):
        assert backend.input_spec.name == "obs" and backend.output_spec[0].name == "action"
        with pytest.raises(RuntimeBackendError, match="activate"):
            backend.infer(np.zeros((1, 4), np.float32))
        with backend:
            assert backend.active
            action = backend.infer(np.zeros((1, 4), np.float32))
            assert action.shape == (1,) and action.dtype == np.int64
            assert backend.infer(np.zeros((7, 4), np.float32)).shape == (7,)
        assert not backend.active

    def test_backends_give_the_training_policys_actions(self, backend, run_with_bundle, rng):
        """Every backend against the trained ActorCritic itself (not against another backend)."""
        from orin_rl.checkpoint import load_policy

        policy, _, _ = load_policy(run_with_bundle)
        obs = rng.normal(size=(64, 4)).astype(np.float32)
        with torch.inference_mode():
            expected = policy.act_deterministic(policy.normalize(torch.from_numpy(obs))).numpy()
        assert len(set(expected.tolist())) == 2  # both actions occur: a real comparison
        with backend:
            np.testing.assert_array_equal(backend.infer(obs), expected)

    @pytest.mark.parametrize(
        ("obs", "message"),
        [
            (np.zeros((1, 5), np.float32), "shape"),
            (np.zeros(4, np.float32), "shape"),
            (np.zeros((1, 4), np.float64), "dtype"),
            ([[0.0, 0.0, 0.0, 0.0]], "numpy array"),
        ],
    )
    def test_bad_input_is_a_value_error(self, backend, obs, message):
        with backend, pytest.raises(ValueError, match=message):
            backend.infer(obs)

    @pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
    def test_non_finite_input_gives_the_safe_action(self, backend, bad):
        obs = np.zeros((3, 4), np.float32)
        with backend:
            normal = int(backend.infer(obs[:1])[0])
            backend.safe_action = np.array(1 - normal)  # an action the policy would not take
            obs[1, 2] = bad
            np.testing.assert_array_equal(backend.infer(obs), [1 - normal] * 3)
            assert backend.non_finite_events == 1

    def test_huge_values_are_valid_input(self, backend):
        with backend:
            assert backend.infer(np.full((1, 4), 3e38, np.float32)).shape == (1,)


def test_non_finite_output_gives_the_safe_action():
    class Broken(torch.nn.Module):
        def forward(self, x):
            return x.sum(-1, keepdim=True) * float("nan")

    backend = TorchBackend.from_module(Broken(), [4], safe_action=np.array([0.5], np.float32))
    with backend:
        np.testing.assert_array_equal(backend.infer(np.ones((2, 4), np.float32)), [[0.5], [0.5]])
        assert backend.non_finite_events == 1
    backend.safe_action = None
    with backend, pytest.raises(ValueError, match="no safe action"):
        backend.infer(np.ones((1, 4), np.float32))


def test_auto_picks_the_lowest_p99(run_with_bundle):
    backend = load(run_with_bundle, "auto")
    assert set(backend.auto_timings) == {"onnxruntime", "torch"}
    best = min(backend.auto_timings, key=lambda k: backend.auto_timings[k]["p99_us"])
    assert backend.name == best


def test_wrong_artefact_for_the_backend(run_with_bundle, tmp_path):
    with pytest.raises(RuntimeBackendError, match="engine"):
        load(run_with_bundle, "tensorrt")
    with pytest.raises(Exception, match="not an engine, a bundle"):
        load(tmp_path, "auto")


@pytest.mark.gpu
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_torch_cuda_modes(run_with_bundle, rng, cuda_graph):
    obs = rng.normal(size=(1, 4)).astype(np.float32)
    with (
        load(run_with_bundle, "torch") as ref,
        load(run_with_bundle, "torch", "cuda", cuda_graph=cuda_graph) as gpu,
    ):
        for _ in range(3):
            np.testing.assert_array_equal(gpu.infer(obs), ref.infer(obs))


@pytest.mark.gpu
@pytest.mark.parametrize("zero_copy", [None, False, True])
def test_torch_cuda_graph_follows_the_batch(run_with_bundle, rng, zero_copy):
    """A graph per batch size, each over its own buffers: switching batch and back replays
    the right graph. zero_copy=True binds the graph to mapped host memory (what an integrated
    GPU gets by default); False captures the host↔device copies inside the graph."""
    with (
        load(run_with_bundle, "torch") as ref,
        load(run_with_bundle, "torch", "cuda", cuda_graph=True, zero_copy=zero_copy) as gpu,
    ):
        for batch in (1, 7, 1, 64, 7, 1):
            obs = rng.normal(size=(batch, 4)).astype(np.float32)
            np.testing.assert_array_equal(gpu.infer(obs), ref.infer(obs))
        assert gpu._graphs.captures == 3 and sorted(gpu._graphs.keys()) == [1, 7, 64]
        if zero_copy is not None:
            assert gpu.describe()["zero_copy"] is zero_copy


class TestBackendOptionsFromTheCli:
    """``orin-rl run`` / ``bench`` flags reach the backends (CPU provider, CPU torch here)."""

    def options(self, *argv, command="bench", batch=1):
        from orin_rl import cli

        args = cli.build_parser().parse_args([command, "--model", "m", *argv])
        return cli._backend_options(args, batch)

    def test_bench_runs_the_ort_provider_asked_for(self, run_with_bundle, tmp_path):
        import json

        from orin_rl import cli

        out = tmp_path / "bench"
        argv = ["-q", "bench", "--model", str(run_with_bundle), "--backends", "onnxruntime"]
        assert (
            cli.main(
                [*argv, "--providers", "cpu", "--batch", "1", "--iters", "20", "--out", str(out)]
            )
            == 0
        )
        (row,) = json.loads(out.with_suffix(".json").read_text())["rows"]
        assert row["provider"] == "CPUExecutionProvider"
        assert (
            cli.main(
                [*argv, "--providers", "cuda", "--batch", "1", "--iters", "20", "--out", str(out)]
            )
            == 0
        )
        (row,) = json.loads(out.with_suffix(".json").read_text())["rows"]
        assert "CUDAExecutionProvider" in row["error"] and "onnxruntime-gpu" in row["error"]

    def test_ort_recipe_sets_the_tensorrt_provider_options(self, run_with_bundle):
        from orin_rl.runtime.onnxruntime_backend import CPU_EP, CUDA_EP, TENSORRT_EP

        options = self.options("--ort-recipe", "engines/dla0-fp16.yaml")
        backend = load(run_with_bundle, "onnxruntime", "cuda", **options)
        candidates = backend.provider_candidates([TENSORRT_EP, CUDA_EP, CPU_EP])
        assert [name for name, _ in candidates] == [TENSORRT_EP, CUDA_EP, CPU_EP]
        trt = candidates[0][1]
        assert trt["trt_fp16_enable"] and trt["trt_dla_enable"] and trt["trt_dla_core"] == 0
        assert trt["trt_profile_min_shapes"] == "obs:1x4"
        # Without a recipe the TensorRT provider computes what the bundle computes: fp32.
        plain = load(run_with_bundle, "onnxruntime", "cuda").provider_candidates([TENSORRT_EP])
        assert not plain[0][1]["trt_fp16_enable"]
        # On the CPU, or with --providers, only what was asked for.
        assert [
            n
            for n, _ in load(run_with_bundle, "onnxruntime").provider_candidates(
                [TENSORRT_EP, CPU_EP]
            )
        ] == [CPU_EP]
        asked = self.options("--providers", "cuda,cpu")
        assert [
            n
            for n, _ in load(run_with_bundle, "onnxruntime", **asked).provider_candidates([CPU_EP])
        ] == [CUDA_EP, CPU_EP]

    def test_cuda_graph_reaches_the_cuda_provider(self, run_with_bundle):
        from orin_rl.runtime.onnxruntime_backend import CUDA_EP

        for argv, flag in (((), "0"), (("--cuda-graph",), "1")):
            backend = load(run_with_bundle, "onnxruntime", "cuda", **self.options(*argv))
            (name, opts), *_ = backend.provider_candidates([CUDA_EP])
            assert name == CUDA_EP and opts["enable_cuda_graph"] == flag
            assert backend.ep.cuda_graph is (flag == "1")

    def test_torch_graph_batch_and_zero_copy_reach_the_backend(self, run_with_bundle):
        options = self.options("--zero-copy", "on", batch=4)
        backend = load(run_with_bundle, "torch", **options)
        assert backend.graph_batch == 4 and backend.zero_copy is True
        assert (
            self.options()["zero_copy"] is None
            and self.options("--zero-copy", "off")["zero_copy"] is False
        )

    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            (["--backend", "torch", "--cuda-graph"], "CUDA graphs need a GPU: use --device cuda"),
            (
                ["--backend", "onnxruntime", "--providers", "gpu"],
                "unknown ONNX Runtime provider 'gpu'",
            ),
        ],
    )
    def test_bad_choices_are_one_line_exit_2(self, run_with_bundle, capsys, argv, message):
        from orin_rl import cli

        code = cli.main(["-q", "run", "--model", str(run_with_bundle), "--steps", "5", *argv])
        err = capsys.readouterr().err.strip()
        assert code == 2 and message in err and len(err.splitlines()) == 1


def test_ort_bound_buffers_follow_the_batch_and_are_not_handed_out(run_with_bundle, rng):
    """The ONNX Runtime backend binds its I/O buffers once per batch size: switching batch
    and back gives session.run's answers, and a returned action is the caller's own."""
    with load(run_with_bundle, "onnxruntime") as backend:
        session = backend.session
        answers = []
        for batch in (1, 7, 1, 7, 64, 64, 64, 1):
            obs = rng.normal(size=(batch, 4)).astype(np.float32)
            got = backend.infer(obs)
            np.testing.assert_array_equal(got, session.run(["action"], {"obs": obs})[0])
            answers.append((got, got.copy()))
        for got, kept in answers:  # later calls did not overwrite an earlier answer
            np.testing.assert_array_equal(got, kept)
        assert sorted(backend._bindings) == [1, 7, 64]


def test_a_tampered_bundle_is_refused_not_replaced_by_its_run(run_with_bundle, tmp_path, capsys):
    """A bundle named by its path runs as that bundle or not at all: with policy.onnx changed,
    "auto" must not fall back to the run's checkpoint beside it (it did, exit 0)."""
    import shutil

    from orin_rl import cli
    from orin_rl.bundle import BundleError

    run = tmp_path / "run"
    shutil.copytree(run_with_bundle, run)
    (run / "bundle" / "policy.onnx").write_bytes(b"garbage")
    with pytest.raises(BundleError, match="sha256 differs"):
        load(run / "bundle", "auto")
    argv = ["-q", "run", "--model", str(run / "bundle"), "--steps", "5", "--rate", "0"]
    assert cli.main(argv) == 2
    assert "sha256 differs" in capsys.readouterr().err
    with load(run, "auto") as backend:  # the run folder named: its checkpoint may run
        assert backend.name == "torch"


def _cuda_ep_or_skip():
    ort = pytest.importorskip("onnxruntime")
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("needs onnxruntime-gpu (its CUDA execution provider)")


@pytest.mark.gpu
@pytest.mark.parametrize("cuda_graph", [False, True])
def test_ort_cuda_ep_matches_the_cpu_ep(run_with_bundle, rng, cuda_graph):
    """The CUDA EP over device-bound I/O (and its CUDA graphs, one per batch size): every call
    gives the CPU EP's action, switching batch and back included (a graph replaying another
    batch's buffers would not)."""
    _cuda_ep_or_skip()
    with (
        load(run_with_bundle, "onnxruntime", providers=["cpu"]) as ref,
        load(run_with_bundle, "onnxruntime", "cuda", providers=["cuda"],
             cuda_graph=cuda_graph) as gpu,
    ):  # fmt: skip
        assert gpu.provider == "CUDAExecutionProvider"
        assert gpu.describe()["device_io"] and gpu.describe()["cuda_graph"] is cuda_graph
        for batch in (1, 7, 1, 64, 7, 1, 1):
            obs = rng.normal(size=(batch, 4)).astype(np.float32)
            np.testing.assert_allclose(gpu.infer(obs), ref.infer(obs), rtol=1e-5, atol=1e-6)
        assert sorted(gpu._bindings) == [1, 7, 64]
        assert gpu._graph_ids == (3 if cuda_graph else 0)


@pytest.mark.gpu
def test_auto_times_the_cuda_and_cpu_providers(run_with_bundle):
    _cuda_ep_or_skip()
    backend = load(run_with_bundle, "auto", "cuda", cuda_graph=True)
    assert {"onnxruntime-cuda", "onnxruntime-cpu", "torch"} <= set(backend.auto_timings)
    best = min(backend.auto_timings, key=lambda k: backend.auto_timings[k]["p99_us"])
    assert best.split("-")[0] == backend.name
