"""InputReader's get_metrics/close hooks pass through the wrapping readers; a policy class
of another algorithm finds its algorithm's default config."""

from __future__ import annotations

from typing import Any

from rayfield.rllib.evaluation.rollout_worker import policy_default_config
from rayfield.rllib.offline.input_reader import InputReader
from rayfield.rllib.offline.mixed_input import MixedInput, ShuffledInput
from rayfield.rllib.policy.policy import Policy


class Recording(InputReader):
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def next(self) -> Any:
        return self.name

    def get_metrics(self) -> list[Any]:
        return [self.name]

    def close(self) -> None:
        self.closed = True


def test_wrapping_readers_pass_metrics_and_close_through() -> None:
    a, b = Recording("a"), Recording("b")
    mixed = MixedInput({a: 0.5, b: 0.5})
    shuffled = ShuffledInput(mixed, 2, seed=0)
    assert sorted(shuffled.get_metrics()) == ["a", "b"]
    shuffled.close()
    assert a.closed and b.closed


def test_the_default_reader_hooks_report_nothing() -> None:
    class Plain(InputReader):
        def next(self) -> Any:
            return None

    plain = Plain()
    assert plain.get_metrics() == []
    plain.close()  # nothing to release


def test_policy_default_config_of_another_algorithm() -> None:
    from rayfield.rllib.agents.dqn import DEFAULT_CONFIG as DQN_DEFAULTS
    from rayfield.rllib.agents.dqn.dqn import DQNTorchPolicy
    from rayfield.rllib.agents.ppo import DEFAULT_CONFIG as PPO_DEFAULTS
    from rayfield.rllib.agents.ppo.ppo_torch_policy import PPOTorchPolicy

    assert policy_default_config(DQNTorchPolicy) is DQN_DEFAULTS  # its module's
    assert policy_default_config(PPOTorchPolicy) is PPO_DEFAULTS  # its package's

    class Own(Policy):
        default_config = {"alpha": 1}

    assert policy_default_config(Own) == {"alpha": 1}

    class Nothing(Policy):
        pass

    Nothing.__module__ = "no_such_module_here"
    assert policy_default_config(Nothing) == {}
