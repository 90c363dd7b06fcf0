"""Behaviour pinned bit for bit: PPO, SAC and DQN runs against values recorded from the code
before the runners were split (issue "one runner per loop").

Each case trains a few iterations with fixed seeds on the CPU and compares every logged value
(losses, returns, evaluations; not wall times) and a sha256 of every tensor in the final
checkpoint's algorithm state against ``data/golden.json``. The run folders under
``data/golden_resume/`` were written by that same older code, stopped half-way: resuming them
must still work and end exactly where the uninterrupted run ended. Where a CPU's float32
kernels round otherwise than the recording machine's (seen on an AVX-512/AMX Xeon), the
``platforms`` section holds what the same older code gave on that CPU, bit for bit; a run
must match one of them exactly.

Re-record only on purpose (a change that is meant to alter the numbers):
``python -m tests.runners.test_golden --record`` rewrites ``data/golden.json`` (dropping the
other platforms' sections, which a change of numbers invalidates) and the resume folders.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from orin_rl import config as C
from orin_rl.checkpoint import load_checkpoint
from orin_rl.runners.logger import read_metrics

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden.json"
RESUME = DATA / "golden_resume"

_COMMON = ["train.device=cpu", "train.torch_threads=1", "train.tensorboard=false",
           "train.power_monitor=off", "train.eval_episodes=2", "train.eval_every=2",
           "train.checkpoint_every=100", "buffer.placement=host"]  # fmt: skip
CASES: dict[str, list[str]] = {
    "ppo_cartpole": [
        "env.env_id=CartPole-v1", "train.algo=ppo", "env.num_envs=4", "ppo.num_steps=32",
        "ppo.num_minibatches=4", "ppo.num_epochs=2", "ppo.hidden_sizes=[16,16]",
        "ppo.normalize_obs=true", "train.total_steps=512", "train.seed=3",
    ],
    "sac_pendulum": [
        "env.env_id=Pendulum-v1", "train.algo=sac", "env.num_envs=2", "sac.learning_starts=64",
        "sac.batch_size=32", "sac.hidden_sizes=[16,16]", "sac.buffer_size=1000", "sac.save_buffer=true",
        "sac.train_freq=16", "sac.gradient_steps=4", "train.total_steps=192", "train.seed=5",
    ],
    "dqn_cartpole": [
        "env.env_id=CartPole-v1", "train.algo=dqn", "env.num_envs=2", "dqn.learning_starts=64",
        "dqn.batch_size=32", "dqn.hidden_sizes=[16,16]", "dqn.buffer_size=1000", "dqn.save_buffer=true",
        "dqn.train_freq=16", "dqn.gradient_steps=2", "dqn.target_update_every=8",
        "train.total_steps=256", "train.seed=7",
    ],
}  # fmt: skip
_WALL = ("time_s", "steps_per_s")
"""Record keys that measure the machine, not the learning (and every ``perf/`` key)."""
_LATER = ("charts/episode_length_mean",)
"""Record keys added after the recording (no learning value: the episodes' lengths, held by
``test_train_e2e.test_cartpole_solves_from_defaults``)."""
PLATFORMS = "platforms"
"""golden.json also holds, per CPU whose float32 kernels round otherwise than the recording
machine's, what the same older code gave there, bit for bit (see ``platforms_note``)."""


def _expectations(golden: dict[str, Any], case: str) -> list[dict[str, Any]]:
    """The recording machine's outcome of ``case``, then each other platform's."""
    return [golden[case], *(p[case] for p in golden.get(PLATFORMS, {}).values())]


def _config(case: str) -> C.Config:
    return C.apply_overrides(C.Config(), [*_COMMON, *CASES[case]])


def _tensors(tree: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor in a nested dict/list, keyed by its path."""
    if isinstance(tree, torch.Tensor):
        return {prefix: tree.detach().cpu().contiguous()}
    out: dict[str, torch.Tensor] = {}
    if isinstance(tree, dict | list | tuple):
        for k, v in tree.items() if isinstance(tree, dict) else enumerate(tree):
            out.update(_tensors(v, f"{prefix}/{k}"))
    return out


def _hashes(tree: Any) -> dict[str, str]:
    """sha256 of every tensor in a nested dict/list, keyed by its path."""
    return {
        path: hashlib.sha256(t.reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()[:32]
        for path, t in _tensors(tree).items()
    }


def _outcome(run: Path) -> dict[str, Any]:
    """What the run logged and where its weights ended, without wall times."""
    records = [
        {k: v for k, v in r.items() if k not in _WALL + _LATER and not k.startswith("perf/")}
        for r in read_metrics(run / "metrics.jsonl")
    ]
    state = load_checkpoint(run / "checkpoint.pt")
    summary = json.loads((run / "summary.json").read_text())
    return {
        "records": records,
        "global_step": state["global_step"],
        "algo_state": state["algo"],
        "eval_return_mean": summary["eval_return_mean"],
    }


def _train(case: str, run: Path, stop_after: int | None = None) -> None:
    from orin_rl.runners import train

    if stop_after is None:
        train(_config(case), run, progress=False)
        return
    # A run stopped half-way (its checkpoint says so): the loop ends after `stop_after`
    # iterations, as a signal would end it, with the config of the whole run.
    from orin_rl.runners import make_runner

    trainer = make_runner(_config(case), run, progress=False)
    trainer.num_iterations = stop_after
    trainer.learn()


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("case", sorted(CASES))
def test_training_is_unchanged_bit_for_bit(case, golden, tmp_path):
    run = tmp_path / "run"
    _train(case, run)
    got = _outcome(run)
    got["algo"] = _hashes(got.pop("algo_state"))
    keys = ("records", "global_step", "algo", "eval_return_mean")
    outcomes = [{k: want[k] for k in keys} for want in _expectations(golden, case)]
    if {k: got[k] for k in keys} in outcomes:
        return
    want = outcomes[0]  # say where it departs from the recording machine's run
    for g, w in zip(got["records"], want["records"], strict=False):
        assert g == w, f"iteration {w.get('iteration')}"
    assert got["algo"] == want["algo"], "final weights/optimizer state differ"
    raise AssertionError("the run differs from every recorded platform's")


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_checkpoint_from_the_older_code_resumes_exactly(case, golden, tmp_path):
    """The folder was written (and stopped half-way) by the code before the split."""
    from orin_rl.runners import train

    run = tmp_path / "run"
    shutil.copytree(RESUME / case, run)
    train(C.Config(), run, resume=True, progress=False)
    got = _outcome(run)
    assert got["global_step"] == golden[case]["global_step"]
    hashes = _hashes(got.pop("algo_state"))
    # The recording machine: the resumed run ends where the whole run ended, and its records
    # after the stop continue the whole run's curve. Another platform: what the older code's
    # resume of the same folder gave there.
    stopped = golden[f"{case}/stopped_at_iteration"]
    later = [r for r in golden[case]["records"] if r["iteration"] > stopped]
    accepted = [(golden[case]["algo"], later)] + [
        (p[case]["resumed_algo"], p[case]["resumed_records"][-len(later) :])
        for p in golden.get(PLATFORMS, {}).values()
    ]
    assert later and (hashes, got["records"][-len(later) :]) in accepted, (
        "resumed run ended on other weights or records than the whole run"
    )


def _record() -> None:
    import tempfile

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in sorted(CASES):
            run = Path(tmp) / case
            _train(case, run)
            out[case] = _outcome(run)
            out[case]["algo"] = _hashes(out[case].pop("algo_state"))
            iterations = out[case]["records"][-1]["iteration"]
            half = iterations // 2
            out[f"{case}/stopped_at_iteration"] = half
            target = RESUME / case
            shutil.rmtree(target, ignore_errors=True)
            _train(case, target, stop_after=half)
            for name in ("summary.json", "curve.png"):  # the resume writes them anew
                (target / name).unlink(missing_ok=True)
    GOLDEN.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] != ["--record"]:
        sys.exit("usage: python -m tests.runners.test_golden --record")
    _record()
