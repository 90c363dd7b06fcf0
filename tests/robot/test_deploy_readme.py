"""docs/deploy-g1.md (once README's "Deploy to a Unitree G1"): its sim-to-sim block runs as
written (issue 51): the twin
with the scripted remote of docs/examples/g1_remote.json, and ``run --command remote`` driven
by it through passive → stand → policy → the remote's stop, exit 0, in that order in the
report; then the same twin (back in its start pose) serves a second run, whose plant stands it
up, runs the policy and is stopped by the watchdog when the twin is killed. One twin (its
model's build is most of the time), loopback DDS, bounded in time."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.robot.conftest import linear_bundle, require_dds

require_dds()

from orin_rl.robot.contract import DeployContract  # noqa: E402
from orin_rl.robot.safety import Mode, SafetyConfig  # noqa: E402
from orin_rl.robot.unitree import UnitreePlant  # noqa: E402
from orin_rl.runtime.loop import ControlLoop, LoopConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = "35"


def _sim_to_sim_block() -> list[str]:
    guide = (ROOT / "docs" / "deploy-g1.md").read_text().split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", guide, re.S)
    block = next(b for b in blocks if "sim-robot" in b)
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_the_readme_sim_to_sim_block_runs_as_written(tmp_path, g1_contract):
    """The twin line (backgrounded by ``&``) and the run line as pasted, in a folder holding
    the bundle at runs/g1/bundle, with three changes: this test's DDS domain, the gantry held
    throughout (``--hold-s 60``: the stand-in policy holds the default pose, it does not
    balance), and ``--late-factor 5`` (three processes share this loaded box's two cores: a
    30 ms hiccup is not what this test is about). The remote script stands the robot up, starts the policy, pushes the stick
    forward and turns, then stops it: exit 0 ("operator stop"), the three transitions in order
    with the remote's causes, the sticks' commands in the report (the old README's block gave
    up after 5 s: its --wait-s default; old run had no remote: both fail it). The twin line
    carries ``--seconds``: a twin left running counted falls long after (mutation: the block's
    twin without it)."""
    twin_line, run_line = _sim_to_sim_block()
    assert twin_line.startswith("orin-rl sim-robot") and twin_line.endswith("&")
    assert "--seconds" in twin_line  # the block ends the twin it starts
    assert run_line.startswith("orin-rl run") and "--command remote" in run_line
    linear_bundle(tmp_path / "runs" / "g1" / "bundle", g1_contract)
    (tmp_path / "docs").symlink_to(ROOT / "docs")

    def argv(line: str) -> list[str]:
        args = shlex.split(line.rstrip("&").replace("--dds-domain 1 ", f"--dds-domain {DOMAIN} "))
        assert args[args.index("--dds-domain") + 1] == DOMAIN, line
        return [sys.executable, "-m", "orin_rl.cli", "-q", *args[1:]]

    twin = subprocess.Popen([*argv(twin_line), "--hold-s", "60", "--report", "twin.json"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        run = subprocess.run([*argv(run_line), "--late-factor", "5"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=240)  # fmt: skip
        assert run.returncode == 0, (run.stdout, run.stderr)
        _stand_up_then_kill_the_twin(twin, g1_contract)
    finally:
        if twin.poll() is None:
            twin.kill()
    report = json.loads((tmp_path / "sim2sim.json").read_text())
    steps = [(t["from"], t["to"], t["cause"]) for t in report["transitions"]]
    assert [s[:2] for s in steps] == [("passive", "stand"), ("stand", "policy"),
                                      ("policy", "stopped")], steps  # fmt: skip
    assert "L2+up" in steps[0][2] and "R1+X" in steps[1][2] and "L2+B" in steps[2][2], steps
    assert report["end"] == "operator stop" and report["safety_stop"] is None
    assert report["ticks"] > 100, report["ticks"]  # ~4 s of policy at 50 Hz
    # half stick forward, 0.3 turn right: past the 0.1 deadzone, into the training ranges
    ranges = json.loads((tmp_path / "runs/g1/bundle/policy.json").read_text())["deploy"]
    x_high = ranges["commands"]["ranges"]["lin_vel_x"][1]
    z_high = ranges["commands"]["ranges"]["ang_vel_z"][1]
    low, high = report["command_range"]
    assert high[0] == pytest.approx(0.4 / 0.9 * x_high, rel=1e-5), report["command_range"]
    assert high[2] == pytest.approx(0.2 / 0.9 * z_high, rel=1e-5), report["command_range"]
    assert low == pytest.approx([0.0, 0.0, 0.0]), report["command_range"]
    out = run.stdout
    assert "L2+up stand" in out and "waiting up to 60 s" in out, out
    assert out.index("passive -> stand") < out.index("stand -> policy") < out.index("end "), out
    seen = json.loads((tmp_path / "twin.json").read_text())
    assert seen["commands"] > 500 and seen["bad_crc"] == 0 and seen["resets"] >= 1, seen
    assert seen["falls"] == 0 and seen["falls_after_end"] == 0, seen  # held on its gantry


def _stand_up_then_kill_the_twin(twin: subprocess.Popen, g1_contract: dict) -> None:
    """The second run on the twin (it was reset 1 s after the first): the stand-up brings
    every joint within 0.2 rad of the default pose, 50 policy ticks run on time, every
    command's CRC checks out at the twin; then the twin is killed and the watchdog stops the
    run (mutation: a wrong CRC: the twin executes none)."""
    contract = DeployContract.from_dict(g1_contract)
    plant = UnitreePlant(contract, domain=int(DOMAIN), interface="lo",
                         safety=SafetyConfig(late_factor=5.0))  # fmt: skip
    time.sleep(1.5)  # the twin's reset after the first run's last command
    plant.start(wait_s=30.0)
    assert plant.machine.mode is Mode.POLICY, plant.machine.transitions
    error = np.max(np.abs(plant._q() - np.asarray(contract.default_joint_pos)))
    assert error < 0.2, error
    zero = np.zeros((1, contract.num_joints), np.float32)
    modes = []

    def kill_at_50(obs):
        modes.append(plant.machine.mode)
        if len(modes) == 50:
            twin.terminate()
        return zero

    cfg = LoopConfig(rate_hz=50.0, iterations=150)
    result = ControlLoop(plant.sensor, kill_at_50, plant.actuate, cfg,
                         should_stop=plant.should_stop).run()  # fmt: skip
    plant.close()
    assert modes[:50] == [Mode.POLICY] * 50 and result.iterations < 150
    stop = plant.machine.transitions[2]
    assert "silent" in stop["cause"] and stop["tick"] >= 50, plant.machine.transitions
    twin.wait(timeout=10)
