"""`ExternalEnv`: CartPole driven from the env's own threads trains PPO (on-policy,
`get_action`) and DQN (partly off-policy, `log_action`); the sampler's batches hold
what the env logged."""

from __future__ import annotations

import threading
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rayfield.rllib.agents.registry import get_trainer_class
from rayfield.rllib.env import ExternalEnv, ExternalEnvStopped, register_env


class ServedCartPole(ExternalEnv):
    """CartPole played by ``clients`` threads, each asking for actions episode after
    episode. With ``logged_fraction`` > 0 a client takes that share of its actions
    itself (uniformly at random) and logs them; with ``fixed_action`` set it logs
    that action at every step. ``untrained_every``: every n-th episode runs with
    ``training_enabled=False``."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__(gym.spaces.Discrete(2), gym.make("CartPole-v1").observation_space)
        self.config = dict(config)
        self.episodes_started = 0
        self.log: list[tuple[Any, int]] = []

    def run(self) -> None:
        clients = [
            threading.Thread(target=self._client, args=(i,), daemon=True)
            for i in range(int(self.config.get("clients", 1)))
        ]
        for c in clients:
            c.start()
        for c in clients:
            c.join()

    def _client(self, index: int) -> None:
        game = gym.make("CartPole-v1")
        rng = np.random.default_rng(index)
        logged = float(self.config.get("logged_fraction", 0.0))
        fixed = self.config.get("fixed_action")
        untrained_every = int(self.config.get("untrained_every", 0))
        seed = 100 * index
        try:
            while True:
                self.episodes_started += 1
                training = not (untrained_every and self.episodes_started % untrained_every == 0)
                eid = self.start_episode(training_enabled=training)
                obs, _ = game.reset(seed=seed)
                seed += 1
                done = False
                while not done:
                    if fixed is not None:
                        action = int(fixed)
                        self.log_action(eid, obs, action)
                        self.log.append((obs, action))
                    elif rng.random() < logged:
                        action = int(rng.integers(2))
                        self.log_action(eid, obs, action)
                    else:
                        action = self.get_action(eid, obs)
                    obs, reward, term, trunc, _ = game.step(action)
                    self.log_returns(eid, reward)
                    done = term or trunc
                self.end_episode(eid, obs)
        except ExternalEnvStopped:
            pass


register_env("served_cartpole", lambda ctx: ServedCartPole(ctx))


def test_ppo_learns_cartpole_through_get_action(
    greedy_return: Any, ppo_served_cartpole_config: dict[str, Any]
) -> None:
    config = {**ppo_served_cartpole_config, "env_config": {"clients": 4}}
    trainer = get_trainer_class("PPO")(env="served_cartpole", config=config)
    try:
        # the clients' threads interleave as the OS schedules them, so the seed fixes
        # the policy's start but not the order of steps: train until the greedy policy
        # also plays well, within a step budget
        greedy, result = 0.0, trainer.train()
        while result["timesteps_total"] < 40_000:
            if result["episode_reward_mean"] >= 100:
                greedy = greedy_return(trainer)
                if greedy >= 100:
                    break
            result = trainer.train()
        assert result["timesteps_this_iter"] >= 256
        assert greedy >= 100, f"greedy return {greedy} after {result['timesteps_total']} steps"
    finally:
        trainer.stop()
    env = trainer.workers.local_worker().external_env
    assert env is not None and not env.is_alive()  # stop() ended run() and its clients


def test_dqn_learns_with_logged_off_policy_actions(
    dqn_cartpole_config: dict, greedy_return: Any
) -> None:
    exp_config = {**dqn_cartpole_config, "env_config": {"clients": 1, "logged_fraction": 0.2}}
    trainer = get_trainer_class("DQN")(env="served_cartpole", config=exp_config)
    try:
        best = 0.0
        for _ in range(25):
            result = trainer.train()
            if result["timesteps_total"] >= 5000 and result["episode_reward_mean"] > 40:
                best = max(best, greedy_return(trainer))
                if best >= 120:
                    break
        assert best >= 120, f"greedy return {best} after {result['timesteps_total']} steps"
    finally:
        trainer.stop()


def test_batches_hold_logged_actions_and_rewards() -> None:
    trainer = get_trainer_class("DQN")(
        env="served_cartpole",
        config={
            "num_workers": 0,
            "env_config": {"fixed_action": 1, "untrained_every": 2},
            "rollout_fragment_length": 50,
        },
    )
    try:
        worker = trainer.workers.local_worker()
        env = worker.external_env
        batch = worker.sample()
        assert batch.count >= 50
        assert set(batch["actions"].tolist()) == {1}  # the logged action, not the policy's
        assert np.all(batch["rewards"] == 1.0)
        logged = np.stack([o for o, _ in env.log[: batch.count]])
        first = batch["eps_id"] == batch["eps_id"][0]
        np.testing.assert_allclose(batch["obs"][first], logged[: int(first.sum())], rtol=1e-6)
        # always pushing right ends episodes in ~10 steps; every second one is not trained on
        metrics = worker.get_metrics()
        ended = batch["eps_id"][batch["terminateds"]]
        assert len(ended) >= 2 and abs(len(metrics) - 2 * len(ended)) <= 1
        assert all(m.episode_length == m.episode_reward for m in metrics)
        for eid in ended:  # whole episodes: t counts 0, 1, ... to the terminal step
            t = batch["t"][batch["eps_id"] == eid]
            assert t.tolist() == list(range(len(t)))
    finally:
        trainer.stop()


class LoggingAsFastAsItCan(ExternalEnv):
    """One episode of logged steps in a loop that never waits on its own."""

    def __init__(self) -> None:
        super().__init__(gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,)))
        self.returned = 0  # log_action calls that returned

    def run(self) -> None:
        eid = self.start_episode("e")
        while True:
            self.log_action(eid, np.zeros(2, np.float32), 1)
            self.returned += 1


def test_log_action_waits_until_the_sampler_took_the_step() -> None:
    # backpressure: a client that only logs runs at most one step ahead of the sampler
    env = LoggingAsFastAsItCan()
    env.start()
    try:
        (first,) = env.poll_events(5.0)
        assert first.action == 1 and not first.wants_action and env.returned == 0
        env.send_action("e", None)  # what the sampler does once the step is taken
        assert len(env.poll_events(5.0)) == 1 and env.returned == 1
    finally:
        env.stop()
    assert not env.is_alive()  # the waiting log_action raised ExternalEnvStopped


class Failing(ExternalEnv):
    def __init__(self, config: Any) -> None:
        super().__init__(gym.spaces.Discrete(2), gym.spaces.Box(-1, 1, (2,)), max_concurrent=1)

    def run(self) -> None:
        eid = self.start_episode("a")
        with pytest.raises(ValueError, match="already in use"):
            self.start_episode("a")
        with pytest.raises(RuntimeError, match="max_concurrent"):
            self.start_episode("b")
        with pytest.raises(KeyError, match="never started"):
            self.get_action("zzz", np.zeros(2))
        with pytest.raises(TypeError, match="subclass ExternalMultiAgentEnv"):
            self.log_returns(eid, {"agent": 1.0})
        self.end_episode(eid, np.zeros(2, np.float32))
        with pytest.raises(KeyError, match="has ended"):
            self.log_returns(eid, 1.0)
        raise OSError("the game server went away")


def test_errors_in_run_reach_the_trainer() -> None:
    trainer = get_trainer_class("PG")(env=Failing, config={"num_workers": 0})
    try:
        with pytest.raises(RuntimeError, match="the game server went away"):
            trainer.workers.local_worker().sample()
    finally:
        trainer.stop()
