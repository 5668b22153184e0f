"""The classic import path of `PolicyClient` (``ray.rllib.utils.policy_client``)."""

from rayfield.rllib.env.policy_client import PolicyClient, PolicyServerError

__all__ = ["PolicyClient", "PolicyServerError"]
