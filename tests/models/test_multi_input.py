"""A dict observation (uint8 frames and float32 states) as rows of bytes, and the encoder that
reads each network's keys back (``obs_layout``, ``models.multi_input``)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from orin_rl.models import ActorCritic, PolicySpec
from orin_rl.models.cnn import KeypointEncoder
from orin_rl.obs_layout import ALIGN, LayoutError, ObsLayout

SPACE = gym.spaces.Dict({
    "actor": gym.spaces.Box(-np.inf, np.inf, (5,), np.float32),
    "camera": gym.spaces.Box(0, 255, (1, 12, 12), np.uint8),
    "critic": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
})  # fmt: skip
GROUPS = {"actor": ["actor", "camera"], "critic": ["critic", "camera"]}
ACTIONS = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)


def _values(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "actor": torch.randn(n, 5, generator=g),
        "camera": torch.randint(0, 256, (n, 1, 12, 12), generator=g, dtype=torch.uint8),
        "critic": torch.randn(n, 3, generator=g),
    }


def _policy(**kwargs) -> ActorCritic:
    torch.manual_seed(0)
    spec = PolicySpec.from_spaces(SPACE, ACTIONS, obs_groups=GROUPS, hidden_sizes=[16], **kwargs)
    return ActorCritic(spec)


class TestRows:
    def test_each_key_comes_back_bit_for_bit_from_rows_and_gathered_rows(self):
        """Floats keep their bits (-0.0, inf, NaN too), frames their bytes; a minibatch gather
        of the rows (what the rollout storage hands the update) unpacks the same."""
        layout = ObsLayout.from_space(SPACE)
        values = _values(6)
        values["actor"][0, :3] = torch.tensor([-0.0, float("inf"), float("nan")])
        rows = layout.pack(values)
        assert rows.dtype == torch.uint8 and rows.shape == (6, layout.row_bytes)
        assert all(p.offset % ALIGN == 0 for p in layout.parts.values())
        # 5 floats (20 bytes, padded to 24), 144 frame bytes, 3 floats (12, padded to 16)
        assert [p.offset for p in layout.parts.values()] == [0, 24, 168] and layout.row_bytes == 184
        index = torch.tensor([4, 1, 1, 5])
        for got, want in ((layout.unpack(rows), values),
                          (layout.unpack(rows[index]), {k: v[index] for k, v in values.items()}),
                          (layout.unpack(rows[1:]), {k: v[1:] for k, v in values.items()})):  # fmt: skip
            for key in want:
                assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape
                assert torch.equal(got[key].view(torch.uint8), want[key].view(torch.uint8)), key

    def test_numpy_rows_are_the_tensors_rows(self):
        """The exporter unpacks the recorded rows with numpy: the same bytes, the same keys."""
        layout = ObsLayout.from_space(SPACE)
        values = _values(3, seed=1)
        rows = layout.pack(values)
        np.testing.assert_array_equal(layout.pack({k: v.numpy() for k, v in values.items()}),
                                      rows.numpy())  # fmt: skip
        for key, value in layout.unpack(rows.numpy()).items():
            np.testing.assert_array_equal(value, values[key].numpy())

    def test_what_a_row_cannot_hold_is_one_line(self):
        with pytest.raises(LayoutError, match="float64: a dict observation holds uint8 images"):
            ObsLayout([("x", (3,), "float64")])
        nested = gym.spaces.Dict({"a": gym.spaces.Discrete(3)})
        with pytest.raises(LayoutError, match="holds Boxes"):
            ObsLayout.from_space(nested)
        floats = gym.spaces.Dict({"camera": gym.spaces.Box(0, 1, (1, 8, 8), np.float32)})
        with pytest.raises(ValueError, match="float images: images travel as uint8"):
            PolicySpec.from_spaces(floats, ACTIONS)


class TestEncoder:
    def test_each_network_reads_its_own_keys(self):
        """The actor reads ``actor`` and the frames, the critic ``critic`` and the frames:
        changing a key moves exactly the networks that read it."""
        policy = _policy()
        layout = ObsLayout.from_spec(policy.spec.obs_layout)
        values = _values(4)

        def outputs(changed: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
            rows = layout.pack({**values, **changed})
            return policy.distribution(rows).mean, policy.value(rows)

        mean, value = outputs({})
        for key, actor_moves, critic_moves in (("actor", True, False),
                                               ("critic", False, True),
                                               ("camera", True, True)):  # fmt: skip
            other = _values(4, seed=7)[key]
            new_mean, new_value = outputs({key: other})
            assert (not torch.equal(new_mean, mean)) == actor_moves, key
            assert (not torch.equal(new_value, value)) == critic_moves, key

    def test_the_update_trains_the_frames_encoder(self):
        """A loss on the actor's output sends gradients into its keypoint convolutions."""
        policy = _policy()
        rows = ObsLayout.from_spec(policy.spec.obs_layout).pack(_values(4))
        policy.distribution(rows).mean.square().sum().backward()
        conv = policy.actor[0].images["camera"].convs[0]
        assert conv.weight.grad is not None and conv.weight.grad.abs().sum() > 0

    def test_rsl_rl_normalisers_fold_in_the_vector_keys_only(self):
        """rsl_rl's normalisers sit in each network's encoder, over its vector keys (the
        frames are scaled x / 255 in their encoder): after one batch, that batch's mean."""
        policy = _policy(rsl_rl=True, normalize_obs=True)
        assert policy.normalization.inside and policy.actor_normalizer is None
        values = _values(8)
        policy.update_normalizers(ObsLayout.from_spec(policy.spec.obs_layout).pack(values))
        actor, critic = policy.actor[0].normalizer, policy.critic[0].normalizer
        assert actor.mean.shape == (5,) and critic.mean.shape == (3,)
        torch.testing.assert_close(actor.mean, values["actor"].mean(0))
        torch.testing.assert_close(critic.mean, values["critic"].mean(0))

    def test_a_normaliser_outside_the_networks_is_one_line(self):
        with pytest.raises(ValueError, match=r"set ppo\.rsl_rl true, or ppo\.normalize_obs false"):
            _policy(normalize_obs=True)


def test_keypoint_encoder_is_mjlabs_spatial_softmax_cnn():
    """mjlab's camera tasks' encoder (``SpatialSoftmaxCNN`` with their ``cnn_cfg``), given the
    same weights, on frames it takes as floats in [0, 1] and ours as uint8: the same keypoints."""
    spatial_softmax = pytest.importorskip("mjlab.rl.spatial_softmax", reason="needs mjlab")
    from mjlab.tasks.manipulation.config.yam.rl_cfg import _VISION_CNN_CFG

    cfg = {k: v for k, v in _VISION_CNN_CFG.items() if k != "spatial_softmax"}
    temperature = cfg.pop("spatial_softmax_temperature")
    torch.manual_seed(0)
    theirs = spatial_softmax.SpatialSoftmaxCNN((32, 32), 3, temperature, **cfg)
    ours = KeypointEncoder((3, 32, 32), temperature)
    ours.convs.load_state_dict(theirs.cnn.state_dict())
    frames = torch.randint(0, 256, (5, 3, 32, 32), dtype=torch.uint8)
    with torch.no_grad():
        torch.testing.assert_close(ours(frames), theirs(frames.float() / 255.0))
    assert ours.features == theirs.output_dim == 64
