"""The CLI: config assembly order, one-line errors with exit code 2."""

from __future__ import annotations

import pytest

from orin_rl import cli


def parse(*argv):
    return cli.build_parser().parse_args(["train", *argv])


def test_precedence_preset_file_flag_set(tmp_path):
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("env:\n  env_id: Acrobot-v1\n  num_envs: 4\nppo:\n  num_steps: 64\n")
    cfg = cli.train_config(
        parse("--config", str(cfg_file), "--num-envs", "2", "--set", "ppo.num_steps=32")
    )
    assert cfg.env.env_id == "Acrobot-v1"
    assert cfg.ppo.normalize_obs is True  # from the Acrobot preset
    assert cfg.env.num_envs == 2  # flag beats file
    assert cfg.ppo.num_steps == 32  # --set beats all (2 x 32 = 64: the preset's 64 minibatches)


@pytest.mark.parametrize(
    ("argv", "preset"),
    [
        (["--env", "Hopper-v5"], "gym"),
        (["--env", "Hopper-v5", "--env-backend", "gpu"], "gpu"),
        (["--set", "env.env_id=Hopper-v5", "--set", 'env.backend="gpu"'], "gpu"),  # via --set
        (["--env", "Hopper-v5", "--no-preset"], None),
    ],
)
def test_presets_follow_env_and_backend(argv, preset):
    """The preset is chosen by env id and backend, wherever they were given."""
    from orin_rl.presets import GPU_PRESETS, PRESETS

    cfg = cli.train_config(cli.build_parser().parse_args(["train", *argv]))
    chosen = {"gym": PRESETS, "gpu": GPU_PRESETS}.get(preset, {}).get("Hopper-v5", {})
    defaults = cli.Config()
    assert cfg.env.env_id == "Hopper-v5"
    assert cfg.env.num_envs == chosen.get("env.num_envs", defaults.env.num_envs)
    assert cfg.ppo.num_minibatches == chosen.get(
        "ppo.num_minibatches", defaults.ppo.num_minibatches
    )
    assert cfg.ppo.hidden_sizes == chosen.get("ppo.hidden_sizes", defaults.ppo.hidden_sizes)


def test_print_config(capsys):
    assert cli.main(["train", "--env", "CartPole-v1", "--print-config"]) == 0
    assert "env_id: CartPole-v1" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "ppo.bogus=1"], "ppo.bogus: unknown key"),
        (["--env", "NoSuchEnv-v9", "--out", "{tmp}/r"], "NoSuchEnv-v9"),
        (["--resume", "{tmp}/nothing"], "nothing to resume"),
        (["--device", "cuda", "--out", "{tmp}/r2"], "torch sees no CUDA"),
        # before torchrun starts its processes (which each printed it, then a traceback)
        (["--device", "cuda", "--nproc", "2", "--out", "{tmp}/r3"], "torch sees no CUDA"),
    ],
)
def test_errors_are_one_line_exit_2(tmp_path, capsys, argv, message):
    import torch

    if "cuda" in argv and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code = cli.main(["-q", "train", "--no-progress", *[a.format(tmp=tmp_path) for a in argv]])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_existing_run_folder_is_not_clobbered(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("x")
    assert cli.main(["-q", "train", "--out", str(tmp_path), "--no-progress"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert cli.main(["-q", "train", "--out", str(tmp_path), "--overwrite", "--no-progress"]) == 2
    assert (tmp_path / "keep.txt").exists()
