"""Jetson detection on fake roots, tegrastats parsing, the monitor, tool commands, doctor."""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from orin_rl import cli, jetson

JP7_LINE = (
    "07-25-2026 09:08:28 RAM 20642/62817MB (lfb 1x2MB) CPU [23%@2201,10%@2201,4%@2201,14%@2201,"
    "30%@2201,18%@2201,10%@2201,10%@2201,33%@2201,7%@2201,5%@2201,27%@2201] EMC_FREQ 3%@3199 "
    "GR3D_FREQ 12%@[1300,1300] NVENC0 off NVDEC0 off NVJPG0 off NVJPG1 off VIC off OFA off "
    "NVDLA0 off NVDLA1 off PVA0_FREQ off APE 174 cpu@52.968C/52.968C soc2@48.406C/48.406C "
    "soc0@49.531C/49.531C gpu@47.625C/47.625C VDD_GPU_SOC 5139mW/5139mW/5139mW "
    "VDD_CPU_CV 3268mW/3268mW/3268mW VIN_SYS_5V0 5500mW/5500mW/5500mW"
)
# JetPack 5 form: one GR3D pair, upper-case temperatures, current/average power, a SWAP field.
JP5_LINE = (
    "RAM 3012/30536MB (lfb 6384x4MB) SWAP 0/15268MB (cached 0MB) CPU [2%@729,1%@729,off,off] "
    "EMC_FREQ 0%@2133 GR3D_FREQ 10%@1300 APE 174 CPU@41.437C GPU@39.5C Tboard@38C "
    "VDD_GPU_SOC 2390mW/2390mW VDD_CPU_CV 796mW/796mW VIN_SYS_5V0 3528mW/3528mW"
)
THOR_LINE = "RAM 10240/131072MB CPU [1%@2601,2%@2601] EMC_FREQ 1%@4266 GR3D_FREQ @[1000,1000,1000] gpu@41.2C/41.2C"


def fake_root(tmp_path, release: str | None, model: str | None):
    if release is not None:
        (tmp_path / "etc").mkdir()
        (tmp_path / "etc" / "nv_tegra_release").write_text(release + "\n# KERNEL_VARIANT: oot\n")
    if model is not None:
        (tmp_path / "proc" / "device-tree").mkdir(parents=True)
        (tmp_path / "proc" / "device-tree" / "model").write_bytes(model.encode() + b"\x00")
    return tmp_path


class TestDetect:
    @pytest.mark.parametrize(
        ("release", "model", "l4t", "jetpack"),
        [
            (
                "# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023",
                "NVIDIA Jetson AGX Orin Developer Kit",
                "35.4.1",
                "5.1.2",
            ),
            (
                "# R36 (release), REVISION: 3.0, GCID: 36191598, BOARD: generic, EABI: aarch64, DATE: Mon May  6 17:34:21 UTC 2024",
                "NVIDIA Jetson AGX Orin Developer Kit",
                "36.3.0",
                "6.0",
            ),
            (
                "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025",
                "NVIDIA Jetson AGX Orin Developer Kit",
                "36.4.3",
                "6.2",
            ),
            (
                "# R36 (release), REVISION: 4.3, GCID: 38968081, BOARD: generic, EABI: aarch64, DATE: Wed Jan  8 01:49:37 UTC 2025",
                "NVIDIA Jetson Orin Nano Engineering Reference Developer Kit Super",
                "36.4.3",
                "6.2",
            ),
            (
                "# R38 (release), REVISION: 2.0, GCID: 1, BOARD: generic, EABI: aarch64, DATE: x",
                "NVIDIA Jetson AGX Thor",
                "38.2.0",
                "7.x",
            ),
        ],
    )
    def test_jetson_roots(self, tmp_path, release, model, l4t, jetpack):
        info = jetson.detect(fake_root(tmp_path, release, model), inspect_torch=False)
        assert info.is_jetson and info.integrated_gpu
        assert (info.model, info.l4t, info.jetpack) == (model, l4t, jetpack)

    def test_not_a_jetson(self, tmp_path):
        info = jetson.detect(fake_root(tmp_path, None, None), inspect_torch=False)
        assert (
            not info.is_jetson and info.l4t is None and info.jetpack is None and info.model is None
        )

    def test_cpu_only_torch_on_a_jetson_is_a_warning(self, tmp_path):
        pytest.importorskip("torch")
        import torch

        if torch.cuda.is_available():
            pytest.skip("this torch has CUDA")
        root = fake_root(
            tmp_path, "# R36 (release), REVISION: 4.3, GCID: 1, BOARD: generic", "Orin"
        )
        info = jetson.detect(root)
        assert info.torch_cuda is False and "JetPack build of torch" in info.warnings[0]


class TestTegrastats:
    def test_jetpack7_agx_orin_line(self):
        s = jetson.parse_tegrastats(JP7_LINE)
        assert s["timestamp"] == "07-25-2026 09:08:28"
        assert (s["ram_used_mb"], s["ram_total_mb"]) == (20642, 62817)
        assert len(s["cpu"]) == 12 and s["cpu"][0] == {"load_pct": 23, "freq_mhz": 2201}
        assert (s["emc_load_pct"], s["emc_freq_mhz"]) == (3, 3199)
        assert (s["gpu_load_pct"], s["gpu_freq_mhz"]) == (12, [1300, 1300])
        assert s["temperatures_c"] == {"cpu": 52.968, "soc2": 48.406, "soc0": 49.531, "gpu": 47.625}
        assert s["power_mw"]["VDD_GPU_SOC"] == {"current": 5139, "average": 5139, "max": 5139}
        assert jetson.total_power_mw(s) == 5500
        assert "swap_used_mb" not in s

    def test_jetpack5_line(self):
        s = jetson.parse_tegrastats(JP5_LINE)
        assert (s["swap_used_mb"], s["swap_total_mb"]) == (0, 15268)
        assert s["cpu"][2] is None and s["cpu"][1] == {"load_pct": 1, "freq_mhz": 729}
        assert (s["gpu_load_pct"], s["gpu_freq_mhz"]) == (10, 1300)
        assert s["temperatures_c"] == {"cpu": 41.437, "gpu": 39.5, "tboard": 38.0}
        assert s["power_mw"]["VDD_CPU_CV"] == {"current": 796, "average": 796}
        assert "timestamp" not in s

    def test_thor_line_has_no_gpu_load(self):
        s = jetson.parse_tegrastats(THOR_LINE)
        assert s["gpu_load_pct"] is None and s["gpu_freq_mhz"] == [1000, 1000, 1000]
        assert s["emc_freq_mhz"] == 4266 and jetson.total_power_mw(s) is None

    def test_garbage_gives_nothing(self):
        assert jetson.parse_tegrastats("not a tegrastats line") == {}


class TestCommands:
    def test_argument_lists(self):
        assert jetson.nvpmodel_query_command() == ["nvpmodel", "-q"]
        assert jetson.nvpmodel_set_command(2) == ["nvpmodel", "-m", "2"]
        assert jetson.jetson_clocks_command("enable") == ["jetson_clocks"]
        assert jetson.jetson_clocks_command("store", "/tmp/c") == [
            "jetson_clocks",
            "--store",
            "/tmp/c",
        ]
        assert jetson.jetson_clocks_command("restore", "/tmp/c") == [
            "jetson_clocks",
            "--restore",
            "/tmp/c",
        ]

    @pytest.mark.parametrize("bad", [-1, "0; rm -rf /", True, 1.5])
    def test_bad_mode_ids(self, bad):
        with pytest.raises(jetson.JetsonError):
            jetson.nvpmodel_set_command(bad)

    def test_clock_actions(self):
        with pytest.raises(jetson.JetsonError, match="state file"):
            jetson.jetson_clocks_command("store")
        with pytest.raises(jetson.JetsonError):
            jetson.jetson_clocks_command("boost")

    def test_parse_nvpmodel(self):
        assert jetson.parse_nvpmodel("NV Power Mode: MAXN\n0\n") == ("MAXN", 0)
        assert jetson.parse_nvpmodel("NV Power Mode: 15W\n1\n") == ("15W", 1)

    def test_missing_tool_says_not_a_jetson(self, monkeypatch):
        monkeypatch.setenv("PATH", "/nonexistent")
        with pytest.raises(jetson.JetsonError, match="not a Jetson"):
            jetson.power_mode()


def fake_tegrastats(tmp_path, lines: list[str], delay: float, exit_after: bool) -> str:
    """A real executable that prints recorded lines like tegrastats does."""
    script = tmp_path / "tegrastats"
    body = "\n".join(f"print({line!r}, flush=True); time.sleep({delay})" for line in lines)
    # Dying: close stdout first and linger, as a process does while it is torn down, so
    # EOF reaches the monitor before the exit code exists (the race a poll() lost).
    tail = (
        "sys.stdout.close(); os.close(1); time.sleep(0.3); sys.exit(3)"
        if exit_after
        else "time.sleep(60)"
    )
    script.write_text(f"#!{sys.executable}\nimport os, sys, time\n{body}\n{tail}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


class TestMonitor:
    def test_samples_energy_and_temperatures(self, tmp_path):
        cmd = fake_tegrastats(tmp_path, [JP7_LINE] * 6, 0.05, exit_after=False)
        with jetson.Monitor(source="tegrastats", command=[cmd]) as mon:
            deadline = time.monotonic() + 10
            while len(mon.samples) < 6 and time.monotonic() < deadline:
                time.sleep(0.02)
        summary = mon.summary()
        assert summary["samples"] == 6 and summary["error"] is None
        assert summary["mean_power_w"] == pytest.approx(5.5)
        assert summary["energy_j"] == pytest.approx(5.5 * summary["duration_s"], rel=1e-6)
        assert summary["peak_temperatures_c"]["cpu"] == 52.968

    def test_source_dying_mid_run_keeps_the_samples(self, tmp_path):
        cmd = fake_tegrastats(tmp_path, [JP5_LINE] * 3, 0.02, exit_after=True)
        mon = jetson.Monitor(source="tegrastats", command=[cmd]).start()
        mon._thread.join(timeout=10)
        summary = mon.stop()
        assert summary["samples"] == 3 and "exited (code 3)" in summary["error"]

    def test_missing_source_is_reported_not_raised(self):
        mon = jetson.Monitor(source="tegrastats", command=["/nonexistent/tegrastats"]).start()
        assert "cannot start" in mon.stop()["error"]

    def test_per_watt(self):
        assert jetson.per_watt(1000.0, {"mean_power_w": 5.0}) == 200.0
        assert jetson.per_watt(1000.0, {"mean_power_w": None}) is None


def test_doctor_on_this_box(capsys):
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    for item in (
        "python",
        "torch",
        "numba",
        "onnxruntime",
        "tensorrt",
        "jetson",
        "gpu physics",
        "robot wire",
        "buffer placement",
    ):
        assert item in out
    assert "CPUExecutionProvider" in out
    if importlib.util.find_spec("cyclonedds"):  # the robot extra (CI): its release, not a guess
        from importlib import metadata

        assert f"cyclonedds {metadata.version('cyclonedds')} (" in out


def test_doctor_probe_model_is_onnx_helpers_model():
    """The provider probe's bytes, written out so the doctor runs without the onnx package, are
    the model onnx's helper builds (Relu on [1, 4] float, opset 17, IR 8)."""
    from onnx import TensorProto, checker, helper

    from orin_rl.doctor import PROBE_ONNX

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    checker.check_model(model)
    assert model.SerializeToString() == PROBE_ONNX


def test_doctor_reports_gpu_physics(monkeypatch):
    from orin_rl import doctor

    row = doctor.gpu_physics_check()
    if importlib.util.find_spec("mujoco_warp") is not None:
        assert row.status in {"ok", "info"} and "mujoco_warp" in row.detail
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        doctor.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "mujoco_warp" else real_find_spec(name, *a),
    )
    missing = doctor.gpu_physics_check()
    assert missing.status == "missing" and "mujoco_warp" in missing.detail
    assert "orin-rl[sim]" in missing.next_step
    assert "jetson/setup.sh" in doctor.gpu_physics_check(is_jetson=True).next_step


class TestDoctorJudgesTheImage:
    """The deploy image (jetson/deploy.sh) leaves torch, numba and GPU physics out on purpose:
    its doctor showed them ✗ with "pip install torch" (issue 67). They are "not in this image"
    there, and still missing, with their advice, in a training install."""

    LEFT_OUT = ("torch", "numba", "gpu physics")

    @pytest.fixture
    def doctor(self, monkeypatch):
        """orin_rl.doctor on an environment without torch, numba and MuJoCo Warp (as the deploy
        image is; the rest as this box has it)."""
        from orin_rl import doctor

        gone = ("torch", "numba", "warp", "mujoco", "mujoco_warp")
        version, find_spec = doctor._version, importlib.util.find_spec
        monkeypatch.setattr(doctor, "_version", lambda m: None if m in gone else version(m))
        monkeypatch.setattr(doctor.importlib.util, "find_spec",
                            lambda name, *a: None if name in gone else find_spec(name, *a))  # fmt: skip
        return doctor

    def test_the_deploy_image_shows_what_it_leaves_out_as_no_fault(self, doctor, tmp_path):
        marker = {"image": "deploy", "by": "jetson/deploy.sh", "left_out": list(self.LEFT_OUT)}
        (tmp_path / doctor.IMAGE_MARKER).write_text(json.dumps(marker))
        rows = {r.item: r for r in doctor.checks(doctor.detect_image(tmp_path, environ={}))}
        for item in self.LEFT_OUT:
            assert rows[item].status == "skipped" and rows[item].next_step == "", rows[item]
            assert rows[item].detail.startswith("not in this image (deploy"), rows[item]
        assert "image" in rows and "left out on purpose" in rows["image"].detail
        text = doctor.table(list(rows.values()))
        assert not any(f"✗ {item}" in text for item in self.LEFT_OUT), text
        assert "pip install torch" not in text and "pip install numba" not in text, text

    def test_a_training_install_still_shows_them_missing(self, doctor, tmp_path):
        rows = {r.item: r for r in doctor.checks(doctor.detect_image(tmp_path, environ={}))}
        assert all(rows[item].status == "missing" for item in self.LEFT_OUT)
        assert rows["torch"].next_step.startswith("pip install torch") and "image" not in rows

    def test_the_image_comes_from_the_environment_or_the_marker(self, tmp_path):
        from orin_rl.doctor import IMAGE_ENV, IMAGE_MARKER, detect_image

        marker = tmp_path / IMAGE_MARKER
        assert detect_image(tmp_path, environ={}).name == "training"  # no marker: full install
        marker.write_text('{"image": "deploy", "left_out": ["torch", "robot wire"]}')
        image = detect_image(tmp_path, environ={})
        assert (image.name, image.left_out, image.source) == (
            "deploy", ("torch", "robot wire"), str(marker))  # fmt: skip
        assert detect_image(tmp_path, environ={IMAGE_ENV: "training"}).name == "training"
        named = detect_image(tmp_path / "elsewhere", environ={IMAGE_ENV: "deploy"})
        assert named.name == "deploy" and named.left_out == TestDoctorJudgesTheImage.LEFT_OUT
        marker.write_text("{not json")
        broken = detect_image(tmp_path, environ={})
        assert broken.name == "training" and "unreadable" in broken.source


def test_doctor_json_validates(capsys):
    assert cli.main(["doctor", "--json", "--selftest"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"checks", "selftest"} == set(data)
    for row in data["checks"] + data["selftest"]:
        assert set(row) == {"item", "status", "detail", "next_step"}
        assert row["status"] in {"ok", "missing", "warn", "info", "skipped"}
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        numba_row = next(r for r in data["checks"] if r["item"] == "numba")
        assert "simulator" in numba_row["detail"]


def test_no_shell_anywhere():
    """Tools run with argument lists: no shell=True in the package."""
    package = Path(jetson.__file__).parent
    files = sorted(package.rglob("*.py"))
    assert len(files) > 20  # the package itself, wherever the tests run from
    hits = [f"{f}:{n}" for f in files for n, line in enumerate(f.read_text().splitlines(), 1)
            if "shell=True" in line]  # fmt: skip
    assert hits == []


def test_training_reports_energy_with_a_monitor(tmp_path, monkeypatch):
    """A real training run with the monitor fed by a tegrastats replay on PATH."""
    from orin_rl import config as C
    from orin_rl.runners import train

    script = fake_tegrastats(tmp_path, [JP7_LINE] * 200, 0.05, exit_after=False)
    monkeypatch.setenv("ORIN_RL_TEGRASTATS", script)
    cfg = C.apply_overrides(
        C.Config(),
        [
            "env.num_envs=4",
            "ppo.num_steps=64",
            "train.total_steps=2048",
            "train.eval_episodes=1",
            "train.tensorboard=false",
        ],
    )
    summary = train(cfg, tmp_path / "run", progress=False)
    power = summary["power"]
    assert power["samples"] >= 2 and power["mean_power_w"] == pytest.approx(5.5)
    assert power["energy_j"] > 0 and power["steps_per_s_per_watt"] == pytest.approx(
        summary["steps_per_s"] / 5.5
    )
    off = train(
        C.apply_overrides(cfg, ["train.power_monitor=off"]), tmp_path / "run2", progress=False
    )
    assert off["power"] is None


def test_doctor_names_cyclonedds_home_when_the_binding_cannot_load(monkeypatch):
    """A binding built against a distribution's CycloneDDS (jetson/deploy.sh with
    CYCLONEDDS_HOME=/usr) does not load while CYCLONEDDS_HOME stays set: the row says so."""
    from orin_rl import doctor

    monkeypatch.setattr(doctor, "_version", lambda m: "broken (CycloneDDSLoaderException)")
    monkeypatch.setenv("CYCLONEDDS_HOME", "/usr")
    row = doctor.robot_wire_check()
    assert row.status == "warn" and row.next_step.startswith("unset CYCLONEDDS_HOME")
    monkeypatch.delenv("CYCLONEDDS_HOME")
    assert "unset" not in doctor.robot_wire_check().next_step
