"""Parametric actions: CartPole whose two real actions hide among ``max_avail``
slots, described by embeddings, with an action mask (RLlib's parametric-actions
example, in torch).

Each episode puts "left" and "right" at random slots of ``max_avail``; the
observation is a Dict with ``action_mask`` (1 at the two slots),
``avail_actions`` (each slot's embedding; random vectors at the other slots) and
``cart`` (CartPole's observation). Taking a masked slot is an error. The model
computes an intent vector from ``cart`` and scores each slot by its dot product
with the slot's embedding; DQN acts only on allowed slots.

python parametric_actions_cartpole.py --iterations 20
"""

from __future__ import annotations

import argparse
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rayfield.rllib.agents.dqn import DQNTrainer
from rayfield.rllib.env import register_env
from rayfield.rllib.models import ModelCatalog, restore_original_dimensions
from rayfield.rllib.models.torch_models import TorchModelV2

EMBED = 2


class ParametricCartPole(gym.Env):
    """See the module docstring. ``config["max_avail"]``: the number of slots (10)."""

    def __init__(self, config: dict[str, Any] | None = None) -> None:
        self.max_avail = int((config or {}).get("max_avail", 10))
        self.cartpole = gym.make("CartPole-v1")
        self.rng = np.random.default_rng()
        self.left_embed = np.array([1.0, 0.0], np.float32)
        self.right_embed = np.array([0.0, 1.0], np.float32)
        self.action_space = gym.spaces.Discrete(self.max_avail)
        self.observation_space = gym.spaces.Dict(
            {
                "action_mask": gym.spaces.Box(0, 1, (self.max_avail,), np.float32),
                "avail_actions": gym.spaces.Box(-1, 1, (self.max_avail, EMBED), np.float32),
                "cart": self.cartpole.observation_space,
            }
        )

    def _obs(self, cart: np.ndarray) -> dict[str, np.ndarray]:
        mask = np.zeros(self.max_avail, np.float32)
        mask[[self.left, self.right]] = 1.0
        avail = self.rng.uniform(-1, 1, (self.max_avail, EMBED)).astype(np.float32)
        avail[self.left], avail[self.right] = self.left_embed, self.right_embed
        return {"action_mask": mask, "avail_actions": avail, "cart": cart}

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.left, self.right = (int(i) for i in self.rng.choice(self.max_avail, 2, False))
        cart, info = self.cartpole.reset(seed=seed)
        return self._obs(cart), info

    def step(self, action: Any) -> Any:
        action = int(action)
        if action not in (self.left, self.right):
            raise ValueError(
                f"slot {action} is masked out: only {self.left} and {self.right} are allowed"
            )
        cart, reward, term, trunc, info = self.cartpole.step(int(action == self.right))
        return self._obs(cart), reward, term, trunc, info


class ParametricActionsModel(TorchModelV2):
    """Scores = <intent(cart), embedding of the slot> + log(mask) (at least float32's
    minimum): the Q-values (or logits) of every slot."""

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
        cart_dim = int(np.prod(obs_space.original_space["cart"].shape))
        self.intent = nn.Sequential(
            nn.Linear(cart_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.intent_out = nn.Linear(hidden, EMBED)
        self.value_head = nn.Linear(hidden, 1)
        self._value: torch.Tensor | None = None

    def forward(
        self, input_dict: dict[str, torch.Tensor], state: list[Any], seq_lens: Any
    ) -> tuple[torch.Tensor, list[Any]]:
        obs = restore_original_dimensions(input_dict["obs"].float(), self.obs_space)
        feats = self.intent(obs["cart"])
        intent = self.intent_out(feats)  # [B, EMBED]
        scores = (obs["avail_actions"] * intent.unsqueeze(1)).sum(-1)  # [B, max_avail]
        floor = torch.finfo(torch.float32).min
        self._value = self.value_head(feats).squeeze(-1)
        return scores + torch.clamp(torch.log(obs["action_mask"]), min=floor), state

    def value_function(self) -> torch.Tensor:
        assert self._value is not None, "call forward() first"
        return self._value


ModelCatalog.register_custom_model("parametric_actions", ParametricActionsModel)
register_env("ParametricCartPole", lambda ctx: ParametricCartPole(ctx))

CONFIG = {
    "num_workers": 0,
    "seed": 0,
    "model": {"custom_model": "parametric_actions"},
    "hiddens": [],
    "dueling": False,
    "n_step": 3,
    "lr": 1e-3,
    "learning_starts": 500,
    "target_network_update_freq": 500,
    "schedule_max_timesteps": 10_000,
    "exploration_fraction": 1.0,
    "min_iter_time_s": 0,
    "timesteps_per_iteration": 1000,
}


def main(iterations: int = 20) -> dict[str, Any]:
    trainer = DQNTrainer(env="ParametricCartPole", config=CONFIG)
    try:
        for _ in range(iterations):
            result = trainer.train()
            print(result["training_iteration"], result["episode_reward_mean"])
        return result
    finally:
        trainer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=20)
    main(parser.parse_args().iterations)
