"""The PPO profiles (``models.profile``): ``ppo.rsl_rl`` is read in one place (and the
configuration's checks), and what a spec saved says is the profile that built it."""

from __future__ import annotations

import ast
from pathlib import Path

import gymnasium as gym
import numpy as np

from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models import profile as profiles

ROOT = Path(__file__).resolve().parents[2]
READERS = {"orin_rl/models/profile.py", "orin_rl/config/checks.py"}


def test_the_flag_is_read_in_the_profile_and_the_checks_only():
    found = []
    for path in sorted((ROOT / "orin_rl").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr == "rsl_rl" and rel not in READERS:
                found.append(f"{rel}:{node.lineno}")
    assert not found, "ask models.profile instead of reading .rsl_rl: " + ", ".join(found)


def _spec(**kwargs) -> PolicySpec:
    box = gym.spaces.Box(-1.0, 1.0, (5,), np.float32)
    return PolicySpec.from_spaces(box, gym.spaces.Box(-1.0, 1.0, (2,), np.float32), **kwargs)


def test_a_saved_spec_names_its_profile_and_the_network_follows_it():
    for profile in (profiles.GENERIC, profiles.RSL_RL):
        spec = _spec(normalize_obs=True, **profiles.spec_fields(profile))
        assert profiles.of_spec(spec.to_dict()) is profile
        policy = ActorCritic(spec)
        inside = profile.normalizers == "inside_networks"
        assert policy.normalization.where == profile.normalizers
        assert (policy.obs_normalizer is None) == inside
        assert (policy.actor_normalizer is not None) == inside
        assert hasattr(policy, "std") == (profile.std == "clamped_std")


def test_no_normalisation_without_normalize_obs_or_with_an_encoder():
    assert profiles.normalization(_spec().to_dict()) == "none"
    assert ActorCritic(_spec(rsl_rl=True)).normalization.describe() is None
    frames = dict(_spec(normalize_obs=True).to_dict(), encoder="nature")
    assert profiles.normalization(frames) == "none"
