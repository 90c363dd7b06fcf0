"""The early stop and the final verdict are one statistic: a run stops as solved only when
the policy it ends with passes the verdict evaluation (seeds no periodic evaluation uses)."""

from __future__ import annotations

import json

from orin_rl import config as config_mod
from orin_rl.config import Config
from orin_rl.config.presets import preset_overrides
from orin_rl.runners import base, train, verdict


def test_a_failed_verdict_keeps_training_and_a_stop_as_solved_is_solved(tmp_path, monkeypatch):
    preset = [f"{k}={json.dumps(v)}" for k, v in preset_overrides("CartPole-v1").items()]
    extra = ["train.device=cpu", "train.tensorboard=false", "train.eval_every=1",
             "train.solved_patience=2", "train.total_steps=2560"]  # fmt: skip
    cfg = config_mod.apply_overrides(Config(), [*preset, *extra])
    calls: list[tuple[int, int]] = []  # (iteration, seed offset)
    verdicts = iter([[100.0] * 3, [480.0] * 3])  # the first verdict fails, the second passes

    def scripted(self, seed_offset):
        calls.append((self.algo.iteration, seed_offset))
        if seed_offset == verdict.VERDICT_SEED_OFFSET:
            return next(verdicts)
        return [500.0] * 3  # every periodic evaluation "solves"

    monkeypatch.setattr(base.Runner, "_evaluate", scripted)
    summary = train(cfg, tmp_path / "run", progress=False)
    verdict_at = [it for it, offset in calls if offset == verdict.VERDICT_SEED_OFFSET]
    # Streak of 2 at iteration 2: verdict fails; streak restarts; 2 more at 4: verdict passes.
    assert verdict_at == [2, 4]
    assert summary["stop_reason"] == "solved" and summary["solved"] is True
    assert summary["eval_return_mean"] == 480.0  # the passed verdict is the final evaluation
    assert summary["iterations"] == 4
