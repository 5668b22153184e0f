"""The classic import path of `PolicyServer` (``ray.rllib.utils.policy_server``)."""

from rayfield.rllib.env.policy_server import PolicyServer

__all__ = ["PolicyServer"]
