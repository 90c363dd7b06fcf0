"""mjlab's own policy export (the .onnx its runner writes into each run folder) as a bundle:
checked against the task, and run by orin_rl's runtime with the actions of the PyTorch policy
mjlab exported it from."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest

if os.environ.get("ORIN_RL_REQUIRE_MJLAB") == "1":  # CI: the mjlab extra must be there
    import mjlab  # noqa: F401
else:
    pytest.importorskip("mjlab", reason="needs the mjlab extra: pip install -e '.[mjlab]'")
onnx = pytest.importorskip("onnx", reason="needs the export extra")
torch = pytest.importorskip("torch")

from orin_rl import runtime  # noqa: E402
from orin_rl.bundle import BundleError, load_bundle  # noqa: E402
from orin_rl.export.mjlab_onnx import import_mjlab_onnx  # noqa: E402

GO1 = "Mjlab-Velocity-Flat-Unitree-Go1"


@pytest.fixture(scope="module")
def mjlab_export(tmp_path_factory):
    """mjlab's velocity runner saving a checkpoint: the .onnx with its metadata, and the
    PyTorch module it exported (rsl_rl's ``as_onnx``), with fresh random weights."""
    return _mjlab_export(GO1, tmp_path_factory.mktemp("mjlab_run"))


def _mjlab_export(task: str, folder):
    """``task``'s mjlab runner saving a checkpoint into ``folder`` (``mjlab_export``)."""
    from mjlab.envs import ManagerBasedRlEnv
    from mjlab.rl import RslRlVecEnvWrapper
    from mjlab.tasks.velocity.rl.runner import VelocityOnPolicyRunner

    from orin_rl.envs.mjlab import import_mjlab

    registry = import_mjlab()
    cfg = registry.load_env_cfg(task)
    cfg.scene.num_envs = 2
    agent = registry.load_rl_cfg(task)
    env = ManagerBasedRlEnv(cfg=cfg, device="cpu")
    runner = VelocityOnPolicyRunner(
        RslRlVecEnvWrapper(env, clip_actions=agent.clip_actions),
        dataclasses.asdict(agent),
        str(folder),
        "cpu",
    )
    torch.manual_seed(0)
    policy = runner.alg.get_policy()
    with torch.no_grad():  # away from the init, and a normaliser that is not the identity
        for p in policy.parameters():
            p.add_(0.1 * torch.randn_like(p))
        for name, buf in policy.named_buffers():
            if name.endswith("_mean"):
                buf.normal_()
            elif name.endswith("_std"):
                buf.uniform_(0.5, 2.0)
    runner.save(str(folder / "model_0.pt"))
    module = policy.as_onnx(verbose=False).eval()
    env.close()
    return folder / f"{folder.name}.onnx", module


def test_mjlabs_export_runs_in_orin_rl_with_the_actions_of_its_pytorch_policy(
    mjlab_export, tmp_path
):
    path, module = mjlab_export
    result = import_mjlab_onnx(path, tmp_path / "bundle", GO1)
    info, _ = load_bundle(tmp_path / "bundle")  # its sha256 checked
    assert info.env_id == GO1 and info.inputs[0].shape == [1, 48]
    assert info.parity_max_abs_error < 1e-5 and info.parity["task_checked"] == GO1
    assert result.metadata["joint_names"].startswith("FR_hip_joint")
    # the deploy contract comes from the task at full precision; what mjlab's 3-decimal CSV
    # lost is measured, and the file is strict JSON (an unbounded action: null)
    assert info.deploy["joint_names"] == result.metadata["joint_names"].split(",")
    lost = info.deploy["precision"]["metadata_max_rounding_error"]
    assert set(lost) == {"joint_stiffness", "joint_damping", "default_joint_pos", "action_scale"}
    assert all(0 <= v <= 5e-4 + 1e-9 for v in lost.values()), lost
    assert "Infinity" not in (tmp_path / "bundle" / "policy.json").read_text()
    obs = np.random.default_rng(1).normal(size=(20, 48)).astype(np.float32)
    with torch.no_grad():
        want = np.concatenate([module(torch.from_numpy(o[None])).numpy() for o in obs])
    with runtime.load(tmp_path / "bundle", "onnxruntime") as backend:
        got = np.concatenate([backend.infer(o[None]) for o in obs])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(want).max() > 0.1  # a policy that acts, not zeros


def test_another_tasks_export_or_changed_metadata_is_refused(mjlab_export, tmp_path):
    path, _ = mjlab_export
    with pytest.raises(BundleError, match=r"actor group has 99 .* not this task's"):
        import_mjlab_onnx(path, tmp_path / "g1", "Mjlab-Velocity-Flat-Unitree-G1")
    model = onnx.load(str(path))
    for entry in model.metadata_props:
        if entry.key == "action_scale":
            entry.value = ",".join(["0.500"] * 12)
    changed = tmp_path / "changed.onnx"
    onnx.save(model, str(changed))
    with pytest.raises(BundleError, match=r"action scale .* is not"):
        import_mjlab_onnx(changed, tmp_path / "changed", GO1)
    del model.metadata_props[:]
    onnx.save(model, str(changed))
    with pytest.raises(BundleError, match="not an mjlab policy export"):
        import_mjlab_onnx(changed, tmp_path / "plain", GO1)


def test_run_bench_and_build_take_the_bare_file(mjlab_export, tmp_path, monkeypatch):
    """``runtime.locate`` imports a bare mjlab .onnx into the user's cache: once per file."""
    path, _ = mjlab_export
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    found = runtime.locate(path)
    assert found["bundle"].parent == tmp_path / "cache" / "orin_rl" / "mjlab_imports"
    assert runtime.locate(path) == found
    cmd = [sys.executable, "-m", "orin_rl.cli", "-q", "bench", "--model", str(path),
           "--backends", "onnxruntime", "--batch", "1", "--iters", "200",
           "--out", str(tmp_path / "bench")]  # fmt: skip
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "onnxruntime" in proc.stdout and (tmp_path / "bench.json").is_file()


def test_run_and_eval_need_the_task_with_the_bare_file(mjlab_export, tmp_path):
    """mjlab's export names no task: ``run`` and ``eval`` of the bare file ask for --env in one
    line (README, "Trained with mjlab?")."""
    path, _ = mjlab_export
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    for argv in (["run", "--model", str(path), "--steps", "5"], ["eval", str(path)]):
        proc = subprocess.run(
            [sys.executable, "-m", "orin_rl.cli", "-q", *argv],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "the environment is unknown; pass --env ID" in proc.stderr, proc.stderr


def test_exporting_mjlabs_g1_policy_says_it_runs_on_the_twin_only(tmp_path, capsys):
    """``orin-rl export G1.onnx --env Mjlab-Velocity-Flat-Unitree-G1``: mjlab's G1 actor
    reads ``base_lin_vel``, which a real G1 in low-level mode does not report; the export
    says so in one line naming the task to train, and the bundle's contract records it
    (mutation: ``_robot_line`` not called: nothing said)."""
    from orin_rl import cli

    (tmp_path / "run").mkdir()
    path, _ = _mjlab_export("Mjlab-Velocity-Flat-Unitree-G1", tmp_path / "run")
    out = tmp_path / "bundle"
    capsys.readouterr()  # mjlab's own tables
    assert cli.main(["-q", "export", str(path), "--env", "Mjlab-Velocity-Flat-Unitree-G1",
                     "--out", str(out)]) == 0  # fmt: skip
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("  robot ")]
    assert len(lines) == 1, lines
    assert "twin only" in lines[0] and "base_lin_vel" in lines[0], lines[0]
    assert "Orin-Velocity-Flat-Unitree-G1-Real" in lines[0], lines[0]
    info, _ = load_bundle(out)
    assert info.deploy["observations"][0]["robot_reports"] is False
