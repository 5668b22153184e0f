"""Environments: `EnvContext`, `register_env`."""

from __future__ import annotations

from rayfield.rllib.env.env_context import EnvContext
from rayfield.rllib.env.registry import get_env_creator, register_env

__all__ = ["EnvContext", "get_env_creator", "register_env"]
