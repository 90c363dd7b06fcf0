"""orin_rl's ``ppo.rsl_rl`` learner step for step against rsl_rl 5.4.2 (mjlab 1.6.0's pin).

Both learners are built from mjlab's own Flat G1 configuration (``rl_config``: rsl_rl's side
from its dataclasses, ours through ``mjlab_preset``, the path ``orin-rl train`` takes) and
driven through three whole iterations of 24 steps as each runner drives them (rsl_rl's
``OnPolicyRunner.learn``; ours ``OnPolicyRunner._iterate``). The environment is a scripted
stream with Flat G1's widths (actor 99, critic 111, 29 actions): each side steps its own copy
of the same stream, so what one side sends as an action comes back in its observations.
The stream has G1's awkward columns (joint velocities 30x the rest, foot heights of a few
millimetres, a constant column, contact flags), terminations, time-outs, and both at once.
Everything runs in float64 from the same initial weights, with torch's generator seeded
before each action draw and each update on both sides (the same noise, the same minibatch
permutation). One departure from G1's settings: gamma 0.99 and lambda 0.95 become 127/128 and
61/64, whose products float32 holds exactly, because rsl_rl's GAE multiplies them by
``1 - dones.float()`` (a float32 even in a float64 run): with 0.99 its returns differ from a
float64 GAE by ~5e-7, and Adam magnifies that past 1e-5 in a few weights by the first update.

Compared: the actions each side sends at every step; after each rollout the returns and the
normalised advantages; after each update every parameter, both normalisers' statistics, the
learning rate and the logged losses (ours logs half rsl_rl's value loss and weighs it twice).

Mutations, each of which failed this test (2026-12-05, put back one at a time; the first
check each one failed in brackets):
  1. the old normaliser whole (one ``ObsNormalizer`` over both groups, updated at act,
     normalised observations stored, ``clip((x - mean) / sqrt(var + 1e-8), +-10)``)
     [iteration 0 step 0: actions sent];
  2. rsl_rl's normalisers with the old formula [step 0: actions];
  3. the normalisers updated at ``act`` from the pre-step observation [step 0: actions];
  4. no update from the post-step observation [step 1: actions];
  5. a new minibatch permutation every epoch [iteration 0: weights];
  6. the KL estimate mean((r - 1) - log r) in the adaptive schedule [iteration 1: weights];
  7. no bootstrap for a step that timed out and terminated at once [iteration 0: returns];
  8. the actor's and the critic's gradients clipped together [iteration 0: weights];
  9. Adam's eps 1e-5 [iteration 0: weights];
  10. the advantages normalised with the biased std [iteration 0: advantages];
  11. the learning rate adapted after the optimiser step [iteration 0: weights];
  12. the value loss unclipped [iteration 0: critic weights].
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pytest
import torch

if os.environ.get("ORIN_RL_REQUIRE_MJLAB") == "1":  # CI: the mjlab extra (rsl_rl with it)
    import rsl_rl  # noqa: F401
else:
    pytest.importorskip("rsl_rl", reason="needs the mjlab extra: pip install -e '.[mjlab]'")

from rsl_rl.algorithms import PPO as RslPPO
from rsl_rl.models import MLPModel
from rsl_rl.storage import RolloutStorage
from tensordict import TensorDict

from orin_rl.algorithms.ppo import PPO
from orin_rl.buffers import RolloutBuffer
from orin_rl.config import PPOConfig
from orin_rl.envs import StepResult
from orin_rl.models import ActorCritic, PolicySpec

TASK = "Mjlab-Velocity-Flat-Unitree-G1"
ACTOR, CRITIC, ACTIONS = 99, 111, 29  # Flat G1's widths in mjlab 1.6 (orin_rl's obs_groups)
NUM_ENVS = 16
ITERATIONS = 3
RTOL = 1e-5
GAMMA, LAM = 127 / 128, 61 / 64  # G1's 0.99 and 0.95, dyadic (see _configs)


class ScriptedG1Stream:
    """A deterministic stand-in for Flat G1's ``step``: G1-shaped observations built from a
    seeded generator and the actions it is sent; rewards, terminations and time-outs drawn."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.last_action = np.zeros((NUM_ENVS, ACTIONS))
        # Per-column scale and offset of the actor's group: base lin/ang vel, gravity, command,
        # joint positions (wrists 3x), joint velocities (30x: G1's wrists), last action.
        scale = np.concatenate([[0.5] * 3, [1.0] * 3, [0.05] * 3, [0.6, 0.3, 0.0],
                                [0.3] * 26 + [0.9] * 3, [2.0] * 26 + [60.0] * 3])  # fmt: skip
        self.actor_scale = scale
        self.actor_offset = np.concatenate([[0.0] * 8, [-1.0], [0.4, 0.0, 0.25], [0.0] * 58])

    def _observe(self) -> tuple[torch.Tensor, torch.Tensor]:
        n = NUM_ENVS
        state = self.actor_offset + self.actor_scale * self.rng.standard_normal((n, 70))
        actor = np.concatenate([state, self.last_action], axis=1)  # (n, 99)
        foot_height = 0.004 * self.rng.random((n, 2)) + 0.05  # millimetres over a constant
        contact = (self.rng.random((n, 2)) < 0.5).astype(float)
        air_time = self.rng.random((n, 2)) * (1 - contact)
        forces = 300.0 * contact.repeat(3, axis=1) * self.rng.random((n, 6))
        critic = np.concatenate([actor, foot_height, air_time, contact, forces], axis=1)
        return torch.from_numpy(actor), torch.from_numpy(critic)

    def reset(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The first observation."""
        return self._observe()

    def step(self, actions: torch.Tensor):
        """(actor, critic, reward, terminated, timed_out) after ``actions``."""
        a = actions.detach().numpy()
        self.last_action = np.clip(a, -5.0, 5.0)  # the action term sees what was sent
        reward = 0.1 * self.rng.standard_normal(NUM_ENVS) - 0.01 * np.square(a).sum(axis=1)
        terminated = self.rng.random(NUM_ENVS) < 0.04
        timed_out = self.rng.random(NUM_ENVS) < 0.04  # both at once: ~1 in 600 steps
        if not terminated.any() or not timed_out.any() or not (terminated & timed_out).any():
            terminated[0] = timed_out[0] = True  # each kind of end in every step (GAE paths)
            timed_out[1], terminated[2] = True, True
        actor, critic = self._observe()
        return actor, critic, torch.from_numpy(reward), terminated, timed_out


@pytest.fixture(autouse=True)
def float64():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(before)


def _configs():
    from orin_rl.config.presets import mjlab_preset
    from orin_rl.envs.mjlab import rl_config

    rl = rl_config(TASK)
    preset = mjlab_preset(TASK, device="cpu")
    ours = PPOConfig(**{k[4:]: v for k, v in preset.items() if k.startswith("ppo.")})
    assert (ours.gamma, ours.gae_lambda) == (rl.algorithm.gamma, rl.algorithm.lam) == (0.99, 0.95)
    # G1's 0.99 and 0.95 moved to the nearest values whose products float32 holds exactly:
    # rsl_rl's GAE multiplies them by ``1 - dones.float()`` (float32), which would round them.
    rl.algorithm = dataclasses.replace(rl.algorithm, gamma=GAMMA, lam=LAM)
    ours.gamma, ours.gae_lambda = GAMMA, LAM
    return rl, ours


def _rsl_side(rl, obs: TensorDict) -> RslPPO:
    """rsl_rl's PPO, models and storage as ``PPO.construct_algorithm`` builds them."""
    groups = {name: list(sets) for name, sets in rl.obs_groups.items()}
    model = {"hidden_dims": list(rl.actor.hidden_dims), "activation": rl.actor.activation}
    dist = {k: v for k, v in rl.actor.distribution_cfg.items() if k != "class_name"}
    actor = MLPModel(obs, groups, "actor", ACTIONS, **model,
                     obs_normalization=rl.actor.obs_normalization,
                     distribution_cfg={"class_name": "rsl_rl.modules.distribution:GaussianDistribution",
                                       **dist})  # fmt: skip
    critic = MLPModel(obs, groups, "critic", 1, hidden_dims=list(rl.critic.hidden_dims),
                      activation=rl.critic.activation,
                      obs_normalization=rl.critic.obs_normalization)  # fmt: skip
    storage = RolloutStorage("rl", NUM_ENVS, rl.num_steps_per_env, obs, [ACTIONS], "cpu")
    algo = {k: v for k, v in vars(rl.algorithm).items()
            if k not in ("class_name", "share_cnn_encoders")}  # fmt: skip
    ppo = RslPPO(actor, critic, storage, device="cpu", **algo)
    ppo.train_mode()  # OnPolicyRunner.learn
    return ppo


def _our_side(cfg: PPOConfig, std: float) -> PPO:
    spec = PolicySpec([ACTOR + CRITIC], "continuous", ACTIONS, hidden_sizes=cfg.hidden_sizes,
                      activation=cfg.activation, normalize_obs=cfg.normalize_obs,
                      init_log_std=math.log(std), critic_hidden_sizes=cfg.critic_hidden_sizes,
                      obs_groups={"actor": [0, ACTOR], "critic": [ACTOR, ACTOR + CRITIC]},
                      rsl_rl=cfg.rsl_rl)  # fmt: skip
    policy = ActorCritic(spec)
    buffer = RolloutBuffer(cfg.num_steps, NUM_ENVS, (ACTOR + CRITIC,), (ACTIONS,), torch.float64,
                           "cpu", "host", cfg.num_minibatches, keep_action_means=True,
                           float_dtype=torch.float64)  # fmt: skip
    return PPO(policy, buffer, cfg, ITERATIONS, torch.device("cpu"))


def _copy_weights(ours: ActorCritic, rsl: RslPPO) -> None:
    with torch.no_grad():
        rsl.actor.mlp.load_state_dict(ours.actor.state_dict())
        rsl.critic.mlp.load_state_dict(ours.critic.state_dict())
        rsl.actor.distribution.std_param.copy_(ours.std)


def _pairs(ours: ActorCritic, rsl: RslPPO) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Every learned tensor and statistic: (ours, rsl_rl's)."""
    pairs = {
        f"actor.{k}": (v, rsl.actor.mlp.state_dict()[k]) for k, v in ours.actor.state_dict().items()
    }
    pairs |= {
        f"critic.{k}": (v, rsl.critic.mlp.state_dict()[k])
        for k, v in ours.critic.state_dict().items()
    }
    pairs["std"] = (ours.std, rsl.actor.distribution.std_param)
    for role, norm in (("actor", ours.actor_normalizer), ("critic", ours.critic_normalizer)):
        theirs = getattr(rsl, role).obs_normalizer
        for stat in ("mean", "var", "std"):
            pairs[f"{role} normaliser {stat}"] = (
                getattr(norm, stat),
                getattr(theirs, f"_{stat}")[0],
            )
        pairs[f"{role} normaliser count"] = (norm.count, theirs.count)
    return pairs


def _assert_close(what: str, ours: torch.Tensor, theirs: torch.Tensor) -> None:
    np.testing.assert_allclose(ours.detach().numpy(), theirs.detach().numpy(), rtol=RTOL,
                               atol=RTOL * 1e-3, err_msg=what)  # fmt: skip


def test_three_iterations_equal_rsl_rl_step_for_step():
    rl, cfg = _configs()
    env_r, env_o = ScriptedG1Stream(seed=5), ScriptedG1Stream(seed=5)
    actor, critic = env_r.reset()
    obs_r = TensorDict({"actor": actor, "critic": critic}, batch_size=[NUM_ENVS])
    obs_o = torch.cat(env_o.reset(), dim=1)
    torch.manual_seed(0)
    ours = _our_side(cfg, std=rl.actor.distribution_cfg["init_std"])
    rsl = _rsl_side(rl, obs_r)
    _copy_weights(ours.policy, rsl)
    assert ours.cfg.vf_coef == 2 * rsl.value_loss_coef  # ours is 0.5 * MSE: the same loss
    steps = rl.num_steps_per_env
    for it in range(ITERATIONS):
        with torch.inference_mode():  # rsl_rl's runner: the rollout and the returns
            for t in range(steps):
                torch.manual_seed(1000 * it + t)
                a_r = rsl.act(obs_r)
                actor, critic, reward, term, timeout = env_r.step(a_r)
                obs_r = TensorDict({"actor": actor, "critic": critic}, batch_size=[NUM_ENVS])
                dones = torch.from_numpy(term | timeout)
                rsl.process_env_step(obs_r, reward, dones, {"time_outs": torch.from_numpy(timeout)})

                torch.manual_seed(1000 * it + t)
                a_o = ours.act(obs_o)
                actor, critic, reward, term, timeout = env_o.step(a_o)
                obs_o = torch.cat([actor, critic], dim=1)
                ours.process_env_step(StepResult(obs_o, reward, torch.from_numpy(term),
                                                 torch.from_numpy(timeout), obs_o))  # fmt: skip
                _assert_close(f"iteration {it} step {t}: actions sent", a_o, a_r)
            rsl.compute_returns(obs_r)
        ours.compute_returns(obs_o)
        _assert_close(f"iteration {it}: returns", ours.buffer.returns, rsl.storage.returns[..., 0])
        _assert_close(f"iteration {it}: advantages", ours.buffer.advantages,
                      rsl.storage.advantages[..., 0])  # fmt: skip

        torch.manual_seed(77 + it)
        losses_r = rsl.update()
        torch.manual_seed(77 + it)
        losses_o = ours.update()
        for name, (mine, theirs) in _pairs(ours.policy, rsl).items():
            _assert_close(f"iteration {it}: {name}", mine, theirs)
        lr = float(ours.optimizer.param_groups[0]["lr"])
        assert lr == pytest.approx(rsl.learning_rate, rel=RTOL), f"iteration {it}: learning rate"
        assert losses_o["charts/learning_rate"] == pytest.approx(rsl.learning_rate, rel=RTOL)
        logged = {"surrogate": losses_o["losses/policy"], "entropy": losses_o["losses/entropy"],
                  "value": 2.0 * losses_o["losses/value"]}  # fmt: skip
        for name, value in logged.items():
            assert value == pytest.approx(losses_r[name], rel=RTOL), f"iteration {it}: {name}"
    # The schedule moved the rate (the adaptive branch ran) and the stream's outliers reached
    # the statistics: a run where neither happens could not tell the learners apart.
    assert rsl.learning_rate != rl.algorithm.learning_rate
    assert float(rsl.actor.obs_normalizer._std[0].max()) > 30


def test_after_update_statistics_are_the_rollouts_stored_observations():
    """``ppo.normalizer_update=after_update`` (rsl_rl 5.5, PR 225): the statistics stay at
    their start through the rollout and the update, then take in the rollout's stored
    (pre-step) observations once, pooled over steps and worlds. Mutation: the per-step update
    left on as well (the rollout's statistics move) fails it."""
    _, cfg = _configs()
    cfg.normalizer_update = "after_update"
    env = ScriptedG1Stream(seed=9)
    obs = torch.cat(env.reset(), dim=1)
    torch.manual_seed(0)
    ours = _our_side(cfg, std=1.0)
    norm = ours.policy.actor_normalizer
    first = obs
    for _ in range(cfg.num_steps):
        a = ours.act(obs)
        actor, critic, reward, term, timeout = env.step(a)
        obs = torch.cat([actor, critic], dim=1)
        ours.process_env_step(StepResult(obs, reward, torch.from_numpy(term),
                                         torch.from_numpy(timeout), obs))  # fmt: skip
    assert int(norm.count) == 0 and float(norm.mean.abs().max()) == 0.0  # fixed over the rollout
    ours.compute_returns(obs)
    stored = ours.buffer.obs.clone()  # (steps, worlds, 210): what the update trained on
    np.testing.assert_array_equal(stored[0].numpy(), first.numpy())
    ours.update()
    rows = stored.flatten(0, 1)[:, :ACTOR]
    assert int(norm.count) == rows.shape[0]
    _assert_close("mean", norm.mean, rows.mean(0))
    _assert_close("var", norm.var, rows.var(0, unbiased=False))
    critic_rows = stored.flatten(0, 1)[:, ACTOR:]
    _assert_close("critic mean", ours.policy.critic_normalizer.mean, critic_rows.mean(0))
