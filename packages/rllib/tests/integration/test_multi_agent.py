"""Multi-agent training: two agents, two policies, one env.

In `MatchEnv` both agents see a random bit each step; agent ``"same"`` is rewarded
for repeating it, agent ``"opposite"`` for the other bit, and ``"opposite"`` leaves
after 5 of the 10 steps. One shared policy cannot serve both (the observation does
not say which agent acts); two policies reach 10 and 5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from click.testing import CliRunner

from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.rllib.env import MultiAgentEnv, register_env
from rayfield.rllib.policy.sample_batch import MultiAgentBatch
from rayfield.rllib.scripts import cli

OBS = gym.spaces.Discrete(2)
ACT = gym.spaces.Discrete(2)


class MatchEnv(MultiAgentEnv):
    observation_space = OBS
    action_space = ACT

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.rng = np.random.default_rng()
        self.old_api = bool((config or {}).get("old_api"))

    def _obs(self) -> dict[str, int]:
        agents = ["same"] + (["opposite"] if self.t < 5 else [])
        self.bits = {a: int(self.rng.integers(2)) for a in agents}
        return dict(self.bits)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        obs = self._obs()
        return obs if self.old_api else (obs, {})

    def step(self, action_dict: dict[str, Any]) -> Any:
        rewards = {}
        for agent, action in action_dict.items():
            match = int(action) == self.bits[agent]
            rewards[agent] = float(match if agent == "same" else not match)
        self.t += 1
        terms = {"__all__": self.t >= 10}
        if self.t == 5:
            terms["opposite"] = True
        obs = self._obs() if self.t < 10 else {"same": 0}
        if self.old_api:
            return obs, rewards, terms, {}
        return obs, rewards, terms, {"__all__": False}, {}


register_env("MatchEnv", MatchEnv)

POLICIES = {"p_same": (None, OBS, ACT, {}), "p_opp": (None, OBS, ACT, {"gamma": 0.0})}


def mapping(agent_id: str) -> str:
    return "p_same" if agent_id == "same" else "p_opp"


CONFIGS = {
    "PPO": {
        "num_envs_per_worker": 4,
        "rollout_fragment_length": 50,
        "train_batch_size": 400,
        "sgd_minibatch_size": 100,
        "num_sgd_iter": 5,
        "lr": 3e-3,
    },
    "PG": {
        "num_envs_per_worker": 4,
        "rollout_fragment_length": 50,
        "train_batch_size": 400,
        "lr": 0.03,
    },
    "A2C": {
        "num_envs_per_worker": 4,
        "rollout_fragment_length": 25,
        "train_batch_size": 200,
        "lr": 0.01,
        "min_iter_time_s": 0,
    },
    "A3C": {  # the local worker applies its own gradients, one per policy
        "num_envs_per_worker": 4,
        "rollout_fragment_length": 25,
        "lr": 0.01,
        "min_iter_time_s": 0,
        "optimizer": {"grads_per_step": 4},
    },
    "DQN": {
        "learning_starts": 200,
        "timesteps_per_iteration": 200,
        "exploration_fraction": 0.3,
        "schedule_max_timesteps": 3000,
        "target_network_update_freq": 100,
        "lr": 3e-3,
        "train_batch_size": 32,
        "min_iter_time_s": 0,
    },
}


def match_config(run: str, **overrides: Any) -> dict[str, Any]:
    """`run`'s config (`CONFIGS`) with a local worker, seed 0, gamma 0.5, a 16-unit
    network and the two policies of `MatchEnv`, then `overrides`."""
    return {
        **CONFIGS[run],
        "num_workers": 0,
        "seed": 0,
        "gamma": 0.5,
        "model": {"fcnet_hiddens": [16]},
        "multiagent": {"policies": POLICIES, "policy_mapping_fn": mapping},
        **overrides,
    }


def make(run: str, **multiagent: Any) -> Any:
    """A `run` trainer on `MatchEnv`; `multiagent` adds keys to ``multiagent``."""
    ma = {"policies": POLICIES, "policy_mapping_fn": mapping, **multiagent}
    return get_trainer_class(run)(env="MatchEnv", config=match_config(run, multiagent=ma))


@pytest.mark.parametrize("run", ["PPO", "PG", "A2C", "A3C", "DQN"])
def test_two_policies_learn_their_own_rule(run: str) -> None:
    trainer = make(run)
    try:
        for _ in range(40):
            result = trainer.train()
            means = result["policy_reward_mean"]
            if means["p_same"] >= 9.0 and means["p_opp"] >= 4.5:
                break
        stats = result["info"]["learner"]
    finally:
        trainer.stop()
    assert means["p_same"] >= 9.0 and means["p_opp"] >= 4.5, (means, result["timesteps_total"])
    assert set(stats) == {"p_same", "p_opp"}
    # episode return: both agents together
    assert result["episode_reward_mean"] == pytest.approx(means["p_same"] + means["p_opp"])
    assert result["episode_len_mean"] == 10


def test_policies_to_train_and_per_policy_config(tmp_path: Path) -> None:
    trainer = make("PPO", policies_to_train=["p_same"])
    try:
        worker = trainer.workers.local_worker()
        assert worker.policy_map["p_opp"].config["gamma"] == 0.0
        assert worker.policy_map["p_same"].config["gamma"] == 0.5
        frozen = trainer.get_policy("p_opp").get_weights()
        for _ in range(4):
            result = trainer.train()
        assert set(result["info"]["learner"]) == {"p_same"}
        after = trainer.get_policy("p_opp").get_weights()
        assert all(np.array_equal(frozen[k], after[k]) for k in frozen)
        changed = trainer.get_policy("p_same").get_weights()
        batch = worker.sample()
        assert isinstance(batch, MultiAgentBatch) and set(batch.policy_batches) == {
            "p_same",
            "p_opp",
        }
        assert batch.count == 200  # env steps: 50 per env, 4 envs
        assert batch.policy_batches["p_same"].count == 200
        assert batch.policy_batches["p_opp"].count == 100  # "opposite" leaves at step 5
        path = trainer.save(str(tmp_path))
        action = trainer.compute_action(1, policy_id="p_same", explore=False)
        assert action in (0, 1)
    finally:
        trainer.stop()
    restored = make("PPO", policies_to_train=["p_same"])
    try:
        restored.restore(path)
        got = restored.get_policy("p_same").get_weights()
        assert all(np.array_equal(changed[k], got[k]) for k in changed)
    finally:
        restored.stop()


def test_old_step_api_and_bad_multiagent_config() -> None:
    config = {
        "num_workers": 0,
        "train_batch_size": 100,
        "rollout_fragment_length": 50,
        "env_config": {"old_api": True},
        "multiagent": {"policies": POLICIES, "policy_mapping_fn": mapping},
    }
    trainer = get_trainer_class("PG")(env="MatchEnv", config=config)
    try:
        assert trainer.train()["timesteps_total"] >= 100
    finally:
        trainer.stop()
    bad = {**config, "multiagent": {"policies": POLICIES, "policies_to_train": ["nope"]}}
    with pytest.raises(ValueError, match="policies_to_train"):
        get_trainer_class("PG")(env="MatchEnv", config=bad)
    wrong = {"multiagent": {"policies": POLICIES, "policy_mapping_fn": lambda a: "p_x"}}
    with pytest.raises(KeyError, match="p_x"):
        get_trainer_class("PG")(env="MatchEnv", config={**config, **wrong})


def test_remote_workers_return_multi_agent_batches(cluster: dict[str, Any]) -> None:
    """A remote rollout worker (a rayfield actor) samples the multi-agent env; the
    learner trains both policies and the new weights reach the workers."""
    import rayfield as rf

    config = match_config("PPO", num_workers=1, train_batch_size=200)
    trainer = get_trainer_class("PPO")(env="MatchEnv", config=config)
    try:
        result = trainer.train()
        assert result["timesteps_total"] >= 200
        assert set(result["info"]["learner"]) == {"p_same", "p_opp"}
        assert set(result["policy_reward_mean"]) == {"p_same", "p_opp"}
        local = trainer.get_weights()
        (remote,) = rf.get([trainer.workers.remote_workers()[0].get_weights.remote(["p_opp"])])
        assert set(remote) == {"p_opp"}
        assert all(np.array_equal(local["p_opp"][k], remote["p_opp"][k]) for k in remote["p_opp"])
    finally:
        trainer.stop()


class TwoMemories(MultiAgentEnv):
    """Agents "x" and "y" each see their own random bits and are rewarded for acting
    the bit of the step before (from the second step on); 20 steps (return <= 19
    per agent, 9.5 by guessing)."""

    observation_space = OBS
    action_space = ACT

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.rng = np.random.default_rng()

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.before: dict[str, int] = {}
        self.cur = {a: int(self.rng.integers(2)) for a in ("x", "y")}
        return dict(self.cur), {}

    def step(self, action_dict: dict[str, Any]) -> Any:
        rewards = {
            a: float(a in self.before and int(act) == self.before[a])
            for a, act in action_dict.items()
        }
        self.t += 1
        self.before = dict(self.cur)
        self.cur = {a: int(self.rng.integers(2)) for a in ("x", "y")}
        return dict(self.cur), rewards, {"__all__": False}, {"__all__": self.t >= 20}, {}


register_env("TwoMemories", TwoMemories)


def recurrent_multi_agent_trainer() -> Any:
    lstm = {"fcnet_hiddens": [32], "use_lstm": True, "lstm_cell_size": 32, "max_seq_len": 10}
    policies = {"px": (None, OBS, ACT, {}), "py": (None, OBS, ACT, {})}
    ma = {"policies": policies, "policy_mapping_fn": lambda agent_id: "p" + agent_id}
    config = match_config("PPO", num_sgd_iter=8, model=lstm, multiagent=ma)
    return get_trainer_class("PPO")(env="TwoMemories", config=config)


def test_recurrent_policies_in_a_multi_agent_env() -> None:
    """Each agent's state, previous action and reward are recorded; both policies
    train on padded sequences."""
    trainer = recurrent_multi_agent_trainer()
    try:
        batch = trainer.workers.local_worker().sample()
        px = batch.policy_batches["px"]
        assert {"state_in_0", "state_out_1", "prev_actions", "prev_rewards"} <= set(px)
        # the state going into a step is the one that came out of the step before
        same_episode = px["eps_id"][1:] == px["eps_id"][:-1]
        assert np.allclose(px["state_in_0"][1:][same_episode], px["state_out_0"][:-1][same_episode])
        assert np.array_equal(
            px["prev_actions"][1:][same_episode], px["actions"][:-1][same_episode]
        )
        before = trainer.get_policy("py").get_weights()
        result = trainer.train()
        after = trainer.get_policy("py").get_weights()
    finally:
        trainer.stop()
    assert set(result["info"]["learner"]) == {"px", "py"}
    assert any(not np.allclose(before[k], after[k]) for k in before if k.startswith("lstm."))


@pytest.mark.slow
def test_recurrent_policies_learn_their_memory_task() -> None:
    trainer = recurrent_multi_agent_trainer()
    try:
        for _ in range(30):
            result = trainer.train()
            means = result["policy_reward_mean"]
            if min(means.values()) >= 16.0:
                break
    finally:
        trainer.stop()
    assert min(means.values()) >= 16.0, (means, result["timesteps_total"])


def test_a3c_remote_workers_send_one_gradient_per_policy(cluster: dict[str, Any]) -> None:
    """Asynchronous gradients from a remote worker update both policies."""
    config = match_config("A3C", num_workers=1)
    trainer = get_trainer_class("A3C")(env="MatchEnv", config=config)
    try:
        before = trainer.get_weights()
        result = trainer.train()
        after = trainer.get_weights()
    finally:
        trainer.stop()
    assert set(result["info"]["learner"]) == {"p_same", "p_opp"}
    for pid in ("p_same", "p_opp"):
        assert any(not np.allclose(before[pid][k], after[pid][k]) for k in before[pid])


def test_rollout_runs_every_policy_of_a_multi_agent_checkpoint(tmp_path: Path) -> None:
    trainer = make("PPO")
    try:
        for _ in range(40):
            means = trainer.train()["policy_reward_mean"]
            if means["p_same"] >= 9.0 and means["p_opp"] >= 4.5:
                break
        path = trainer.save(str(tmp_path))
    finally:
        trainer.stop()
    runner = CliRunner()
    args = ["rollout", path, "--episodes", "5", "--no-render", "--out", str(tmp_path / "o.json")]
    res = runner.invoke(cli, [*args, "--policy-mapping-fn", f"{mapping.__module__}:mapping"])
    assert res.exit_code == 0, res.output
    assert "rollout: 5 episodes, 50 env steps" in res.output
    mean = float(res.output.split("mean reward ")[1].split(",")[0])
    assert mean >= 14.0, res.output  # greedy: 10 for "same" and 5 for "opposite"
    assert "same=" in res.output and "opposite=" in res.output
    # without a mapping the agent ids name no policy: the error says what training used
    res = runner.invoke(cli, args)
    assert res.exit_code == 2 and "--policy-mapping-fn" in res.output
    assert "mapping" in res.output.split("training used")[1]
