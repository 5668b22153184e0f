"""The pieces of SAC, DDPG and TD3: the fused twin critics, Polyak updates, the squashed
Gaussian's fast sampler, target smoothing, the twin-minimum targets, the temperature
loss's sign, delayed policy updates, exploration noise and the config checks."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rayfield.rllib.agents.ddpg import DDPGTorchPolicy, DDPGTrainer, TD3Trainer
from rayfield.rllib.agents.ddpg.ddpg_torch_policy import smoothed_target_action
from rayfield.rllib.agents.ddpg.noise import ActionNoise, noise_settings
from rayfield.rllib.agents.sac import SACTorchPolicy, SACTrainer
from rayfield.rllib.agents.sac.sac_torch_policy import sac_target_entropy
from rayfield.rllib.models.distributions import SquashedGaussian, tanh_gaussian_rsample
from rayfield.rllib.models.torch_ensemble import EnsembleMLP, polyak_update
from rayfield.rllib.policy.sample_batch import SampleBatch

OBS = gym.spaces.Box(-1.0, 1.0, (3,), dtype=np.float32)
BOX = gym.spaces.Box(-2.0, 2.0, (1,), dtype=np.float32)


def config(trainer: Any, **overrides: Any) -> dict[str, Any]:
    cfg = trainer.merge_trainer_configs(trainer._default_config, {"seed": 0, **overrides})
    return cfg


def batch(n: int = 8, discrete: bool = False, terminated: bool = False) -> SampleBatch:
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 3, n) if discrete else rng.uniform(-2, 2, (n, 1)).astype(np.float32)
    return SampleBatch(
        {
            SampleBatch.CUR_OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.ACTIONS: actions,
            SampleBatch.REWARDS: np.full(n, 0.5, dtype=np.float32),
            SampleBatch.NEXT_OBS: rng.uniform(-1, 1, (n, 3)).astype(np.float32),
            SampleBatch.TERMINATEDS: np.full(n, terminated),
        }
    )


def set_constant(critic: EnsembleMLP, values: list[float]) -> None:
    """Make member j of a critic output values[j] for every input."""
    with torch.no_grad():
        critic.weights[-1].zero_()
        for j, v in enumerate(values):
            critic.biases[-1][j].fill_(v)


# -- networks ----------------------------------------------------------------------------
@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_ensemble_matches_its_members_run_one_by_one(activation: str) -> None:
    torch.manual_seed(0)
    net = EnsembleMLP(2, 4, [8, 8], 3, activation)
    act = torch.tanh if activation == "tanh" else torch.relu
    x = torch.randn(5, 4)
    out = net(x)
    assert out.shape == (2, 5, 3)
    # the same products member by member, out of place, on copies of the parameters
    ws = [w.detach().clone().requires_grad_() for w in net.weights]
    bs = [b.detach().clone().requires_grad_() for b in net.biases]
    ref = []
    for m in range(2):
        h = x
        for i in range(3):
            h = h @ ws[i][m] + bs[i][m]
            if i < 2:
                h = act(h)
        torch.testing.assert_close(out[m], h)
        ref.append(h)
    # and the same gradients (ReLU runs in place in the ensemble)
    out.square().sum().backward()
    torch.stack(ref).square().sum().backward()
    for mine, theirs in zip([*net.weights, *net.biases], [*ws, *bs]):
        torch.testing.assert_close(mine.grad, theirs.grad)
    torch.testing.assert_close(net(x, members=slice(0, 1))[0], out[0])
    # members are initialised independently
    assert not torch.equal(net.weights[0][0], net.weights[0][1])


def test_ensemble_detach_sends_no_gradient_into_the_critic() -> None:
    net = EnsembleMLP(2, 2, [4], 1)
    a = torch.zeros(3, 2, requires_grad=True)
    net(a, detach=True).sum().backward()
    assert a.grad is not None and a.grad.abs().sum() > 0
    assert all(p.grad is None for p in net.parameters())


def test_polyak_update_mixes_by_tau_and_copies_at_one() -> None:
    target = [torch.zeros(3), torch.ones(2)]
    source = [torch.full((3,), 10.0), torch.full((2,), 3.0)]
    polyak_update(target, source, 0.1)
    torch.testing.assert_close(target[0], torch.full((3,), 1.0))
    torch.testing.assert_close(target[1], torch.full((2,), 1.2))
    polyak_update(target, source, 1.0)
    torch.testing.assert_close(target[1], source[1])
    with pytest.raises(ValueError, match="tau"):
        polyak_update(target, source, 1.5)


def test_tanh_gaussian_sampler_matches_squashed_gaussian_logp() -> None:
    torch.manual_seed(0)
    mean, log_std = torch.randn(64, 2), torch.randn(64, 2).clamp(-2, 1)
    y, logp = tanh_gaussian_rsample(mean, log_std)
    assert y.abs().max() <= 1.0
    dist = SquashedGaussian(torch.cat([mean, log_std], 1), low=[-1, -1], high=[1, 1])
    ok = y.abs().max(1).values < 0.999  # atanh is ill-conditioned at the bounds
    torch.testing.assert_close(logp[ok], dist.logp(y)[ok], atol=1e-3, rtol=1e-3)
    y0, _ = tanh_gaussian_rsample(mean, log_std, deterministic=True)
    torch.testing.assert_close(y0, torch.tanh(mean))


def test_target_smoothing_noise_is_clipped() -> None:
    torch.manual_seed(0)
    y = torch.zeros(1000, 2)
    smoothed = smoothed_target_action(y, noise_std=100.0, noise_clip=0.5)
    assert smoothed.abs().max() <= 0.5 + 1e-6
    assert (smoothed.abs() > 0.49).float().mean() > 0.9  # huge noise sits on the clip
    edge = smoothed_target_action(torch.ones(1000, 2), noise_std=100.0, noise_clip=0.5)
    assert edge.max() <= 1.0 and edge.min() >= 0.5 - 1e-6
    torch.testing.assert_close(smoothed_target_action(y, 0.0, 0.5), y)


# -- targets and losses --------------------------------------------------------------------
@pytest.mark.parametrize("terminated", [False, True])
def test_sac_target_is_the_twin_minimum(terminated: bool) -> None:
    policy = SACTorchPolicy(OBS, BOX, config(SACTrainer, initial_alpha=1e-9, gamma=0.9))
    set_constant(policy.target_model.critic, [3.0, 2.0])
    set_constant(policy.model.critic, [1.0, 4.0])
    stats = policy.learn_on_batch(batch(terminated=terminated))
    y = 0.5 + (0.0 if terminated else 0.9 * 2.0)  # min(3, 2) bootstraps
    assert stats["critic_loss"] == pytest.approx(0.5 * ((1.0 - y) ** 2 + (4.0 - y) ** 2), rel=1e-4)
    assert stats["mean_q"] == pytest.approx(2.5)


def test_discrete_sac_target_is_the_policy_expectation_of_the_twin_minimum() -> None:
    space = gym.spaces.Discrete(3)
    policy = SACTorchPolicy(OBS, space, config(SACTrainer, initial_alpha=1e-9, gamma=0.9))
    assert policy.target_entropy == pytest.approx(0.98 * math.log(3))
    with torch.no_grad():
        policy.target_model.critic.weights[-1].zero_()
        policy.target_model.critic.biases[-1][0].copy_(torch.tensor([[5.0, 5.0, 5.0]]))
        policy.target_model.critic.biases[-1][1].copy_(torch.tensor([[2.0, 2.0, 2.0]]))
    set_constant(policy.model.critic, [0.0, 0.0])
    stats = policy.learn_on_batch(batch(discrete=True))
    y = 0.5 + 0.9 * 2.0  # sum_a pi(a) * min_j Q'_j(s', a) = 2 for every policy
    assert stats["critic_loss"] == pytest.approx(0.5 * 2 * y**2, rel=1e-4)


@pytest.mark.parametrize(
    ("trainer", "values", "minimum"), [(TD3Trainer, [3.0, 2.0], 2.0), (DDPGTrainer, [3.0], 3.0)]
)
def test_ddpg_td3_target_uses_the_twin_minimum(
    trainer: Any, values: list[float], minimum: float
) -> None:
    cfg = config(trainer, gamma=0.9, prioritized_replay=False, l2_reg=0.0)
    policy = DDPGTorchPolicy(OBS, BOX, cfg)
    assert policy.model.critic.num_members == len(values)
    set_constant(policy.target_model.critic, values)
    set_constant(policy.model.critic, [1.0] * len(values))
    stats = policy.learn_on_batch(batch())
    y = 0.5 + 0.9 * minimum
    assert stats["critic_loss"] == pytest.approx(len(values) * 0.5 * (1.0 - y) ** 2, rel=1e-4)


@pytest.mark.parametrize("space", [BOX, gym.spaces.Discrete(3)], ids=["box", "discrete"])
@pytest.mark.parametrize(("target_entropy", "direction"), [(10.0, 1), (-10.0, -1)])
def test_alpha_rises_below_the_target_entropy_and_falls_above(
    space: Any, target_entropy: float, direction: int
) -> None:
    cfg = config(
        SACTrainer,
        target_entropy=target_entropy,
        optimization={
            "actor_learning_rate": 0.0,
            "critic_learning_rate": 0.0,
            "entropy_learning_rate": 0.1,
        },
    )
    policy = SACTorchPolicy(OBS, space, cfg)
    stats = policy.learn_on_batch(batch(discrete=space is not BOX))
    alpha_after = float(policy.model.log_alpha.detach().exp())
    assert stats["alpha"] == pytest.approx(1.0)
    assert (alpha_after - 1.0) * direction > 0.05


def test_sac_target_entropy_auto() -> None:
    assert sac_target_entropy(gym.spaces.Box(-1, 1, (3,)), "auto") == -3.0
    assert sac_target_entropy(gym.spaces.Discrete(4), None) == pytest.approx(0.98 * math.log(4))
    assert sac_target_entropy(BOX, -0.5) == -0.5
    with pytest.raises(ValueError, match="target_entropy"):
        sac_target_entropy(BOX, "high")


def test_td3_updates_actor_and_targets_every_policy_delay_steps() -> None:
    cfg = config(TD3Trainer, policy_delay=2, prioritized_replay=False)
    policy = DDPGTorchPolicy(OBS, BOX, cfg)

    def snapshot() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (
            policy.model.actor[0].weight.detach().clone(),
            policy.target_model.actor[0].weight.detach().clone(),
            policy.model.critic.weights[0].detach().clone(),
        )

    changed = []
    for _ in range(4):
        before = snapshot()
        stats = policy.learn_on_batch(batch())
        after = snapshot()
        changed.append(tuple(not torch.equal(b, a) for b, a in zip(before, after)))
        assert ("actor_loss" in stats) == changed[-1][0]
    # (actor, target actor, critic) per step: the critic every step, the rest every second
    assert changed == [(True, True, True), (False, False, True)] * 2


# -- exploration -----------------------------------------------------------------------------
def test_noise_settings_from_07_keys_and_exploration_config() -> None:
    ddpg = noise_settings(config(DDPGTrainer))
    assert (ddpg.kind, ddpg.random_timesteps, ddpg.ou_base_scale) == ("ou", 1000, 0.1)
    td3 = noise_settings(config(TD3Trainer))
    assert (td3.kind, td3.random_timesteps, td3.stddev) == ("gaussian", 10000, 0.1)
    ray2 = noise_settings(
        config(
            DDPGTrainer,
            exploration_config={"type": "GaussianNoise", "stddev": 0.3, "scale_timesteps": 10},
        )
    )
    assert (ray2.kind, ray2.stddev, ray2.final_scale) == ("gaussian", 0.3, 0.02)
    noise = ActionNoise(ray2, 1)
    assert (
        noise.scale(0) == 1.0
        and noise.scale(5) == pytest.approx(0.51)
        and noise.scale(99) == pytest.approx(0.02)
    )
    with pytest.raises(ValueError, match="type must be one of"):
        config(DDPGTrainer, exploration_config={"type": "EpsilonGreedy"})
    with pytest.raises(ValueError, match="unknown exploration_config key 'sigma'"):
        config(DDPGTrainer, exploration_config={"type": "GaussianNoise", "sigma": 0.1})


def test_gaussian_and_ou_noise_statistics() -> None:
    torch.manual_seed(0)
    gauss = ActionNoise(noise_settings(config(TD3Trainer)), 2)
    assert gauss.sample(20000, 0).std().item() == pytest.approx(0.1, rel=0.05)
    ou = ActionNoise(
        noise_settings(
            config(
                DDPGTrainer,
                exploration_config={
                    "ou_theta": 0.15,
                    "ou_sigma": 0.2,
                    "ou_base_scale": 1.0,
                    "final_scale": 1.0,
                },
            )
        ),
        1,
    )
    xs = torch.stack([ou.sample(4000, 0) for _ in range(60)])  # [T, rows, 1]
    # stationary std of x_{t+1} = (1 - theta) x_t + sigma eps: sigma / sqrt(1 - (1-theta)^2)
    assert xs[-1].std().item() == pytest.approx(0.2 / math.sqrt(1 - 0.85**2), rel=0.1)
    lag1 = torch.corrcoef(torch.stack([xs[-2].ravel(), xs[-1].ravel()]))[0, 1].item()
    assert lag1 == pytest.approx(0.85, abs=0.05)  # time-correlated, unlike Gaussian noise


def test_random_timesteps_then_policy_actions() -> None:
    cfg = config(TD3Trainer, exploration_config={"type": "GaussianNoise", "random_timesteps": 5})
    policy = DDPGTorchPolicy(OBS, BOX, cfg)
    obs = np.zeros((500, 3), dtype=np.float32)
    uniform, _, _ = policy.compute_actions(obs)
    assert uniform.min() < -1.8 and uniform.max() > 1.8  # uniform over [-2, 2]
    policy.on_global_var_update({"timestep": 5})
    greedy, _, _ = policy.compute_actions(obs[:1], explore=False)
    noisy, _, _ = policy.compute_actions(obs)
    assert np.abs(noisy - greedy[0]).max() < 1.0  # std 0.1 in [-1, 1] units: 0.2 here
    assert np.all(np.abs(noisy) <= 2.0)


# -- config and spaces -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("trainer", "overrides", "match"),
    [
        (SACTrainer, {"tau": 2.0}, "tau"),
        (SACTrainer, {"n_step": 0}, "n_step"),
        (SACTrainer, {"initial_alpha": 0.0}, "initial_alpha"),
        (SACTrainer, {"exploration_config": {"type": "GaussianNoise"}}, "StochasticSampling"),
        (TD3Trainer, {"policy_delay": 0}, "policy_delay"),
        (DDPGTrainer, {"parameter_noise": True}, "parameter_noise"),
        (DDPGTrainer, {"target_noise_clip": -1.0}, "target_noise_clip"),
    ],
)
def test_bad_config_values_are_refused(trainer: Any, overrides: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        config(trainer, **overrides)


def test_unsupported_spaces_are_refused() -> None:
    with pytest.raises(ValueError, match="needs a Box action space"):
        DDPGTorchPolicy(OBS, gym.spaces.Discrete(2), config(DDPGTrainer))
    unbounded = gym.spaces.Box(-np.inf, np.inf, (1,), dtype=np.float32)
    with pytest.raises(ValueError, match="finite bounds"):
        SACTorchPolicy(OBS, unbounded, config(SACTrainer))
    with pytest.raises(ValueError, match="use_state_preprocessor"):
        SACTorchPolicy(OBS, BOX, config(SACTrainer, use_state_preprocessor=True))


@pytest.mark.parametrize(
    ("cls", "trainer"), [(SACTorchPolicy, SACTrainer), (DDPGTorchPolicy, TD3Trainer)]
)
def test_state_round_trips_through_a_weights_only_file(
    cls: Any, trainer: Any, tmp_path: Any
) -> None:
    policy = cls(OBS, BOX, config(trainer, prioritized_replay=False))
    for _ in range(3):
        policy.learn_on_batch(batch())
    torch.save(policy.get_state(), tmp_path / "state.pt")
    other = cls(OBS, BOX, config(trainer, prioritized_replay=False, seed=1))
    other.set_state(torch.load(tmp_path / "state.pt", weights_only=True))
    obs = np.random.default_rng(0).uniform(-1, 1, (4, 3)).astype(np.float32)
    np.testing.assert_array_equal(
        policy.compute_actions(obs, explore=False)[0], other.compute_actions(obs, explore=False)[0]
    )
    for a, b in zip(policy.target_model.parameters(), other.target_model.parameters()):
        torch.testing.assert_close(a, b)
    assert other.num_updates == 3
    for name, opt in policy.optimizers.items():
        saved = opt.state_dict()["state"]
        loaded = other.optimizers[name].state_dict()["state"]
        torch.testing.assert_close(saved[0]["exp_avg"], loaded[0]["exp_avg"])
