"""`ExternalMultiAgentEnv`: a turn-based matching game driven from the env's own
client threads trains two PPO policies; the sampler's batches keep each agent's
steps, delayed rewards and terminal step.

In `ServedMatch` both agents see a random bit. Agent ``"same"`` acts at all 10
steps of an episode and is rewarded for repeating its bit; agent ``"opposite"``
acts only at steps 0, 2 and 4, is rewarded for the other bit, and its reward is
logged one step late, while it does not observe. One shared policy could not
serve both; two policies reach 10 and 3 (random play: 5 and 1.5).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rayfield.rllib.agents.ppo import DEFAULT_CONFIG, PPOTorchPolicy, PPOTrainer
from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.rllib.env import ExternalEnvStopped, ExternalMultiAgentEnv, register_env
from rayfield.rllib.evaluation.rollout_worker import RolloutWorker
from rayfield.rllib.policy.sample_batch import MultiAgentBatch

BIT = gym.spaces.Discrete(2)
POLICIES = {"p_same": (None, BIT, BIT, {}), "p_opp": (None, BIT, BIT, {})}


def mapping(agent_id: str) -> str:
    return "p_same" if agent_id == "same" else "p_opp"


class ServedMatch(ExternalMultiAgentEnv):
    """See the module docstring. ``clients`` threads play episodes; with
    ``logged: True`` they pick random actions and log them (`log_action`)."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(BIT, BIT)
        self.config = dict(config)

    def run(self) -> None:
        clients = int(self.config.get("clients", 1))
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(self._client, range(clients)))

    def _client(self, index: int) -> None:
        rng = np.random.default_rng(index)
        logged = bool(self.config.get("logged"))
        try:
            while True:
                eid = self.start_episode()
                late = None  # the opposite agent's reward, logged at the next step
                for t in range(10):
                    agents = ["same"] + (["opposite"] if t % 2 == 0 and t < 6 else [])
                    bits = {a: int(rng.integers(2)) for a in agents}
                    if logged:
                        actions = {a: int(rng.integers(2)) for a in agents}
                        self.log_action(eid, bits, actions)
                    else:
                        actions = self.get_action(eid, bits)
                    assert set(actions) == set(agents)
                    rewards = {"same": float(actions["same"] == bits["same"])}
                    if late is not None:
                        rewards["opposite"], late = late, None
                    if "opposite" in agents:
                        late = float(actions["opposite"] != bits["opposite"])
                    self.log_returns(eid, rewards)
                self.end_episode(eid, {"same": 0})
        except ExternalEnvStopped:
            pass


register_env("served_match", lambda ctx: ServedMatch(ctx))

PPO_CONFIG = {
    "num_workers": 0,
    "seed": 0,
    "gamma": 0.5,
    "rollout_fragment_length": 200,
    "train_batch_size": 200,
    "sgd_minibatch_size": 100,
    "num_sgd_iter": 10,
    "lr": 0.01,
    "model": {"fcnet_hiddens": [16]},
    "multiagent": {"policies": POLICIES, "policy_mapping_fn": mapping},
}


def test_two_policies_learn_through_get_action() -> None:
    trainer = get_trainer_class("PPO")(
        env="served_match", config={**PPO_CONFIG, "env_config": {"clients": 2}}
    )
    try:
        for _ in range(40):
            result = trainer.train()
            means = result["policy_reward_mean"]
            if means["p_same"] >= 9.0 and means["p_opp"] >= 2.7:
                break
    finally:
        trainer.stop()
    assert means["p_same"] >= 9.0 and means["p_opp"] >= 2.7, (means, result["timesteps_total"])
    assert set(result["info"]["learner"]) == {"p_same", "p_opp"}
    assert result["episode_len_mean"] == 10
    assert result["episode_reward_mean"] == pytest.approx(means["p_same"] + means["p_opp"])
    env = trainer.workers.local_worker().external_env
    assert env is not None and not env.is_alive()  # stop() ended run() and its clients


def test_batches_keep_each_agents_steps_and_late_rewards() -> None:
    config = {
        **PPO_CONFIG,
        "env_config": {"clients": 1, "logged": True},
        "batch_mode": "complete_episodes",
        "rollout_fragment_length": 20,
    }
    config = PPOTrainer.merge_trainer_configs(DEFAULT_CONFIG, config)
    worker = RolloutWorker(lambda ctx: ServedMatch(ctx), PPOTorchPolicy, config)
    try:
        batch = worker.sample()
        episodes = worker.get_metrics()
    finally:
        worker.stop()
    assert isinstance(batch, MultiAgentBatch)
    assert batch.count == 10 * len(episodes) and len(episodes) >= 2
    same, opp = batch.policy_batches["p_same"], batch.policy_batches["p_opp"]
    assert same.count == 10 * len(episodes) and opp.count == 3 * len(episodes)
    obs, actions = opp["obs"].argmax(-1), opp["actions"]
    # the reward logged a step late belongs to the opposite agent's action
    np.testing.assert_array_equal(opp["rewards"], (obs != actions).astype(np.float32))
    np.testing.assert_array_equal(same["rewards"], (same["obs"].argmax(-1) == same["actions"]))
    # each agent's last step ends the episode; the steps of one agent follow each other
    np.testing.assert_array_equal(opp["terminateds"], np.tile([False, False, True], len(episodes)))
    np.testing.assert_array_equal(opp["t"], np.tile([0, 1, 2], len(episodes)))
    inner = np.flatnonzero(~opp["terminateds"])
    np.testing.assert_array_equal(opp["new_obs"][inner], opp["obs"][inner + 1])
    assert "advantages" in opp and "advantages" in same
    for ep in episodes:
        total = sum(ep.agent_rewards.values())
        assert ep.episode_reward == pytest.approx(total)
        assert set(k[1] for k in ep.agent_rewards) <= {"p_same", "p_opp"}


def test_dict_arguments_are_checked() -> None:
    env = ServedMatch({})
    eid = env.start_episode()
    with pytest.raises(TypeError, match="dict keyed by agent id"):
        env.log_returns(eid, 1.0)
    with pytest.raises(ValueError, match="one action per observing agent"):
        env.log_action(eid, {"same": 0, "opposite": 1}, {"same": 0})
    with pytest.raises(TypeError, match="use ExternalEnv for a single agent"):
        env.get_action(eid, 0)  # type: ignore[arg-type]
    env.log_returns(eid, {"same": 1.0})
    env.log_returns(eid, {"same": 0.5, "opposite": 2.0})
    # log_action returns once the sampler (here the test) took the step
    logging = threading.Thread(target=env.log_action, args=(eid, {"same": 1}, {"same": 0}))
    logging.start()
    (event,) = env.poll_events(5.0)
    assert event.reward == {"same": 1.5, "opposite": 2.0}
    assert event.obs == {"same": 1} and event.action == {"same": 0}
    assert not event.wants_action and logging.is_alive()
    env.send_action(eid, None)
    logging.join(5.0)
    assert not logging.is_alive()
    env.stop()
