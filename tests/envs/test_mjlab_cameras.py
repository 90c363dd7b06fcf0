"""mjlab's camera tasks (issue 69, item 1): the Yam depth task's frames and states as one dict
observation, rendered on Warp's CPU device, trained there, exported with one uint8 input for the
frames and run torch-free."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

if os.environ.get("ORIN_RL_REQUIRE_MJLAB") == "1":  # CI: the mjlab extra must be there
    import mjlab  # noqa: F401
else:
    pytest.importorskip("mjlab", reason="needs the mjlab extra: pip install -e '.[mjlab]'")

from orin_rl.envs.base import EnvError, EnvOptions
from orin_rl.envs.mjlab import MjlabVecEnv

DEPTH = "Mjlab-Lift-Cube-Yam-Depth"
FRAME = (1, 32, 32)
"""The Yam camera's depth frame (C, H, W)."""
ITERATIONS = 10
TRAIN = {
    "env.num_envs": 32,  # a step on Warp's CPU costs about the same for 2 worlds as for 32
    "ppo.num_steps": 8,
    "env.max_episode_steps": 8,  # every world ends one episode an iteration: its rewards logged
    "ppo.desired_kl": None,  # the preset's adaptive rate sank to its 1e-5 floor in the first
    # iteration of batches this small, and the reward stayed where it was: a fixed rate
    "ppo.learning_rate": 3e-3,
    "train.seed": 1,
    "train.total_steps": 32 * 8 * ITERATIONS,
    "train.eval_episodes": 1,
    "train.tensorboard": False,
}
"""The task's own preset (rsl_rl's PPO, its network sizes and normalisers), made small."""


@pytest.mark.parametrize(
    ("task", "frame"), [(DEPTH, FRAME), ("Mjlab-Lift-Cube-Yam-Rgb", (3, 32, 32))]
)
def test_the_dict_observation_is_mjlabs_groups_with_the_frames_as_uint8(task, frame):
    """Rows of bytes hold mjlab's own groups: the actor and critic vectors bit for bit, the
    frame (mjlab's [0, 1]: depth / cutoff, rgb / 255) as round(255 x), after a reset and after
    steps."""
    env = MjlabVecEnv(task, 2, "cpu", EnvOptions(seed=3))
    space = env.observation_space
    assert list(space) == ["actor", "camera", "critic"]
    assert space["camera"].dtype == np.uint8 and space["camera"].shape == frame
    assert env.obs_groups == {"actor": ["actor", "camera"], "critic": ["critic", "camera"]}
    rows = env.reset()
    for step in range(3):
        assert rows.dtype == torch.uint8 and rows.shape == (2, env.images.layout.row_bytes)
        ours, theirs = env.images.layout.unpack(rows), env.env.obs_buf
        for key in ("actor", "critic"):
            assert torch.equal(ours[key], theirs[key]), (step, key)
        assert torch.equal(ours["camera"], (theirs["camera"] * 255).round().to(torch.uint8))
        assert len(torch.unique(ours["camera"])) > 10, "the camera sees the scene"
        rows = env.step(torch.full((2, env.action_space.shape[0]), 0.2)).obs
    with pytest.raises(EnvError) as exc:  # the learner asking for a time-out's final frame
        env.final_obs_needed = True
    assert "\n" not in str(exc.value) and "set ppo.timeout_bootstrap=value" in str(exc.value)
    env.close()


def test_sac_is_refused_a_dict_observation_in_one_line(tmp_path, capsys):
    """SAC's and DQN's networks take one array: rows of bytes read as floats would be garbage."""
    from orin_rl import cli

    argv = ["-q", "train", "--env", DEPTH, "--algo", "sac", "--device", "cpu", "--num-envs", "2",
            "--total-steps", "64", "--out", str(tmp_path / "run"), "--no-progress"]  # fmt: skip
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith("train it with --algo ppo; SAC and DQN take one array")


@pytest.fixture(scope="module")
def depth_run(tmp_path_factory):
    """The depth task trained a few iterations on the CPU with its preset, made small."""
    from orin_rl import config as C
    from orin_rl.config.presets import preset_overrides
    from orin_rl.runners import train

    out = tmp_path_factory.mktemp("yam-depth") / "run"
    settings = {**preset_overrides(DEPTH, "ppo", "gym", "cpu"), **TRAIN}
    cfg = C.apply_overrides(C.Config(), [f"{k}={json.dumps(v)}" for k, v in settings.items()])
    train(cfg, out, progress=False)
    return out


def _task_rewards(run) -> list[float]:
    """Each iteration's reward: the sum of mjlab's ``Episode_Reward/*`` terms (the episodes
    that ended in it, each term per second of episode)."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [sum(v for k, v in r.items() if k.startswith("Episode_Reward/")) for r in records]


def test_the_depth_task_trains_on_the_cpu(depth_run):
    """The policy reads the frames and the states (uint8 rows in the rollout storage), the
    update trains the actor's frame encoder, and the task's reward rises over the run: the last
    three iterations against the second to fourth (the first's episodes started at random
    steps of the time limit). On this budget the rise is the joint-velocity penalty's, which a
    smaller action noise lowers too: the frames' part is the encoder's gradients."""
    from orin_rl.checkpoint import load_policy

    policy, spec, _ = load_policy(depth_run)
    assert spec.obs_dtype == "uint8" and spec.obs_groups["actor"] == ["actor", "camera"]
    assert {e["key"]: e["dtype"] for e in spec.obs_layout}["camera"] == "uint8"
    adam = torch.load(depth_run / "checkpoint.pt", weights_only=True)["algo"]["optimizer"]
    names = [name for name, _ in policy.named_parameters()]
    conv = names.index("actor.0.images.camera.convs.0.weight")
    moments = adam["state"].get(conv, {}).get("exp_avg_sq")  # Adam's: none without gradients
    assert moments is not None and moments.min() > 0, "the frames' convolution was trained"
    rewards = _task_rewards(depth_run)
    assert len(rewards) == ITERATIONS
    early, late = np.mean(rewards[1:4]), np.mean(rewards[-3:])
    assert late > early + 0.15, rewards


@pytest.fixture(scope="module")
def depth_bundle(depth_run):
    from orin_rl.export.onnx import export_bundle

    export_bundle(depth_run, depth_run / "bundle", parity_observations=64)
    return depth_run / "bundle"


def test_the_bundle_takes_the_frames_as_uint8_and_runs_torch_free(depth_run, depth_bundle):
    """One ONNX input per actor key (the critic's never reach the robot), the frames uint8;
    ONNX Runtime's actions on the recorded observations, with torch unimportable, are the
    torch policy's."""
    import onnx

    from orin_rl import bundle
    from orin_rl.checkpoint import load_policy
    from orin_rl.models.deploy import DeterministicPolicy

    info, onnx_path = bundle.load_bundle(depth_bundle)
    assert [(t.name, t.shape, t.dtype) for t in info.inputs] == [
        ("actor", ["batch", 26], "float32"), ("camera", ["batch", 1, 32, 32], "uint8")
    ]  # fmt: skip
    types = {i.name: i.type.tensor_type.elem_type for i in onnx.load(onnx_path).graph.input}
    assert types == {"actor": onnx.TensorProto.FLOAT, "camera": onnx.TensorProto.UINT8}
    assert info.normalizer["inputs"]["camera"]["formula"] == "x / 255"
    assert len(info.normalizer["inputs"]["actor"]["mean"]) == 26
    assert info.parity["max_rel_error"] <= 1e-5
    recorded = depth_bundle / "calibration.npz"  # the observations the policy met, by input
    calibration = dict(np.load(recorded))
    assert calibration["camera"].dtype == np.uint8 and calibration["camera"].shape[1:] == FRAME
    out = depth_bundle.parent / "ort_actions.npy"
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["torch"] = None
        sys.modules["numba"] = None
        import numpy as np
        import orin_rl
        feeds = dict(np.load(r"{recorded}"))
        with orin_rl.load_policy(r"{depth_bundle}", backend="onnxruntime") as policy:
            np.save(r"{out}", policy.act(feeds))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    policy, _, _ = load_policy(depth_run)
    with torch.inference_mode():
        expected = DeterministicPolicy(policy)(
            *(torch.from_numpy(calibration[k]) for k in ("actor", "camera"))
        ).numpy()
    np.testing.assert_allclose(np.load(out), expected, rtol=1e-5, atol=1e-5)


def test_fp16_and_int8_models_take_the_same_inputs(depth_run, tmp_path):
    """``--fp16`` and ``--int8`` of a dict observation's policy: the same two inputs, each
    within its precision's rule (int8 calibrated on the recorded frames and states)."""
    from orin_rl.export.onnx import export_bundle

    half = export_bundle(depth_run, tmp_path / "fp16", parity_observations=64, fp16=True).info
    assert [(t.name, t.dtype) for t in half.inputs] == [("actor", "float32"), ("camera", "uint8")]
    assert half.parity["max_rel_error"] <= 2e-2
    int8 = export_bundle(depth_run, tmp_path / "int8", parity_observations=256, int8=True).info
    assert "<= 0.1" in int8.variants["int8-qdq"]["parity"]["rule"]


def test_eval_and_run_feed_the_bundle_the_actor_keys(depth_bundle, tmp_path, capsys):
    """``orin-rl eval`` and ``orin-rl run`` step one world of the play configuration, whose
    observation is the actor's keys (a dict: the frame uint8), into the ONNX Runtime policy."""
    from orin_rl import cli

    report = tmp_path / "eval.json"
    assert cli.main(["-q", "eval", str(depth_bundle), "--episodes", "1", "--report",
                     str(report)]) == 0  # fmt: skip
    assert json.loads(report.read_text())["lengths"] == [8]  # the run's time limit
    ran = tmp_path / "run.json"
    assert cli.main(["-q", "run", "--model", str(depth_bundle), "--backend", "onnxruntime",
                     "--rate", "0", "--steps", "12", "--report", str(ran)]) == 0  # fmt: skip
    data = json.loads(ran.read_text())
    assert data["iterations"] == 12 and data["episode_end_ticks"] == [7]
    assert data["non_finite_events"] == 0
