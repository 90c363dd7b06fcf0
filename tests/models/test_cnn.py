"""Image encoders: chosen from the observation space, scaling uint8 frames inside the network."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models.cnn import ImageEncoder


def _spec(shape, dtype=np.uint8, **kwargs) -> PolicySpec:
    space = gym.spaces.Box(0, 255, shape, dtype)
    return PolicySpec.from_spaces(space, gym.spaces.Discrete(3), hidden_sizes=[], **kwargs)


class TestEncoderChoice:
    def test_atari_stack_gets_the_nature_encoder(self):
        spec = _spec((4, 84, 84))
        assert (spec.encoder, spec.obs_dtype) == ("nature", "uint8")
        convs = [m for m in ActorCritic(spec).actor.modules() if isinstance(m, torch.nn.Conv2d)]
        assert [(c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [
            (32, 8, 4), (64, 4, 2), (64, 3, 1)
        ]  # fmt: skip

    def test_small_grid_gets_the_small_encoder(self):
        spec = _spec((4, 10, 10))
        assert spec.encoder == "small"
        out = ActorCritic(spec).act(torch.zeros(5, 4, 10, 10, dtype=torch.uint8))
        assert [tuple(t.shape) for t in out] == [(5,), (5,), (5,)]

    def test_float_vectors_stay_on_the_mlp(self):
        spec = _spec((8,), np.float32)
        assert (spec.encoder, spec.obs_dtype) == (None, "float32")

    def test_normalize_obs_is_refused_for_frames(self):
        with pytest.raises(ValueError, match="normalize_obs false"):
            ActorCritic(_spec((4, 10, 10), normalize_obs=True))


class TestScalingInside:
    def test_uint8_frames_are_scaled_by_255_in_the_network(self):
        """encoder(uint8 x) is the convolutions on x / 255 in float, flattened or not."""
        torch.manual_seed(0)
        encoder = ImageEncoder((4, 10, 10), "small")
        frames = torch.randint(0, 256, (6, 4, 10, 10), dtype=torch.uint8)
        expected = encoder.fc(encoder.convs(frames.float() / 255.0))
        torch.testing.assert_close(encoder(frames), expected)
        torch.testing.assert_close(encoder(frames.flatten(1)), expected)

    def test_policy_acts_on_uint8_as_on_the_scaled_floats(self):
        torch.manual_seed(0)
        policy = ActorCritic(_spec((4, 84, 84)))
        frames = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
        log_probs = policy.distribution(frames).log_probs
        by_hand = policy.actor[1:](policy.actor[0].fc(policy.actor[0].convs(frames / 255.0)))
        torch.testing.assert_close(log_probs, torch.log_softmax(by_hand, -1))


class TestChannelsLast:
    def test_hwc_frames_are_read_as_their_chw_transpose(self):
        """(H, W, C) frames (gymnasium's rendered ones) go through the same convolutions as
        their (C, H, W) transpose: the encoder permutes, the storage keeps the env's layout."""
        torch.manual_seed(0)
        spec = _spec((10, 10, 4))
        assert spec.encoder == "small" and spec.obs_shape == [10, 10, 4]
        hwc = ImageEncoder((10, 10, 4), "small")
        chw = ImageEncoder((4, 10, 10), "small")
        chw.load_state_dict(hwc.state_dict())
        frames = torch.randint(0, 256, (3, 10, 10, 4), dtype=torch.uint8)
        torch.testing.assert_close(hwc(frames), chw(frames.permute(0, 3, 1, 2)))

    def test_large_hwc_frames_get_the_nature_encoder(self):
        assert _spec((96, 96, 3)).encoder == "nature"


class TestSharedEncoder:
    """``share_encoder``: one encoder for both heads (CleanRL's Atari agent), run once by
    ``act`` and ``evaluate``, trained by both losses."""

    def _pair(self):
        torch.manual_seed(0)
        shared = ActorCritic(_spec((4, 10, 10), share_encoder=True))
        separate = ActorCritic(_spec((4, 10, 10)))
        return shared, separate

    def test_one_encoder_whose_features_both_heads_read(self):
        shared, separate = self._pair()
        assert shared.actor[0] is shared.critic[0]
        enc = sum(p.numel() for p in shared.actor[0].parameters())
        assert (
            sum(p.numel() for p in separate.parameters())
            - sum(p.numel() for p in shared.parameters())
            == enc
        )

    def test_act_and_evaluate_agree_with_the_distribution_and_value(self):
        shared, _ = self._pair()
        obs = torch.randint(0, 256, (6, 4, 10, 10), dtype=torch.uint8)
        actions, logp, values = shared.act(obs)
        dist = shared.distribution(obs)
        torch.testing.assert_close(logp, dist.log_prob(actions))
        torch.testing.assert_close(values, shared.value(obs))
        logp2, entropy, values2 = shared.evaluate(obs, actions)
        torch.testing.assert_close(logp2, logp)
        torch.testing.assert_close(entropy, dist.entropy())
        torch.testing.assert_close(values2, values)

    def test_the_value_loss_trains_the_shared_encoder_only(self):
        obs = torch.randint(0, 256, (6, 4, 10, 10), dtype=torch.uint8)
        for policy, reaches in zip(self._pair(), (True, False), strict=True):
            policy.value(obs).square().mean().backward()
            grad = next(policy.actor[0].parameters()).grad
            assert (grad is not None and bool(grad.abs().sum() > 0)) is reaches
