"""Config dataclasses: YAML round trip, overrides, bad keys and types, field docs."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from orin_rl import config as C
from orin_rl.config.presets import PRESETS


def test_yaml_round_trip(tmp_path):
    cfg = C.apply_overrides(
        C.Config(), ["ppo.hidden_sizes=[32, 16]", "train.seed=7", "ppo.target_kl=0.02"]
    )
    C.save(cfg, tmp_path / "c.yaml")
    assert C.load(tmp_path / "c.yaml") == cfg


def test_overrides_parse_yaml_values():
    cfg = C.apply_overrides(
        C.Config(), ["ppo.learning_rate=3e-4", "ppo.anneal_lr=false", "env.max_episode_steps=null"]
    )
    assert cfg.ppo.learning_rate == 3e-4 and cfg.ppo.anneal_lr is False
    assert cfg.env.max_episode_steps is None


def test_int_widens_to_float():
    assert C.apply_overrides(C.Config(), ["ppo.learning_rate=1"]).ppo.learning_rate == 1.0


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("ppo.lerning_rate=1e-3", "ppo.lerning_rate: unknown key"),
        ("optim.lr=1", "optim.lr: unknown key"),
        ("env.num_envs=eight", "env.num_envs: expected an integer"),
        ("env.num_envs=2.5", "env.num_envs: expected an integer"),
        ("ppo.anneal_lr=1", "ppo.anneal_lr: expected true/false"),
        ("train.device=tpu", "train.device: 'tpu' is not one of"),
        ("env.num_envs=-4", "env.num_envs: must be positive"),
        ("ppo.gamma=1.5", "ppo.gamma: must be within"),
        ("ppo.hidden_sizes=[64, x]", "ppo.hidden_sizes[1]: expected an integer"),
        ("ppo.num_minibatches=7", "does not divide"),
        ("ppo.learning_rate", "expected section.field=value"),
        ("env.random_episode_start=true", "env.random_episode_start: mjlab tasks only"),
        ("env.train_wrappers=[nomodule]", "env.train_wrappers[0]: 'nomodule' is not a module"),
    ],
)
def test_bad_overrides_name_the_key(override, message):
    with pytest.raises(C.ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        C.apply_overrides(C.Config(), [override])


def test_compiled_update_needs_fp32():
    with pytest.raises(C.ConfigError, match=r"ppo\.compile_update: needs train\.precision=fp32"):
        C.apply_overrides(C.Config(), ["ppo.compile_update=true", "train.precision=bf16"])
    assert C.apply_overrides(C.Config(), ["ppo.compile_update=true"]).ppo.compile_update


@pytest.mark.parametrize(
    "others",
    [["train.algo=sac", "env.env_id=Pendulum-v1"], ["train.algo=dqn"],
     ["train.algo=sac", "online.enabled=true", "env.num_envs=1", "env.env_id=Pendulum-v1"]],
)  # fmt: skip
def test_overlap_is_ppos_only(others):
    """--overlap with SAC, DQN or --online was accepted silently (issue 41, item 6)."""
    with pytest.raises(C.ConfigError, match=r"train\.overlap: PPO's rollouts only"):
        C.apply_overrides(C.Config(), [*others, "train.overlap=true"])
    C.apply_overrides(C.Config(), others)  # valid without it


@pytest.mark.parametrize("option", ["share_frames", "frame_history"])
@pytest.mark.parametrize("others", [["dqn.n_step=3"], ["online.enabled=true", "env.num_envs=1"]])
def test_shared_frames_take_one_step_transitions_off_line(option, others):
    """dqn.share_frames and dqn.frame_history rebuild stacks from one-step shifts; the n-step
    window and the online runner's own inserts would store what they cannot rebuild."""
    with pytest.raises(C.ConfigError, match=rf"dqn\.{option}: one-step transitions"):
        C.apply_overrides(C.Config(), ["train.algo=dqn", f"dqn.{option}=true", *others])
    C.apply_overrides(C.Config(), ["train.algo=dqn", f"dqn.{option}=true"])  # valid alone


def test_frame_history_and_share_frames_are_one_or_the_other():
    with pytest.raises(C.ConfigError, match=r"pick one"):
        C.apply_overrides(C.Config(), ["dqn.share_frames=true", "dqn.frame_history=true"])


@pytest.mark.parametrize(
    "option",
    ["ppo.rsl_rl=true", "ppo.target_kl=0.02", "ppo.normalize_advantage_per_minibatch=true"],
)
def test_single_agent_options_are_refused_with_many_agents(option):
    with pytest.raises(C.ConfigError, match=f"{option.split('=')[0]}: not supported"):
        C.apply_overrides(C.Config(), ["train.num_agents=4", option])


def test_file_with_unknown_key_names_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("ppo:\n  num_step: 8\n")
    with pytest.raises(C.ConfigError, match=r"bad.yaml: ppo.num_step: unknown key"):
        C.load(path)


@pytest.mark.parametrize("text", ["env: [1, 2", "just a string", "- a\n- b\n"])
def test_broken_or_wrong_kind_yaml(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(C.ConfigError):
        C.load(path)


def test_unsafe_yaml_tags_are_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("env: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(C.ConfigError, match="not valid YAML"):
        C.load(path)


def test_every_field_has_a_docstring():
    for cls in (C.EnvConfig, C.PPOConfig, C.BufferConfig, C.TrainConfig, C.Config):
        docs = C.field_docs(cls)
        missing = [f.name for f in dataclasses.fields(cls) if not docs.get(f.name)]
        assert not missing, f"{cls.__name__} fields without a docstring: {missing}"


def test_derived_sizes():
    cfg = C.apply_overrides(
        C.Config(),
        ["env.num_envs=8", "ppo.num_steps=32", "ppo.num_minibatches=4", "train.total_steps=1000"],
    )
    assert (cfg.batch_size, cfg.minibatch_size, cfg.num_iterations) == (256, 64, 4)


@pytest.mark.parametrize("env_id", sorted(PRESETS))
def test_presets_are_valid(env_id):
    overrides = [
        f"{k}={v!r}".replace("True", "true").replace("False", "false")
        for k, v in PRESETS[env_id].items()
    ]
    C.apply_overrides(C.Config(), overrides)


def test_yaml_off_is_the_word_off():
    assert C.apply_overrides(C.Config(), ["train.power_monitor=off"]).train.power_monitor == "off"


def test_internal_copy_keeps_every_section():
    """from_plain (behind every apply_overrides and every resume) rebuilds each section: a
    section it forgets comes back as defaults (online.enabled was lost that way on resume)."""
    assert set(C.SECTIONS) == {f.name for f in dataclasses.fields(C.Config)}
    cfg = C.Config()
    for name in C.SECTIONS:
        section = getattr(cfg, name)
        for field in dataclasses.fields(section):  # change the first flag or number
            value = getattr(section, field.name)
            if isinstance(value, bool):
                setattr(section, field.name, not value)
                break
            if isinstance(value, (int, float)):
                setattr(section, field.name, value + 1)
                break
            if isinstance(value, str):  # a Literal: any other of its values
                options = typing.get_args(typing.get_type_hints(type(section))[field.name])
                other = [o for o in options if isinstance(o, str) and o != value]
                if other:
                    setattr(section, field.name, other[0])
                    break
        else:
            pytest.fail(f"section {name} has no flag or number to change; extend this test")
    assert C.from_plain(C.to_dict(cfg)) == cfg


@pytest.mark.parametrize("other, message", [
    ("ppo.normalize_advantage=false", "set ppo.normalize_advantage true"),
    ("ppo.num_minibatches=512", "a minibatch of one sample has no std"),
])  # fmt: skip
def test_per_minibatch_advantages_need_normalising_and_two_samples(other, message):
    base = ["env.num_envs=4", "ppo.num_steps=128", "ppo.normalize_advantage_per_minibatch=true"]
    with pytest.raises(C.ConfigError, match=message):
        C.apply_overrides(C.Config(), [*base, other])
    C.apply_overrides(C.Config(), base)  # valid alone


def test_frame_history_takes_uniform_replay():
    with pytest.raises(C.ConfigError, match=r"dqn.frame_history: uniform replay only"):
        C.apply_overrides(C.Config(), ["dqn.frame_history=true", "dqn.prioritized=true"])
