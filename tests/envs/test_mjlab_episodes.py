"""An evaluation batch's mjlab logs per episode (``orin_rl.envs.mjlab.episodes``): what
summary.json's ``eval_log`` and ``orin-rl eval`` report (issue 41 item 9)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import require_extra

require_extra("mjlab", "mjlab")  # CI (ORIN_RL_REQUIRE_MJLAB=1): the mjlab extra must be there

from orin_rl.envs.base import EnvOptions  # noqa: E402
from orin_rl.envs.mjlab import MjlabVecEnv  # noqa: E402

GO1 = "Mjlab-Velocity-Flat-Unitree-Go1"
WORLDS = 4
LIMIT = 3
"""Steps per episode: worlds 1-3 time out at steps 3 and 6; world 0, turned over before the
first step, falls at step 1, then times out at step 4 (its second episode)."""
TRACKING = "Metrics/twist/error_vel_xy"


@pytest.fixture(scope="module")
def evaluation():
    """Six steps of a 4-world evaluation batch, world 0 upside down at the start: per step,
    the done flags and what mjlab itself logged; then the batch's ``pop_log``, a second one at
    once, a seventh step (its done flags and mjlab's log) and ``pop_log`` again."""
    env = MjlabVecEnv(GO1, WORLDS, "cpu", EnvOptions(seed=3, max_episode_steps=LIMIT, evaluation=True))  # fmt: skip
    env.reset(seed=3)
    robot = env.env.scene["robot"]
    pose = robot.data.root_link_pose_w[:1].clone()
    pose[:, 3:7] = torch.tensor([0.0, 1.0, 0.0, 0.0])  # rolled over: (w, x, y, z)
    robot.write_root_link_pose_to_sim(pose, torch.tensor([0]))
    steps = []
    for _ in range(2 * LIMIT):
        step = env.step(torch.zeros(WORLDS, env.action_space.shape[0]))
        mjlabs = {k: float(v) for k, v in env.env.extras["log"].items()}
        steps.append(((step.terminated | step.truncated).tolist(), mjlabs))
    logged = env.pop_log()
    empty = env.pop_log()  # nothing stepped since the last read
    # a seventh step: world 0's third episode ends (a time-out), not one the batch counts
    step = env.step(torch.zeros(WORLDS, env.action_space.shape[0]))
    seventh = ((step.terminated | step.truncated).tolist(),
               {k: float(v) for k, v in env.env.extras["log"].items()})  # fmt: skip
    again = env.pop_log()
    env.close()
    return steps, logged, (empty, seventh, again)


def test_terminations_are_rates_over_the_first_episode_of_each_world(evaluation):
    """One world of four fell, three timed out: rates 0.25 and 0.75, summing to 1; the
    second episodes (world 0's time-out at step 4, all at step 6) are not the evaluation's.
    mjlab's own logs average to 0.25 and 1.75 (counts 1, 3, 1, 3 over four reset steps)."""
    steps, logged, _ = evaluation
    dones = [done for done, _ in steps]
    assert dones[0] == [True, False, False, False]  # the turned-over world fell at once
    assert dones[2] == [False, True, True, True] and dones[3] == [True, False, False, False]
    assert steps[0][1]["Episode_Termination/fell_over"] == 1.0  # mjlab: a count of worlds
    assert steps[2][1]["Episode_Termination/time_out"] == 3.0
    rates = {k: v for k, v in logged.items() if k.startswith("Episode_Termination/")}
    assert rates == {"Episode_Termination/fell_over": 0.25, "Episode_Termination/time_out": 0.75}
    assert sum(rates.values()) == pytest.approx(1.0)


def test_the_tracking_error_is_the_mean_over_episodes_of_mjlabs_value(evaluation):
    """mjlab logs, at a step with resets, the mean of the reset worlds' error_vel_xy: at step
    1 world 0's, at step 3 that of worlds 1-3. Over the four first episodes, each counted
    once: (step 1's + 3 x step 3's) / 4 -- not the mean of the four reset steps' logs."""
    steps, logged, _ = evaluation
    fell, timed_out = steps[0][1][TRACKING], steps[2][1][TRACKING]
    assert logged[TRACKING] == pytest.approx((fell + 3 * timed_out) / 4, rel=1e-6)
    per_step_mean = sum(s[1][TRACKING] for s in steps if TRACKING in s[1]) / 4
    assert logged[TRACKING] != pytest.approx(per_step_mean, rel=1e-3)


def test_a_log_read_counts_the_next_episodes_afresh(evaluation):
    """A read right after a read is empty: nothing ended in between. After a read, each
    world's next episode to end is counted as its first: the seventh step ends world 0's
    third episode (a time-out), and the read after it is that one episode's rates and
    tracking error beside mjlab's other means. This test passed on an empty read before;
    mutation: ``EpisodeLog.pop`` not restarting the count -> the second read repeats the
    first's rates and the seventh step's episode is not counted, fails."""
    _, _, (empty, (dones, mjlabs), again) = evaluation
    assert empty == {}
    assert dones == [True, False, False, False]
    rates = {k: v for k, v in again.items() if k.startswith("Episode_Termination/")}
    assert rates == {"Episode_Termination/fell_over": 0.0, "Episode_Termination/time_out": 1.0}
    assert again[TRACKING] == pytest.approx(mjlabs[TRACKING], rel=1e-6)
    assert len(again) > len(rates) + 1  # mjlab's per-step means are there too
