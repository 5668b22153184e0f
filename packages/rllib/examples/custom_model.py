"""A custom torch model registered with ModelCatalog and used by name.

python custom_model.py --iterations 10
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from torch import nn

from rayfield.rllib.algorithms.ppo import PPOConfig
from rayfield.rllib.models import ModelCatalog
from rayfield.rllib.models.torch_models import TorchModelV2


class TwoHeadModel(TorchModelV2):
    """One shared hidden layer with a policy head and a value head."""

    def __init__(
        self,
        obs_space: Any,
        action_space: Any,
        num_outputs: int,
        model_config: dict[str, Any],
        name: str,
        hidden: int = 64,
    ) -> None:
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.body = nn.Sequential(nn.Linear(obs_space.shape[0], hidden), nn.Tanh())
        self.pi = nn.Linear(hidden, num_outputs)
        self.vf = nn.Linear(hidden, 1)
        self._features: torch.Tensor | None = None

    def forward(self, input_dict: dict[str, torch.Tensor], state: list[Any], seq_lens: Any) -> Any:
        self._features = self.body(input_dict["obs"].float())
        return self.pi(self._features), state

    def value_function(self) -> torch.Tensor:
        assert self._features is not None
        return self.vf(self._features).squeeze(-1)


def main(iterations: int = 10) -> dict[str, Any]:
    ModelCatalog.register_custom_model("two_head", TwoHeadModel)
    algo = (
        PPOConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0, num_envs_per_env_runner=4, rollout_fragment_length=100)
        .training(
            lr=1e-3,
            train_batch_size=400,
            sgd_minibatch_size=100,
            num_sgd_iter=5,
            model={"custom_model": "two_head", "custom_model_config": {"hidden": 32}},
        )
        .build()
    )
    try:
        for _ in range(iterations):
            result = algo.train()
            print(f"iter {result['training_iteration']} reward {result['episode_reward_mean']:.1f}")
        return result
    finally:
        algo.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=10)
    main(parser.parse_args().iterations)
