"""Spaces in checkpoint JSON, and flattened Dict observations split back."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import torch

from rayfield.rllib.agents.checkpoints import drop_unserializable, to_json_safe
from rayfield.rllib.models import get_preprocessor, restore_original_dimensions

SPACES = [
    gym.spaces.Discrete(3, start=1),
    gym.spaces.Box(-1.0, 2.0, (2, 3), np.float32),
    gym.spaces.MultiDiscrete([2, 5]),
    gym.spaces.MultiBinary(4),
    gym.spaces.Tuple([gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (2,))]),
    gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Box(0, 1, (3,))}),
]


def test_spaces_survive_checkpoint_json() -> None:
    config = {
        "multiagent": {
            "policies": {f"p{i}": (None, s, s, {"gamma": 0.5}) for i, s in enumerate(SPACES)},
            "policy_mapping_fn": lambda agent_id: "p0",
        }
    }
    back = drop_unserializable(json.loads(json.dumps(to_json_safe(config))))
    assert "policy_mapping_fn" not in back["multiagent"]
    for i, s in enumerate(SPACES):
        cls, obs, act, overrides = back["multiagent"]["policies"][f"p{i}"]
        assert cls is None and obs == s and act == s and overrides == {"gamma": 0.5}


def test_restore_original_dimensions_splits_dict_observations() -> None:
    space = gym.spaces.Dict(
        {
            "action_mask": gym.spaces.Box(0, 1, (3,), np.float32),
            "avail": gym.spaces.Box(-1, 1, (3, 2), np.float32),
            "pos": gym.spaces.Discrete(4),
        }
    )
    prep = get_preprocessor(space)(space)
    obs = {
        "action_mask": np.array([1, 0, 1], np.float32),
        "avail": np.arange(6, dtype=np.float32).reshape(3, 2),
        "pos": 2,
    }
    flat = torch.as_tensor(prep.transform_batch([obs, obs]))
    parts = restore_original_dimensions(flat, prep.observation_space)
    torch.testing.assert_close(parts["action_mask"][0], torch.tensor([1.0, 0.0, 1.0]))
    torch.testing.assert_close(parts["avail"][1], torch.arange(6.0).reshape(3, 2))
    torch.testing.assert_close(parts["pos"][0], torch.tensor([0.0, 0.0, 1.0, 0.0]))
    box = gym.spaces.Box(0, 1, (2,))
    assert restore_original_dimensions(flat, box) is flat  # not a Dict: unchanged
