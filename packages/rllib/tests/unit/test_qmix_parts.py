"""QMIX's pieces without training: the two-step game's rules, the mixers (QMIX's is
monotonic in every agent's Q, VDN's is the sum), the policy's observation split, epsilon
and its errors."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rayfield.rllib.agents.qmix.mixers import QMixer, RNNAgent, VDNMixer
from rayfield.rllib.agents.qmix.qmix import DEFAULT_CONFIG, QMixTrainer
from rayfield.rllib.agents.qmix.qmix_policy import QMixTorchPolicy
from rayfield.rllib.env.registry import get_env_creator
from rayfield.rllib.env.twostep_game import TwoStepGame, grouped_twostep
from rayfield.rllib.models.preprocessors import get_preprocessor


def play(env: object, first: tuple[int, int], second: tuple[int, int]) -> float:
    env.reset()  # type: ignore[attr-defined]
    total = 0.0
    for a1, a2 in (first, second):
        _, rew, terms, _, _ = env.step({"agent_1": a1, "agent_2": a2})  # type: ignore[attr-defined]
        total += sum(rew.values())
    assert terms["__all__"]
    return total


def test_twostep_game_pays_as_in_the_qmix_paper() -> None:
    env = TwoStepGame()
    obs, _ = env.reset()
    assert obs == {"agent_1": 0, "agent_2": 3}
    # state 2A (agent 1 plays 0 first): 7 whatever the joint action
    assert {play(env, (0, b), (x, y)) for b in (0, 1) for x in (0, 1) for y in (0, 1)} == {7.0}
    # state 2B: the payoff matrix [[0, 1], [1, 8]]
    assert [play(env, (1, 0), (x, y)) for x in (0, 1) for y in (0, 1)] == [0.0, 1.0, 1.0, 8.0]
    env.reset()
    obs, rew, terms, _, _ = env.step({"agent_1": 1, "agent_2": 0})
    assert obs == {"agent_1": 2, "agent_2": 5} and rew == {"agent_1": 0.0, "agent_2": 0.0}
    assert not terms["__all__"]
    with pytest.raises(ValueError, match="action 0 or 1 for agent_2"):
        env.step({"agent_1": 1})


def test_the_grouped_game_is_a_builtin_env_with_tuple_spaces() -> None:
    env = get_env_creator("grouped_twostep")({})
    assert env.observation_space == gym.spaces.Tuple([gym.spaces.Discrete(6)] * 2)
    assert env.action_space == gym.spaces.Tuple([gym.spaces.Discrete(2)] * 2)
    obs, _ = env.reset()
    assert obs == {"group_1": (0, 3)}
    env.step({"group_1": np.array([1, 0])})
    _, rew, terms, _, infos = env.step({"group_1": np.array([1, 1])})
    assert rew == {"group_1": 8.0} and terms["__all__"]
    assert infos["group_1"]["individual_rewards"] == [4.0, 4.0]
    with_state = grouped_twostep({"separate_state_space": True})
    assert with_state.reset()[0] == {"group_1": ({"obs": 0, "state": 0}, {"obs": 3, "state": 0})}


def test_qmixer_is_monotonic_in_each_agent_q_and_vdn_sums() -> None:
    torch.manual_seed(0)
    mixer = QMixer(n_agents=3, state_dim=5, embed_dim=8)
    qs = torch.randn(4, 7, 3, requires_grad=True)
    states = torch.randn(4, 7, 5)
    q_tot = mixer(qs, states)
    assert q_tot.shape == (4, 7, 1)
    (grad,) = torch.autograd.grad(q_tot.sum(), qs)
    assert (grad >= 0).all()  # dQ_tot/dQ_i >= 0: the agents' argmaxes are the team's
    # the weights depend on the state: the same Qs mix differently in another state
    assert not torch.allclose(mixer(qs, states + 1.0), q_tot)
    vdn = VDNMixer()(qs, states)
    assert torch.allclose(vdn, qs.sum(-1, keepdim=True))


def test_the_agent_network_is_recurrent() -> None:
    net = RNNAgent(obs_dim=6, n_actions=2, hidden=16)
    obs = torch.zeros(3, 6)
    q0, h1 = net(obs, torch.zeros(3, 16))
    q1, _ = net(obs, h1)
    assert q0.shape == (3, 2) and h1.shape == (3, 16)
    assert not torch.allclose(q0, q1)  # same observation, different history


def group_spaces(obs_space: gym.Space, n: int = 2, n_actions: int = 2) -> tuple:
    original = gym.spaces.Tuple([obs_space] * n)
    flat = get_preprocessor(original)(original).observation_space
    return flat, gym.spaces.Tuple([gym.spaces.Discrete(n_actions)] * n)


def make_policy(obs_space: gym.Space, **overrides: object) -> QMixTorchPolicy:
    config = QMixTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"seed": 0, **overrides})
    return QMixTorchPolicy(*group_spaces(obs_space), config)


def test_policy_splits_dict_observations_and_respects_action_masks() -> None:
    agent_obs = gym.spaces.Dict(
        {
            "obs": gym.spaces.Box(-1, 1, (3,)),
            "action_mask": gym.spaces.Box(0, 1, (2,)),
            "state": gym.spaces.Box(-1, 1, (4,)),
        }
    )
    policy = make_policy(agent_obs, mixer="qmix")
    assert (policy.obs_dim, policy.state_dim) == (3, 4)
    # Dict parts are flattened in key order: action_mask, obs, state
    row = np.concatenate(
        [[1, 0], [0.1, 0.2, 0.3], [1, 2, 3, 4], [0, 1], [0.4, 0.5, 0.6], [1, 2, 3, 4]]
    )
    obs = torch.as_tensor(np.stack([row] * 5), dtype=torch.float32)
    agent, mask, state = policy.split_obs(obs)
    assert torch.allclose(agent[0, 1], torch.tensor([0.4, 0.5, 0.6]))
    assert mask is not None and mask[0].tolist() == [[True, False], [False, True]]
    assert state[0].tolist() == [1, 2, 3, 4]
    policy.cur_epsilon = 1.0  # fully random: still only allowed actions
    actions, (h,), _ = policy.compute_actions(obs.numpy())
    assert actions.tolist() == [[0, 1]] * 5 and h.shape == (5, 2, 64)


def test_epsilon_anneals_over_the_exploration_fraction() -> None:
    policy = make_policy(
        gym.spaces.Discrete(6),
        exploration_fraction=0.1,
        schedule_max_timesteps=1000,
        exploration_final_eps=0.0,
    )
    assert policy.cur_epsilon == 1.0
    policy.on_global_var_update({"timestep": 50})
    assert policy.cur_epsilon == pytest.approx(0.5)
    policy.on_global_var_update({"timestep": 500})
    assert policy.cur_epsilon == 0.0


def test_bad_spaces_and_configs_are_refused() -> None:
    config = QMixTrainer.merge_trainer_configs(DEFAULT_CONFIG, {})
    box = gym.spaces.Box(-1, 1, (4,))
    with pytest.raises(ValueError, match="grouped env"):
        QMixTorchPolicy(box, gym.spaces.Discrete(2), config)
    flat, _ = group_spaces(gym.spaces.Discrete(6))
    with pytest.raises(ValueError, match="one size"):
        QMixTorchPolicy(
            flat, gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Discrete(3)]), config
        )
    with pytest.raises(ValueError, match="mixer must be"):
        QMixTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"mixer": "sum"})
    with pytest.raises(ValueError, match="complete_episodes"):
        QMixTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"batch_mode": "truncate_episodes"})
    merged = QMixTrainer.merge_trainer_configs(DEFAULT_CONFIG, {"mixer": None})
    assert merged["mixer"] is None
